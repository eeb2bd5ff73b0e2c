#!/usr/bin/env python3
"""Median tables of braid-perf JSON runs next to the anchors' text runs, with ratios.

usage: compare.py RESULTS_DIR [--braid PREFIX] [--mpi CONFIG] [--gloo NAME] [--ref-braid PREFIX]
                  [--placement FILE [--near-us US]]
  braid runs: RESULTS_DIR/<PREFIX>.<coll>.run<k>.json (braid-perf --json; PREFIX "braid")
  anchors:    RESULTS_DIR/<CONFIG>.run<k>*.txt (mpi/run.sh), RESULTS_DIR/<NAME>.run<k>*.txt (gloo/run.sh)
  --ref-braid: other braid-perf JSON runs (RESULTS_DIR/<PREFIX>.<coll>.run<k>.json) as the
              reference, e.g. braid over another transport (bench/compare_ucx.sh ... tcp)
Ratios compare like with like: busbw ratio for sizes >= 64 KiB, time ratio (reference/braid)
below; > 1 means braid is faster.
--placement: a TSV (file, probe_before_us, probe_after_us) naming the vCPU placement probes taken
around each run (bench/compare_shm.sh). A run is "near" when both probes read below --near-us,
"far" when both read at or above it, else "mixed". The ratio matrix is then printed three times:
over all runs, over near runs only, over far runs only.
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
    rows = defaultdict(list)  # (coll, size) -> [(time_us, busbw, file)]
    for f in sorted(glob.glob(pattern)):
        for line in open(f):
            if line.startswith("#") or not line.strip():
                continue
            parts = line.split()
            if len(parts) < 6 or not re.match(r"^\d+$", parts[1]):
                continue
            coll = ALIASES.get(parts[0], parts[0])
            rows[(coll, int(parts[1]))].append((float(parts[3]), float(parts[5]), os.path.basename(f)))
    return rows


def load_braid(pattern):
    rows = defaultdict(list)
    for f in sorted(glob.glob(pattern)):
        for line in open(f):
            if not line.strip():
                continue
            r = json.loads(line)
            coll = ALIASES.get(r["collective"], r["collective"])
            rows[(coll, int(r["size"]))].append((float(r["time_us"]), float(r["busbw"]), os.path.basename(f)))
    return rows


def med(vals, i):
    return statistics.median(v[i] for v in vals) if vals else None


def ratio_of(size, braid_vals, ref_vals):
    """reference/braid: busbw ratio from 64 KiB, time ratio below (> 1: braid faster)."""
    bt, bb = med(braid_vals, 0), med(braid_vals, 1)
    rt, rb = med(ref_vals, 0), med(ref_vals, 1)
    if size >= 65536:
        return bb / rb if rb > 0 else float("nan")
    return rt / bt if bt > 0 else float("nan")


def load_placement(path, near_us):
    """file name -> "near" | "far" | "mixed" from the probes taken before and after it."""
    labels = {}
    for line in open(path):
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 3 or parts[0] == "file":
            continue
        try:
            before, after = float(parts[1]), float(parts[2])
        except ValueError:
            labels[parts[0]] = "mixed"  # a probe that printed nothing
            continue
        if before < near_us and after < near_us:
            labels[parts[0]] = "near"
        elif before >= near_us and after >= near_us:
            labels[parts[0]] = "far"
        else:
            labels[parts[0]] = "mixed"
    return labels


def print_matrix(title, braid, ref, keep):
    """Prints the ratio matrix (collective x size) over the runs `keep` accepts, and its geomean."""
    colls = sorted({c for c, _ in braid})
    sizes = sorted({s for _, s in braid})
    ratios, runs = [], {}
    cells = {}
    for c in colls:
        nb = len({f for s in sizes for _, _, f in braid.get((c, s), []) if keep(f)})
        nr = len({f for s in sizes for _, _, f in ref.get((c, s), []) if keep(f)})
        runs[c] = (nb, nr)
        for s in sizes:
            b = [v for v in braid.get((c, s), []) if keep(v[2])]
            r = [v for v in ref.get((c, s), []) if keep(v[2])]
            if b and r:
                cells[(c, s)] = ratio_of(s, b, r)
                if cells[(c, s)] == cells[(c, s)] and cells[(c, s)] > 0:
                    ratios.append(cells[(c, s)])
    sizes = [s for s in sizes if any((c, s) in cells for c in colls)] or sizes  # no empty columns
    print(f"\n### ratio matrix, {title}\n")
    print("| collective (runs braid/ref) | " + " | ".join(fmt_size(s) for s in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for c in colls:
        row = [f"{cells[(c, s)]:.2f}x" if (c, s) in cells else "-" for s in sizes]
        print(f"| {c} ({runs[c][0]}/{runs[c][1]}) | " + " | ".join(row) + " |")
    if ratios:
        gm = statistics.geometric_mean(ratios)
        print(f"\ngeometric mean {gm:.2f}x over {len(ratios)} points; min {min(ratios):.2f}x, "
              f"max {max(ratios):.2f}x")
    else:
        print("\nno points")


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
    ap.add_argument("--ref-braid", default=None, help="prefix of braid JSON runs to compare against")
    ap.add_argument("--placement", default=None, help="TSV of placement probes per run file")
    ap.add_argument("--near-us", type=float, default=0.1, help="near placement below this one-way latency")
    a = ap.parse_args()
    braid = load_braid(os.path.join(a.dir, f"{a.braid}.*.run*.json"))
    refs = []
    if a.mpi:
        refs.append(("Open MPI", load_anchor(os.path.join(a.dir, f"{a.mpi}.run*.txt"))))
    if a.gloo:
        refs.append(("gloo", load_anchor(os.path.join(a.dir, f"{a.gloo}.run*.txt"))))
    if a.ref_braid:
        refs.append((a.ref_braid, load_braid(os.path.join(a.dir, f"{a.ref_braid}.*.run*.json"))))
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
                ratio = ratio_of(s, braid[(coll, s)], vals)
                ratios[name].append(ratio)
                line += f" {rt:.2f} | {rb:.3f} | {ratio:.2f}x |"
            print(line)
    for name, rs in ratios.items():
        rs = [r for r in rs if r == r and r > 0]
        if rs:
            gm = statistics.geometric_mean(rs)
            print(f"\nbraid vs {name}: geometric mean ratio {gm:.2f}x over {len(rs)} (collective, size) points; "
                  f"min {min(rs):.2f}x, max {max(rs):.2f}x")
    if a.placement and refs:
        labels = load_placement(a.placement, a.near_us)
        name, ref = refs[0]
        counts = defaultdict(int)
        for f in {v[2] for rows in (braid, ref) for vals in rows.values() for v in vals}:
            counts[labels.get(f, "unlabelled")] += 1
        print(f"\nplacement of the runs (probe one-way < {a.near_us} us before and after: near): "
              + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        print_matrix(f"braid / {name}, all runs", braid, ref, lambda f: True)
        for label in ("near", "far"):
            print_matrix(f"braid / {name}, {label} runs only", braid, ref,
                         lambda f, label=label: labels.get(f) == label)


if __name__ == "__main__":
    main()
