"""Functional collectives (torch.distributed._functional_collectives) over braid, eager and
inside a function compiled with torch.compile (inductor's CPU code calling the _c10d_functional
ops on braid), against values computed from each rank's known contribution."""

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from rank_util import Checks, assert_equal, init


def contribution(rank, n, salt=0):
    return torch.arange(n, dtype=torch.float32) * (rank + 1) + salt


def expected_sum(world, n, salt=0):
    return sum(contribution(r, n, salt) for r in range(world))


def collectives(x, group):
    """The functional collectives a model's forward would use; returns plain tensors."""
    world = dist.get_world_size(group)
    s = funcol.all_reduce(x, "sum", group)
    m = funcol.all_reduce(x, "max", group)
    g = funcol.all_gather_tensor(x, 0, group)
    rs = funcol.reduce_scatter_tensor(x.repeat(world), "sum", 0, group)
    b = funcol.broadcast(x, 0, group)
    a2a = funcol.all_to_all_single(x.repeat(world), None, None, group)
    # Computation on the results makes the compiled graph wait for each collective.
    return s * 1, m + 0, g * 1, rs + 0, b * 1, a2a * 1


def check(results, rank, world, n, what):
    s, m, g, rs, b, a2a = (torch.as_tensor(t) for t in results)
    assert_equal(s, expected_sum(world, n), f"{what} all_reduce sum")
    assert_equal(m, contribution(world - 1, n), f"{what} all_reduce max")
    assert_equal(g, torch.cat([contribution(r, n) for r in range(world)]), f"{what} all_gather")
    assert_equal(rs, expected_sum(world, n), f"{what} reduce_scatter")
    assert_equal(b, contribution(0, n), f"{what} broadcast")
    assert_equal(a2a, torch.cat([contribution(r, n) for r in range(world)]),
                 f"{what} all_to_all_single")


def check_eager(rank, world):
    for n in (1, 7, 1031):
        x = contribution(rank, n)
        check([t.wait() if hasattr(t, "wait") else t for t in collectives(x, dist.group.WORLD)],
              rank, world, n, f"eager n={n}")


def check_eager_on_a_subgroup(rank, world):
    evens = list(range(0, world, 2))
    g = dist.new_group(evens)
    if rank in evens:
        x = contribution(evens.index(rank), 5)
        s = funcol.all_reduce(x, "sum", g)
        assert_equal(torch.as_tensor(s), expected_sum(len(evens), 5), "subgroup all_reduce")


def check_compiled(rank, world):
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: collectives(x, dist.group.WORLD), fullgraph=True)
    for n in (7, 1031):
        check(compiled(contribution(rank, n)), rank, world, n, f"compiled n={n}")


def main():
    rank, world = init()
    checks = Checks(f"functional collectives (world {world})")
    for fn in (check_eager, check_eager_on_a_subgroup, check_compiled):
        checks.run(fn, rank, world)
    dist.barrier()
    checks.done()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
