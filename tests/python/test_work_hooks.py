"""Coalescing (_coalescing_manager with a device, batch_isend_irecv), collectives timing and
completion hooks over braid: the scenario is workers/work_hooks_worker.py, ranks as processes
over env:// (docs/pytorch.md, "Coalescing, timing and completion hooks")."""

from pathlib import Path

import pytest

from launch import launch

WORKER = Path(__file__).resolve().parent / "workers" / "work_hooks_worker.py"


@pytest.mark.parametrize("nranks", [2, 3])
def test_work_hooks(nranks):
    result = launch(nranks, WORKER, timeout=120)
    assert result.ok, result.report()
    for r in range(nranks):
        assert f"[rank {r}] PASS work_hooks" in result.outputs[r], result.report()
    assert "[braid WARN] on-completion hook raised: RuntimeError: a completion hook that fails" in \
        "".join(result.outputs), result.report()
