# A stand-in for one rank of tools/gpudrill/allreduce.py in the two-node
# trials, for the drill's own test on a machine without a GPU
# (TestNodeTrials): no NCCL, but the same environment, the same rendezvous
# across the veth pair, and a RAS service on each rank's NCCL_RAS_ADDR that
# answers like NCCL 2.28.9's (JSON STATUS) with the pids the ranks see
# themselves as (1 in a container). Rank 1 connects to rank 0 from its own
# node address (so it fails unless it runs inside node 1); they exchange
# pids. Once rank 1's connection drops (SIGKILL), rank 0 reports it missing
# and itself with async_error 6 ("remote process error"), as NCCL does.
# With --destroy-file, the job has a second communicator; when the file
# appears rank 1 "destroys" it and both report rank 1 of it missing but
# responsive and alive (NOCOMM). With TORCH_NCCL_USE_COMM_NONBLOCKING=1
# the ranks show init_state 7 (ncclInProgress) for their first 3 s and
# rank 0 async_error 7 in every third answer afterwards.
import json
import os
import socket
import sys
import threading
import time

rank = int(os.environ["RANK"])
for k in ("NCCL_DEBUG", "NCCL_DEBUG_FILE"):
    if k in os.environ:
        sys.exit("fakerank: %s is set" % k)
if os.environ.get("NCCL_SOCKET_IFNAME") != "veth":
    sys.exit("fakerank: NCCL_SOCKET_IFNAME is not veth")
ras_host, ras_port = os.environ["NCCL_RAS_ADDR"].rsplit(":", 1)
master = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
destroy_file = sys.argv[sys.argv.index("--destroy-file") + 1] if "--destroy-file" in sys.argv else ""
nonblocking = os.environ.get("TORCH_NCCL_USE_COMM_NONBLOCKING") == "1"

if rank == 1:
    while True:
        try:
            conn = socket.create_connection(master, timeout=2, source_address=(ras_host, 0))
            break
        except OSError:
            time.sleep(0.2)
    conn.settimeout(None)
    peer_host = master[0]
else:
    srv = socket.create_server(master)
    conn, (peer_host, _) = srv.accept()
f = conn.makefile("rwb")
f.write(b"%d\n" % os.getpid())
f.flush()
state = {"peer": int(f.readline()), "lost": False, "destroyed": False, "count": 0, "answers": 0, "up": time.time()}


def watch():
    for line in f:
        if line.strip() == b"destroyed":
            state["destroyed"] = True
    state["lost"] = True


threading.Thread(target=watch, daemon=True).start()


def destroyer():
    while not os.path.exists(destroy_file):
        time.sleep(0.1)
    state["destroyed"] = True
    f.write(b"destroyed\n")
    f.flush()


if rank == 1 and destroy_file:
    threading.Thread(target=destroyer, daemon=True).start()


def rank_json(r, host, pid, init, err):
    return {"rank": r, "host": host, "pid": pid, "cuda_dev": 0, "nvml_dev": 0,
            "status": {"init_state": init, "async_error": err, "finalize_called": False,
                       "destroy_flag": False, "abort_flag": False},
            "collective_counts": {"Broadcast": 1, "Reduce": 0, "AllGather": 0,
                                  "ReduceScatter": 0, "AllReduce": state["count"]}}


def comm(hash_, lost, nocomm):
    init = 7 if nonblocking and time.time() - state["up"] < 3 else 0
    err = 6 if lost else (7 if nonblocking and init == 0 and state["answers"] % 3 == 0 else 0)
    me = (rank, ras_host, os.getpid())
    peer = (1 - rank, peer_host, state["peer"])
    r0, r1 = (me, peer) if rank == 0 else (peer, me)
    ranks, missing = [rank_json(*r0, init, err)], []
    if lost or nocomm:
        m = dict(rank=1, host=r1[1], pid=r1[2], cuda_dev=0, nvml_dev=0)
        m["status"] = {"unresponsive": lost, "considered_dead": False}
        missing.append(m)
    else:
        ranks.append(rank_json(*r1, init, 0))
    return {"hash": hash_, "size": 2, "ranks_count": len(ranks),
            "missing_ranks_count": len(missing), "ranks": ranks, "missing_ranks": missing}


def answer():
    state["answers"] += 1
    if not state["lost"]:
        state["count"] += 10
    comms = [comm("0xf8e68da1f581fed5", state["lost"], False)]
    if destroy_file:
        comms.append(comm("0x2c0e1d5b9a3f4e71", state["lost"], state["destroyed"]))
    return json.dumps({"nccl_version": "2.28.9", "communicators_count": len(comms), "communicators": comms,
                       "ras": {"collection_time_sec": 0.0, "timeouts_count": 0}}, indent=2) + "\n"


def serve(c):
    cf = c.makefile("rwb")
    for line in cf:
        cmd = line.decode().strip().upper()
        if cmd.startswith("CLIENT PROTOCOL"):
            cf.write(b"SERVER PROTOCOL 2\n")
        elif cmd.startswith("TIMEOUT") or cmd == "SET FORMAT JSON":
            cf.write(b"OK\n")
        elif cmd in ("STATUS", "VERBOSE STATUS"):
            cf.write(answer().encode())
            cf.flush()
            break
        cf.flush()
    c.close()


ras = socket.create_server((ras_host, int(ras_port)))
while True:
    c, _ = ras.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
