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
# --step decode makes each batch look like a decode step of a TP model:
# per layer, matrix work on a small batch of tokens (weights read from
# device memory, tensor cores busy) then an all-reduce of the activations
# (--layers, --tokens, --hidden); --graph captures the batch in a CUDA
# graph and replays it, as SGLang and vLLM do in decode (NCCL's RAS does
# not count graph-launched collectives). Hang and idle controls, checked
# between batches:
#   --hang-file: while it exists, rank 1 launches nothing (stuck in Python,
#     alive, sleeping); rank 0 goes on and waits inside the next
#     all-reduce. When it goes, rank 1 resumes and the job moves again.
#   --idle-file: while it exists, both ranks launch nothing (a server with
#     no requests); rank 0 decides, so both stop after the same batch.
# In graph mode the stop/idle decision (an eager one-element all-reduce)
# is taken every --sync-every batches, so RAS's counts move rarely.
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
ap.add_argument("--step", choices=["allreduce", "decode"], default="allreduce")
ap.add_argument("--graph", action="store_true")
ap.add_argument("--layers", type=int, default=8)
ap.add_argument("--tokens", type=int, default=32)
ap.add_argument("--hidden", type=int, default=8192)
ap.add_argument("--matmuls", type=int, default=4)
ap.add_argument("--sync-every", type=int, default=20)
ap.add_argument("--hang-file", default="")
ap.add_argument("--idle-file", default="")
ap.add_argument("--second-group", action="store_true")
ap.add_argument("--pg-timeout", type=float, default=60, help="PyTorch's collective timeout, seconds (a hang trial outlasts 60 s)")
args = ap.parse_args()

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
gpu = int(os.environ.get("DRILL_GPU", "0"))
torch.cuda.set_device(gpu)
dev = torch.device("cuda", gpu)
try:
    # device_id makes the NCCL communicator at init (not at the first
    # collective), so a failed NCCL init fails here.
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev,
                            timeout=datetime.timedelta(seconds=args.pg_timeout))
    x = torch.ones(args.mib << 18, device=dev, dtype=torch.float32)
    flag = torch.zeros(1, device=dev, dtype=torch.float32)
    size = x.numel() * 4
    deadline = time.time() + args.seconds
    for _ in range(2):
        dist.all_reduce(x)
    second = None
    if args.destroy_file or args.second_group:
        # A second process group, its own NCCL communicator, used once (as
        # a serving process holds more than one: PyTorch's device group,
        # SGLang's pynccl group).
        second = dist.new_group([0, 1])
        dist.all_reduce(flag, group=second)
        print("rank %d: second communicator up" % rank, flush=True)
    step, size, graph = None, x.numel() * 4, None
    if args.step == "decode":
        torch.manual_seed(rank)
        w = torch.randn(args.hidden, args.hidden, device=dev, dtype=torch.bfloat16) / args.hidden ** 0.5
        h = torch.randn(args.tokens, args.hidden, device=dev, dtype=torch.bfloat16)
        size = h.numel() * 2 * args.layers

        def step():
            y = h
            for _ in range(args.layers):
                for _ in range(args.matmuls):
                    y = torch.tanh(y @ w)
                dist.all_reduce(y)
            return y
        if args.graph:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    step()
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            print("rank %d: captured a decode step (%d layers) in a CUDA graph" % (rank, args.layers), flush=True)
    elif args.graph:
        graph = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            dist.all_reduce(x)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(graph):
            dist.all_reduce(x)
    torch.cuda.synchronize()
    print("rank %d: NCCL %s, %s step, %d MiB of all-reduce per batch item, graph %s, on %s" % (rank, ".".join(map(str, torch.cuda.nccl.version())), args.step, size >> 20, args.graph, torch.cuda.get_device_name(dev)), flush=True)

    def one():
        if graph is not None:
            graph.replay()
        elif step is not None:
            step()
        else:
            dist.all_reduce(x)

    def waiting(path):
        return path and os.path.exists(path)
    batch = 0
    while True:
        if rank == 1 and waiting(args.hang_file):
            print("rank 1: hang file: launching nothing", flush=True)
            while waiting(args.hang_file):
                time.sleep(0.05)
            print("rank 1: hang file gone: resuming", flush=True)
        n, t = 5, time.time()
        for _ in range(n):
            one()
        torch.cuda.synchronize()
        dt = (time.time() - t) / n
        batch += 1
        # bus bandwidth of an all-reduce: size/time * 2(n-1)/n (nccl-tests)
        print("busbw_gbs %.3f" % (size / dt * 2 * (world - 1) / world / 1e9), flush=True)
        if second is not None and args.destroy_file and rank == 1 and os.path.exists(args.destroy_file):
            t = time.time()
            dist.destroy_process_group(second)
            second = None
            print("rank 1: destroyed the second communicator in %.3f s" % (time.time() - t), flush=True)
        if args.pause > 0:
            time.sleep(args.pause)
        if graph is not None and batch % args.sync_every:
            continue
        # 1: stop; 2: idle until the idle file goes.
        v = 0.0
        if rank == 0:
            if os.path.exists(args.stop_file) or time.time() > deadline:
                v = 1.0
            elif waiting(args.idle_file):
                v = 2.0
        flag.fill_(v)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        v = flag.item()
        if v == 1:
            break
        if v == 2:
            print("rank %d: idle" % rank, flush=True)
            while waiting(args.idle_file):
                time.sleep(0.05)
            print("rank %d: busy again" % rank, flush=True)
    dist.destroy_process_group()
except Exception as e:  # the forced-IB run ends here
    print("rank %d: NCCL failed: %s" % (rank, str(e).splitlines()[0] if str(e) else type(e).__name__), flush=True)
    sys.exit(3)
