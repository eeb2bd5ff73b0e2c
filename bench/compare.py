#!/usr/bin/env python3
"""Median tables of braid-perf JSON runs next to the anchors' text runs, with ratios.

usage: compare.py RESULTS_DIR [--braid PREFIX] [--mpi CONFIG] [--gloo NAME]
  braid runs: RESULTS_DIR/<PREFIX>.<coll>.run<k>.json (braid-perf --json; PREFIX "braid")
  anchors:    RESULTS_DIR/<CONFIG>.run<k>.txt (mpi/run.sh), RESULTS_DIR/<NAME>.run<k>.txt (gloo/run.sh)
Ratios compare like with like: busbw ratio for sizes >= 64 KiB, time ratio (reference/braid)
below; > 1 means braid is faster.
"""
import argparse
import glob
import json
import os
import re
import statistics
from collections import defaultdict

ALIASES = {"bcast": "broadcast", "reduce_scatter": "reducescatter"}


def load_anchor(pattern):
    rows = defaultdict(list)  # (coll, size) -> [(time_us, busbw)]
    for f in sorted(glob.glob(pattern)):
        for line in open(f):
            if line.startswith("#") or not line.strip():
                continue
            parts = line.split()
            if len(parts) < 6 or not re.match(r"^\d+$", parts[1]):
                continue
            coll = ALIASES.get(parts[0], parts[0])
            rows[(coll, int(parts[1]))].append((float(parts[3]), float(parts[5])))
    return rows


def load_braid(pattern):
    rows = defaultdict(list)
    for f in sorted(glob.glob(pattern)):
        for line in open(f):
            if not line.strip():
                continue
            r = json.loads(line)
            coll = ALIASES.get(r["collective"], r["collective"])
            rows[(coll, int(r["size"]))].append((float(r["time_us"]), float(r["busbw"])))
    return rows


def med(vals, i):
    return statistics.median(v[i] for v in vals) if vals else None


def fmt_size(b):
    for unit, s in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= s and b % s == 0:
            return f"{b // s}{unit}"
    return str(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--braid", default="braid", help="prefix of braid's JSON runs")
    ap.add_argument("--mpi", default=None)
    ap.add_argument("--gloo", default=None)
    a = ap.parse_args()
    braid = load_braid(os.path.join(a.dir, f"{a.braid}.*.run*.json"))
    refs = []
    if a.mpi:
        refs.append(("Open MPI", load_anchor(os.path.join(a.dir, f"{a.mpi}.run*.txt"))))
    if a.gloo:
        refs.append(("gloo", load_anchor(os.path.join(a.dir, f"{a.gloo}.run*.txt"))))
    colls = sorted({c for c, _ in braid})
    ratios = defaultdict(list)
    for coll in colls:
        sizes = sorted(s for c, s in braid if c == coll)
        head = "| size | braid time us | braid busbw GB/s |"
        sep = "|---:|---:|---:|"
        for name, _ in refs:
            head += f" {name} time us | {name} busbw | braid/{name} |"
            sep += "---:|---:|---:|"
        print(f"\n### {coll} (medians of {len(braid[(coll, sizes[0])])} runs)\n")
        print(head)
        print(sep)
        for s in sizes:
            bt, bb = med(braid[(coll, s)], 0), med(braid[(coll, s)], 1)
            line = f"| {fmt_size(s)} | {bt:.2f} | {bb:.3f} |"
            for name, rows in refs:
                vals = rows.get((coll, s))
                if not vals:
                    line += " - | - | - |"
                    continue
                rt, rb = med(vals, 0), med(vals, 1)
                ratio = (bb / rb if rb > 0 else float("nan")) if s >= 65536 else (rt / bt if bt > 0 else float("nan"))
                ratios[name].append(ratio)
                line += f" {rt:.2f} | {rb:.3f} | {ratio:.2f}x |"
            print(line)
    for name, rs in ratios.items():
        rs = [r for r in rs if r == r and r > 0]
        if rs:
            gm = statistics.geometric_mean(rs)
            print(f"\nbraid vs {name}: geometric mean ratio {gm:.2f}x over {len(rs)} (collective, size) points; "
                  f"min {min(rs):.2f}x, max {max(rs):.2f}x")


if __name__ == "__main__":
    main()
