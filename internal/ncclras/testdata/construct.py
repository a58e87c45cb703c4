#!/usr/bin/env python3
"""Writes the *-constructed-* RAS answers of this directory.

Each answer is what NCCL's RAS thread prints for a made-up job, written
with the format strings of src/ras/client_support.cc of NVIDIA/nccl:
rasClientRunInit (header, job summary), rasClientRunComms (communicator
table, Errors, Warnings), rasClientBreakDownErrors (ERROR entries) and the
JSON writers (jsonWriteHeader, jsonStartCommunicator, jsonWriteRankData,
jsonStartMissingRanks, jsonWriteMissingRank, jsonEndCommunicator,
jsonWriteFooter) at v2.28.9-1 and v2.29.7-1; the text of 2.24 and 2.25
at v2.25.1-1. The logic that picks what to print (INCOMPLETE against
NOCOMM, the status bitmask, outliers, sort orders) follows those
functions; README.md names each line's source. Values (hashes, pids,
addresses, counts) are made up.

    cd internal/ncclras/testdata && python3 construct.py        # writes them
    cd internal/ncclras/testdata && python3 construct.py check  # the recorded answers, rebuilt
"""

STATUS = ["NOCOMM", "INIT", "RUNNING", "FINALIZE", "ABORT"]  # statusStr; 2.25: UNKNOWN for NOCOMM
ERRORS = ["OK", "MISMATCH", "ERROR", "ERROR,MISMATCH", "INCOMPLETE", "INCOMPLETE,MISMATCH",
          "INCOMPLETE,ERROR", "INCOMPLETE,ERROR,MISMATCH"]  # errorStr
FUNCS = ["Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"]  # ncclFuncStr
ERRSTR = {1: "Unhandled CUDA error", 2: "System error", 3: "Internal error", 4: "Invalid argument",
          5: "Invalid usage", 6: "Remote process error", 7: "NCCL operation in progress"}  # ncclErrorToString
NOCOMM, INIT, RUNNING, FINALIZE, ABORT = 1, 2, 4, 8, 16  # rasACStatus
MISMATCH, ERROR, INCOMPLETE = 1, 2, 4  # rasACError
IN_PROGRESS = 7


def s(n, one="", many="s"):
    return one if n == 1 else many


def outlier(count, total=-1):  # rasCountIsOutlier, not verbose
    if count == 1:
        return True
    return count <= 10 and (total == -1 or count <= total * 0.25)


def gpu(cuda, nvml):  # rasGpuToString, rasCommRankGpuToString
    return "%d" % cuda if cuda == nvml else "%d (NVML %d)" % (cuda, nvml)


def rank_status(r):  # rasClientRunComms: the rank's status bit
    if r["abort"]:
        return ABORT
    if r["finalize"] or r["destroy"]:
        return FINALIZE
    if r["init"] == 0:
        return RUNNING
    return INIT


def idx(bit):  # (sizeof(unsigned int)*8-1) - COMPILER_CLZ(bit)
    return bit.bit_length() - 1


class Job:
    def __init__(self, version, peers, comms, timeouts=0, secs=0.0, stamp="2026-12-03 10:20:00"):
        self.v, self.peers, self.comms, self.timeouts, self.secs, self.stamp = version, peers, comms, timeouts, secs, stamp
        self.old = version.startswith("2.25")
        self.by_pid = {p["pid"]: p for p in peers}

    def peer(self, pid):
        return self.by_pid[pid]

    # ---- JSON (rasDumpCommsToJSON) ----
    def json(self):
        o = ["{\n", '  "nccl_version": "%s",\n' % self.v, '  "cuda_runtime_version": %d,\n' % 13000,
             '  "cuda_driver_version": %d,\n' % 13000, '  "timestamp": "%s",\n' % self.stamp,
             '  "communicators_count": %d,\n' % len(self.comms), '  "communicators": [\n']
        for ci, c in enumerate(self.comms):
            if ci:
                o.append(",\n")
            o += ["    {\n", '      "hash": "0x%x",\n' % c["hash"], '      "secondary_hash": "0x%x:0x%x",\n' % c["secondary"],
                  '      "size": %d,\n' % c["size"], '      "ranks_count": %d,\n' % len(c["ranks"]),
                  '      "missing_ranks_count": %d,\n' % len(c["missing"]), '      "ranks": [\n']
            for ri, r in enumerate(c["ranks"]):
                p = self.peer(r["pid"])
                if ri:
                    o.append(",\n")
                o += ["        {\n", '          "rank": %d,\n' % r["rank"], '          "host": "%s",\n' % p["host"],
                      '          "pid": %d,\n' % p["pid"], '          "cuda_dev": %d,\n' % r["cuda"],
                      '          "nvml_dev": %d,\n' % r["nvml"], '          "status": {\n',
                      '            "init_state": %d,\n' % r["init"], '            "async_error": %d,\n' % r["async"],
                      '            "finalize_called": %s,\n' % tf(r["finalize"]),
                      '            "destroy_flag": %s,\n' % tf(r["destroy"]),
                      '            "abort_flag": %s\n' % tf(r["abort"]), "          },\n",
                      '          "collective_counts": {\n']
                for op, name in enumerate(FUNCS):
                    o.append('            "%s": %d' % (name, r["counts"][op]))
                    if op < len(FUNCS) - 1:
                        o.append(",")
                    o.append("\n")
                o += ["          }\n", "        }"]
            o += ["\n      ],\n", '      "missing_ranks": [\n']
            for mi, m in enumerate(c["missing"]):
                p = self.peer(m["pid"])
                if mi:
                    o.append(",\n")
                o += ["        {\n", '          "rank": %d,\n' % m["rank"], '          "host": "%s",\n' % p["host"],
                      '          "pid": %d,\n' % p["pid"], '          "cuda_dev": %d,\n' % m["cuda"]]
                # 2.28.7 to 2.28.9 write no comma after nvml_dev (jsonWriteMissingRank).
                o.append(('          "nvml_dev": %d\n' if self.v.startswith("2.28") else '          "nvml_dev": %d,\n') % m["nvml"])
                o += ['          "status": {\n', '            "unresponsive": %s,\n' % tf(not p["answered"]),
                      '            "considered_dead": %s\n' % tf(p["dead"]), "          }\n", "        }"]
            o += ["\n      ]\n", "    }"]
        o += ["\n  ],\n", '  "ras": {\n', '    "collection_time_sec": %.3f,\n' % self.secs,
              '    "timeouts_count": %d\n' % self.timeouts, "  }\n", "}\n"]
        return "".join(o)

    # ---- text (rasClientRunInit, rasClientRunComms) ----
    def text(self):
        cuda = "12.8" if self.old else "13.0"
        rt = 12080 if self.old else 13000
        o = ["NCCL version %s compiled with CUDA %s\n" % (self.v, cuda),
             "CUDA runtime version %d, driver version %d\n\n" % (rt, rt)]
        peers = sorted(self.peers, key=lambda p: (p["host"], p["pid"]))
        nodes = {}
        for p in peers:
            nodes.setdefault(p["host"], []).append(p)
        per_node = {len(v) for v in nodes.values()}
        per_proc = {len(p["gpus"]) for p in peers}
        assert len(per_node) == 1 and len(per_proc) == 1, "only the consistent job summary is written"
        o += ["Job summary\n===========\n\n",
              "  Nodes  Processes         GPUs  Processes     GPUs\n"
              "(total)   per node  per process    (total)  (total)\n"
              "%7d  %9d  %11d  %9d  %7d\n" % (len(nodes), per_node.pop(), per_proc.pop(), len(peers),
                                              sum(len(p["gpus"]) for p in peers))]
        o.append("\nCommunicators...")
        o.append((" (%.2fs)\n=============\n\n" if self.old else " (%.3fs)\n=============\n\n") % self.secs)

        n_dead = sum(p["dead"] for p in peers)
        n_missing = len(peers) - n_dead - sum(p["answered"] for p in peers)  # nPeersMissing
        aux = [self.aux(c, n_missing, n_dead) for c in self.comms]
        # rasAuxCommsCompareRev: size, nodes, highest status, errors (descending), ranks answering.
        aux.sort(key=lambda a: (-a["c"]["size"], -a["nodes"], -a["status"].bit_length(), -a["errors"], len(a["c"]["ranks"])))
        groups = []
        for a in aux:
            key = (a["c"]["size"], a["nodes"], a["status"].bit_length(), a["errors"])
            if groups and groups[-1][0] == key:
                groups[-1][1].append(a)
            else:
                groups.append((key, [a]))
        o.append("Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors\n"
                 "    #  in group  per comm  per node  per comm  in group\n")
        for gi, (_, g) in enumerate(groups):
            lo, hi = min(a["rpn_min"] for a in g), max(a["rpn_max"] for a in g)
            rpn = "%d" % lo if lo == hi else "%d-%d" % (lo, hi)
            total = len({(r["pid"], r["nvml"]) for a in g for r in a["c"]["ranks"]})
            word = STATUS[idx(g[0]["status"])]
            if self.old and word == "NOCOMM":
                word = "UNKNOWN"
            o.append("%5d  %8d  %8d  %8s  %8d  %8d  %8s  %6s\n" % (gi, len(g), g[0]["nodes"], rpn, g[0]["c"]["size"],
                                                               total, word, ERRORS[g[0]["errors"]]))
        o.append("\nErrors\n======\n\n")
        if n_missing > 0:
            o.append("INCOMPLETE\n  Missing communicator data from %d job process%s\n" % (n_missing, s(n_missing, "", "es")))
            if outlier(n_missing):
                for p in peers:
                    if not p["answered"] and not p["dead"]:
                        o.append(self.process_line(p))
            o.append("\n")
        if n_dead > 0:
            o.append("DEAD\n  %d job process%s considered dead (unreachable via the RAS network)\n" %
                     (n_dead, s(n_dead, " is", "es are")))
            if outlier(n_dead):
                for p in peers:
                    if p["dead"]:
                        o.append(self.process_line(p))
            o.append("\n")
        for gi, (_, g) in enumerate(groups):
            for ci, a in enumerate(g):
                o += self.incomplete(gi, ci, a) + self.error(gi, ci, a)
        o.append("Warnings\n========\n\n")
        if self.timeouts > 0:
            o.append("TIMEOUT\n  Encountered %d communication timeout%s while gathering communicator data\n\n" %
                     (self.timeouts, s(self.timeouts)))
        for gi, (_, g) in enumerate(groups):
            for ci, a in enumerate(g):
                o += self.mismatch(gi, ci, a)
        return "".join(o)

    def process_line(self, p):
        return "  Process %d on node %s managing GPU%s %s\n" % (p["pid"], p["host"], s(len(p["gpus"])),
                                                             ",".join(str(g) for g in p["gpus"]))

    def aux(self, c, n_missing, n_dead):
        a = {"c": c, "status": 0, "errors": 0, "incomplete": 0}
        if c["missing"]:
            if self.old:  # v2.25.1-1: an approximation, all or nothing
                if n_missing > 0 or n_dead > 0:
                    a["errors"] |= INCOMPLETE
                else:
                    a["errors"] |= MISMATCH
                    a["status"] |= NOCOMM
            elif n_missing == 0 and n_dead == 0:
                a["errors"] |= MISMATCH
                a["status"] |= NOCOMM
            else:
                for m in c["missing"]:
                    if self.peer(m["pid"])["answered"]:
                        a["errors"] |= MISMATCH
                        a["status"] |= NOCOMM
                    else:
                        a["errors"] |= INCOMPLETE
                        a["incomplete"] += 1
        for r in c["ranks"]:
            a["status"] |= rank_status(r)
            if self.counts(r) != self.counts(c["ranks"][0]):
                a["errors"] |= MISMATCH
            if r["init"] not in (0, IN_PROGRESS) or r["async"] not in (0, IN_PROGRESS):
                a["errors"] |= ERROR
        if bin(a["status"]).count("1") > 1:
            a["errors"] |= MISMATCH
        hosts = {}
        for r in c["ranks"]:
            h = self.peer(r["pid"])["host"]
            hosts[h] = hosts.get(h, 0) + 1
        a["nodes"], a["rpn_min"], a["rpn_max"] = len(hosts), min(hosts.values()), max(hosts.values())
        return a

    def counts(self, r):
        # 2.24 and 2.25 keep one count per rank (collOpCount): the sum here.
        return [sum(r["counts"])] if self.old else list(r["counts"])

    def rank_gpu(self, r):
        p = self.peer(r["pid"])
        return "GPU %s managed by process %d on node %s" % (gpu(r["cuda"], r["nvml"]), p["pid"], p["host"])

    def incomplete(self, gi, ci, a):
        c = a["c"]
        if not a["errors"] & INCOMPLETE:
            return []
        n = len(c["missing"]) if self.old else a["incomplete"]
        o = ["#%d-%d (%016x) INCOMPLETE\n  Missing communicator data from %d rank%s\n" % (gi, ci, c["hash"], n, s(n))]
        if outlier(n):
            if self.old:
                o.append("  The missing rank%s: %s\n" % (s(n), ",".join(str(m["rank"]) for m in c["missing"])))
            else:
                for m in c["missing"]:
                    if not self.peer(m["pid"])["answered"]:
                        o.append("  Rank %d -- %s\n" % (m["rank"], self.rank_gpu(m)))
        o.append("\n")
        return o

    def error(self, gi, ci, a):
        c = a["c"]
        if not a["errors"] & ERROR:
            return []
        o = ["#%d-%d (%016x) ERROR\n" % (gi, ci, c["hash"])]
        for field, what in (("init", "Initialization"), ("async", "Asynchronous")):
            codes = [r[field] for r in c["ranks"]]
            n = sum(1 for x in codes if x not in (0, IN_PROGRESS))
            if n == 0:
                continue
            o.append("  %s error%s on %d rank%s\n" % (what, s(n), n, s(n)))
            left = {e: codes.count(e) for e in range(1, IN_PROGRESS) if codes.count(e)}
            while left:  # rasClientBreakDownErrors: most frequent first, the lowest code on a tie
                e = max(sorted(left), key=lambda k: left[k])
                cnt = left.pop(e)
                if cnt > 1:
                    o.append("  %d ranks reported %s\n" % (cnt, ERRSTR[e]))
                if outlier(cnt):
                    for r in c["ranks"]:
                        if r[field] == e:
                            if cnt > 1:
                                o.append("  Rank %d -- %s\n" % (r["rank"], self.rank_gpu(r)))
                            else:
                                o.append("  Rank %d reported %s -- %s\n" % (r["rank"], ERRSTR[e], self.rank_gpu(r)))
        o.append("\n")
        return o

    def mismatch(self, gi, ci, a):
        c = a["c"]
        if not a["errors"] & MISMATCH:
            return []
        o = ["#%d-%d (%016x) MISMATCH\n" % (gi, ci, c["hash"])]
        size = c["size"]
        if bin(a["status"]).count("1") > 1:
            o.append("  Communicator ranks have different status\n")
            vals = {}
            for r in sorted(c["ranks"], key=lambda r: (rank_status(r), r["rank"])):
                vals.setdefault(idx(rank_status(r)), []).append(r)
            groups = [(len(v), k, v) for k, v in vals.items()]
            nocomm = len(c["missing"]) if self.old else len(c["missing"]) - a["incomplete"]
            if nocomm > 0:
                groups.append((nocomm, 0, None))  # the "fake" NOCOMM (UNKNOWN) entry
            groups.sort(key=lambda g: (-g[0], -g[1]))  # rasValCountsCompareRev
            for cnt, k, ranks in groups:
                word = "UNKNOWN" if self.old and k == 0 else STATUS[k]
                if cnt > 1:
                    o.append("  %d ranks have status %s\n" % (cnt, word))
                if not outlier(cnt, size):
                    continue
                if ranks is None and self.old:
                    lst = ",".join(str(m["rank"]) for m in c["missing"])
                    o.append("  The unknown ranks: %s\n" % lst if cnt > 1 else "  Rank %s has status %s\n" % (lst, word))
                    continue
                if ranks is None:
                    ranks = [m for m in c["missing"] if self.peer(m["pid"])["answered"]]
                for r in ranks:
                    if cnt > 1:
                        o.append("  Rank %d -- %s\n" % (r["rank"], self.rank_gpu(r)))
                    else:
                        o.append("  Rank %d has status %s -- %s\n" % (r["rank"], word, self.rank_gpu(r)))
        ops = [None] if self.old else range(len(FUNCS))
        for op in ops:
            val = (lambda r: self.counts(r)[0]) if self.old else (lambda r, op=op: r["counts"][op])
            if len({val(r) for r in c["ranks"]}) == 1:
                continue
            o.append("  Communicator ranks have different %s operation counts\n" % ("collective" if self.old else FUNCS[op]))
            vals = {}
            for r in sorted(c["ranks"], key=lambda r: (val(r), r["rank"])):
                vals.setdefault(val(r), []).append(r)
            for v, ranks in sorted(vals.items(), key=lambda kv: (-len(kv[1]), -kv[0])):
                cnt = len(ranks)
                if cnt > 1:
                    o.append("  %d ranks have launched up to operation %d\n" % (cnt, v) if v > 0 or self.old
                             else "  %d ranks have not launched any operations\n" % cnt)
                if outlier(cnt, size):
                    for r in ranks:
                        if cnt > 1:
                            o.append("  Rank %d -- %s\n" % (r["rank"], self.rank_gpu(r)))
                        elif v > 0 or self.old:
                            o.append("  Rank %d has launched up to operation %d -- %s\n" % (r["rank"], v, self.rank_gpu(r)))
                        else:
                            o.append("  Rank %d has not launched any operations -- %s\n" % (r["rank"], self.rank_gpu(r)))
            if not self.old:
                o.append("\n")
        if self.old:
            o.append("\n")  # v2.25.1-1 ends every MISMATCH entry with an empty line
        return o


def tf(b):
    return "true" if b else "false"


def peer(host, pid, g, answered=True, dead=False):
    return {"host": host, "pid": pid, "gpus": [g], "answered": answered, "dead": dead}


def rank(n, pid, g, counts, init=0, asyncerr=0, finalize=False, destroy=False, abort=False):
    return {"rank": n, "pid": pid, "cuda": g, "nvml": g, "counts": counts, "init": init, "async": asyncerr,
            "finalize": finalize, "destroy": destroy, "abort": abort}


def missing(n, pid, g):
    return {"rank": n, "pid": pid, "cuda": g, "nvml": g}


def scenarios():
    """name → (peers, comms, timeouts, collection seconds)"""
    out = {}
    # (a) rank 1's process destroyed its communicator (ncclCommDestroy done:
    # the communicator is gone from that process), rank 0 keeps it.
    two = [peer("10.0.0.1", 51200, 0), peer("10.0.0.1", 51201, 1)]
    out["nocomm"] = (two, [{"hash": 0x7c41d2e09a3b5f16, "secondary": (0x5a1e, 0x9c3f), "size": 2,
                            "ranks": [rank(0, 51200, 0, [1, 0, 0, 0, 2048])],
                            "missing": [missing(1, 51201, 1)]}], 0, 0.001)
    # The same with eight ranks, two of which destroyed theirs.
    eight = [peer("10.0.0.1", 52300 + g, g) for g in range(8)]
    out["nocomm-tp8"] = (eight, [{"hash": 0x3e9b0c6d1f2a4857, "secondary": (0x6b2f, 0xad40), "size": 8,
                                  "ranks": [rank(r, 52300 + r, r, [1, 0, 4, 0, 90210]) for r in range(6)],
                                  "missing": [missing(r, 52300 + r, r) for r in (6, 7)]}], 0, 0.002)
    # (b) a non-blocking communicator: rank 0 initialized with a group call
    # in flight (async_error ncclInProgress), rank 1 still initializing.
    two = [peer("10.0.0.1", 53400, 0), peer("10.0.0.1", 53401, 1)]
    out["inprogress"] = (two, [{"hash": 0x11d05e7a2c9f3b64, "secondary": (0x7c30, 0xbe51), "size": 2,
                                "ranks": [rank(0, 53400, 0, [0, 0, 0, 0, 0], asyncerr=7),
                                          rank(1, 53401, 1, [0, 0, 0, 0, 0], init=7, asyncerr=7)],
                                "missing": []}], 0, 0.001)
    # (c) shutting down: one communicator finalized on both ranks (rank 1
    # destroyed too: both FINALIZE, no mismatch), another destroyed on rank
    # 0 only (FINALIZE against RUNNING).
    two = [peer("10.0.0.1", 54500, 0), peer("10.0.0.1", 54501, 1)]
    out["finalize"] = (two, [{"hash": 0x2a6f4c81d03e9b57, "secondary": (0x8d41, 0xcf62), "size": 2,
                              "ranks": [rank(0, 54500, 0, [1, 0, 0, 0, 5120], finalize=True),
                                        rank(1, 54501, 1, [1, 0, 0, 0, 5120], finalize=True, destroy=True)],
                              "missing": []},
                             {"hash": 0x9d3b7e15a8c2f460, "secondary": (0x8d41, 0xcf63), "size": 2,
                              "ranks": [rank(0, 54500, 0, [1, 0, 0, 0, 7168], destroy=True),
                                        rank(1, 54501, 1, [1, 0, 0, 0, 7168])],
                              "missing": []}], 0, 0.001)
    # (d) rank 0 aborted (ncclCommAbort: abort_flag and destroy_flag) after a
    # remote error; rank 1 still running, one all-reduce ahead.
    two = [peer("10.0.0.1", 55600, 0), peer("10.0.0.1", 55601, 1)]
    out["abort"] = (two, [{"hash": 0x5f08a3c6e1d94b72, "secondary": (0x9e52, 0xd073), "size": 2,
                           "ranks": [rank(0, 55600, 0, [1, 0, 0, 0, 1200], asyncerr=6, destroy=True, abort=True),
                                     rank(1, 55601, 1, [1, 0, 0, 0, 1201])],
                           "missing": []}], 0, 0.001)
    # (e) four ranks on two nodes: rank 2's process does not answer (not
    # dead yet), rank 3's is dead; one leg of the collective timed out.
    four = [peer("10.0.1.1", 41001, 0), peer("10.0.1.1", 41002, 1),
            peer("10.0.1.2", 42001, 0, answered=False), peer("10.0.1.2", 42002, 1, answered=False, dead=True)]
    out["unresponsive-dead"] = (four, [{"hash": 0xc4e2a09b7d3f1865, "secondary": (0xaf63, 0xe184), "size": 4,
                                        "ranks": [rank(0, 41001, 0, [1, 0, 0, 0, 3300]), rank(1, 41002, 1, [1, 0, 0, 0, 3300])],
                                        "missing": [missing(2, 42001, 0), missing(3, 42002, 1)]}], 1, 5.004)
    return out


FILES = [  # (file, version, format, scenario)
    ("2.28.9-json-constructed-nocomm.txt", "2.28.9", "json", "nocomm"),
    ("2.29.7-json-constructed-nocomm-tp8.txt", "2.29.7", "json", "nocomm-tp8"),
    ("2.29.7-json-constructed-inprogress.txt", "2.29.7", "json", "inprogress"),
    ("2.29.7-json-constructed-finalize.txt", "2.29.7", "json", "finalize"),
    ("2.28.9-json-constructed-abort.txt", "2.28.9", "json", "abort"),
    ("2.29.7-json-constructed-unresponsive-dead.txt", "2.29.7", "json", "unresponsive-dead"),
    ("2.28.9-text-constructed-nocomm.txt", "2.28.9", "text", "nocomm"),
    ("2.28.9-text-constructed-nocomm-tp8.txt", "2.28.9", "text", "nocomm-tp8"),
    ("2.28.9-text-constructed-inprogress.txt", "2.28.9", "text", "inprogress"),
    ("2.28.9-text-constructed-finalize.txt", "2.28.9", "text", "finalize"),
    ("2.28.9-text-constructed-abort.txt", "2.28.9", "text", "abort"),
    ("2.28.9-text-constructed-unresponsive-dead.txt", "2.28.9", "text", "unresponsive-dead"),
    ("2.25.1-text-constructed-unknown.txt", "2.25.1", "text", "nocomm"),
    ("2.25.1-text-constructed-unknown-tp8.txt", "2.25.1", "text", "nocomm-tp8"),
    ("2.25.1-text-constructed-inprogress.txt", "2.25.1", "text", "inprogress"),
    ("2.25.1-text-constructed-finalize.txt", "2.25.1", "text", "finalize"),
    ("2.25.1-text-constructed-abort.txt", "2.25.1", "text", "abort"),
    ("2.25.1-text-constructed-unresponsive-dead.txt", "2.25.1", "text", "unresponsive-dead"),
]

def check():
    """Rebuilds four answers recorded from NCCL 2.28.9 (README.md) from their values."""
    killed = [peer("127.0.0.1", 658, 0), peer("127.0.0.1", 659, 0, answered=False)]
    comm = {"hash": 0xf8e68da1f581fed5, "secondary": (0xc21ed1e87db71d72, 0xe0c356b16b97b62e), "size": 2,
            "ranks": [rank(0, 658, 0, [1, 0, 0, 0, 1131], asyncerr=6)], "missing": [missing(1, 659, 0)]}
    job = Job("2.28.9", killed, [comm], 0, 0.0, "2026-12-02 09:16:02")
    dead = [peer("127.0.0.1", 730, 0), peer("127.0.0.1", 731, 0, answered=False, dead=True)]
    both = [peer("127.0.0.1", 730, 0), peer("127.0.0.1", 731, 0)]
    h = 0x10ee41e5abc55cb8
    ok = True
    for name, got in (
            ("2.28.9-json-killed.txt", job.json()),
            ("2.28.9-text-killed.txt", job.text()),
            ("2.28.9-text-killed-dead.txt", Job("2.28.9", dead, [{
                "hash": h, "secondary": (0, 0), "size": 2, "ranks": [rank(0, 730, 0, [1, 0, 0, 0, 1116], asyncerr=6)],
                "missing": [missing(1, 731, 0)]}]).text()),
            ("2.28.9-text-verbose-mismatch.txt", Job("2.28.9", both, [{
                "hash": h, "secondary": (0, 0), "size": 2, "missing": [],
                "ranks": [rank(0, 730, 0, [1, 0, 0, 0, 507]), rank(1, 731, 0, [1, 0, 0, 0, 506])]}]).text())):
        same = open(name).read() == got
        ok = ok and same
        print(name, "identical" if same else "DIFFERS")
    return ok


if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["check"]:
        sys.exit(0 if check() else 1)
    sc = scenarios()
    for name, version, fmt, key in FILES:
        peers, comms, timeouts, secs = sc[key]
        job = Job(version, peers, comms, timeouts, secs)
        with open(name, "w") as f:
            f.write(job.json() if fmt == "json" else job.text())
        print(name)
