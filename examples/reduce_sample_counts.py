"""Global evaluation metrics: reduce per-rank counts to rank 0.

Each rank evaluates its shard of a dataset (shards need not be equal) and counts samples and
correct predictions; one reduce(SUM) to rank 0 gives the global accuracy, printed there.

    build/bin/braid-run -n 4 .venv/bin/python examples/reduce_sample_counts.py
"""

import torch
import torch.distributed as dist

from _common import setup


def main():
    rank, world = setup()
    # A toy "model" (sign of the first feature) and a toy labelled dataset of 1000 samples.
    g = torch.Generator().manual_seed(7)
    x = torch.randn(1000, 4, generator=g)
    labels = (x[:, 0] + 0.3 * x[:, 1] > 0).long()
    shard = torch.arange(rank, 1000, world)  # strided split: uneven when world does not divide
    predictions = (x[shard, 0] > 0).long()
    counts = torch.tensor([len(shard), int((predictions == labels[shard]).sum())],
                          dtype=torch.int64)
    dist.reduce(counts, dst=0, op=dist.ReduceOp.SUM)
    if rank == 0:
        samples, correct = counts.tolist()
        expected = int(((x[:, 0] > 0).long() == labels).sum())
        assert samples == 1000 and correct == expected, (samples, correct, expected)
        print(f"accuracy {correct / samples:.3f} over {samples} samples from {world} ranks",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
