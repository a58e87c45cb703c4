# One rank of the fire drill's NCCL job (tools/gpudrill): an all-reduce loop
# that runs until the drill creates the stop file (or --seconds pass), then
# tears the communicator down. Rank 0 decides when to stop and tells the
# other rank with a one-element all-reduce, so both run the same number of
# collectives. Prints one "busbw_gbs <value>" line per timed batch.
#
# Two ranks on ONE GPU talk over NCCL's network transport when each sets a
# different NCCL_HOSTID (the drill does): NCCL then believes they run on two
# hosts and skips P2P and SHM.
#
# --pause sleeps between batches (parallel trials share the cores).
# --destroy-file: a second process group (its own NCCL communicator) is
# made on both ranks and used once; when the file appears, rank 1 destroys
# it while rank 0 keeps it, and both run the world all-reduce on.
import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--stop-file", required=True)
ap.add_argument("--seconds", type=float, default=150)
ap.add_argument("--mib", type=int, default=64)
ap.add_argument("--pause", type=float, default=0)
ap.add_argument("--destroy-file", default="")
args = ap.parse_args()

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
gpu = int(os.environ.get("DRILL_GPU", "0"))
torch.cuda.set_device(gpu)
dev = torch.device("cuda", gpu)
try:
    # device_id makes the NCCL communicator at init (not at the first
    # collective), so a failed NCCL init fails here.
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev,
                            timeout=datetime.timedelta(seconds=60))
    x = torch.ones(args.mib << 18, device=dev, dtype=torch.float32)
    flag = torch.zeros(1, device=dev, dtype=torch.float32)
    size = x.numel() * 4
    deadline = time.time() + args.seconds
    for _ in range(2):
        dist.all_reduce(x)
    second = None
    if args.destroy_file:
        second = dist.new_group([0, 1])
        dist.all_reduce(flag, group=second)
        print("rank %d: second communicator up" % rank, flush=True)
    torch.cuda.synchronize()
    print("rank %d: NCCL %s, all-reduce of %d MiB on %s" % (rank, ".".join(map(str, torch.cuda.nccl.version())), size >> 20, torch.cuda.get_device_name(dev)), flush=True)
    while True:
        n, t = 5, time.time()
        for _ in range(n):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dt = (time.time() - t) / n
        # bus bandwidth of an all-reduce: size/time * 2(n-1)/n (nccl-tests)
        print("busbw_gbs %.3f" % (size / dt * 2 * (world - 1) / world / 1e9), flush=True)
        if second is not None and rank == 1 and os.path.exists(args.destroy_file):
            t = time.time()
            dist.destroy_process_group(second)
            second = None
            print("rank 1: destroyed the second communicator in %.3f s" % (time.time() - t), flush=True)
        if args.pause > 0:
            time.sleep(args.pause)
        flag.fill_(1.0 if rank == 0 and (os.path.exists(args.stop_file) or time.time() > deadline) else 0.0)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() > 0:
            break
    dist.destroy_process_group()
except Exception as e:  # the forced-IB run ends here
    print("rank %d: NCCL failed: %s" % (rank, str(e).splitlines()[0] if str(e) else type(e).__name__), flush=True)
    sys.exit(3)
