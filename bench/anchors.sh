# Sourced by the comparison scripts. anchors_prepare DEST [setup]: copies ../shared/anchors
# beside the repository (or beside a worktree's parent folder, or $ANCHORS) to DEST, writable;
# installs Open MPI with its headers where missing (Debian's openmpi-bin can be installed
# without libopenmpi-dev: mpicc then exists but mpi.h does not); with `setup`, runs the anchors'
# own setup too (gloo's Debian torch, iperf3, ...); builds Open MPI's benchmark in DEST/build.
anchors_prepare() {
  local dest=$1 src="${ANCHORS:-}" repo cand
  repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  for cand in "$repo/../shared/anchors" "$repo/../../shared/anchors"; do
    [ -n "$src" ] || { [ -d "$cand" ] && src="$cand"; } || true
  done
  [ -d "$src" ] || { echo "no anchors folder (set ANCHORS=.../shared/anchors)" >&2; return 1; }
  rm -rf "$dest" && cp -r "$src" "$dest" && chmod -R u+w "$dest"
  if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null ||
    ! printf '#include <mpi.h>\n' | mpicc -E -x c - >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null
  fi
  [ "${2:-}" != setup ] || bash "$dest/run_all.sh" setup >/dev/null
  mkdir -p "$dest/build"
  mpicc -O2 -Wall "$dest/mpi/mpi_coll_bench.c" -o "$dest/build/mpi_coll_bench"
}
