"""The examples/ scripts run under braid-run (or with torchrun-style variables when braid-run is
not built) and pass their own checks."""

from pathlib import Path

import pytest

from launch import REPO, braid_run_path, launch, launch_braid_run

EXAMPLES = {
    "allreduce_gradients": 2,
    "broadcast_initial_params": 2,
    "reduce_sample_counts": 3,
    "zero3_allgather_params": 2,
    "zero2_reduce_scatter_grads": 2,
    "hierarchical_allreduce": 4,
    "overlap_async_allreduce": 2,
}


# Run by test_elastic.py (a rank is killed; braid-run --max-failures).
ELSEWHERE = {"elastic_training"}


def test_every_example_is_listed():
    found = {p.stem for p in (REPO / "examples").glob("*.py") if not p.stem.startswith("_")}
    listed = set(EXAMPLES) | ELSEWHERE
    assert found == listed, f"examples without a test entry: {found ^ listed}"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example(name):
    script = REPO / "examples" / f"{name}.py"
    nranks = EXAMPLES[name]
    if braid_run_path() is not None:
        result = launch_braid_run(nranks, script, timeout=90)
    else:
        result = launch(nranks, script, timeout=90)
    assert result.ok, result.report()
