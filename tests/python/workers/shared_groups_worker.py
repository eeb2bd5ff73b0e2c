"""Shared connections for torch's groups (docs/pytorch.md, "Shared connections"), at 4 ranks.

Three phases in one launch, each with a default group of its own (init_process_group, the
checks, destroy_process_group; the later ones rendezvous through a file:// store):
  share   - default group braid, sharing on (the default): after the world's first collectives
            (an all_to_all_single touches every pair, so that lazy connections are all made),
            new_group([0,1,2,3]), new_group([1,3]), new_group([3,1], sort_ranks=False),
            new_subgroups, split_group and sub-groups of two disjoint groups that torch names
            alike (made while a world all_reduce is in flight) open no
            socket (braid_torch._C.tcp_sockets_opened(),
            the process's count), are derived from the world's communicator (their comm_id is
            under the world's) and count its sockets, and their collectives and point-to-point
            give values computed here from each rank's known contribution. Then collectives of
            two groups from two threads at once, and a subgroup's pending operation across
            destroy_process_group() (the default group's backend freed while the subgroup's
            lives on).
  noshare - BRAID_SHARE_CONNECTIONS=0: the same groups and values through torch's store, each
            with sockets of its own (the count grows).
  gloo    - default group gloo, subgroups braid: no braid world, so the store path.

Every pair is TCP (the test sets BRAID_SHM_DISABLE=1), so that there are sockets to count. With
BRAID_TEST_SHM=1 (and shared memory on) every pair is on this host's shared memory instead: the
share phase then counts segments (braid_torch._C.shm_segments_made()): the groups make none, each
taking a lane group of the default group's segment.
Rank 0 prints "checks passed" after each phase; BRAID_DEBUG=INFO makes braid log which path
each group took (the test checks those lines).
"""

import datetime
import gc
import os
import threading

import braid_torch
import torch
import torch.distributed as dist
from braid_torch import _C

from rank_util import Checks, assert_equal, init

MODES = os.environ.get("BRAID_TEST_MODES", "share,noshare,gloo").split(",")
SHM = os.environ.get("BRAID_TEST_SHM") == "1"  # every pair on shared memory: count segments


def contribution(rank, n, salt=0):
    i = torch.arange(n, dtype=torch.int64)
    return ((i * 7 + rank * 13 + salt * 3) % 17).to(torch.float32)


def expected_sum(ranks, n, salt=0):
    out = torch.zeros(n)
    for r in ranks:
        out += contribution(r, n, salt)
    return out


def check_group(group, ranks, rank, salt):
    """all_reduce, broadcast from the group's last listed rank, all_gather (order = the group's
    ranks), and a send/recv ring (the group's point-to-point communicator)."""
    if group == dist.GroupMember.NON_GROUP_MEMBER or group is None:
        assert rank not in ranks, f"rank {rank} got no group of {ranks}"
        return
    assert dist.get_process_group_ranks(group) == list(ranks), dist.get_process_group_ranks(group)
    for n in (1, 13, 4099):
        t = contribution(rank, n, salt)
        dist.all_reduce(t, group=group)
        assert_equal(t, expected_sum(ranks, n, salt), f"all_reduce of {ranks} (n={n})")
    root = ranks[-1]
    b = contribution(rank, 9, salt + 1)
    dist.broadcast(b, src=root, group=group)
    assert_equal(b, contribution(root, 9, salt + 1), f"broadcast from {root} in {ranks}")
    outs = [torch.empty(5) for _ in ranks]
    dist.all_gather(outs, contribution(rank, 5, salt + 2), group=group)
    for r, o in zip(ranks, outs):
        assert_equal(o, contribution(r, 5, salt + 2), f"all_gather of {ranks}: block of {r}")
    if len(ranks) > 1:
        me = ranks.index(rank)
        nxt, prv = ranks[(me + 1) % len(ranks)], ranks[(me - 1) % len(ranks)]
        got = torch.empty(11)
        send = dist.isend(contribution(rank, 11, salt + 3), dst=nxt, group=group)
        dist.recv(got, src=prv, group=group)
        send.wait()
        assert_equal(got, contribution(prv, 11, salt + 3), f"send/recv in {ranks} from {prv}")


def derived(group):
    """Whether the group's braid communicator was derived from the default group's."""
    return "/g" in braid_torch.backend_of(group).comm_id


def phase(mode, first):
    """One default group's checks; `first`: the launcher's rendezvous, else a file:// store."""
    os.environ["BRAID_SHARE_CONNECTIONS"] = "0" if mode == "noshare" else "1"
    backend = "gloo" if mode == "gloo" else "braid"
    if first:
        rank, world = init(backend)
    else:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        dist.init_process_group(backend, init_method=f"file://{os.environ['BRAID_TEST_TMP']}/"
                                f"{mode}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=60))
    assert world == 4, world
    checks = Checks(f"shared groups ({mode})")
    state = {}

    def world_first():
        if mode == "gloo":
            state["before"] = _C.tcp_sockets_opened()
            return
        t = contribution(rank, 13)
        dist.all_reduce(t)
        assert_equal(t, expected_sum(range(world), 13), "world all_reduce")
        # Every pair exchanges data: with lazy connections (the default) every pair is dialed.
        out = torch.empty(world * 3)
        dist.all_to_all_single(out, torch.full((world * 3,), float(rank)))
        assert_equal(out, torch.arange(world).repeat_interleave(3).float(), "all_to_all_single")
        dist.barrier()
        state["before"] = _C.tcp_sockets_opened()
        state["segments"] = _C.shm_segments_made()
        state["world_connections"] = braid_torch.backend_of().connection_count
        expected = 0 if SHM else world - 1  # no socket on one host's shared memory
        assert state["world_connections"] == expected, state["world_connections"]

    def make_groups():
        # The world has an operation in flight on its worker while the groups are derived from
        # its communicator (memberSubgroup sends nothing over it).
        big = contribution(rank, 200003, 5)
        pending = dist.all_reduce(big, async_op=True)
        groups = {}
        groups["all"] = ([0, 1, 2, 3], dist.new_group([0, 1, 2, 3], backend="braid"))
        groups["odd"] = ([1, 3], dist.new_group([1, 3], backend="braid"))
        # Unsorted: the group's rank 0 is global rank 3.
        groups["rev"] = ([3, 1], dist.new_group([3, 1], backend="braid", sort_ranks=False))
        sub, _ = dist.new_subgroups(group_size=2, backend="braid")
        groups["sub"] = ([0, 1] if rank < 2 else [2, 3], sub)
        if mode != "gloo" and hasattr(dist, "split_group"):
            mine = [0, 2] if rank % 2 == 0 else [1, 3]
            groups["split"] = (mine, dist.split_group(split_ranks=[[0, 2], [1, 3]]))
        if mode == "share":
            # Two disjoint groups made at once, each by its own members: torch names the
            # sub-groups of both alike (new_subgroups(group=...) counts groups per process), so
            # braid must not take the name alone for the group (PyTorch's
            # test_new_subgroups_with_group_param at world size 4).
            outer, _ = dist.new_subgroups_by_enumeration([[0, 2], [1, 3]], backend="braid")
            inner, _ = dist.new_subgroups(group_size=2, group=outer, backend="braid")
            groups["nested"] = ([0, 2] if rank % 2 == 0 else [1, 3], inner)
        state["groups"] = groups
        pending.wait()
        assert_equal(big, expected_sum(range(world), 200003, 5), "world all_reduce in flight")

    def group_collectives():
        for salt, (name, (ranks, group)) in enumerate(sorted(state["groups"].items())):
            check_group(group, ranks, rank, salt)

    def sockets():
        opened = _C.tcp_sockets_opened() - state["before"]
        for name, (ranks, group) in state["groups"].items():
            if rank not in ranks:
                continue
            be = braid_torch.backend_of(group)
            if mode == "share":
                assert derived(group), f"group {name}: comm {be.comm_id} is not derived"
                # The shared sockets: the world's.
                assert be.connection_count == state["world_connections"], (
                    name, be.connection_count)
            else:
                assert not derived(group), f"group {name}: comm {be.comm_id} is derived"
        if mode == "share":
            assert opened == 0, f"the groups opened {opened} sockets"
            made = _C.shm_segments_made() - state["segments"]
            assert made == 0, f"the groups made {made} shared memory segments"
        elif SHM:
            made = _C.shm_segments_made() - state["segments"]
            assert made > 0, "the groups made no segment of their own"
        else:
            # Every group of more than one rank connected its own pairs.
            assert opened > 0, "the groups opened no socket of their own"

    def two_threads():
        ranks, group = state["groups"]["all"]
        other = None if mode != "gloo" else state["groups"]["odd"][1]
        errors = []

        def loop(g, grp_ranks, salt):
            try:
                for i in range(30):
                    t = contribution(rank, 257 + i, salt + i)
                    dist.all_reduce(t, group=g)
                    assert_equal(t, expected_sum(grp_ranks, 257 + i, salt + i),
                                 f"all_reduce of {grp_ranks} from a thread (iteration {i})")
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        # The world (or, under gloo, group [1, 3]) and group [0, 1, 2, 3] at once.
        first = threading.Thread(target=loop, args=(group, ranks, 100))
        first.start()
        if other is None:
            loop(None, list(range(world)), 200)
        elif rank in (1, 3):
            loop(other, [1, 3], 200)
        first.join()
        if errors:
            raise errors[0]

    def pending_across_destroy():
        # An operation of a subgroup still pending while destroy_process_group shuts every
        # group down and drops torch's references (the default group's backend is freed, this
        # subgroup's lives on in `state`): the subgroup's queue runs it, over the connections
        # the default group made.
        ranks, group = state["groups"]["sub"]
        t = contribution(rank, 1031, 7)
        work = dist.all_reduce(t, group=group, async_op=True)
        dist.destroy_process_group()
        gc.collect()
        work.wait()
        assert_equal(t, expected_sum(ranks, 1031, 7), "all_reduce pending across destroy")

    checks.run(world_first)
    checks.run(make_groups)
    checks.run(group_collectives)
    checks.run(sockets)
    checks.run(two_threads)
    checks.run(pending_across_destroy)
    checks.done()
    state.clear()
    gc.collect()


def main():
    for i, mode in enumerate(MODES):
        phase(mode, i == 0)


if __name__ == "__main__":
    main()
