# Captures NCCL RAS answers (tools: python3 + torch on the device).
import json, os, signal, socket, subprocess, sys, time

OUT = os.environ["OUT"]
HERE = os.path.dirname(os.path.abspath(__file__))
T0 = time.time()

def log(*a):
    msg = "%7.2f %s" % (time.time() - T0, " ".join(str(x) for x in a))
    print(msg, flush=True)
    with open(os.path.join(OUT, "capture.log"), "a") as f:
        f.write(msg + "\n")

def readline(s):
    b = b""
    while not b.endswith(b"\n"):
        c = s.recv(1)
        if not c:
            break
        b += c
    return b

def query(port, lines, name, sd, tmo=40):
    """Sends the handshake lines, then the last line, reads until EOF.
    Writes <name>.txt (the answer) and <name>.transcript (what was said)."""
    t = time.time()
    tr = []
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=tmo)
    except OSError as e:
        log(name, "connect:", e)
        with open(os.path.join(sd, name + ".transcript"), "w") as f:
            f.write("connect: %s\n" % e)
        return None
    s.settimeout(tmo)
    try:
        for l in lines[:-1]:
            s.sendall(l.encode() + b"\n")
            r = readline(s)
            tr.append(">> " + l)
            tr.append("<< " + r.decode(errors="replace").rstrip("\n"))
        s.sendall(lines[-1].encode() + b"\n")
        tr.append(">> " + lines[-1])
        buf = b""
        while True:
            c = s.recv(65536)
            if not c:
                break
            buf += c
        tr.append("<< (%d bytes until EOF)" % len(buf))
    except OSError as e:
        tr.append("!! %s" % e)
        buf = None
    s.close()
    dt = time.time() - t
    tr.append("elapsed %.3f s" % dt)
    with open(os.path.join(sd, name + ".transcript"), "w") as f:
        f.write("\n".join(tr) + "\n")
    if buf is not None:
        with open(os.path.join(sd, name + ".txt"), "wb") as f:
            f.write(buf)
    log(name, "%.2fs" % dt, "bytes", None if buf is None else len(buf))
    return buf

def four(port, sd, prefix):
    hs = ["CLIENT PROTOCOL 2", "TIMEOUT 5"]
    query(port, hs + ["SET FORMAT json", "STATUS"], prefix + "-json", sd)
    query(port, hs + ["SET FORMAT json", "VERBOSE STATUS"], prefix + "-json-verbose", sd)
    query(port, hs + ["STATUS"], prefix + "-text", sd)
    query(port, hs + ["VERBOSE STATUS"], prefix + "-text-verbose", sd)

def scenario(name, port, extra_env, odd, stop=False):
    sd = os.path.join(OUT, name)
    os.makedirs(sd, exist_ok=True)
    for f in ("idle", "busy"):
        try: os.remove(os.path.join(sd, f))
        except OSError: pass
    procs = []
    for r in range(2):
        env = dict(os.environ)
        env.update({"RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(29500 + port % 100), "CAP_DIR": sd,
                    "NCCL_HOSTID": "drill-node-%d" % r, "NCCL_SOCKET_IFNAME": "lo",
                    "NCCL_IB_DISABLE": "1", "NCCL_NVLS_ENABLE": "0", "NCCL_DEBUG": "WARN",
                    "NCCL_RAS_ADDR": "localhost:%d" % port,
                    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
                    "PYTHONUNBUFFERED": "1"})
        env.update(extra_env)
        out = open(os.path.join(sd, "rank%d.out" % r), "w")
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "rank.py")], env=env,
                                      stdout=out, stderr=subprocess.STDOUT))
    log(name, "pids", [p.pid for p in procs])
    deadline = time.time() + 150
    while time.time() < deadline:
        ok = 0
        for r in range(2):
            with open(os.path.join(sd, "rank%d.out" % r)) as f:
                if "ready" in f.read():
                    ok += 1
        if ok == 2 or any(p.poll() is not None for p in procs):
            break
        time.sleep(0.5)
    log(name, "ready", ok, [p.poll() for p in procs])
    if ok != 2:
        for p in procs: p.kill()
        return False
    time.sleep(2)
    four(port, sd, "healthy")
    if odd:
        query(port, ["CLIENT PROTOCOL 2", "SET FORMAT xml", "FOO", "TIMEOUT -1", "TIMEOUT x", "CLIENT PROTOCOL 99", "STATUS"], "odd-commands", sd)
        query(port, ["STATUS"], "no-handshake-status", sd)
    open(os.path.join(sd, "idle"), "w").close()
    time.sleep(4)
    hs = ["CLIENT PROTOCOL 2", "TIMEOUT 5"]
    query(port, hs + ["SET FORMAT json", "STATUS"], "idle-json", sd)
    time.sleep(1)
    query(port, hs + ["SET FORMAT json", "VERBOSE STATUS"], "idle-json-verbose", sd)
    query(port, hs + ["STATUS"], "idle-text", sd)
    open(os.path.join(sd, "busy"), "w").close()
    time.sleep(3)
    query(port, hs + ["SET FORMAT json", "STATUS"], "busy-json", sd)
    if stop:
        st = time.time()
        procs[1].send_signal(signal.SIGSTOP)
        log(name, "stopped rank 1 pid", procs[1].pid)
        for at in (3, 12):
            while time.time() < st + at: time.sleep(0.1)
            query(port, hs + ["SET FORMAT json", "STATUS"], "stop%02ds-json" % at, sd)
        query(port, hs + ["SET FORMAT json", "VERBOSE STATUS"], "stopped-json-verbose", sd)
        query(port, hs + ["STATUS"], "stopped-text", sd)
    kt = time.time()
    procs[1].send_signal(signal.SIGKILL)
    log(name, "killed rank 1 pid", procs[1].pid)
    for at in (3, 10, 17):
        while time.time() < kt + at: time.sleep(0.1)
        query(port, hs + ["SET FORMAT json", "STATUS"], "kill%02ds-json" % at, sd)
    while time.time() < kt + 25: time.sleep(0.1)
    four(port, sd, "killed")
    log(name, "rank0 alive:", procs[0].poll() is None)
    for p in procs:
        p.kill()
        p.wait()
    return procs[0].returncode

def main():
    import torch
    with open(os.path.join(OUT, "versions.txt"), "w") as f:
        f.write("%s %s\n" % (torch.__version__, torch.cuda.nccl.version()))
        f.write(subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True).stdout)
        f.write(time.strftime("%Y-%m-%dT%H:%M:%SZ\n", time.gmtime()))
    log("versions", open(os.path.join(OUT, "versions.txt")).read().replace("\n", " | "))
    scenario("default", 28028, {}, True)
    # Survivor kept alive by PyTorch (no watchdog teardown), in case the
    # default run lost it before the +25 s query.
    kd = open(os.path.join(OUT, "default", "killed-json.transcript")).read() if os.path.exists(os.path.join(OUT, "default", "killed-json.transcript")) else ""
    if "connect:" in kd or time.time() - T0 < 150:
        scenario("noteardown", 28128, {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0", "TORCH_NCCL_ENABLE_MONITORING": "0"}, False, stop=True)
    log("done")

main()
