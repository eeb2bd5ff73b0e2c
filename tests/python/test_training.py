"""DDP with braid_torch.training's comm hooks: the fusion hook reproduces uncompressed training,
and each compressor (int8, topk, randk, sign, with error feedback) ends within the stated loss
margin of it while sending fewer bytes (workers/training_worker.py prints the table). The
Python compressors alone, on 1-3 ranks, against the error bounds and exact expectations of
docs/training.md and the error-feedback identity (workers/compressors_worker.py)."""

from pathlib import Path

import pytest

from launch import launch

WORKER = Path(__file__).resolve().parent / "workers" / "training_worker.py"


def test_hooks_converge_on_two_ranks():
    result = launch(2, WORKER, timeout=480)
    assert result.ok, result.report()
    print(result.outputs[0])


COMPRESSORS = Path(__file__).resolve().parent / "workers" / "compressors_worker.py"


@pytest.mark.parametrize("nranks", [1, 2, 3])
def test_python_compressors_within_bounds(nranks):
    result = launch(nranks, COMPRESSORS, timeout=240)
    assert result.ok, result.report()
