#!/usr/bin/env python3
"""Communicator creation at scale: braid (eager and lazy TCP connections) against gloo
(torch.distributed), N ranks as processes on this host. Driven by bench/creation_scale.sh.
`--impls braid-shm` adds braid with shared memory on (eager; the other braid runs set
BRAID_SHM_DISABLE=1).

Every rank waits at a start line (a FIFO the driver opens once every rank is up), so process
start-up and imports are not timed; then it times creation (braid: Comm::fromEnv; gloo:
init_process_group) and the first collective (a 4-byte allreduce), and counts its sockets.
Reported per run: the max over ranks of each, and braid's connection count (Comm::
connectionCount: sockets to peers) or, for gloo, the TCP sockets of the process (from
/proc/self/fd; its store connection included: one more than its peer connections on ranks
other than 0), max over ranks other than 0.

usage: creation_scale.py --sizes 16,32,64,128 --rounds 1 --out DIR [--impls braid-eager,...]
       creation_scale.py --gloo-rank R --world N --port P   (one gloo rank; internal)
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def wait_start_line():
    ready, go, rank = os.environ.get("BENCH_READY_DIR"), os.environ.get("BENCH_GO_FIFO"), os.environ.get("RANK")
    open(os.path.join(ready, rank), "w").close()
    with open(go, "rb") as f:
        f.read()


def tcp_sockets():
    inodes = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink("/proc/self/fd/" + name)
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    n = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[9] in inodes and cols[3] == "01":  # ESTABLISHED
                        n += 1
        except OSError:
            pass
    return n


def gloo_rank(rank, world, port):
    import torch
    import torch.distributed as dist
    os.environ["RANK"] = str(rank)
    wait_start_line()
    t0 = time.perf_counter()
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world, timeout=__import__("datetime").timedelta(seconds=600))
    t1 = time.perf_counter()
    x = torch.ones(1)
    dist.all_reduce(x)
    t2 = time.perf_counter()
    socks = tcp_sockets()
    print(json.dumps({"rank": rank, "init_ms": (t1 - t0) * 1e3, "first_ms": (t2 - t1) * 1e3,
                      "sockets": socks, "correct": float(x.item()) == float(world)}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def release_when_ready(ready_dir, fifo, n, stop):
    while not stop.is_set() and len(os.listdir(ready_dir)) < n:
        time.sleep(0.01)
    if stop.is_set():
        return
    fd = os.open(fifo, os.O_WRONLY)  # every rank has it open for reading (or is about to)
    os.close(fd)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


_torch_rank_bytes = None


def torch_rank_bytes():
    """Anonymous memory of one process that imported torch.distributed, measured once (RssAnon
    of a child doing just that), plus 5 %: what each gloo rank needs beyond shared files."""
    global _torch_rank_bytes
    if _torch_rank_bytes is None:
        out = subprocess.run([sys.executable, "-c",
                              "import torch, torch.distributed\n"
                              "print([l.split()[1] for l in open('/proc/self/status')"
                              " if l.startswith('RssAnon:')][0])"],
                             capture_output=True, text=True, timeout=300)
        kib = int(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else 320 << 10
        _torch_rank_bytes = int(kib * 1024 * 1.05)
    return _torch_rank_bytes


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def run_one(impl, n, timeout, bindir):
    # The ranks' torch memory (measured) must leave 10 % of what is available.
    if impl == "gloo" and n * torch_rank_bytes() > 0.9 * mem_available():
        return {"impl": impl, "nranks": n, "wall_s": 0,
                "error": "skipped: %d torch processes need ~%.1f GiB, %.1f GiB available"
                         % (n, n * torch_rank_bytes() / 2**30, mem_available() / 2**30)}
    tmp = tempfile.mkdtemp(prefix="creation_scale.")
    ready = os.path.join(tmp, "ready")
    os.mkdir(ready)
    fifo = os.path.join(tmp, "go")
    os.mkfifo(fifo)
    env = dict(os.environ, BENCH_READY_DIR=ready, BENCH_GO_FIFO=fifo, BRAID_SHM_DISABLE="1",
               OMP_NUM_THREADS="1")
    stop = threading.Event()
    releaser = threading.Thread(target=release_when_ready, args=(ready, fifo, n, stop), daemon=True)
    releaser.start()
    t0 = time.perf_counter()
    result = {"impl": impl, "nranks": n}
    try:
        if impl.startswith("braid"):
            env["BRAID_CONNECT"] = "lazy" if impl == "braid-lazy" else "eager"
            if impl == "braid-shm":  # every rank of the host over shared memory
                del env["BRAID_SHM_DISABLE"]
            env["BRAID_ALGO"] = "allreduce:ring"  # the first collective: a ring
            p = subprocess.run([os.path.join(bindir, "braid-run"), "-n", str(n), "--bind", "none",
                                "--timeout", str(timeout), "--no-prefix", "--",
                                os.path.join(bindir, "creation-probe")],
                               env=env, capture_output=True, text=True, timeout=timeout + 30)
            line = [l for l in p.stdout.splitlines() if l.startswith("{")]
            if p.returncode != 0 or not line:
                result["error"] = "exit %d: %s" % (p.returncode, p.stderr[-400:])
            else:
                result.update(json.loads(line[-1]))
                result["impl"] = impl
        else:
            port = free_port()
            procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--gloo-rank", str(r),
                                       "--world", str(n), "--port", str(port)],
                                      env=dict(env, RANK=str(r), GLOO_SOCKET_IFNAME="lo"),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      preexec_fn=lambda: __import__("ctypes").CDLL(None).prctl(1, 9))
                     for r in range(n)]  # PR_SET_PDEATHSIG = SIGKILL: no orphans
            rows, errors = [], []
            deadline = time.time() + timeout
            for r, pr in enumerate(procs):
                try:
                    out, err = pr.communicate(timeout=max(1, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    for q in procs:
                        q.kill()
                    errors.append("rank %d timed out" % r)
                    break
                js = [l for l in out.splitlines() if l.startswith("{")]
                if pr.returncode != 0 or not js:
                    errors.append("rank %d exit %d: %s" % (r, pr.returncode, err[-300:]))
                else:
                    rows.append(json.loads(js[-1]))
            if errors:
                result["error"] = "; ".join(errors)[:600]
            else:
                result.update({"init_ms": max(x["init_ms"] for x in rows),
                               "first_ms": max(x["first_ms"] for x in rows),
                               "connections": max(x["sockets"] for x in rows if x["rank"] != 0),
                               "correct": all(x["correct"] for x in rows)})
    finally:
        stop.set()
        result["wall_s"] = round(time.perf_counter() - t0, 2)
        try:  # a releaser still waiting: let it go
            fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            os.close(fd)
        except OSError:
            pass
    return result


def fmt(v, d=1):
    return "-" if v is None else ("%.*f" % (d, v))


def report(results, sizes, impls):
    def med(impl, n, key):
        vals = [r[key] for r in results if r["impl"] == impl and r["nranks"] == n and key in r]
        return statistics.median(vals) if vals else None
    lines = ["| ranks | impl | creation (ms, max over ranks) | first allreduce (ms) | connections per rank "
             "| creation CPU ms per rank: max / mean |",
             "|---:|---|---:|---:|---:|---:|"]
    for n in sizes:
        for impl in impls:
            lines.append("| %d | %s | %s | %s | %s | %s / %s |" % (
                n, impl, fmt(med(impl, n, "init_ms")), fmt(med(impl, n, "first_ms")),
                fmt(med(impl, n, "connections"), 0), fmt(med(impl, n, "init_cpu_ms_max")),
                fmt(med(impl, n, "init_cpu_ms_mean"))))
    lines += ["", "| ranks | gloo / braid eager, creation | gloo / braid lazy, creation | "
              "gloo / braid lazy, creation + first | braid lazy creation vs 16 ranks |",
              "|---:|---:|---:|---:|---:|"]
    base = med("braid-lazy", sizes[0], "init_ms")
    for n in sizes:
        g, e, l = med("gloo", n, "init_ms"), med("braid-eager", n, "init_ms"), med("braid-lazy", n, "init_ms")
        gf, lf = med("gloo", n, "first_ms"), med("braid-lazy", n, "first_ms")
        ratio = lambda a, b: "-" if a is None or b in (None, 0) else "%.1fx" % (a / b)
        lines.append("| %d | %s | %s | %s | %s |" % (
            n, ratio(g, e), ratio(g, l),
            ratio(None if g is None or gf is None else g + gf, None if l is None or lf is None else l + lf),
            ratio(l, base)))
    errs = [r for r in results if "error" in r]
    for r in errs:
        lines.append("\nFAILED: %s at %d ranks: %s" % (r["impl"], r["nranks"], r["error"]))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gloo-rank", type=int)
    ap.add_argument("--world", type=int)
    ap.add_argument("--port", type=int)
    ap.add_argument("--sizes", default="16,32,64,128")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--impls", default="braid-eager,braid-lazy,gloo")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--bindir", default=os.path.join(REPO, "build", "bin"))
    ap.add_argument("--out", default=os.path.join(REPO, "results", "creation"))
    a = ap.parse_args()
    if a.gloo_rank is not None:
        gloo_rank(a.gloo_rank, a.world, a.port)
        return
    os.makedirs(a.out, exist_ok=True)
    sizes = [int(s) for s in a.sizes.split(",")]
    impls = a.impls.split(",")
    results = []
    with open(os.path.join(a.out, "runs.jsonl"), "a") as log:
        for k in range(a.rounds):
            for n in sizes:
                for impl in impls:  # interleaved: the load changes between runs, not within a pair
                    r = run_one(impl, n, a.timeout, a.bindir)
                    r["round"] = k
                    r["load1"] = os.getloadavg()[0]
                    print(json.dumps(r), flush=True)
                    log.write(json.dumps(r) + "\n")
                    log.flush()
                    results.append(r)
    text = report(results, sizes, impls)
    with open(os.path.join(a.out, "report.md"), "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
