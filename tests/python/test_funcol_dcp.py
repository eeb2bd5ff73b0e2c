"""Functional collectives, eager and compiled with torch.compile (workers/funcol_worker.py), and
torch.distributed.checkpoint saving at one world size and loading, resharded, at another
(workers/dcp_worker.py), over braid."""

import shutil
import tempfile
from pathlib import Path

import pytest

from launch import launch

WORKERS = Path(__file__).resolve().parent / "workers"


@pytest.mark.parametrize("nranks", [2, 3])
def test_functional_collectives_eager_and_compiled(nranks):
    result = launch(nranks, WORKERS / "funcol_worker.py", timeout=400)
    assert result.ok, result.report()
    assert "checks passed" in result.outputs[0], result.report()


@pytest.mark.parametrize("save_ranks,load_ranks", [(2, 4), (4, 2)])
def test_checkpoint_saved_at_one_size_loads_at_another(save_ranks, load_ranks):
    directory = tempfile.mkdtemp(prefix="braid_dcp_")
    try:
        for n, mode in ((save_ranks, "save"), (load_ranks, "load")):
            result = launch(n, WORKERS / "dcp_worker.py", args=(mode, directory), timeout=300)
            assert result.ok, result.report()
            assert "checks passed" in result.outputs[0], result.report()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
