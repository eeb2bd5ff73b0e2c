"""braid_torch.FusionBuffer, the C++ fusion buffer exposed in Python (docs/training.md):
workers/fusion_worker.py at 1, 2, 3 ranks, and once with BRAID_FUSION_THRESHOLD /
BRAID_CYCLE_TIME set (the defaults must follow them)."""

from pathlib import Path

import pytest

from launch import launch

WORKER = Path(__file__).resolve().parent / "workers" / "fusion_worker.py"


@pytest.mark.parametrize("nranks", [1, 2, 3])
def test_fusion_buffer(nranks):
    # (no BRAID_FUSION_THRESHOLD / BRAID_CYCLE_TIME: the documented defaults, 64M and 1 ms)
    result = launch(nranks, WORKER, args=(64 << 20, 1.0), timeout=300)
    assert result.ok, result.report()


def test_fusion_buffer_defaults_follow_environment():
    env = {"BRAID_FUSION_THRESHOLD": "3M", "BRAID_CYCLE_TIME": "2.5"}
    result = launch(2, WORKER, args=(3 << 20, 2.5), timeout=300, env=env)
    assert result.ok, result.report()
