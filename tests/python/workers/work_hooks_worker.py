"""Coalescing, collectives timing and completion hooks over braid (tests/python/test_work_hooks.py),
any world size >= 2:

- the backend says supports_coalescing; _coalescing_manager(device="cpu") over broadcasts from
  every root (the generic path: startCoalescing / endCoalescing), synchronous and asynchronous,
  and with all_reduce's fast path (allreduce_coalesced issued while coalescing), counts 1 to
  100003; batch_isend_irecv around a ring returns one work, waited on directly and through its
  future; a coalesced batch with a size mismatch raises on wait() after its other operations
  completed; nested startCoalescing and endCoalescing without start raise; an empty window
  gives a completed work.
- _enable_collectives_timing: a work issued before has no duration (error), one issued after
  has one.
- a collective issued with asyncOp=False (torch's blocking calls: braid does not wake its
  worker for it, the caller runs it in wait()) that is then waited on with a timeout, which
  runs nothing itself: the worker runs it.
- _register_on_completion_hook: one WorkInfo per successful operation (collectives and
  point-to-point, an isend nobody waits on included), with op type, sequence numbers, times;
  none for the failed receive; a second registration raises; _has_hooks;
  _wait_for_pending_works; a hook that raises is reported and the next operation still fires.
- the C++ completion hooks (torch >= 2.15): a recorder sees one unique key per successful
  operation, with a duration once timing is on, and nothing after it is unregistered;
  _wait_for_pending_works returns after a slow one ran for a send that completed meanwhile.

Prints "[rank R] PASS work_hooks".
"""

import datetime
import os
import time

import torch
import torch.distributed as dist

import braid_torch  # noqa: F401  (registers the backend)

CPU = torch.device("cpu")
COUNTS = (1, 7, 1000, 100003)


def expect_error(fn, text):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        assert text in str(e), (text, str(e))
        return str(e)
    raise AssertionError(f"no error containing {text!r}")


def coalescing(rank, world):
    pg = dist.group.WORLD
    assert pg._get_backend(CPU).supports_coalescing

    # Generic path, synchronous: broadcasts from every root in one window.
    ts = [torch.full((n,), float(rank)) for n in COUNTS]
    with dist._coalescing_manager(device=CPU):
        for i, t in enumerate(ts):
            dist.broadcast(t, src=i % world)
    for i, t in enumerate(ts):
        assert torch.equal(t, torch.full_like(t, float(i % world))), (i, t[:4])

    # Asynchronous, all_reduce's fast path next to a broadcast in the same window.
    a = [torch.arange(n, dtype=torch.float64) * (rank + 1) for n in COUNTS]
    b = torch.full((5,), float(rank), dtype=torch.float64)
    with dist._coalescing_manager(device=CPU, async_ops=True) as cm:
        for t in a:
            dist.all_reduce(t)
        dist.broadcast(b, src=world - 1)
    assert len(cm.works) == 1, cm.works
    cm.wait()
    total = world * (world + 1) / 2
    for t in a:
        assert torch.equal(t, torch.arange(t.numel(), dtype=torch.float64) * total), t[:4]
    assert torch.equal(b, torch.full_like(b, float(world - 1))), b

    # batch_isend_irecv around a ring: one work for the batch.
    right, left = (rank + 1) % world, (rank - 1) % world
    for use_future in (False, True):
        sends = [torch.full((n,), float(rank * 1000 + j)) for j, n in enumerate(COUNTS)]
        recvs = [torch.empty(n) for n in COUNTS]
        ops = [dist.P2POp(dist.isend, s, right, tag=j) for j, s in enumerate(sends)]
        ops += [dist.P2POp(dist.irecv, r, left, tag=j) for j, r in enumerate(recvs)]
        reqs = dist.batch_isend_irecv(ops)
        assert len(reqs) == 1, reqs
        if use_future:
            got = reqs[0].get_future().wait()
            assert len(got) == len(recvs), len(got)  # the receives' outputs, in issue order
        else:
            reqs[0].wait()
        assert reqs[0].is_completed()
        for j, r in enumerate(recvs):
            assert torch.equal(r, torch.full_like(r, float(left * 1000 + j))), (j, r[:4])

    # A window whose receive fails (rank 1 expects 5 elements, rank 0 sends 4): wait() raises,
    # once the batch's other operations completed (rank 0 gets rank 1's message).
    if rank < 2:
        peer = 1 - rank
        x, y = torch.full((4,), 3.0), torch.zeros(4)
        if rank == 0:
            ops = [dist.P2POp(dist.isend, x, peer, tag=5), dist.P2POp(dist.irecv, y, peer, tag=7)]
        else:
            y = torch.zeros(5)
            ops = [dist.P2POp(dist.irecv, y, peer, tag=5), dist.P2POp(dist.isend, x, peer, tag=7)]
        reqs = dist.batch_isend_irecv(ops)
        if rank == 0:
            reqs[0].wait()
            assert torch.equal(y, torch.full((4,), 3.0)), y
        else:
            expect_error(reqs[0].wait, "expected 20 bytes with tag 5")
            assert reqs[0].exception() is not None

    # API misuse, and an empty window.
    pg._start_coalescing(CPU)
    expect_error(lambda: pg._start_coalescing(CPU), "coalescing already")
    w = pg._end_coalescing(CPU)
    w.wait()
    assert w.is_completed() and w.get_future().wait() == []
    expect_error(lambda: pg._end_coalescing(CPU), "without startCoalescing")
    dist.barrier()


def timing(rank, world):
    pg = dist.group.WORLD
    t = torch.ones(1000)
    before = dist.all_reduce(t, async_op=True)
    before.wait()
    expect_error(before._get_duration, "timing was not enabled")
    pg._enable_collectives_timing()
    after = dist.all_reduce(t, async_op=True)
    after.wait()
    d = after._get_duration()
    assert isinstance(d, float) and d >= 0.0, d


def blocking_then_timed_wait(rank, world):
    backend = dist.group.WORLD._get_backend(CPU)
    t = torch.full((1000,), float(rank + 1))
    opts = dist.AllreduceOptions()
    opts.asyncOp = False
    w = backend.allreduce([t], opts)
    w.wait(datetime.timedelta(seconds=30))
    assert torch.equal(t, torch.full_like(t, world * (world + 1) / 2)), t[:4]


def hooks(rank, world):
    pg = dist.group.WORLD
    infos = []
    pg._register_on_completion_hook(lambda info: infos.append(info))
    expect_error(lambda: pg._register_on_completion_hook(lambda info: None), "registered already")
    assert pg._has_hooks()
    recorder = None
    if hasattr(pg, "supports_completion_hooks"):
        assert pg.supports_completion_hooks
        recorder = pg._get_backend(CPU)._register_completion_recorder(3)
        expect_error(lambda: pg._get_backend(CPU)._register_completion_recorder(3),
                     "registered already")

    t = torch.ones(64)
    dist.all_reduce(t)                              # 1 collective, waited
    dist.broadcast(t, src=0, async_op=True).wait()  # 2
    right, left = (rank + 1) % world, (rank - 1) % world
    r = torch.empty(64)
    dist.isend(t, right)                            # nobody waits on it
    dist.irecv(r, left).wait()
    bad = None
    if rank < 2:  # a receive that fails: no hook
        if rank == 0:
            dist.send(torch.ones(4), 1, tag=1)
        else:
            bad = dist.irecv(torch.empty(3), 0, tag=1)
            expect_error(bad.wait, "expected 12 bytes with tag 1")
    pg._wait_for_pending_works()
    ok_ops = 4
    assert len(infos) == ok_ops + (1 if rank == 0 else 0), [i.op_type for i in infos]
    types = sorted(str(i.op_type) for i in infos)
    assert types.count("OpType.ALLREDUCE") == 1 and types.count("OpType.BROADCAST") == 1, types
    assert types.count("OpType.SEND") == 1 + (rank == 0) and types.count("OpType.RECV") == 1, types
    colls = [i.seq for i in infos if str(i.op_type) in ("OpType.ALLREDUCE", "OpType.BROADCAST")]
    assert colls[1] == colls[0] + 1, colls
    for i in infos:
        assert i.time_finished >= i.time_started, (i.time_started, i.time_finished)
        assert i.active_duration >= datetime.timedelta(0), i.active_duration
    if recorder is not None:
        seen = recorder.records()
        assert len(seen) == len(infos), (seen, len(infos))
        assert len({k for k, _ in seen}) == len(seen), seen  # one key per operation
        assert all(d is not None for _, d in seen), seen  # timing is on (timing() ran first)
        pg._get_backend(CPU)._unregister_completion_hook(3)
        expect_error(lambda: pg._get_backend(CPU)._unregister_completion_hook(3), "no hook")
        dist.all_reduce(t)
        pg._wait_for_pending_works()
        assert len(recorder.records()) == len(seen)

    # A hook that raises is reported; later operations still fire it.
    g = dist.new_group(list(range(world)))
    calls = []

    def raising(info):
        calls.append(info.seq)
        raise RuntimeError("a completion hook that fails")

    g._register_on_completion_hook(raising)
    dist.all_reduce(t, group=g)
    dist.all_reduce(t, group=g)
    g._wait_for_pending_works()
    assert len(calls) == 2, calls
    dist.destroy_process_group(g)  # waits for pending works (hooks registered), then goes


def slow_hook_on_posted(rank, world):
    """A posted send that completes while _wait_for_pending_works waits, with a completion-key
    hook that takes a while: the wait returns after the hook did (the send counted as done
    before its hooks ran once let the record miss it)."""
    g = dist.new_group([0, 1])
    if rank < 2 and hasattr(g, "supports_completion_hooks"):
        backend = g._get_backend(CPU)
        recorder = backend._register_completion_recorder(5, delay_ms=200)
        big = torch.ones(1 << 20)  # 4 MiB: the send completes only once rank 0 received it
        if rank == 1:
            dist.isend(big, 0, group=g)
            g._wait_for_pending_works()
            assert len(recorder.records()) == 1, recorder.records()
        else:
            time.sleep(0.3)
            out = torch.empty_like(big)
            dist.recv(out, 1, group=g)
            assert torch.equal(out, big)
        backend._unregister_completion_hook(5)
    dist.destroy_process_group(g)


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("braid", timeout=datetime.timedelta(seconds=60))
    coalescing(rank, world)
    timing(rank, world)
    blocking_then_timed_wait(rank, world)
    hooks(rank, world)
    slow_hook_on_posted(rank, world)
    dist.destroy_process_group()
    print(f"[rank {rank}] PASS work_hooks", flush=True)


if __name__ == "__main__":
    main()
