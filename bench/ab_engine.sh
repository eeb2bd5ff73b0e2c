#!/usr/bin/env bash
# A/B of two braid-perf binaries (before and after a change), interleaved in one run: for each
# round, each transport (shm: NRANKS ranks of one host; tcp: the same with BRAID_SHM_DISABLE=1) and
# each collective, A then B (B then A on odd rounds). Reports per point the median over rounds
# of each side's time (each itself braid-perf's median of --reps) and B/A, and the minimum
# over rounds (a launch that meets the VM's slow state, docs/benchmarks.md, drops out of it).
# Usage: bench/ab_engine.sh A_BIN B_BIN [ROUNDS=3] [MAXBYTES=64M] [COLLS=allreduce,allgather,broadcast]
# Env: TRANSPORTS="shm tcp" (any of shm, tcp, ucx), MINBYTES=8, FACTOR=8, REPS=5, NRANKS=2.
#   ucx: 2 ranks with BRAID_TRANSPORT=ucx BRAID_SHM_DISABLE=1 over the caller's UCX_TLS
#   (default sm,cma,self, with UCX's shared-memory error handling on, as bench/compare_ucx.sh).
# Output: results/ab_engine/*.json and the table (printed, markdown).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
a="$1"
b="$2"
rounds="${3:-3}"
maxb="${4:-64M}"
colls="${5:-allreduce,allgather,broadcast}"
run="${BRAID_RUN:-$repo/build/bin/braid-run}"
out="$repo/results/ab_engine"
mkdir -p "$out"
rm -f "$out"/*.json
for ((r = 0; r < rounds; r++)); do
  for t in ${TRANSPORTS:-shm tcp}; do
    env=()
    case "$t" in
      shm) ;;
      tcp) env=(BRAID_SHM_DISABLE=1) ;;
      ucx)
        env=(BRAID_SHM_DISABLE=1 BRAID_TRANSPORT=ucx UCX_TLS="${UCX_TLS:-sm,cma,self}"
          UCX_POSIX_ERROR_HANDLING=y UCX_SYSV_ERROR_HANDLING=y)
        ;;
      *) echo "unknown transport '$t' (shm, tcp, ucx)" >&2; exit 2 ;;
    esac
    for c in ${colls//,/ }; do
      order="A B"
      ((r % 2 == 1)) && order="B A"
      for side in $order; do
        bin="$a"
        [ "$side" = B ] && bin="$b"
        env "${env[@]}" "$run" -n "${NRANKS:-2}" -- "$bin" "$c" -b "${MINBYTES:-8}" -e "$maxb" -f "${FACTOR:-8}" -c 0 \
          --reps "${REPS:-5}" \
          --json "$out/$t.$c.$side.$r.json" > /dev/null
      done
    done
  done
done
/usr/bin/python3 - "$out" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
t = {}
for f in glob.glob(os.path.join(out, "*.json")):
    tr, coll, side, _ = os.path.basename(f).split(".")[:4]
    for line in open(f):
        j = json.loads(line)
        t.setdefault((tr, coll, j["size"]), {}).setdefault(side, []).append(j["time_us"])
print("| transport | collective | bytes | A us | B us | B/A | A min | B min | B/A min |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
worst = 0
for (tr, coll, size) in sorted(t, key=lambda k: (k[0], k[1], k[2])):
    v = t[(tr, coll, size)]
    if "A" not in v or "B" not in v:
        continue
    ma, mb = statistics.median(v["A"]), statistics.median(v["B"])
    worst = max(worst, mb / ma)
    na, nb = min(v["A"]), min(v["B"])
    print(f"| {tr} | {coll} | {size} | {ma:.2f} | {mb:.2f} | {mb / ma:.3f} "
          f"| {na:.2f} | {nb:.2f} | {nb / na:.3f} |")
print(f"\nworst B/A: {worst:.3f}")
PY
