"""torch's reconfigure API over braid (tests/python/test_reconfigure.py), one scenario per launch:

  basic N     init_process_group("braid", enable_reconfigure=True): a collective before
              reconfigure fails naming it; bad arguments (a list without this process, a handle
              twice, a foreign handle, hints) fail before any rendezvous; reconfigure with the
              handles reversed renumbers the ranks (collectives, send/recv and a subgroup checked);
              a reused uuid fails; a set of handles gives the sorted order; members given
              different lists fail (the first member after the short timeout it was given) and the
              group keeps working; the last rank is left out (shrink) and taken back (grow); an
              aborted group is reconfigured and works again.
  replace N   the last rank kills itself (SIGKILL); the survivors' all_reduce fails; rank 0
              starts a replacement process (`joiner`), which joins through the same rendezvous
              (env://) with enable_reconfigure=True; everyone reconfigures with the survivors'
              unchanged handles and the replacement's, and the group of N works again.

Each rank prints "[rank R] PASS <scenario>" at the end; expected values come from the ranks and
the handle lists, not from another collective.
"""

import datetime
import os
import signal
import subprocess
import sys

import torch
import torch.distributed as dist

import braid_torch  # noqa: F401  (registers the backend)
from rank_util import run_scenario

TIMEOUT = datetime.timedelta(seconds=float(os.environ.get("RECONF_TEST_TIMEOUT", "30")))


def store():
    return dist.distributed_c10d._get_default_store()


def exchange(tag, rank, world, value):
    """Every rank's `value` in rank order, through the default store (the out-of-band channel
    a fault-tolerance controller would be)."""
    s = store()
    s.set(f"{tag}/{rank}", value)
    return [s.get(f"{tag}/{r}").decode() for r in range(world)]


def expect_error(fn, *texts):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        for t in texts:
            assert t in str(e), f"{t!r} not in {e}"
        return str(e)
    raise AssertionError(f"no error; expected one with {texts}")


def check_group(old_rank, order, subgroup=False):
    """The default group is the processes of `order` (their original ranks, in new-rank order),
    and every kind of operation works on it; with `subgroup`, a new_group of it too (only where
    every process has made the same number of groups: torch numbers them per process)."""
    world = len(order)
    rank = order.index(old_rank)
    assert dist.get_world_size() == world, (dist.get_world_size(), world)
    assert dist.get_rank() == rank, (dist.get_rank(), rank)
    t = torch.full((7,), float(old_rank + 1), dtype=torch.float64)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((7,), float(sum(r + 1 for r in order)),
                                     dtype=torch.float64)), t
    got = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(got, torch.tensor([old_rank]))
    assert [int(g) for g in got] == order, (got, order)
    b = torch.tensor([old_rank if rank == 0 else -1])
    dist.broadcast(b, 0)
    assert int(b) == order[0], (b, order)
    if world > 1:
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        out = torch.tensor([old_rank * 10])
        inp = torch.zeros(1, dtype=torch.int64)
        reqs = [dist.isend(out, nxt), dist.irecv(inp, prv)]
        for r in reqs:
            r.wait()
        assert int(inp) == order[prv] * 10, (inp, order)
    if subgroup and world > 1:
        # A subgroup of the reconfigured group: new ranks 0 and 1 (derived from its
        # communicator, sharing its connections).
        sub = dist.new_group([0, 1])
        if rank < 2:
            s = torch.tensor([float(old_rank)])
            dist.all_reduce(s, group=sub)
            assert float(s) == float(order[0] + order[1]), (s, order)
        dist.destroy_process_group(sub)


def basic(rank, world):
    assert dist._supports_reconfigure()
    expect_error(lambda: dist.all_reduce(torch.ones(2)), "enable_reconfigure=True",
                 "_reconfigure()")
    mine = dist._get_reconfigure_handle()
    assert mine.startswith("braid;") and f"pid={os.getpid()}" in mine, mine
    assert dist._get_reconfigure_handle() == mine  # stable
    hs = exchange("h", rank, world, mine)
    if world > 1:
        expect_error(lambda: dist._reconfigure(uuid=100, handles=[h for h in hs if h != mine]),
                     "this process's handle", "is not among")
    expect_error(lambda: dist._reconfigure(uuid=100, handles=hs + [hs[0]]), "listed twice")
    expect_error(lambda: dist._reconfigure(uuid=100, handles=["gloo:0:-1:0:h:1"] + hs),
                 "handle 0", "not a braid handle")
    expect_error(lambda: dist._reconfigure(uuid=100, handles=hs, hints={"x": "1"}), "no hints")

    # A list: ranks by position (here reversed).
    order = list(reversed(range(world)))
    dist._reconfigure(uuid=1, handles=[hs[r] for r in order]).wait()
    check_group(rank, order, subgroup=True)
    expect_error(lambda: dist._reconfigure(uuid=1, handles=hs), "uuid 1 was used before")

    # A set: braid sorts the handles.
    dist._reconfigure(uuid=2, handles=set(hs), timeout=TIMEOUT).wait()
    order = sorted(range(world), key=lambda r: hs[r])
    check_group(rank, order, subgroup=True)

    if world >= 3:
        # Every rank but the first of the list is given another order: they fail at once,
        # naming both lists; the first waits out the short timeout it was given. The group is
        # still served by uuid 2's communicator afterwards.
        first = hs[0]
        wrong = [first] + list(reversed(hs[1:]))
        mine_list = hs if rank == 0 else wrong
        short = datetime.timedelta(seconds=3)
        if rank == 0:
            expect_error(lambda: dist._reconfigure(uuid=3, handles=mine_list, timeout=short))
        else:
            expect_error(lambda: dist._reconfigure(uuid=3, handles=mine_list, timeout=short),
                         "different lists", hs[1], hs[-1])
        check_group(rank, order)

    if world >= 2:
        # Shrink: the last rank is left out (it calls nothing meanwhile) ...
        kept = list(range(world - 1))
        if rank in kept:
            dist._reconfigure(uuid=4, handles=[hs[r] for r in kept]).wait()
            check_group(rank, kept)
            if rank == 0:
                store().set("shrunk", "1")
        else:
            store().wait(["shrunk"])
        # ... and taken back (grow).
        dist._reconfigure(uuid=5, handles=hs).wait()
        check_group(rank, list(range(world)))

    # Abort, then reconfigure: the group works again.
    dist.distributed_c10d._get_default_group().abort()
    expect_error(lambda: dist.all_reduce(torch.ones(1)), "shut down")
    dist._reconfigure(uuid=6, handles=hs).wait()
    check_group(rank, list(range(world)))


def replace(rank, world):
    hs = exchange("h", rank, world, dist._get_reconfigure_handle())
    dist._reconfigure(uuid=1, handles=hs).wait()
    check_group(rank, list(range(world)))
    last = world - 1
    if rank == last:
        print(f"[rank {rank}] killing myself", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    msg = expect_error(lambda: dist.all_reduce(torch.ones(3)))
    print(f"[rank {rank}] all_reduce failed: {msg.splitlines()[0][:200]}", flush=True)
    joiner = None
    if rank == 0:
        env = dict(os.environ, RANK=str(last))
        joiner = subprocess.Popen([sys.executable, __file__, "joiner"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # The survivors' handles are unchanged; the replacement's is new.
    new = store().get(f"h2/{last}").decode()
    assert new not in hs, (new, hs)
    handles = hs[:last] + [new]
    dist._reconfigure(uuid=2, handles=handles).wait()
    check_group(rank, list(range(world)))
    if joiner is not None:
        out, _ = joiner.communicate(timeout=TIMEOUT.total_seconds() * 2)
        print(out, flush=True)
        assert joiner.returncode == 0, joiner.returncode
        assert f"[rank {last}] PASS joiner" in out


def joiner(rank, world):
    """The replacement of `replace`: publishes its handle, reconfigures into the group."""
    hs = [store().get(f"h/{r}").decode() for r in range(world - 1)]
    mine = dist._get_reconfigure_handle()
    store().set(f"h2/{rank}", mine)
    dist._reconfigure(uuid=2, handles=hs + [mine]).wait()
    check_group(rank, list(range(world)))


if __name__ == "__main__":
    run_scenario({"basic": basic, "replace": replace, "joiner": joiner},
                 enable_reconfigure=True, timeout=TIMEOUT)
