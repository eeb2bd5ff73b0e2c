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

torch's dispatch floor ("floor" rows, --floor-iters): the same torch.distributed call on a group
of torch's own FakeProcessGroup (backend "fake", a C++ c10d::Backend whose every method returns
an already-completed Work without communicating), i.e. what torch's Python API, the c10d
dispatcher and the Work object cost before any backend does anything. Measured per rank, the
slowest rank counts, median over the rounds, at the smallest size.

The DDP step: a 25.2M-parameter MLP (six 2048x2048 linear layers), batch 16 per rank (--ddp-batch),
forward + backward (DDP's bucketed allreduce overlapping it) + SGD step, median over steps.

The FSDP2 step (--fsdp-steps): fully_shard per block and on the root of a 4-block transformer
(dim 256, 3.2M parameters) on a DeviceMesh of each group, 2 sequences of 16 tokens per rank:
forward (all_gather_into_tensor of each block's parameters) + backward (all_gather again and
reduce_scatter_tensor of the gradients) + SGD step, median over steps.

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
COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all_single"]
BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "all_to_all_single": lambda n: (n - 1) / n,
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
    import torch.testing._internal.distributed.fake_pg  # noqa: F401  (registers "fake")
    floor_group = dist.new_group(backend="fake") if args.floor_iters else None

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
        if name == "all_to_all_single":
            inp = torch.ones(per * n)
            out = torch.empty(per * n)
            return lambda: dist.all_to_all_single(out, inp, group=group)
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
            if floor_group is not None and size == min(args.sizes):
                fop = make_op(name, size, floor_group, "floor")
                fsamples = []
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    for _ in range(args.floor_iters):
                        fop()
                    fsamples.append(slowest((time.perf_counter() - t0) / args.floor_iters))
                results.append({"collective": name, "bytes": size, "backend": "floor",
                                "ranks": n, "supported": True,
                                "time_us": statistics.median(fsamples) * 1e6})
                if rank == 0:
                    print(f"  {name:15s} {size:>10d} B  torch dispatch floor (fake backend) "
                          f"{results[-1]['time_us']:.2f} us", flush=True)
            if rank == 0:
                line = f"  {name:15s} {size:>10d} B"
                for r in [r for r in results if r["backend"] != "floor"][-2:]:
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

    if args.fsdp_steps:
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.fsdp import fully_shard
        import torch.nn as nn

        class Block(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.attn = nn.MultiheadAttention(dim, 4, batch_first=True)
                self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
                self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(),
                                         nn.Linear(4 * dim, dim))

            def forward(self, x):
                h = self.norm1(x)
                x = x + self.attn(h, h, h, need_weights=False)[0]
                return x + self.mlp(self.norm2(x))

        def transformer(dim=256, vocab=512, blocks=4):
            torch.manual_seed(0)
            return nn.Sequential(nn.Embedding(vocab, dim), *[Block(dim) for _ in range(blocks)],
                                 nn.Linear(dim, vocab))

        fmodels, fopts, fparams = {}, {}, 0
        for b, g in groups.items():
            m = transformer()
            fparams = sum(p.numel() for p in m.parameters())
            mesh = DeviceMesh.from_group(g, "cpu")
            for blk in list(m)[1:-1]:
                fully_shard(blk, mesh=mesh)
            fully_shard(m, mesh=mesh)
            fmodels[b], fopts[b] = m, torch.optim.SGD(m.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(rank)
        tokens = torch.randint(0, 512, (2, 16), generator=g)
        fsteps = {b: [] for b in groups}
        for step in range(args.fsdp_steps + 2):
            for b, m in fmodels.items():
                dist.barrier(group=groups[b])
                t0 = time.perf_counter()
                fopts[b].zero_grad()
                nn.functional.cross_entropy(m(tokens).flatten(0, 1), tokens.flatten()).backward()
                fopts[b].step()
                dt = slowest(time.perf_counter() - t0)
                if step >= 2:
                    fsteps[b].append(dt)
        for b in groups:
            results.append({"collective": "fsdp2_step", "bytes": fparams * 4, "backend": b,
                            "ranks": n, "supported": True,
                            "time_us": statistics.median(fsteps[b]) * 1e6, "params": fparams,
                            "batch": 2})
        if rank == 0:
            print(f"  fsdp2 step ({fparams / 1e6:.1f}M params, 2x16 tokens): braid "
                  f"{statistics.median(fsteps['braid']) * 1e3:.1f} ms, gloo "
                  f"{statistics.median(fsteps['gloo']) * 1e3:.1f} ms", flush=True)

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
    keys = sorted({(r["ranks"], r["collective"], r["bytes"]) for r in results
                   if r["backend"] != "floor"},
                  key=lambda k: (k[0], COLLECTIVES.index(k[1]) if k[1] in COLLECTIVES else
                                 {"ddp_step": 9, "fsdp2_step": 10}.get(k[1], 11), k[2]))
    for n, c, size in keys:
        b, g = by.get((n, c, size, "braid")), by.get((n, c, size, "gloo"))
        f = by.get((n, c, size, "floor"))
        floor = f" (floor {f['time_us']:.1f})" if f else ""
        if c == "fsdp2_step":
            lines.append(f"| {n} | FSDP2 step ({b['params'] / 1e6:.1f}M params, 2x16 tokens) | - | "
                         f"{b['time_us'] / 1e3:.1f} ms | {g['time_us'] / 1e3:.1f} ms | | | "
                         f"{g['time_us'] / b['time_us']:.2f}x |")
            continue
        if c == "ddp_step":
            lines.append(f"| {n} | DDP step ({b['params'] / 1e6:.1f}M params, batch {b.get('batch', 16)}) | - | "
                         f"{b['time_us'] / 1e3:.1f} ms | {g['time_us'] / 1e3:.1f} ms | | | "
                         f"{g['time_us'] / b['time_us']:.2f}x |")
            continue
        gs = g and g["supported"]
        lines.append(
            f"| {n} | {c} | {fmt_bytes(size)} | {b['time_us']:.1f}{floor} | "
            f"{g['time_us']:.1f} | " if gs else
            f"| {n} | {c} | {fmt_bytes(size)} | {b['time_us']:.1f}{floor} | n/a | ")
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
    ap.add_argument("--fsdp-steps", type=int, default=10, help="0 skips the FSDP2 measurement")
    ap.add_argument("--floor-iters", type=int, default=2000,
                    help="calls per round on torch's fake backend (dispatch floor); 0 skips it")
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
                   "--ddp-steps", str(args.ddp_steps), "--ddp-batch", str(args.ddp_batch),
                   "--fsdp-steps", str(args.fsdp_steps), "--floor-iters", str(args.floor_iters)]
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
