"""DDP with braid_torch.training's comm hooks: the fusion hook reproduces uncompressed training,
and each compressor (int8, topk, randk, sign, with error feedback) ends within the stated loss
margin of it while sending fewer bytes (workers/training_worker.py prints the table)."""

from pathlib import Path

from launch import launch

WORKER = Path(__file__).resolve().parent / "workers" / "training_worker.py"


def test_hooks_converge_on_two_ranks():
    result = launch(2, WORKER, timeout=280)
    assert result.ok, result.report()
    print(result.outputs[0])
