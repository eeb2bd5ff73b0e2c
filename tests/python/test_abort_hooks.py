"""Abort hooks (ProcessGroup.register_abort_hook, torch >= 2.15) over braid: the scenario is
workers/abort_hooks_worker.py, 2 ranks as processes over env:// (docs/pytorch.md)."""

from pathlib import Path

import pytest
import torch.distributed as dist

from launch import launch

WORKER = Path(__file__).resolve().parent / "workers" / "abort_hooks_worker.py"


@pytest.mark.skipif(not hasattr(dist.ProcessGroup, "register_abort_hook"),
                    reason="this torch has no abort hooks (torch < 2.15)")
def test_abort_hooks():
    result = launch(2, WORKER, timeout=90)
    assert result.ok, result.report()
    for r in range(2):
        assert f"[rank {r}] PASS abort_hooks" in result.outputs[r], result.report()
    assert "abort hook 10 (run because abort() was called) raised: RuntimeError: a hook that fails" in \
        "".join(result.outputs), result.report()
