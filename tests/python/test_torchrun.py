"""The real torchrun binary from the venv's torch wheel (not a stand-in): --nproc-per-node 4 on
one host starts four ranks that init_process_group("braid") through env:// and run the
collectives worker's core checks (workers/collectives_worker.py)."""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from launch import REPO, base_env, free_port

WORKER = Path(__file__).resolve().parent / "workers" / "collectives_worker.py"
TORCHRUN = Path(sys.executable).parent / "torchrun"


def test_torchrun_nproc_per_node_4():
    if not TORCHRUN.exists():
        pytest.skip(f"{TORCHRUN} does not exist (not a venv with torch)")
    port = free_port()
    env = base_env({"BRAID_TEST_INIT_METHOD": "env://"})
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    cmd = [str(TORCHRUN), "--nproc-per-node", "4", "--master-addr", "127.0.0.1",
           "--master-port", str(port), str(WORKER), "check_all_reduce_coalesced",
           "check_all_gather_into_tensor", "check_reduce_scatter_tensor", "check_broadcast",
           "check_all_to_all_single", "check_send_recv", "check_new_group", "check_barrier"]
    with tempfile.TemporaryFile(mode="w+") as out:
        t0 = time.monotonic()
        proc = subprocess.run(cmd, env=env, cwd=str(REPO), stdout=out, stderr=subprocess.STDOUT,
                              timeout=300)
        out.seek(0)
        log = out.read()
    assert proc.returncode == 0, f"torchrun exited {proc.returncode} after " \
                                 f"{time.monotonic() - t0:.0f}s:\n{log[-8000:]}"
    assert "collectives (world 4): 8 checks passed" in log, log[-8000:]
