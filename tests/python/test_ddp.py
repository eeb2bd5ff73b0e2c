"""DistributedDataParallel over braid ends with the same parameters as over gloo and as
single-process training on the global batch (workers/ddp_worker.py)."""

from pathlib import Path

import pytest

from launch import launch

WORKER = Path(__file__).resolve().parent / "workers" / "ddp_worker.py"


@pytest.mark.parametrize("nranks", [2, 3])
def test_ddp_matches_gloo(nranks):
    result = launch(nranks, WORKER, timeout=180)
    assert result.ok, result.report()
