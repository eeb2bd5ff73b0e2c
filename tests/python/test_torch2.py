"""torch 2.x's additions for a CPU backend, on braid (workers/torch2_worker.py): coalesced
collectives, gather_into_tensor, uneven all_to_all_single against gloo, every dtype for data
movement, errors naming op and dtype, dist.monitored_barrier, per-call timeouts, set_timeout,
abort, shutdown, split_group, new_subgroups, init_device_mesh and DTensor redistribution, at
2, 3 and 4 ranks, with backend "braid" and "cpu:braid"."""

from pathlib import Path

import pytest

from launch import launch

WORKER = Path(__file__).resolve().parent / "workers" / "torch2_worker.py"


@pytest.mark.parametrize("nranks,init,backend", [(2, "env", "braid"), (3, "tcp", "cpu:braid"),
                                                 (4, "file", "braid")])
def test_torch2_ops(nranks, init, backend):
    result = launch(nranks, WORKER, init=init, timeout=300, env={"BRAID_TEST_BACKEND": backend})
    assert result.ok, result.report()
    assert "checks passed" in result.outputs[0], result.report()
