"""Shrinking braid process groups (tests/python/test_elastic.py), one scenario per launch:

  torch_api N   the backend's shrink() refuses bad arguments (out of range, this rank, a rank
                twice, unknown flags) before agreeing on anything, the group still working;
                then ranks N-2 and N-1 die (SIGKILL); the survivors' all_reduce fails with braid's
                PeerLost; torch.distributed.shrink_group([N-1]) fails naming braid's agreed list
                [N-2, N-1]; shrink_group([N-2, N-1]) then returns the default group of the
                survivors, which reduces, gathers, sends and makes subgroups.
  no_failure N  rank 1 revokes the world; every rank's next all_reduce fails with PeerLost;
                braid_torch.shrink() keeps all N ranks in a new group that works.
  subgroup N    a subgroup of ranks 1..N-1 loses rank N-1 (SIGKILL); ranks 1..N-2 shrink the
                subgroup with braid_torch.shrink(group) (whose global ranks are right, unlike
                what torch 2.15's shrink_group records for a subgroup) and reduce over it; rank 0
                is not in it and takes no part.

Each rank prints "[rank R] PASS <scenario>" at the end; expected values are computed here from
the ranks and sizes, not by another collective.
"""

import datetime
import os
import signal

import torch
import torch.distributed as dist

import braid_torch
from torch.distributed import distributed_c10d as c10d
from rank_util import run_scenario


def expect_peer_failure(fn, *names):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        assert braid_torch.is_peer_failure(e), f"not a braid peer failure: {e!r}"
        for n in names:
            assert n in str(e), f"{n!r} not in {e}"
        return str(e)
    raise AssertionError("the collective did not fail")


def check_world(rank_before, survivors):
    """The default group is the survivors, renumbered in their old order, and it works."""
    world = len(survivors)
    rank = survivors.index(rank_before)
    assert dist.get_world_size() == world, (dist.get_world_size(), world)
    assert dist.get_rank() == rank, (dist.get_rank(), rank)
    t = torch.full((5,), float(rank_before), dtype=torch.float64)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((5,), float(sum(survivors)), dtype=torch.float64)), t
    got = [torch.zeros(3, dtype=torch.int32) for _ in range(world)]
    dist.all_gather(got, torch.full((3,), rank_before, dtype=torch.int32))
    assert [int(g[0]) for g in got] == survivors, got
    if world > 1:  # point-to-point over the shrunk group's own communicator
        right, left = (rank + 1) % world, (rank - 1) % world
        buf = torch.zeros(4, dtype=torch.int64)
        reqs = [dist.isend(torch.full((4,), rank_before, dtype=torch.int64), right),
                dist.irecv(buf, left)]
        for r in reqs:
            r.wait()
        assert torch.equal(buf, torch.full((4,), survivors[left], dtype=torch.int64)), buf
    # A new subgroup of the shrunk world (created through torch's store, over braid's).
    sub = dist.new_group([0, world - 1])
    if rank in (0, world - 1):
        t = torch.ones(2)
        dist.all_reduce(t, group=sub)
        assert torch.equal(t, torch.full((2,), 2.0 if world > 1 else 1.0)), t
    dist.barrier()


def expect_error(fn, *texts):
    try:
        fn()
    except RuntimeError as e:
        for t in texts:
            assert t in str(e), f"{t!r} not in {e}"
        return
    raise AssertionError(f"no error; expected {texts}")


def bad_arguments(rank, world):
    """The backend's own checks (torch's shrink_group checks the same before calling it): they
    fail before any agreement, and the group stays usable."""
    backend = braid_torch.backend_of()
    where = f"braid: shrink_group on rank {rank} of a group of {world}"
    expect_error(lambda: backend.shrink([world], 0, None), where,
                 f"ranks_to_exclude has rank {world}, outside the group [0, {world})")
    expect_error(lambda: backend.shrink([-1], 0, None), where, "has rank -1")
    expect_error(lambda: backend.shrink([rank], 0, None), where,
                 f"ranks_to_exclude has this rank ({rank})")
    other = (rank + 1) % world
    expect_error(lambda: backend.shrink([other, other], 0, None), where,
                 f"ranks_to_exclude [{other}, {other}] names a rank twice")
    expect_error(lambda: backend.shrink([other], 2, None), where,
                 "shrink_flags 2 is neither SHRINK_DEFAULT (0) nor SHRINK_ABORT (1)")
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), float(world))), t


def torch_api(rank, world):
    dead = [world - 2, world - 1]
    bad_arguments(rank, world)
    dist.barrier()
    if rank in dead:
        os.kill(os.getpid(), signal.SIGKILL)
    survivors = [r for r in range(world) if r not in dead]
    expect_peer_failure(lambda: dist.all_reduce(torch.ones(100)), "braid PeerLost")
    try:
        dist.shrink_group([world - 1])
        raise AssertionError("shrink_group with one of two dead ranks succeeded")
    except RuntimeError as e:
        want = f"ranks_to_exclude is [{world - 1}] but braid's agreement left out " \
               f"[{world - 2}, {world - 1}]"
        assert want in str(e), str(e)
    old = c10d._get_default_group()
    new = dist.shrink_group(dead)
    assert new is c10d._get_default_group() and new is not old
    assert dist.get_backend() == "braid", dist.get_backend()
    assert isinstance(braid_torch.backend_of(new), braid_torch.ProcessGroupBraid)
    check_world(rank, survivors)


def no_failure(rank, world):
    dist.barrier()
    if rank == 1:
        braid_torch.backend_of().revoke()
    # The revoke reaches the others through the store's watcher or rank 1's transport closing,
    # whichever is first: both are PeerLost.
    expect_peer_failure(lambda: dist.all_reduce(torch.ones(10)), "braid PeerLost")
    braid_torch.shrink()
    check_world(rank, list(range(world)))


def subgroup(rank, world):
    members = list(range(1, world))
    g = dist.new_group(members)
    dist.barrier()
    if rank == world - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    survivors = members[:-1]
    store = c10d._get_default_store()
    if rank == 0:
        # Not a member; the world is revoked by the death, and rank 0 leaves it be. It serves
        # torch's store (env://), which shrink_group still uses: it waits for the members.
        store.wait([f"subgroup_done/{r}" for r in survivors], datetime.timedelta(seconds=60))
        return
    expect_peer_failure(lambda: dist.all_reduce(torch.ones(10), group=g), "braid PeerLost")
    new = braid_torch.shrink(g)
    assert dist.get_process_group_ranks(new) == survivors, dist.get_process_group_ranks(new)
    assert new.size() == len(survivors) and new.rank() == survivors.index(rank)
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, group=new)
    assert t.item() == float(sum(survivors)), t
    store.set(f"subgroup_done/{rank}", "1")


if __name__ == "__main__":
    # The default group is destroyed at the end by every rank still in it (rank 0 of
    # `subgroup` holds the revoked one, destroyed alike).
    run_scenario({"torch_api": torch_api, "no_failure": no_failure, "subgroup": subgroup},
                 timeout=datetime.timedelta(
                     seconds=float(os.environ.get("SHRINK_TEST_TIMEOUT", "30"))))
