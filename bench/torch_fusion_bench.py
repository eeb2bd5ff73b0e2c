#!/usr/bin/env python3
"""The fusion benchmark from Python: T tensors of B bytes (fp32, sum) all-reduced over a braid
process group one by one (dist.all_reduce, blocking), one by one asynchronously (async_op=True,
then wait all), and through braid_torch.FusionBuffer (add all, synchronize) — the C++ fusion
buffer, as train_bench fusion measures it from C++ (docs/training.md).

    PYTHONPATH=python build/bin/braid-run -n 2 -- .venv/bin/python bench/torch_fusion_bench.py \\
        [--tensors 1000] [--bytes 4096] [--reps 5] [--threshold 64M] [--cycle-ms 1]

Per method: wall time of one round on every rank, slowest rank, median over --reps rounds (after
one untimed round). Every round's results are checked against the sum computed here.
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist

import braid_torch
from braid_torch.training import parse_size


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tensors", type=int, default=1000)
    ap.add_argument("--bytes", default="4096")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threshold", default=None, help="bytes (default BRAID_FUSION_THRESHOLD)")
    ap.add_argument("--cycle-ms", type=float, default=None,
                    help="ms (default BRAID_CYCLE_TIME)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("braid")
    rank, world = dist.get_rank(), dist.get_world_size()
    count = parse_size(args.bytes) // 4
    base = [torch.full((count,), float(t % 13 + rank)) for t in range(args.tensors)]
    want = [torch.full((count,), float(world * (t % 13) + world * (world - 1) // 2))
            for t in range(args.tensors)]
    fb = braid_torch.FusionBuffer(
        threshold_bytes=None if args.threshold is None else parse_size(args.threshold),
        cycle_time_ms=args.cycle_ms)

    def blocking(xs):
        for x in xs:
            dist.all_reduce(x)

    def asynchronous(xs):
        for w in [dist.all_reduce(x, async_op=True) for x in xs]:
            w.wait()

    def fused(xs):
        for x in xs:
            fb.add(x)
        fb.synchronize()

    def timed(fn):
        times = []
        for rep in range(args.reps + 1):
            xs = [b.clone() for b in base]
            dist.barrier()
            t0 = time.perf_counter()
            fn(xs)
            t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            for i in range(0, args.tensors, max(1, args.tensors // 50)):
                if not torch.equal(xs[i], want[i]):
                    raise SystemExit(f"rank {rank}: {fn.__name__}: tensor {i} is wrong")
            if rep:
                times.append(t.item())
        return statistics.median(times)

    results = {name: timed(fn) for name, fn in
               (("blocking", blocking), ("async", asynchronous), ("fused", fused))}
    st = fb.stats()
    if rank == 0:
        print(f"# torch fusion: {args.tensors} tensors x {count * 4} B fp32 sum, {world} ranks, "
              f"threshold {fb.threshold_bytes} B, cycle {fb.cycle_time_ms} ms; results checked")
        print(f"# {'method':<40} {'time(ms)':>10} {'vs fused':>9}")
        labels = {"blocking": "dist.all_reduce one by one (blocking)",
                  "async": "dist.all_reduce one by one (async, wait)",
                  "fused": "braid_torch.FusionBuffer"}
        for name, t in results.items():
            print(f"  {labels[name]:<40} {t * 1e3:10.3f} {t / results['fused']:9.2f}")
        print(f"# fused all-reduces per round: {st['allreduces'] / (args.reps + 1):.1f}")
    fb.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
