"""The end of a job over torch's env:// store (a TCPStore served by rank 0's process) when
rank 0 exits first: the other ranks' braid groups end without torch's warning and C++ stack
trace for a store request to a server that has gone (workers/teardown_worker.py)."""

from pathlib import Path

import pytest

from launch import launch

WORKER = Path(__file__).resolve().parent / "workers" / "teardown_worker.py"


@pytest.mark.parametrize("mode", ["implicit", "destroy"])
def test_rank0_gone_first_leaves_no_trace(mode):
    result = launch(2, WORKER, args=[mode], init="env", timeout=120)
    assert result.ok, result.report()
    late = result.outputs[1]
    assert "the store's server has gone" in late, result.report()
    for noise in ("recvValue failed", "Exception raised from", "Broken pipe", "Traceback"):
        assert noise not in late, result.report()
