"""Keep going when a rank dies, through torch (docs/pytorch.md "Shrink"): a rank is killed with
SIGKILL, the others shrink the braid process group and go on.

- examples/elastic_training.py under braid-run --max-failures (braid's store outside the ranks:
  a killed rank is known gone at once) and under plain processes with torch's env:// store (the
  killed rank is left out after the group's timeout): the final weights equal one process's
  full-batch training, computed here with the gradient written out by hand.
- workers/shrink_worker.py: torch.distributed.shrink_group (the wrong list fails naming braid's,
  the right one works), braid_torch.shrink() after a revoke with nobody dead, and a subgroup.

After each launch no /dev/shm entry of any rank is left.
"""

import os
import re
from pathlib import Path

import pytest
import torch

from launch import REPO, braid_run_path, launch, launch_braid_run

EXAMPLE = REPO / "examples" / "elastic_training.py"
WORKER = Path(__file__).resolve().parent / "workers" / "shrink_worker.py"


def example_module():
    import importlib.util
    import sys
    sys.path.insert(0, str(REPO / "examples"))
    spec = importlib.util.spec_from_file_location("elastic_training", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def expected_weights():
    """One process: every step's whole global batch, gradient of the summed squared error by
    hand (2 X^T r, 2 sum r), divided by the batch size."""
    ex = example_module()
    x, y = ex.data()
    w = torch.zeros(ex.FEATURES, dtype=torch.float64)
    b = torch.zeros((), dtype=torch.float64)
    for step in range(ex.STEPS):
        xs = x[step * ex.GLOBAL_BATCH:(step + 1) * ex.GLOBAL_BATCH]
        ys = y[step * ex.GLOBAL_BATCH:(step + 1) * ex.GLOBAL_BATCH]
        r = xs @ w + b - ys
        w = w - ex.LR * (2 * xs.T @ r) / ex.GLOBAL_BATCH
        b = b - ex.LR * (2 * r.sum()) / ex.GLOBAL_BATCH
    return w, b


def pids_of(log):
    return [int(p) for p in re.findall(r"\[rank \d+\] pid (\d+)", log)]


def assert_no_shm_left(pids):
    left = [n for n in os.listdir("/dev/shm")
            if "braid" in n and any(f"-{p}-" in n for p in pids)]
    assert not left, f"left in /dev/shm: {left}"


def braid_run_or_skip():
    if braid_run_path() is None:
        pytest.skip("braid-run is not built (build/bin/braid-run)")


@pytest.mark.parametrize("nranks,kill_rank,kill_step,launcher", [
    (4, 2, 7, "braid-run"),
    (3, 1, 0, "braid-run"),
    (2, 1, 4, "braid-run"),  # down to one rank
    (3, 2, 11, "processes"),
])
def test_elastic_training_example(nranks, kill_rank, kill_step, launcher, tmp_path):
    out = tmp_path / "weights.pt"
    env = {"ELASTIC_KILL_RANK": kill_rank, "ELASTIC_KILL_STEP": kill_step}
    if launcher == "braid-run":
        braid_run_or_skip()
        result = launch_braid_run(nranks, EXAMPLE, args=("--out", out), timeout=100, env=env,
                                  options=("--max-failures", "1"))
        assert result.ok, result.report()
        log = result.outputs[0]
    else:
        # torch's store only: the dead rank is waited for until the group's timeout (5 s).
        env["ELASTIC_TIMEOUT"] = 5
        result = launch(nranks, EXAMPLE, args=("--out", out), timeout=100, env=env)
        assert not result.timed_out, result.report()
        for r, rc in enumerate(result.returncodes):
            assert rc == (-9 if r == kill_rank else 0), result.report()
        log = "\n".join(result.outputs)
    assert f"[rank {kill_rank}] killing myself at step {kill_step}" in log, log[-4000:]
    assert f"1 shrink(s), final world {nranks - 1}, replicas identical" in log, log[-4000:]
    got = torch.load(out)
    w, b = expected_weights()
    assert torch.allclose(got["weight"].reshape(-1), w, rtol=0, atol=1e-12), (got, w)
    assert torch.allclose(got["bias"].reshape(()), b, rtol=0, atol=1e-12), (got, b)
    pids = pids_of(log)
    assert len(pids) == nranks, log[-4000:]
    assert_no_shm_left(pids)


@pytest.mark.parametrize("scenario,nranks,failures", [
    ("torch_api", 4, 2),
    ("no_failure", 3, 0),
    ("subgroup", 4, 1),
])
def test_shrink(scenario, nranks, failures):
    braid_run_or_skip()
    # braid-run serves braid's store itself under --max-failures (also for no_failure: its
    # revoke watcher is what tells the ranks at once).
    options = ("--max-failures", str(max(1, failures)))
    result = launch_braid_run(nranks, WORKER, args=(scenario,), timeout=100, options=options)
    assert result.ok, result.report()
    log = result.outputs[0]
    alive = {"torch_api": nranks - 2, "no_failure": nranks, "subgroup": nranks - 1}[scenario]
    assert log.count(f"PASS {scenario}") == alive, log[-6000:]
    assert_no_shm_left(pids_of(log))
