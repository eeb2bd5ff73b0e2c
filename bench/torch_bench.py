#!/usr/bin/env python3
"""torch.distributed-level benchmark: backend "braid" against "gloo", side by side in one run.

    PYTHONPATH=python .venv/bin/python bench/torch_bench.py               # 2 and 4 ranks
    PYTHONPATH=python .venv/bin/python bench/torch_bench.py --ranks 2 --json out.json --markdown

Each rank joins a braid world group and a gloo group of the same ranks; every measurement runs
on both, interleaved (braid, gloo, braid, gloo, ...), so both see the same machine state. For
each collective and size: `iters` back-to-back blocking calls are timed on every rank, the
slowest rank's time per call counts, and the median over `--repeats` rounds is reported, as
nccl-tests' columns: time, algbw = bytes / time, busbw = algbw x the collective's bus factor
(allreduce 2(n-1)/n, allgather and reduce_scatter (n-1)/n, broadcast 1). Bytes are the
nccl-tests "size": the buffer per rank (allreduce, broadcast) or the whole gathered/scattered
buffer (allgather, reduce_scatter).

The DDP step: a 25.2M-parameter MLP (six 2048x2048 linear layers), batch 16 per rank (--ddp-batch),
forward + backward (DDP's bucketed allreduce overlapping it) + SGD step, median over steps.

A backend without reduce_scatter_tensor (gloo before torch 2.x) gets n/a in its column.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SIZES = [8, 1024, 64 * 1024, 1 << 20, 16 << 20]
COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "broadcast"]
BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}


def iterations(size):
    if size <= 64 * 1024:
        return 200
    if size <= (1 << 20):
        return 20
    return 3


# ---------------------------------------------------------------- rank side

def rank_main(args):
    sys.path.insert(0, str(REPO / "python"))
    import braid_torch  # noqa: F401
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("braid")
    rank, n = dist.get_rank(), dist.get_world_size()
    groups = {"braid": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}

    def make_op(name, size, group, backend):
        elems = max(1, size // 4)
        if name == "all_reduce":
            t = torch.ones(elems)
            return lambda: dist.all_reduce(t, group=group)
        if name == "broadcast":
            t = torch.ones(elems)
            return lambda: dist.broadcast(t, src=0, group=group)
        per = max(1, elems // n)
        if name == "all_gather":
            out = torch.empty(per * n)
            outs = list(out.chunk(n))
            t = torch.ones(per)
            return lambda: dist.all_gather(outs, t, group=group)
        if name == "reduce_scatter":
            inp = torch.ones(per * n)
            out = torch.empty(per)
            op = lambda: dist.reduce_scatter_tensor(out, inp, group=group)  # noqa: E731
            try:  # gloo gained reduce_scatter_tensor in torch 2.x; older ones lack it
                op()
            except (RuntimeError, NotImplementedError):
                return None
            return op
        raise ValueError(name)

    def timed(op, iters, group):
        dist.barrier(group=group)
        t0 = time.perf_counter()
        for _ in range(iters):
            op()
        return (time.perf_counter() - t0) / iters

    def slowest(seconds):
        t = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=groups["gloo"])
        return t.item()

    results = []
    for name in args.collectives:
        for size in args.sizes:
            ops = {b: make_op(name, size, g, b) for b, g in groups.items()}
            iters = iterations(size)
            samples = {b: [] for b in groups}
            for b, op in ops.items():  # warm-up
                if op:
                    timed(op, max(1, iters // 4), groups[b])
            for _ in range(args.repeats):
                for b, op in ops.items():
                    if op:
                        samples[b].append(slowest(timed(op, iters, groups[b])))
            for b in groups:
                if not samples[b]:
                    results.append({"collective": name, "bytes": size, "backend": b,
                                    "ranks": n, "supported": False})
                    continue
                t = statistics.median(samples[b])
                algbw = size / t / 1e9
                results.append({"collective": name, "bytes": size, "backend": b, "ranks": n,
                                 "supported": True, "time_us": t * 1e6, "algbw_GBps": algbw,
                                 "busbw_GBps": algbw * BUS_FACTOR[name](n)})
            if rank == 0:
                line = f"  {name:15s} {size:>10d} B"
                for r in results[-2:]:
                    line += (f"  {r['backend']} {r['time_us']:10.1f} us" if r["supported"]
                             else f"  {r['backend']} n/a")
                print(line, flush=True)

    if args.ddp_steps:
        import copy
        import torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel as DDP
        torch.manual_seed(0)
        base = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(6)])
        params = sum(p.numel() for p in base.parameters())
        models = {b: DDP(copy.deepcopy(base), process_group=g) for b, g in groups.items()}
        opts = {b: torch.optim.SGD(m.parameters(), lr=1e-4) for b, m in models.items()}
        x = torch.randn(args.ddp_batch, 2048)
        steps = {b: [] for b in groups}
        for step in range(args.ddp_steps + 2):
            for b, m in models.items():
                dist.barrier(group=groups[b])
                t0 = time.perf_counter()
                opts[b].zero_grad()
                m(x).square().mean().backward()
                opts[b].step()
                dt = slowest(time.perf_counter() - t0)
                if step >= 2:  # the first steps build buckets
                    steps[b].append(dt)
        for b in groups:
            t = statistics.median(steps[b])
            results.append({"collective": "ddp_step", "bytes": params * 4, "backend": b,
                            "ranks": n, "supported": True, "time_us": t * 1e6,
                            "params": params, "batch": args.ddp_batch})
        if rank == 0:
            print(f"  ddp step ({params / 1e6:.1f}M params, batch {args.ddp_batch}): braid "
                  f"{statistics.median(steps['braid']) * 1e3:.1f} ms, gloo "
                  f"{statistics.median(steps['gloo']) * 1e3:.1f} ms", flush=True)

    if rank == 0 and args.out:
        Path(args.out).write_text(json.dumps(results))
    dist.destroy_process_group()


# ---------------------------------------------------------------- driver

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(nranks, argv, out):
    port = free_port()
    procs = []
    for rank in range(nranks):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(nranks), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                   PYTHONPATH=str(REPO / "python"))
        procs.append(subprocess.Popen([sys.executable, __file__, "--rank-main", "--out", out,
                                       *argv], env=env))
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"benchmark ranks failed: exit codes {codes}")
    return json.loads(Path(out).read_text())


def fmt_bytes(b):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div:
            return f"{b // div} {unit}"
    return f"{b} B"


def markdown(results):
    lines = ["| ranks | collective | size | braid time (us) | gloo time (us) | braid busbw (GB/s) "
             "| gloo busbw (GB/s) | braid speedup |",
             "|---|---|---|---|---|---|---|---|"]
    by = {}
    for r in results:
        by[(r["ranks"], r["collective"], r["bytes"], r["backend"])] = r
    keys = sorted({(r["ranks"], r["collective"], r["bytes"]) for r in results},
                  key=lambda k: (k[0], COLLECTIVES.index(k[1]) if k[1] in COLLECTIVES else 9, k[2]))
    for n, c, size in keys:
        b, g = by.get((n, c, size, "braid")), by.get((n, c, size, "gloo"))
        if c == "ddp_step":
            lines.append(f"| {n} | DDP step ({b['params'] / 1e6:.1f}M params, batch {b.get('batch', 16)}) | - | "
                         f"{b['time_us'] / 1e3:.1f} ms | {g['time_us'] / 1e3:.1f} ms | | | "
                         f"{g['time_us'] / b['time_us']:.2f}x |")
            continue
        gs = g and g["supported"]
        lines.append(
            f"| {n} | {c} | {fmt_bytes(size)} | {b['time_us']:.1f} | "
            f"{g['time_us']:.1f} | " if gs else
            f"| {n} | {c} | {fmt_bytes(size)} | {b['time_us']:.1f} | n/a | ")
        lines[-1] += (f"{b['busbw_GBps']:.3f} | {g['busbw_GBps']:.3f} | "
                      f"{g['time_us'] / b['time_us']:.1f}x |" if gs else
                      f"{b['busbw_GBps']:.3f} | n/a | - |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="2,4", help="comma-separated world sizes (default 2,4)")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="bytes, comma-separated")
    ap.add_argument("--collectives", default=",".join(COLLECTIVES))
    ap.add_argument("--repeats", type=int, default=5, help="interleaved rounds; median reported")
    ap.add_argument("--ddp-steps", type=int, default=10, help="0 skips the DDP measurement")
    ap.add_argument("--ddp-batch", type=int, default=16,
                    help="samples per rank in the DDP step (small: communication dominates)")
    ap.add_argument("--json", default=None, help="write all results here")
    ap.add_argument("--markdown", action="store_true", help="print a markdown table at the end")
    ap.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.collectives = [c for c in args.collectives.split(",") if c]
    if args.rank_main:
        return rank_main(args)

    import tempfile
    results = []
    passthrough = ["--sizes", ",".join(map(str, args.sizes)), "--collectives",
                   ",".join(args.collectives), "--repeats", str(args.repeats),
                   "--ddp-steps", str(args.ddp_steps), "--ddp-batch", str(args.ddp_batch)]
    for n in [int(x) for x in args.ranks.split(",")]:
        print(f"{n} ranks (braid vs gloo, interleaved, median of {args.repeats}):", flush=True)
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            results += launch(n, passthrough, f.name)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.markdown:
        print(markdown(results))


if __name__ == "__main__":
    main()
