#!/usr/bin/env bash
# Small-message allreduce latency between emulated hosts with an added link delay: ring against
# the log-step algorithms and braid's automatic selection (docs/benchmarks.md, "Allreduce
# latency over delayed links").
#
#   sudo bench/delay_latency.sh [ROUNDS=3] [DELAY=1ms] [HOSTS=4]
#
# 1. ROUNDS interleaved rounds; in each, one scripts/emucluster.sh --hosts HOSTS --ranks 1
#    --delay DELAY run per algorithm (ring, recursive_doubling, halving_doubling,
#    double_binary_tree forced with --algo allreduce:NAME, then automatic selection) of
#    braid-perf allreduce 8 B - 64 KiB (x8), 20 iterations x 3 repetitions per size, checked.
#    Table: median over the rounds of braid-perf's time (itself the median of 3 repetitions).
# 2. The cost model's view at 8 B (BRAID_DEBUG=INFO, automatic selection): its candidates and
#    predictions, with the default parameters and with BRAID_TUNE=1 (measured links).
# 3. The forwarder's own latency: TCP round trips (tests/netns/rtt_probe.py, 200 one-byte
#    ping-pongs, 2 hosts) over plain veth links (no --delay) and over TUN links with
#    --delay 0ms --delay-by tun, interleaved ROUNDS times; medians of the runs' min and median.
# Output: results/delay/ (JSON, logs) and results/delay/report.md (printed).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
rounds="${1:-3}"
delay="${2:-1ms}"
hosts="${3:-4}"
BIN="$repo/build/bin"
emu="$repo/scripts/emucluster.sh"
out="$repo/results/delay"
rm -rf "$out"
mkdir -p "$out"
algos=(ring recursive_doubling halving_doubling double_binary_tree auto)
perf=("$BIN/braid-perf" allreduce -b 8 -e 64K -f 8 -n 20 -w 3 --reps 3 -c 1)
common=(--bin "$BIN" --hosts "$hosts" --ranks 1 --delay "$delay" --timeout 600 --quiet)

{
  echo "# delay_latency: $(date -u '+%Y-%m-%d %H:%M UTC'), $hosts hosts x 1 rank, delay $delay," \
    "$rounds rounds; load: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$out/meta.txt"

for k in $(seq 1 "$rounds"); do
  for algo in "${algos[@]}"; do
    rule=()
    [ "$algo" = auto ] || rule=(--algo "allreduce:$algo")
    echo "== round $k/$rounds: $algo"
    "$emu" "${common[@]}" --out "$out/emu_${algo}.run$k" -- \
      "${perf[@]}" "${rule[@]}" --json "$out/$algo.run$k.json" 2>"$out/emu_${algo}.run$k.err" ||
      { cat "$out/emu_${algo}.run$k.err" >&2; exit 1; }
  done
done

echo "== cost model (BRAID_DEBUG=INFO), default and measured (BRAID_TUNE=1) parameters"
for tune in 0 1; do
  "$emu" "${common[@]}" --out "$out/emu_info_tune$tune" --env BRAID_DEBUG=INFO \
    --env BRAID_TUNE=$tune -- "$BIN/braid-perf" allreduce -b 8 -e 64K -f 8 -n 2 -w 1 --reps 1 \
    2>"$out/emu_info_tune$tune.err" || { cat "$out/emu_info_tune$tune.err" >&2; exit 1; }
done

echo "== forwarder latency: veth vs TUN with --delay 0ms"
for k in $(seq 1 "$rounds"); do
  "$emu" --bin "$BIN" --hosts 2 --ranks 1 --quiet --out "$out/rtt_veth.run$k" -- \
    /usr/bin/python3 "$repo/tests/netns/rtt_probe.py" 200 2>/dev/null
  "$emu" --bin "$BIN" --hosts 2 --ranks 1 --quiet --delay 0ms --delay-by tun \
    --out "$out/rtt_tun0.run$k" -- /usr/bin/python3 "$repo/tests/netns/rtt_probe.py" 200 \
    2>"$out/rtt_tun0.run$k.err"
done

/usr/bin/python3 - "$out" "$rounds" "$delay" "$hosts" <<'EOF' | tee "$out/report.md"
import glob, json, os, re, statistics, sys
out, rounds, delay, hosts = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
algos = ["ring", "recursive_doubling", "halving_doubling", "double_binary_tree", "auto"]
times, picked = {}, {}
for a in algos:
    for f in sorted(glob.glob(os.path.join(out, a + ".run*.json"))):
        for line in open(f):
            r = json.loads(line)
            if r["wrong"] not in (0, None):
                sys.exit("wrong elements in %s" % f)
            times.setdefault((a, r["size"]), []).append(r["time_us"])
            if a == "auto":
                picked.setdefault(r["size"], set()).add(r["algo"])
sizes = sorted({s for (_, s) in times})
def fmt(b):
    return "%d B" % b if b < 1024 else "%d KiB" % (b // 1024)
print(open(os.path.join(out, "meta.txt")).read().strip())
print()
print("allreduce fp32 sum, time per operation in us (median of %d rounds; each the median of 3"
      " repetitions of 20 operations)" % rounds)
print()
print("| size | " + " | ".join(algos[:-1]) + " | automatic (its choice) | fastest forced |")
print("|---:|" + "---:|" * (len(algos) - 1) + "---|---|")
for s in sizes:
    med = {a: statistics.median(times[(a, s)]) for a in algos if (a, s) in times}
    forced = {a: t for a, t in med.items() if a != "auto"}
    best = min(forced, key=forced.get)
    cells = []
    for a in algos[:-1]:
        c = "%.0f" % med[a] if a in med else "-"
        cells.append("**%s**" % c if a == best else c)
    auto = "%.0f (%s)" % (med["auto"], ", ".join(sorted(picked.get(s, [])))) if "auto" in med else "-"
    print("| %s | %s | %s | %s, ring/%s = %.2fx |" % (fmt(s), " | ".join(cells), auto, best,
          best, forced["ring"] / forced[best]))
print()
# The cost model's INFO lines of rank 0: per size class its candidates' predictions and choice.
def model(tune):
    params, pred, chosen, block8, cur = "", {}, {}, [], None
    for line in open(os.path.join(out, "emu_info_tune%d" % tune, "h0.log")):
        line = re.sub(r"^\[0\] ", "", line.rstrip())
        if "INFO rank 0 comm 0]" not in line:
            continue
        m = re.search(r"cost model: (.*), selects", line)
        if m:
            params = m.group(1)
        m = re.search(r"\] allreduce (\d+) (B|KiB|MiB) \(size class", line)
        if m:
            cur = int(m.group(1)) << {"B": 0, "KiB": 10, "MiB": 20}[m.group(2)]
        elif not line.split("] ", 1)[1].startswith("  "):
            cur = None
        if cur is None:
            continue
        if cur == 8:
            block8.append(line.split("] ", 1)[1])
        m = re.search(r"candidate (\S+) +predicted ([0-9.e+]+) (us|ms)", line)
        if m:
            pred[(cur, m.group(1))] = float(m.group(2)) * (1000 if m.group(3) == "ms" else 1)
        m = re.search(r"  chosen (\S+):", line)
        if m:
            chosen[cur] = m.group(1)
            cur = None  # the block ends with its choice
    return params, pred, chosen, block8
m0, m1 = model(0), model(1)
print("The cost model (rank 0's BRAID_DEBUG=INFO lines), parameters: defaults `%s`; BRAID_TUNE=1"
      " `%s`." % (m0[0], m1[0]))
print()
print("At 8 B with BRAID_TUNE=1:")
print("```")
print("\n".join(m1[3]))
print("```")
print()
print("| size | chosen (defaults) | chosen (BRAID_TUNE=1) | BRAID_TUNE=1 predicted us: "
      + " / ".join(algos[:-1]) + " | measured us (table above) | fastest measured |")
print("|---:|---|---|---|---|---|")
for s in sizes:
    med = {a: statistics.median(times[(a, s)]) for a in algos[:-1] if (a, s) in times}
    best = min(med, key=med.get)
    preds = " / ".join("%.0f" % m1[1][(s, a)] if (s, a) in m1[1] else "-" for a in algos[:-1])
    meas = " / ".join("%.0f" % med[a] for a in algos[:-1] if a in med)
    print("| %s | %s | %s | %s | %s | %s |" % (fmt(s), m0[2].get(s, "?"), m1[2].get(s, "?"),
          preds, meas, best))
def rtt(pattern):
    mins, meds = [], []
    for d in sorted(glob.glob(os.path.join(out, pattern))):
        if not os.path.isdir(d):
            continue
        m = re.search(r"min ([0-9.]+) us, median ([0-9.]+) us", open(os.path.join(d, "h0.log")).read())
        if m:
            mins.append(float(m.group(1)))
            meds.append(float(m.group(2)))
    return (statistics.median(mins), statistics.median(meds), len(mins)) if mins else None
v, t = rtt("rtt_veth.run*"), rtt("rtt_tun0.run*")
print()
print("TCP round trip, 1 byte, 2 hosts (median over runs of each run's min / median of 200):")
print()
print("| link | min us | median us | runs |")
print("|---|---:|---:|---:|")
for name, r in (("veth + bridge (no --delay)", v), ("TUN + braid-netdelay, --delay 0ms", t)):
    if r:
        print("| %s | %.1f | %.1f | %d |" % (name, r[0], r[1], r[2]))
if v and t:
    print()
    print("forwarder's own cost per round trip (two passes): min +%.1f us, median +%.1f us"
          % (t[0] - v[0], t[1] - v[1]))
EOF
