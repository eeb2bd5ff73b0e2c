"""torch's reconfigure API (torch.distributed._reconfigure, torch >= 2.15) and
ProcessGroup.merge_remote_group over braid (docs/pytorch.md "Reconfigure"): the scenarios are in
workers/reconfigure_worker.py and workers/merge_worker.py; each rank is a process, bootstrapped
through torch's env:// store."""

from pathlib import Path

import pytest
import torch.distributed as dist

from launch import launch

WORKERS = Path(__file__).resolve().parent / "workers"

pytestmark = pytest.mark.skipif(not hasattr(dist, "_reconfigure"),
                                reason="this torch has no reconfigure API (torch < 2.15)")


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_reconfigure_basic(nranks):
    result = launch(nranks, WORKERS / "reconfigure_worker.py", args=("basic",), timeout=150)
    assert result.ok, result.report()
    for r, out in enumerate(result.outputs):
        assert f"[rank {r}] PASS basic" in out, result.report()


@pytest.mark.parametrize("nranks", [2, 3])
def test_reconfigure_replaces_a_killed_rank(nranks):
    result = launch(nranks, WORKERS / "reconfigure_worker.py", args=("replace",), timeout=150,
                    env={"RECONF_TEST_TIMEOUT": "20"})
    assert not result.timed_out, result.report()
    last = nranks - 1
    for r, rc in enumerate(result.returncodes):
        assert rc == (-9 if r == last else 0), result.report()
    for r in range(last):
        assert f"[rank {r}] PASS replace" in result.outputs[r], result.report()
    assert f"[rank {last}] PASS joiner" in result.outputs[0], result.report()


@pytest.mark.parametrize("nranks", [2, 4, 5])
def test_merge_remote_group(nranks):
    result = launch(nranks, WORKERS / "merge_worker.py", timeout=120)
    assert result.ok, result.report()
    for r, out in enumerate(result.outputs):
        assert f"[rank {r}] PASS merge" in out, result.report()
