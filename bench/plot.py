#!/usr/bin/env python3
"""Plots of a comparison's result files: bus bandwidth against size, braid and the references.

usage: plot.py RESULTS_DIR OUT_DIR [--braid PREFIX] [--mpi CONFIG] [--gloo NAME] [--title TEXT]

Reads the same files as compare.py (braid-perf --json runs RESULTS_DIR/<PREFIX>.<coll>.run<k>.json,
the anchors' text runs RESULTS_DIR/<CONFIG>.run<k>*.txt) and writes one PNG per collective,
OUT_DIR/<PREFIX>.<coll>.png, with two panels: busbw (GB/s, median over runs) against the message
size for braid and each reference, and the ratio compare.py prints (busbw ratio from 64 KiB, time
ratio below; > 1: braid faster) against the size, with the 1.0x line; then one overview,
OUT_DIR/<PREFIX>.overview.png: the ratio against every reference for every collective, one
panel each (the results page of docs/benchmarks.md shows these). Prints the files it wrote.
Needs matplotlib (Debian: python3-matplotlib; run it with /usr/bin/python3).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402  (the loaders and the ratio rule, shared with the tables)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_collective(coll, braid, refs, title, path):
    sizes = sorted(s for c, s in braid if c == coll)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    top.plot(sizes, [compare.med(braid[(coll, s)], 1) for s in sizes], "o-", label="braid")
    for name, ref in refs:
        rs = [s for s in sizes if ref.get((coll, s))]
        if not rs:
            continue
        top.plot(rs, [compare.med(ref[(coll, s)], 1) for s in rs], "s--", label=name)
        bottom.plot(rs, [compare.ratio_of(s, braid[(coll, s)], ref[(coll, s)]) for s in rs],
                    "o-", label=f"braid / {name}")
    top.set_xscale("log", base=2)
    top.set_yscale("log")
    top.set_ylabel("busbw (GB/s)")
    top.set_title(f"{coll}: {title}" if title else coll)
    top.grid(True, which="both", alpha=0.3)
    top.legend()
    bottom.axhline(1.0, color="black", linewidth=0.8)
    bottom.set_yscale("log", base=2)
    bottom.set_ylabel("ratio (> 1: braid faster)")
    bottom.set_xlabel("message size (nccl-tests convention)")
    ticks = sizes[:: max(1, len(sizes) // 8)]
    bottom.set_xticks(ticks, [compare.fmt_size(t) for t in ticks])
    bottom.grid(True, which="both", alpha=0.3)
    if bottom.get_legend_handles_labels()[0]:
        bottom.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_overview(braid, refs, title, path):
    colls = sorted({c for c, _ in braid})
    cols = 3 if len(colls) > 4 else max(1, min(2, len(colls)))
    rows = (len(colls) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False,
                             sharey=True)
    for i, coll in enumerate(colls):
        ax = axes[i // cols][i % cols]
        sizes = sorted(s for c, s in braid if c == coll)
        for name, ref in refs:
            rs = [s for s in sizes if ref.get((coll, s))]
            if rs:
                ax.plot(rs, [compare.ratio_of(s, braid[(coll, s)], ref[(coll, s)]) for s in rs],
                        "o-", markersize=3, label=f"vs {name}")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_title(coll)
        ticks = sizes[:: max(1, len(sizes) // 4)]
        ax.set_xticks(ticks, [compare.fmt_size(t) for t in ticks])
        ax.grid(True, which="both", alpha=0.3)
        if i % cols == 0:
            ax.set_ylabel("braid / reference")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    for j in range(len(colls), rows * cols):
        axes[j // cols][j % cols].axis("off")
    fig.suptitle(f"{title} (> 1: braid faster)" if title else "> 1: braid faster")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("out")
    ap.add_argument("--braid", default="braid", help="prefix of braid's JSON runs")
    ap.add_argument("--mpi", default=None, help="prefix of Open MPI's runs")
    ap.add_argument("--gloo", default=None, help="prefix of gloo's runs")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    braid = compare.load_braid(os.path.join(a.dir, f"{a.braid}.*.run*.json"))
    if not braid:
        sys.exit(f"plot.py: no braid runs {a.braid}.*.run*.json in {a.dir}")
    refs = []
    if a.mpi:
        refs.append(("Open MPI", compare.load_anchor(os.path.join(a.dir, f"{a.mpi}.run*.txt"))))
    if a.gloo:
        refs.append(("gloo", compare.load_anchor(os.path.join(a.dir, f"{a.gloo}.run*.txt"))))
    os.makedirs(a.out, exist_ok=True)
    for coll in sorted({c for c, _ in braid}):
        path = os.path.join(a.out, f"{a.braid}.{coll}.png")
        plot_collective(coll, braid, refs, a.title, path)
        print(path)
    path = os.path.join(a.out, f"{a.braid}.overview.png")
    plot_overview(braid, refs, a.title, path)
    print(path)


if __name__ == "__main__":
    main()
