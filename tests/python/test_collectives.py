"""Every collective of backend "braid" at 2, 3 and 4 ranks, over each init method torch offers,
checked against independently computed results (workers/collectives_worker.py)."""

from pathlib import Path

import pytest

from launch import braid_run_path, launch, launch_braid_run

WORKER = Path(__file__).resolve().parent / "workers" / "collectives_worker.py"


@pytest.mark.parametrize("nranks,init", [(2, "env"), (3, "tcp"), (4, "file")])
def test_collectives(nranks, init):
    result = launch(nranks, WORKER, init=init, timeout=240)
    assert result.ok, result.report()


def test_under_braid_run():
    """braid-run sets torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT):
    init_process_group("braid") with env:// just works."""
    if braid_run_path() is None:
        pytest.skip("build/bin/braid-run is not built")
    result = launch_braid_run(2, WORKER, args=["check_all_reduce", "check_all_gather",
                                               "check_send_recv", "check_new_group"],
                              timeout=120)
    assert result.ok, result.report()
    assert "checks passed" in result.outputs[0], result.report()
