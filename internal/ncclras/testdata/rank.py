# One rank for the RAS capture: all-reduces in a loop until the file
# <dir>/idle exists, then stays alive without collectives.
import datetime, os, sys, time
import torch
import torch.distributed as dist

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
d = os.environ["CAP_DIR"]
torch.cuda.set_device(0)
dev = torch.device("cuda", 0)
dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev,
                        timeout=datetime.timedelta(seconds=300))
x = torch.ones(1 << 18, device=dev)
for _ in range(3):
    dist.all_reduce(x)
dist.broadcast(x, 0)
torch.cuda.synchronize()
print("ready pid %d NCCL %s" % (os.getpid(), torch.cuda.nccl.version()), flush=True)
n = 0
try:
    while not os.path.exists(os.path.join(d, "idle")):
        for _ in range(20):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        n += 20
        # both ranks decide together when to go idle
        f = torch.tensor([1.0 if os.path.exists(os.path.join(d, "idle")) else 0.0], device=dev)
        dist.all_reduce(f, op=dist.ReduceOp.MAX)
        if f.item() > 0:
            break
    print("idle after %d all-reduces" % n, flush=True)
    while not os.path.exists(os.path.join(d, "busy")):
        time.sleep(0.2)
    print("busy again", flush=True)
    while True:
        dist.all_reduce(x)
        torch.cuda.synchronize()
except Exception as e:
    print("rank %d: exception: %s" % (rank, e), flush=True)
    time.sleep(120)
