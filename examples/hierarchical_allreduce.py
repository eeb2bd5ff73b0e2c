"""Two-level allreduce from subgroups: reduce_scatter inside each host, all_reduce across hosts,
all_gather inside each host.

new_group builds one intra-host group per host and one cross-host group per local rank. Each
rank then carries 1/L of the cross-host traffic (L = ranks per host) instead of the whole
buffer: the shape of NCCL's and braid's own hierarchical algorithms, written with torch's API.

HOSTS (default 2) emulates the host count on one machine; on a real cluster use the launcher's
LOCAL_WORLD_SIZE.

    build/bin/braid-run -n 4 .venv/bin/python examples/hierarchical_allreduce.py
"""

import os

import torch
import torch.distributed as dist

from _common import log, setup


def build_groups(world, per_host):
    """Every rank must create every group, in the same order (new_group is collective)."""
    hosts = world // per_host
    intra = [dist.new_group(list(range(h * per_host, (h + 1) * per_host))) for h in range(hosts)]
    cross = [dist.new_group(list(range(l, world, per_host))) for l in range(per_host)]
    rank = dist.get_rank()
    return intra[rank // per_host], cross[rank % per_host]


def hierarchical_all_reduce(x, intra, cross, per_host):
    """In-place sum of x over all ranks; x.numel() must divide by the ranks per host."""
    shard = torch.empty(x.numel() // per_host, dtype=x.dtype)
    dist.reduce_scatter_tensor(shard, x, group=intra)  # 1. sum within the host, 1/L each
    dist.all_reduce(shard, group=cross)                 # 2. sum that slice across hosts
    dist.all_gather_into_tensor(x, shard, group=intra)  # 3. everyone in the host gets all
    return x


def main():
    rank, world = setup()
    if os.environ.get("LOCAL_WORLD_SIZE") and int(os.environ["LOCAL_WORLD_SIZE"]) < world:
        per_host = int(os.environ["LOCAL_WORLD_SIZE"])  # a real multi-node launch
    else:
        hosts = int(os.environ.get("HOSTS", "2"))
        per_host = world // hosts if world % hosts == 0 else world
    intra, cross = build_groups(world, per_host)
    x = torch.arange(per_host * 1000, dtype=torch.float64) * (rank + 1)
    expected = x.clone()
    dist.all_reduce(expected)  # the flat allreduce, for comparison
    hierarchical_all_reduce(x, intra, cross, per_host)
    torch.testing.assert_close(x, expected)
    log(f"hierarchical allreduce: {world // per_host} hosts x {per_host} ranks, "
        f"matches the flat allreduce")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
