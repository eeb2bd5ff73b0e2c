#!/usr/bin/env bash
# Communicator creation at 16, 32, 64 and 128 ranks as processes on this host (TCP only:
# BRAID_SHM_DISABLE=1): braid eager, braid lazy (BRAID_CONNECT=lazy) and gloo
# (torch.distributed), interleaved per size. Creation time and first-allreduce time (max over
# ranks, timed from a common start line), connections per rank; a markdown table with ratios.
# Usage: bench/creation_scale.sh [SIZES=16,32,64,128] [ROUNDS=1]
# Needs build/bin/braid-run and build/bin/creation-probe; gloo runs with $PYTHON (default the
# project's venv, /work/main/.venv/bin/python, else python3) and needs torch.
# Output: results/creation/runs.jsonl (one line per run, with the 1-minute load) and report.md.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
sizes="${1:-16,32,64,128}"
rounds="${2:-1}"
py="${PYTHON:-/work/main/.venv/bin/python}"
[ -x "$py" ] || py=python3
out="$repo/results/creation"
mkdir -p "$out"
{
  echo "# $(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs"
  echo "# uptime: $(uptime)"
  echo "# free: $(free -m | awk '/Mem:/ {print $2 " MiB total, " $7 " MiB available"}')"
} | tee "$out/machine.txt"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
"$py" "$here/creation_scale.py" --sizes "$sizes" --rounds "$rounds" --out "$out" \
  --bindir "$repo/build/bin"
echo "# uptime after: $(uptime)" | tee -a "$out/machine.txt"
