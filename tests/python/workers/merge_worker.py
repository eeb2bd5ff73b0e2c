"""ProcessGroup.merge_remote_group over braid (tests/python/test_reconfigure.py): the world is
cut into two groups, A (the first half) and B (the rest); each merges with the other through a
prefix of the default store into one group of every rank. torch numbers the merged group (in
the order the ranks reach the store); an all_gather over it says where each rank went, which
must be every rank once, then an all_reduce and a send/recv ring run on it. Prints
"[rank R] PASS merge"."""

import datetime
import os

import torch
import torch.distributed as dist

import braid_torch  # noqa: F401  (registers the backend)


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("braid", timeout=datetime.timedelta(seconds=30))
    half = world // 2
    groups = [dist.new_group(list(range(half))), dist.new_group(list(range(half, world)))]
    mine = groups[0] if rank < half else groups[1]
    store = dist.PrefixStore("merge/", dist.distributed_c10d._get_default_store())
    merged = mine.merge_remote_group(store, world, datetime.timedelta(seconds=30))
    assert merged.size() == world, merged.size()
    me = merged.rank()
    # Where every rank ended up: gathered over the merged group itself.
    got = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    merged.allgather([got], [torch.tensor([rank])]).wait()
    order = [int(g) for g in got]
    assert sorted(order) == list(range(world)), order
    assert order[me] == rank, (order, me, rank)
    t = torch.full((5,), float(rank + 1))
    merged.allreduce([t]).wait()
    assert torch.equal(t, torch.full((5,), float(world * (world + 1) // 2))), t
    if world > 1:
        out, inp = torch.tensor([rank]), torch.zeros(1, dtype=torch.int64)
        works = [merged.send([out], (me + 1) % world, 0),
                 merged.recv([inp], (me - 1) % world, 0)]
        for w in works:
            w.wait()
        assert int(inp) == order[(me - 1) % world], (inp, order)
    print(f"[rank {rank}] PASS merge", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
