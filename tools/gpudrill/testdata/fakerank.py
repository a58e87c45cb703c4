# A stand-in for one rank of tools/gpudrill/allreduce.py in the two-node
# trials, for the drill's own test on a machine without a GPU
# (TestNodeTrials): no NCCL, but the same environment, the same rendezvous
# across the veth pair, and a RAS service that answers like NCCL 2.28.9's
# (JSON STATUS). Rank 1 connects to rank 0 from its own node address (so
# it fails unless it runs inside node 1) and sends its pid; rank 0 serves
# RAS on NCCL_RAS_ADDR and, once rank 1's connection drops, reports it
# missing and itself with async_error 6 ("remote process error"), as NCCL
# does after a peer's SIGKILL.
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

if rank == 1:
    while True:
        try:
            s = socket.create_connection(master, timeout=2, source_address=(ras_host, 0))
            break
        except OSError:
            time.sleep(0.2)
    s.sendall(b"%d\n" % os.getpid())
    while True:
        time.sleep(60)

state = {"peer": None, "lost": False, "count": 0}
srv = socket.create_server(master)
conn, _ = srv.accept()
state["peer"] = int(conn.makefile().readline())


def watch():
    while conn.recv(1):
        pass
    state["lost"] = True


threading.Thread(target=watch, daemon=True).start()


def rank_json(r, host, pid, err):
    return {"rank": r, "host": host, "pid": pid, "cuda_dev": 0, "nvml_dev": 0,
            "status": {"init_state": 0, "async_error": err, "finalize_called": False,
                       "destroy_flag": False, "abort_flag": False},
            "collective_counts": {"Broadcast": 1, "Reduce": 0, "AllGather": 0,
                                  "ReduceScatter": 0, "AllReduce": state["count"]}}


def answer():
    if not state["lost"]:
        state["count"] += 10
    ranks = [rank_json(0, ras_host, os.getpid(), 6 if state["lost"] else 0)]
    missing = []
    peer = dict(rank=1, host="10.77.0.2", pid=state["peer"], cuda_dev=0, nvml_dev=0)
    if state["lost"]:
        peer["status"] = {"unresponsive": True, "considered_dead": False}
        missing.append(peer)
    else:
        ranks.append(rank_json(1, "10.77.0.2", state["peer"], 0))
    return json.dumps({"nccl_version": "2.28.9", "communicators_count": 1, "communicators": [
        {"hash": "0xf8e68da1f581fed5", "size": 2, "ranks_count": len(ranks),
         "missing_ranks_count": len(missing), "ranks": ranks, "missing_ranks": missing}],
        "ras": {"collection_time_sec": 0.0, "timeouts_count": 0}}, indent=2) + "\n"


def serve(c):
    f = c.makefile("rwb")
    for line in f:
        cmd = line.decode().strip().upper()
        if cmd.startswith("CLIENT PROTOCOL"):
            f.write(b"SERVER PROTOCOL 2\n")
        elif cmd.startswith("TIMEOUT") or cmd == "SET FORMAT JSON":
            f.write(b"OK\n")
        elif cmd in ("STATUS", "VERBOSE STATUS"):
            f.write(answer().encode())
            f.flush()
            break
        f.flush()
    c.close()


ras = socket.create_server((ras_host, int(ras_port)))
while True:
    c, _ = ras.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
