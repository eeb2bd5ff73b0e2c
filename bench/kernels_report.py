#!/usr/bin/python3
"""Markdown tables from kernels_bench --benchmark_out=FILE.json (with --benchmark_repetitions and
--benchmark_report_aggregates_only): GB/s of each kernel from the median CPU time and from the
median real time, and the ratio to memcpy of the same size measured in the same run.

    bench/kernels_report.py results.json
"""
import json
import sys


def main(path):
    with open(path) as f:
        data = json.load(f)
    med = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        name = b["run_name"].removesuffix("/real_time")
        size = name.rsplit("/", 1)[1]
        nbytes = int(size[:-1]) << (20 if size.endswith("M") else 10)
        med[name] = (b["cpu_time"], b["real_time"], nbytes)

    def gbs(t_ns, nbytes):
        return nbytes / t_ns  # bytes per ns = GB/s

    ctx = data["context"]
    print(f"context: {ctx.get('date')}, load average {ctx.get('load_avg')}, "
          f"best level {ctx.get('kernels.best')}, streaming threshold "
          f"{ctx.get('kernels.streaming_threshold_bytes')} B\n")
    for size in ("64K", "64M"):
        mc = med.get(f"Memcpy/{size}")
        if not mc:
            continue
        mc_cpu, mc_real = gbs(mc[0], mc[2]), gbs(mc[1], mc[2])
        print(f"### {size} (memcpy: {mc_cpu:.2f} GB/s by CPU time, {mc_real:.2f} GB/s by real time)\n")
        print("| kernel | GB/s (CPU time) | x memcpy | GB/s (real time) | x memcpy |")
        print("|---|---:|---:|---:|---:|")
        for name, (cpu, real, nbytes) in med.items():
            if not name.endswith("/" + size) or name.startswith("Memcpy"):
                continue
            label = name[: -len(size) - 1]
            c, r = gbs(cpu, nbytes), gbs(real, nbytes)
            print(f"| {label} | {c:.2f} | {c / mc_cpu:.2f} | {r:.2f} | {r / mc_real:.2f} |")
        print()


if __name__ == "__main__":
    main(sys.argv[1])
