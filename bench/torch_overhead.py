#!/usr/bin/env python3
"""Per-call cost of a small torch.distributed all_reduce: braid builds A and B against torch's
dispatch floor, interleaved (docs/pytorch.md, "Per-call overhead").

    PYTHONPATH=python .venv/bin/python bench/torch_overhead.py \
        --a /tmp/ab/before --b python --ranks 1,2 --rounds 7

--a / --b: directories that hold a braid_torch package (e.g. a copy of python/ before a
change, and python/ after it). Each round starts one world of `--ranks` processes per build,
A then B then A ... (so both see the same machine state); in every world each rank times
`--calls` back-to-back `dist.all_reduce` of `--bytes` bytes on the braid world group and on a
group of torch's FakeProcessGroup (backend "fake": every method returns an already-completed
Work; torch's dispatch floor), alternating braid and fake in `--chunks` chunks. Reported per
rank: wall time per call and CPU time per call (`time.process_time()`, which counts the other
processes on a loaded machine less), the slowest rank of the world counts, medians over rounds,
and the ratios B/A of braid's time and of braid's time over the floor.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def rank_main(args):
    import braid_torch  # noqa: F401  (from the PYTHONPATH the driver set)
    import torch
    import torch.distributed as dist
    import torch.testing._internal.distributed.fake_pg  # noqa: F401  (registers "fake")

    torch.set_num_threads(1)
    dist.init_process_group("braid")
    fake = dist.new_group(backend="fake")
    gloo = dist.new_group(backend="gloo")
    t = torch.ones(max(1, args.bytes // 4))
    groups = {"braid": dist.group.WORLD, "floor": fake}
    per = max(1, args.calls // args.chunks)
    wall = {k: 0.0 for k in groups}
    cpu = {k: 0.0 for k in groups}
    for k, g in groups.items():  # warm-up
        for _ in range(200):
            dist.all_reduce(t, group=g)
    for _ in range(args.chunks):
        for k, g in groups.items():
            dist.barrier(group=gloo)
            w0, c0 = time.perf_counter(), time.process_time()
            for _ in range(per):
                dist.all_reduce(t, group=g)
            wall[k] += time.perf_counter() - w0
            cpu[k] += time.process_time() - c0
    res = {}
    for k in groups:
        v = torch.tensor([wall[k] / (per * args.chunks), cpu[k] / (per * args.chunks)],
                         dtype=torch.float64)
        dist.all_reduce(v, op=dist.ReduceOp.MAX, group=gloo)
        res[k] = {"wall_us": v[0].item() * 1e6, "cpu_us": v[1].item() * 1e6}
    if dist.get_rank() == 0:
        Path(args.out).write_text(json.dumps(res))
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def world(pkgdir, n, args):
    port = free_port()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        procs = []
        for r in range(n):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), OMP_NUM_THREADS="1", PYTHONPATH=str(pkgdir))
            procs.append(subprocess.Popen(
                [sys.executable, __file__, "--rank-main", "--out", f.name, "--bytes",
                 str(args.bytes), "--calls", str(args.calls), "--chunks", str(args.chunks)],
                env=env))
        codes = [p.wait() for p in procs]
        if any(codes):
            raise SystemExit(f"ranks failed: {codes}")
        return json.loads(Path(f.name).read_text())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", help="directory holding braid_torch (build A)")
    ap.add_argument("--b", help="directory holding braid_torch (build B)")
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--bytes", type=int, default=8)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--chunks", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", default=None)
    ap.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank_main:
        return rank_main(args)
    if not args.a or not args.b:
        ap.error("--a and --b are required")
    builds = {"A": Path(args.a).resolve(), "B": Path(args.b).resolve()}
    all_results = []
    for n in [int(x) for x in args.ranks.split(",")]:
        samples = {b: [] for b in builds}
        for k in range(args.rounds):
            for b, d in builds.items():
                r = world(d, n, args)
                samples[b].append(r)
                print(f"  {n} ranks round {k} {b}: braid {r['braid']['wall_us']:.2f} us wall "
                      f"{r['braid']['cpu_us']:.2f} us cpu; floor {r['floor']['wall_us']:.2f} / "
                      f"{r['floor']['cpu_us']:.2f}", flush=True)

        def med(b, k, m):
            return statistics.median(s[k][m] for s in samples[b])

        def med_ratio(m):
            return statistics.median(sb["braid"][m] / sa["braid"][m]
                                     for sa, sb in zip(samples["A"], samples["B"]))
        print(f"{n} ranks, {args.bytes} B all_reduce, medians of {args.rounds} rounds:")
        print("| build | braid wall (us) | floor wall (us) | braid - floor wall | braid cpu (us) "
              "| floor cpu (us) | braid - floor cpu |")
        print("|---|---|---|---|---|---|---|")
        for b in builds:
            bw, fw = med(b, "braid", "wall_us"), med(b, "floor", "wall_us")
            bc, fc = med(b, "braid", "cpu_us"), med(b, "floor", "cpu_us")
            print(f"| {b} | {bw:.2f} | {fw:.2f} | {bw - fw:.2f} | {bc:.2f} | {fc:.2f} | "
                  f"{bc - fc:.2f} |")
        print(f"B/A of braid's time (median of per-round ratios): wall "
              f"{med_ratio('wall_us'):.3f}, cpu {med_ratio('cpu_us'):.3f}")
        all_results.append({"ranks": n, "samples": samples})
    if args.json:
        Path(args.json).write_text(json.dumps(all_results, indent=1))


if __name__ == "__main__":
    main()
