"""FSDP2 (fully_shard) over braid on a small transformer: losses and final parameters equal
single-process training on the global batch (workers/fsdp2_worker.py), at 2 and 4 ranks."""

from pathlib import Path

import pytest

from launch import launch

WORKER = Path(__file__).resolve().parent / "workers" / "fsdp2_worker.py"


@pytest.mark.parametrize("nranks", [2, 4])
def test_fsdp2_matches_one_process(nranks):
    result = launch(nranks, WORKER, timeout=300)
    assert result.ok, result.report()
    assert "checks passed" in result.outputs[0], result.report()
