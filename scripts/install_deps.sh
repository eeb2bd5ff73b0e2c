#!/usr/bin/env bash
# Installs what building and testing braid needs from Debian 12, only when missing (idempotent).
set -euo pipefail
pkgs=(g++ cmake make libgtest-dev libgmock-dev libbenchmark-dev iproute2 clang libclang-rt-14-dev
      python3-torch libtorch-dev python3-pytest python3-numpy python3-pybind11 pybind11-dev
      pkg-config libpmix-dev openmpi-bin slurm-wlm munge)
# libpmix-dev: the store address of mpirun jobs goes through PMIx (optional at build time).
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
