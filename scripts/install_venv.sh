#!/usr/bin/env bash
# Creates .venv/ at the repository root: Python 3.11 with exactly the packages of
# python/requirements.txt (pinned torch 2.x, pybind11, numpy, pytest, expecttest, hypothesis).
# Run by scripts/install_deps.sh, hence by `make demo` and `make test`.
#
# Idempotent: .venv/.braid-requirements holds the hash of the requirements file and the
# interpreter it was made from; when both still match, nothing is done (a few milliseconds).
# When they differ (a changed pin), the environment is made anew from scratch, so it never
# holds leftovers. A failed install leaves no stamp, so the next run starts over.
#
# The interpreter: $BRAID_VENV_PYTHON if set, else the first Python 3.11 on PATH (python3.11,
# python3) that has venv and ensurepip outside /usr/bin (this machine image's pyenv 3.11),
# else Debian's /usr/bin/python3.11 with python3.11-venv installed for it.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="$repo/.venv"
req="$repo/python/requirements.txt"

find_python() {
  local c p
  for c in "${BRAID_VENV_PYTHON:-}" python3.11 python3; do
    [ -n "$c" ] || continue
    p="$(command -v "$c" 2>/dev/null)" || continue
    "$p" - <<'EOF' >/dev/null 2>&1 || continue
import os, sys, ensurepip, venv
real = os.path.realpath(sys.executable)
sys.exit(0 if sys.version_info[:2] == (3, 11) and not real.startswith(("/usr/bin/", "/bin/")) else 1)
EOF
    "$p" -c 'import os, sys; print(os.path.realpath(sys.executable))'
    return 0
  done
  return 1
}

if ! python="$(find_python)"; then
  # A plain Debian 12 machine: its own Python 3.11, once python3.11-venv brings ensurepip
  # (the venv does not see the system's site-packages either way).
  if [ -x /usr/bin/python3.11 ]; then
    if ! /usr/bin/python3.11 -c 'import ensurepip' 2>/dev/null; then
      SUDO=""
      [ "$(id -u)" -eq 0 ] || SUDO=sudo
      $SUDO apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3.11-venv >/dev/null
    fi
    python=/usr/bin/python3.11
  else
    echo "install_venv: no Python 3.11 with venv/ensurepip on PATH; set BRAID_VENV_PYTHON" >&2
    exit 1
  fi
fi
want="$(sha256sum "$req" | cut -d' ' -f1) $python"

exec 9>"$repo/.venv.lock"
flock 9  # two builds starting at once: the second waits for the first, then finds it done
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.braid-requirements" 2>/dev/null)" = "$want" ]; then
  exit 0
fi

echo "install_venv: creating .venv from $python with python/requirements.txt (torch: ~3 GB download)"
start=$(date +%s)
rm -rf "$venv"
"$python" -m venv "$venv"
# --no-deps: the file pins every dependency itself (and leaves out the ones not needed here).
"$venv/bin/python" -m pip install --no-deps --only-binary=:all: --no-input \
  --disable-pip-version-check -q -r "$req"
"$venv/bin/python" -c 'import torch, torch.distributed as d; assert d.is_available()'
echo "$want" >"$venv/.braid-requirements"
echo "install_venv: done in $(( $(date +%s) - start )) s ($(du -sh "$venv" | cut -f1))"
