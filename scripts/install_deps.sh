#!/usr/bin/env bash
# Installs what building and testing braid needs, only when missing (idempotent): Debian 12's
# packages, then .venv/ with the pinned Python packages (torch 2.x, pytest, ...:
# scripts/install_venv.sh, python/requirements.txt).
set -euo pipefail
pkgs=(g++ cmake make libgtest-dev libgmock-dev libbenchmark-dev iproute2 clang libclang-rt-14-dev
      python3 pkg-config libpmix-dev openmpi-bin slurm-wlm munge libucx-dev ucx-utils
      python3-matplotlib)
# libpmix-dev: the store address of mpirun jobs goes through PMIx (optional at build time).
# libucx-dev: the UCX transport (optional at build time, docs/ucx.md); ucx-utils: ucx_info.
# python3-matplotlib: bench/plot.py, the benchmarks' plots (Debian's python3, not the .venv).
# openmpi-bin, slurm-wlm, munge: the launchers tests (tests/launchers) start real mpirun and a
# one-node Slurm cluster of their own (munged, slurmctld, slurmd on a temporary slurm.conf,
# other sockets and ports); services the packages may start (munge; slurmd and slurmctld, which
# fail without /etc/slurm/slurm.conf) are not used and do not disturb them.
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
"$(dirname "$0")/install_venv.sh"
