"""Every collective of backend "braid", checked against expectations computed here from each
rank's (deterministic) contribution, never through torch.distributed itself.

Run as N ranks by tests/python/test_collectives.py (env://, tcp:// or file://) or under
build/bin/braid-run -n N .venv/bin/python tests/python/workers/collectives_worker.py.
"""

import datetime
import os
import sys
import time

import braid_torch
import torch
import torch.distributed as dist

from rank_util import Checks, assert_equal, expect_error, init

OPS = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.AVG,
    "product": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
}
REDUCE_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                 torch.int8, torch.uint8, torch.int32, torch.int64]
# Collectives that only move data accept any dtype.
MOVE_DTYPES = REDUCE_DTYPES + [torch.bool, torch.int16, torch.complex64]
HALF = (torch.float16, torch.bfloat16)


def contribution(rank, n, dtype, op="sum"):
    """Rank `rank`'s data: small integers, so every dtype holds every partial result exactly."""
    i = torch.arange(n, dtype=torch.int64)
    v = (i + rank) % 2 + 1 if op == "product" else (i * 3 + rank * 5) % 11
    if dtype == torch.bool:
        return (v % 2).bool()
    if dtype.is_complex:
        return torch.complex(v.double(), -v.double()).to(dtype)
    return v.to(dtype)


def reduced(op, n, dtype, world):
    s = torch.stack([contribution(r, n, torch.int64, op) for r in range(world)])
    if op == "sum":
        e = s.sum(0)
    elif op == "product":
        e = s.prod(0)
    elif op == "min":
        e = s.min(0).values
    elif op == "max":
        e = s.max(0).values
    elif dtype.is_floating_point:  # avg
        return (s.double().sum(0) / world).to(dtype)
    else:
        e = torch.div(s.sum(0), world, rounding_mode="floor")
    return e.to(dtype)


def tol(dtype):
    return dict(rtol=1e-2, atol=1e-2) if dtype in HALF else {}


# ---------------------------------------------------------------- reductions

def check_all_reduce(rank, world):
    for n in (0, 1, 1001, 70001):
        for name, op in OPS.items():
            for dtype in REDUCE_DTYPES:
                t = contribution(rank, n, dtype, name)
                dist.all_reduce(t, op=op)
                assert_equal(t, reduced(name, n, dtype, world), f"all_reduce {name} {dtype} n={n}",
                             **tol(dtype))


def check_all_reduce_noncontiguous(rank, world):
    base = contribution(rank, 6 * 5, torch.float32).view(6, 5)
    t = base.t()  # a transposed view: not contiguous
    assert not t.is_contiguous()
    dist.all_reduce(t)
    assert_equal(base, reduced("sum", 30, torch.float32, world).view(6, 5), "non-contiguous")
    col = torch.zeros(4, 3)
    col[:, 1] = rank + 1
    dist.all_reduce(col[:, 1], op=dist.ReduceOp.MAX)  # a strided column, written back in place
    assert_equal(col[:, 1], torch.full((4,), float(world)), "strided column")
    assert_equal(col[:, 0], torch.zeros(4), "neighbouring column untouched")


def check_all_reduce_complex(rank, world):
    t = contribution(rank, 17, torch.complex64)
    dist.all_reduce(t)
    expected = torch.complex(reduced("sum", 17, torch.float64, world),
                             -reduced("sum", 17, torch.float64, world)).to(torch.complex64)
    assert_equal(t, expected, "complex sum")


def check_all_reduce_coalesced(rank, world):
    ts = [contribution(rank, n, torch.float32) for n in (3, 1000, 7)]
    dist.all_reduce_coalesced(ts)
    for t, n in zip(ts, (3, 1000, 7)):
        assert_equal(t, reduced("sum", n, torch.float32, world), f"coalesced n={n}")


def check_reduce(rank, world):
    for root in range(world):
        for name in ("sum", "max", "avg"):
            for dtype in (torch.float32, torch.int64, torch.bfloat16):
                t = contribution(rank, 501, dtype, name)
                before = t.clone()
                dist.reduce(t, dst=root, op=OPS[name])
                if rank == root:
                    assert_equal(t, reduced(name, 501, dtype, world),
                                 f"reduce {name} {dtype} root {root}", **tol(dtype))
                else:
                    assert_equal(t, before, "reduce leaves non-root input untouched")


def check_reduce_scatter(rank, world):
    n = 333
    for name in ("sum", "min", "avg"):
        for dtype in (torch.float32, torch.int32, torch.float16):
            # Rank s contributes block j = contribution(s * world + j); rank r gets block r.
            ins = [contribution(rank * world + j, n, dtype) for j in range(world)]
            out = torch.empty(n, dtype=dtype)
            dist.reduce_scatter(out, ins, op=OPS[name])
            s = torch.stack([contribution(src * world + rank, n, torch.int64)
                             for src in range(world)])
            e = {"sum": s.sum(0), "min": s.min(0).values,
                 "avg": (s.double().sum(0) / world) if dtype.is_floating_point
                 else torch.div(s.sum(0), world, rounding_mode="floor")}[name]
            assert_equal(out, e.to(dtype), f"reduce_scatter {name} {dtype}", **tol(dtype))


def check_reduce_scatter_uneven(rank, world):
    ins = [contribution(rank + j, 10 + j, torch.float64) for j in range(world)]
    out = torch.empty(10 + rank, dtype=torch.float64)
    dist.reduce_scatter(out, ins)
    e = sum(contribution(src + rank, 10 + rank, torch.float64) for src in range(world))
    assert_equal(out, e, "reduce_scatter with blocks of different sizes")


def check_reduce_scatter_tensor(rank, world):
    n = 4097
    inp = torch.cat([contribution(rank * world + j, n, torch.float32) for j in range(world)])
    out = torch.empty(n)
    dist.reduce_scatter_tensor(out, inp)
    e = sum(contribution(src * world + rank, n, torch.float32) for src in range(world))
    assert_equal(out, e, "reduce_scatter_tensor")
    out2 = torch.empty(n)
    dist._reduce_scatter_base(out2, inp, op=dist.ReduceOp.MAX)
    e = torch.stack([contribution(src * world + rank, n, torch.float32)
                     for src in range(world)]).max(0).values
    assert_equal(out2, e, "_reduce_scatter_base max")


def check_sparse_all_reduce(rank, world):
    def sparse_of(r):
        if r == 1:  # a rank without nonzeros
            return torch.sparse_coo_tensor(torch.empty(2, 0, dtype=torch.int64),
                                           torch.empty(0, 3), (world + 1, 4, 3))
        i = torch.tensor([[r, r + 1, 0], [0, 3, r % 4]])
        v = torch.arange(9, dtype=torch.float32).view(3, 3) + r
        return torch.sparse_coo_tensor(i, v, (world + 1, 4, 3))
    t = sparse_of(rank)
    dist.all_reduce(t)
    assert t.is_sparse
    assert_equal(t.to_dense(), sum(sparse_of(r).to_dense() for r in range(world)),
                 "sparse all_reduce")
    expect_error(lambda: dist.all_reduce(sparse_of(rank), op=dist.ReduceOp.MAX), "SUM only",
                 "sparse MAX")


# ---------------------------------------------------------------- data movement

def check_broadcast(rank, world):
    for root in range(world):
        for dtype in MOVE_DTYPES:
            t = contribution(rank, 1003, dtype) if rank == root else torch.zeros(1003, dtype=dtype)
            dist.broadcast(t, src=root)
            assert_equal(t, contribution(root, 1003, dtype), f"broadcast {dtype} root {root}")
    big = torch.full((300000,), float(rank))
    dist.broadcast(big, src=world - 1)
    assert_equal(big, torch.full((300000,), float(world - 1)), "broadcast 1.2 MB")
    m = torch.zeros(8, 4)
    if rank == 0:
        m[:, 2] = 7.0
    dist.broadcast(m[:, 2], src=0)  # non-contiguous column
    assert_equal(m[:, 2], torch.full((8,), 7.0), "broadcast non-contiguous")


def check_all_gather(rank, world):
    for dtype in MOVE_DTYPES:
        n = 257
        outs = [torch.empty(n, dtype=dtype) for _ in range(world)]
        dist.all_gather(outs, contribution(rank, n, dtype))
        for r in range(world):
            assert_equal(outs[r], contribution(r, n, dtype), f"all_gather {dtype} from {r}")
    # Outputs that are chunks of one tensor (the packed, copy-free path).
    flat = torch.empty(world * 1000)
    dist.all_gather(list(flat.chunk(world)), contribution(rank, 1000, torch.float32))
    assert_equal(flat, torch.cat([contribution(r, 1000, torch.float32) for r in range(world)]),
                 "all_gather into chunks of one tensor")
    # Different sizes per rank (braid allgatherv).
    outs = [torch.empty(5 + r, dtype=torch.int64) for r in range(world)]
    dist.all_gather(outs, contribution(rank, 5 + rank, torch.int64))
    for r in range(world):
        assert_equal(outs[r], contribution(r, 5 + r, torch.int64), f"uneven all_gather from {r}")


def check_all_gather_into_tensor(rank, world):
    for dtype in (torch.float32, torch.bfloat16, torch.int8):
        n = 70001
        out = torch.empty(world * n, dtype=dtype)
        dist.all_gather_into_tensor(out, contribution(rank, n, dtype))
        assert_equal(out, torch.cat([contribution(r, n, dtype) for r in range(world)]),
                     f"all_gather_into_tensor {dtype}")
    out = torch.empty(world, 3, 2)
    dist._all_gather_base(out, torch.full((3, 2), float(rank)))
    for r in range(world):
        assert_equal(out[r], torch.full((3, 2), float(r)), "_all_gather_base 2-D")


def check_all_gather_coalesced(rank, world):
    ins = [contribution(rank, 3, torch.float32), contribution(rank, 11, torch.float32)]
    outs = [[torch.empty(3), torch.empty(11)] for _ in range(world)]
    dist.all_gather_coalesced(outs, ins)
    for r in range(world):
        assert_equal(outs[r][0], contribution(r, 3, torch.float32), "coalesced[0]")
        assert_equal(outs[r][1], contribution(r, 11, torch.float32), "coalesced[1]")


def check_gather_scatter(rank, world):
    for root in range(world):
        for dtype in (torch.float32, torch.int16, torch.uint8):
            t = contribution(rank, 99, dtype)
            outs = [torch.empty(99, dtype=dtype) for _ in range(world)] if rank == root else None
            dist.gather(t, gather_list=outs, dst=root)
            if rank == root:
                for r in range(world):
                    assert_equal(outs[r], contribution(r, 99, dtype), f"gather {dtype} root {root}")
            ins = [contribution(root * 10 + r, 77, dtype) for r in range(world)] \
                if rank == root else None
            out = torch.empty(77, dtype=dtype)
            dist.scatter(out, scatter_list=ins, src=root)
            assert_equal(out, contribution(root * 10 + rank, 77, dtype),
                         f"scatter {dtype} root {root}")


def check_all_to_all_single(rank, world):
    k = 1000
    inp = torch.arange(world * k, dtype=torch.float32) + rank * 1e5
    out = torch.empty(world * k)
    dist.all_to_all_single(out, inp)
    e = torch.cat([torch.arange(rank * k, (rank + 1) * k, dtype=torch.float32) + j * 1e5
                   for j in range(world)])
    assert_equal(out, e, "all_to_all_single equal splits")
    # Unequal splits: rank r sends r + j + 1 rows of 3 to rank j; a row says (src, dst, idx).
    send_splits = [rank + j + 1 for j in range(world)]
    recv_splits = [j + rank + 1 for j in range(world)]
    rows = [torch.tensor([[rank, j, i] for i in range(send_splits[j])], dtype=torch.int64)
            for j in range(world)]
    inp = torch.cat(rows)
    out = torch.empty(sum(recv_splits), 3, dtype=torch.int64)
    dist.all_to_all_single(out, inp, output_split_sizes=recv_splits, input_split_sizes=send_splits)
    e = torch.cat([torch.tensor([[j, rank, i] for i in range(recv_splits[j])], dtype=torch.int64)
                   for j in range(world)])
    assert_equal(out, e, "all_to_all_single unequal splits")


def check_all_to_all_list(rank, world):
    ins = [torch.full((rank + j + 1,), rank * 1000 + j * 10, dtype=torch.int32)
           for j in range(world)]
    outs = [torch.empty(j + rank + 1, dtype=torch.int32) for j in range(world)]
    dist.all_to_all(outs, ins)
    for j in range(world):
        assert_equal(outs[j], torch.full((j + rank + 1,), j * 1000 + rank * 10, dtype=torch.int32),
                     f"all_to_all from {j}")


def check_barrier(rank, world):
    for _ in range(20):
        dist.barrier()
    w = dist.barrier(async_op=True)
    w.wait()


# ---------------------------------------------------------------- point-to-point

def check_send_recv(rank, world):
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    # Ring with isend/irecv posted on both sides before waiting.
    for n in (1, 100000):
        out = torch.empty(n)
        reqs = [dist.isend(torch.full((n,), float(rank)), nxt), dist.irecv(out, prv)]
        for r in reqs:
            r.wait()
        assert_equal(out, torch.full((n,), float(prv)), f"ring isend/irecv n={n}")
    # Blocking send/recv, ordered so that it cannot deadlock; tags pair messages.
    t = torch.empty(5, dtype=torch.int64)
    if rank == 0:
        for dst in range(1, world):
            dist.send(torch.full((5,), dst * 3, dtype=torch.int64), dst, tag=7)
    else:
        src = dist.recv(t, src=0, tag=7)
        assert src == 0
        assert_equal(t, torch.full((5,), rank * 3, dtype=torch.int64), "send/recv with tag")
    # Several messages in flight between one pair arrive in order.
    if world >= 2 and rank in (0, 1):
        peer = 1 - rank
        if rank == 0:
            reqs = [dist.isend(torch.full((3,), float(i)), peer) for i in range(5)]
        else:
            bufs = [torch.empty(3) for _ in range(5)]
            reqs = [dist.irecv(b, peer) for b in bufs]
        for r in reqs:
            r.wait()
        if rank == 1:
            for i, b in enumerate(bufs):
                assert_equal(b, torch.full((3,), float(i)), f"in-order message {i}")
    # Tags select messages, as under Gloo: rank 0 sends tags 1, 2 (large) and 3; rank 1
    # receives 3, then 2, then 1 from any source. Then a receive of another size fails alone
    # (naming both sizes; its message is dropped) and the next message of that tag arrives
    # intact.
    if world >= 2 and rank in (0, 1):
        big = 100003
        if rank == 0:
            for tag, n in ((1, 3), (2, big), (3, 5)):
                dist.send(torch.full((n,), float(tag)), 1, tag=tag)
            dist.send(torch.arange(6.0), 1, tag=4)
        else:
            three, two, one = torch.empty(5), torch.empty(big), torch.empty(3)
            dist.recv(three, 0, tag=3)
            dist.irecv(two, 0, tag=2).wait()
            assert dist.recv(one, tag=1) == 0
            for tag, t in ((1, one), (2, two), (3, three)):
                assert_equal(t, torch.full_like(t, float(tag)), f"message of tag {tag}")
            short = torch.full((4,), -1.0)
            try:
                dist.recv(short, 0, tag=4)
                raise AssertionError("a receive of 4 elements took a message of 6")
            except RuntimeError as e:
                assert "expected 16 bytes with tag 4" in str(e) and "has 24 bytes" in str(e), e
            assert_equal(short, torch.full((4,), -1.0), "nothing written by the failed receive")
            right = torch.empty(6)
            dist.send(torch.ones(1), 0, tag=5)  # now rank 0 sends it again
            dist.recv(right, 0, tag=4)
            assert_equal(right, torch.arange(6.0), "the message after a size mismatch")
        if rank == 0:
            dist.recv(torch.empty(1), 1, tag=5)
            dist.send(torch.arange(6.0), 1, tag=4)
        # Receives from any source wait per tag: the older one (tag 9) does not hold up the
        # younger (tag 8), whose message comes first.
        if rank == 1:
            nine, eight = torch.empty(2), torch.empty(3)
            w9, w8 = dist.irecv(nine, tag=9), dist.irecv(eight, tag=8)
            dist.send(torch.ones(1), 0, tag=10)
            w8.wait()
            assert w8._source_rank() == 0 and not w9.is_completed()
            assert_equal(eight, torch.full((3,), 8.0), "any source, tag 8 before tag 9")
            dist.send(torch.ones(1), 0, tag=11)
            w9.wait()
            assert_equal(nine, torch.full((2,), 9.0), "any source, tag 9")
        else:
            dist.recv(torch.empty(1), 1, tag=10)
            dist.send(torch.full((3,), 8.0), 1, tag=8)
            dist.recv(torch.empty(1), 1, tag=11)
            dist.send(torch.full((2,), 9.0), 1, tag=9)
    dist.barrier()


def check_recv_any_source(rank, world):
    # The pattern of PyTorch's test_send_recv_any_source: each rank in turn receives two
    # messages from every other rank with src=None (recv and irecv).
    senders = []
    for turn in range(world):
        if turn == rank:
            for _ in range(2 * (world - 1)):
                out = torch.full((4,), -1.0)
                if len(senders) % 2 == 0:
                    sender = dist.recv(out)
                else:
                    w = dist.irecv(out)
                    w.wait()
                    sender = w._source_rank()
                assert_equal(out, torch.full((4,), float(sender)), "any-source payload")
                senders.append(sender)
        else:
            dist.send(torch.full((4,), float(rank)), turn)
            dist.send(torch.full((4,), float(rank)), turn)
    expected = sorted([r for r in range(world) if r != rank] * 2)
    assert sorted(senders) == expected, f"any-source senders {sorted(senders)} != {expected}"
    dist.barrier()


def check_batch_isend_irecv(rank, world):
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    recv_next, recv_prev = torch.empty(10), torch.empty(10)
    ops = [dist.P2POp(dist.isend, torch.full((10,), float(rank)), nxt),
           dist.P2POp(dist.irecv, recv_prev, prv),
           dist.P2POp(dist.isend, torch.full((10,), float(rank) + 0.5), prv),
           dist.P2POp(dist.irecv, recv_next, nxt)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    if world > 2:
        assert_equal(recv_prev, torch.full((10,), float(prv)), "batch recv from prev")
        assert_equal(recv_next, torch.full((10,), float(nxt) + 0.5), "batch recv from next")


def check_p2p_pending_across_collectives(rank, world):
    # An irecv left pending across a collective must not stall it (Gloo allows this).
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    buf = torch.empty(1000)
    r = dist.irecv(buf, prv)
    t = torch.ones(10)
    dist.all_reduce(t)
    assert_equal(t, torch.full((10,), float(world)), "all_reduce while an irecv is pending")
    dist.send(torch.full((1000,), 2.0), nxt)
    r.wait()
    assert_equal(buf, torch.full((1000,), 2.0), "the pending irecv")


# ---------------------------------------------------------------- async, futures

def check_async_and_futures(rank, world):
    ts = [contribution(rank, 5000 + i, torch.float32) for i in range(8)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    for w in reversed(works):  # waiting out of order is fine
        w.wait()
        assert w.is_completed()
    for i, t in enumerate(ts):
        assert_equal(t, reduced("sum", 5000 + i, torch.float32, world), f"async all_reduce {i}")
    # A blocking call issued while an asynchronous one is still queued runs after it, never at
    # issue ahead of it: broadcast after all_reduce gives everyone the sum (ahead of it, every
    # rank would end with world x rank 0's value).
    t = torch.full((1 << 16,), float(rank + 1))
    w = dist.all_reduce(t, async_op=True)
    dist.broadcast(t, src=0)
    w.wait()
    assert_equal(t, torch.full((1 << 16,), float(world * (world + 1) // 2)),
                 "blocking broadcast after a queued all_reduce")
    # Blocking calls in a row, nothing queued: the path that runs them at issue (results only;
    # that they do not overtake queued work is the check above).
    for _ in range(3):
        t = torch.full((5,), float(rank))
        dist.all_reduce(t)
        assert_equal(t, torch.full((5,), float(sum(range(world)))), "blocking all_reduce")
    # get_future without wait(): the worker runs it; then() chains work on the result.
    t = torch.ones(100)
    fut = dist.all_reduce(t, async_op=True).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2)
    assert_equal(doubled.wait(), torch.full((100,), 2.0 * world), "future.then")
    assert_equal(fut.value()[0], torch.full((100,), float(world)), "future value is the tensor")
    # Futures of every kind of op complete.
    out = torch.empty(world * 4)
    f1 = dist.all_gather_into_tensor(out, torch.full((4,), float(rank)), async_op=True).get_future()
    f2 = dist.broadcast(torch.zeros(3), src=0, async_op=True).get_future()
    f3 = dist.barrier(async_op=True).get_future()
    torch.futures.wait_all([f1, f2, f3])
    # Point-to-point futures complete too (polled by the backend's worker).
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    buf = torch.empty(6)
    fs = dist.isend(torch.full((6,), float(rank)), nxt).get_future()
    fr = dist.irecv(buf, prv).get_future()
    torch.futures.wait_all([fs, fr])
    assert_equal(buf, torch.full((6,), float(prv)), "irecv future")
    # The future is made when first asked for: after wait() it is born completed with the
    # result.
    t = torch.full((7,), float(rank))
    w = dist.all_reduce(t, async_op=True)
    w.wait()
    fut = w.get_future()
    assert fut.done(), "get_future after wait(): not completed"
    assert_equal(fut.value()[0], torch.full((7,), float(sum(range(world)))), "late future value")
    assert w.get_future().done(), "get_future asked again"
    # Asked for while pending, then waited on both ways.
    w = dist.all_reduce(t, async_op=True)
    fut = w.get_future()
    w.wait()
    assert_equal(fut.wait()[0], torch.full((7,), float(world * sum(range(world)))),
                 "pending future value")
    # The profiler still sees the backend's operations, named, when it is on.
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        dist.all_reduce(torch.ones(3))
    names = {e.name for e in prof.events()}
    assert "braid:all_reduce" in names, f"profiler events: {sorted(names)[:40]}"
    # Compute overlaps a running all_reduce.
    big = torch.ones(1 << 20)
    w = dist.all_reduce(big, async_op=True)
    x = torch.randn(200, 200)
    for _ in range(5):
        x = x @ x.t() / 200
    w.wait()
    assert_equal(big, torch.full((1 << 20,), float(world)), "overlapped all_reduce")


# ---------------------------------------------------------------- groups

def check_new_group(rank, world):
    evens = list(range(0, world, 2))
    g = dist.new_group(evens)
    if rank in evens:
        t = torch.full((10,), float(rank))
        dist.all_reduce(t, group=g)
        assert_equal(t, torch.full((10,), float(sum(evens))), "all_reduce in the even group")
        assert dist.get_world_size(g) == len(evens) and dist.get_rank(g) == evens.index(rank)
        b = torch.full((3,), float(rank))
        dist.broadcast(b, src=evens[-1], group=g)  # src is a global rank
        assert_equal(b, torch.full((3,), float(evens[-1])), "broadcast in the even group")
        outs = [torch.empty(2) for _ in evens]
        dist.all_gather(outs, torch.full((2,), float(rank)), group=g)
        for i, r in enumerate(evens):
            assert_equal(outs[i], torch.full((2,), float(r)), "all_gather in the even group")
    solo = dist.new_group([0])
    if rank == 0:
        t = torch.arange(4.0)
        dist.all_reduce(t, group=solo)
        assert_equal(t, torch.arange(4.0), "group of one")
    if world >= 3:
        g12 = dist.new_group([1, 2])
        if rank in (1, 2):
            t = torch.full((5,), float(rank))
            dist.broadcast(t, src=2, group=g12)
            assert_equal(t, torch.full((5,), 2.0), "broadcast in group [1, 2]")
            if rank == 2:
                dist.send(torch.full((2,), 9.0), 1, group=g12)
            else:
                r = torch.empty(2)
                dist.recv(r, 2, group=g12)
                assert_equal(r, torch.full((2,), 9.0), "send/recv in a subgroup")
    # Interleave world and subgroup collectives.
    t = torch.ones(3)
    dist.all_reduce(t)
    assert_equal(t, torch.full((3,), float(world)), "world after subgroups")
    if rank in evens:
        assert dist.get_backend(g) == "braid"


# ---------------------------------------------------------------- errors and timeouts

def check_errors(rank, world):
    t = torch.ones(4)
    expect_error(lambda: dist.broadcast(t, src=world), "outside", "broadcast with a bad root")
    expect_error(lambda: dist.reduce(t, dst=world + 3), "outside", "reduce with a bad root")
    expect_error(lambda: dist.all_reduce(t, op=dist.ReduceOp.BAND), "BAND", "BAND")
    expect_error(lambda: dist.all_reduce(t, op=dist.ReduceOp.BXOR), "BXOR", "BXOR")
    expect_error(lambda: dist.all_reduce(torch.ones(3, dtype=torch.bool), op=dist.ReduceOp.AVG),
                 "AVG", "bool AVG all_reduce")
    expect_error(lambda: dist.all_gather([torch.empty(4) for _ in range(world)],
                                         torch.ones(5)), "elements", "all_gather size mismatch")
    expect_error(lambda: dist.all_gather([torch.empty(4, dtype=torch.int32)
                                          for _ in range(world)], torch.ones(4)),
                 "dtype", "all_gather dtype mismatch")
    expect_error(lambda: dist.all_gather_into_tensor(torch.empty(3), torch.ones(4)),
                 "group size", "all_gather_into_tensor size")
    expect_error(lambda: dist.reduce_scatter_tensor(torch.empty(3), torch.ones(4)),
                 "group size", "reduce_scatter_tensor size")
    expect_error(lambda: dist.all_to_all_single(torch.empty(world * 2), torch.ones(world * 2),
                                                input_split_sizes=[1] * world),
                 "split sizes", "all_to_all_single bad splits")
    # Nothing was sent by the failed calls: the group still works.
    t = torch.ones(4)
    dist.all_reduce(t)
    assert_equal(t, torch.full((4,), float(world)), "all_reduce after argument errors")


def check_timeout(rank, world):
    world_timeout = braid_torch.backend_of().timeout
    assert world_timeout == datetime.timedelta(seconds=60), f"default timeout {world_timeout}"
    # A blocking call with the queue idle runs at issue on the caller's thread, with no Work of
    # its own (ProcessGroupBraid::enqueue): its error comes from the call itself.
    gb = dist.new_group(timeout=datetime.timedelta(seconds=2))
    if rank == 0:
        t0 = time.monotonic()
        expect_error(lambda: dist.all_reduce(torch.ones(8), group=gb), "timeout",
                     "blocking all_reduce nobody joins")
        took = time.monotonic() - t0
        assert 1.5 < took < 20, f"blocking call timed out after {took:.1f}s, expected ~2s"
    g = dist.new_group(timeout=datetime.timedelta(seconds=3))
    assert braid_torch.backend_of(g).timeout == datetime.timedelta(seconds=3), "group timeout"
    if rank == 0:
        # Nobody else joins: the group's 3 s timeout must end it, as an error from wait().
        t0 = time.monotonic()
        w = dist.all_reduce(torch.ones(8), group=g, async_op=True)
        expect_error(w.wait, "timeout", "all_reduce nobody joins")
        took = time.monotonic() - t0
        assert 2.5 < took < 20, f"timed out after {took:.1f}s, expected ~3s"
        fut = dist.all_reduce(torch.ones(8), group=g, async_op=True).get_future()
        try:
            fut.wait()
            raise AssertionError("the future of a failed operation did not raise")
        except RuntimeError:
            pass
        # A future asked for after the failure carries the error too.
        w = dist.all_reduce(torch.ones(8), group=g, async_op=True)
        expect_error(w.wait, "timeout", "all_reduce nobody joins, again")
        expect_error(w.get_future().wait, "timeout", "future asked for after the failure")
    # A Work.wait(timeout) shorter than the op returns control with an error; the operation
    # keeps running and completes once the others join.
    g2 = dist.new_group()
    t = torch.ones(8)
    if rank == 0:
        w = dist.all_reduce(t, group=g2, async_op=True)
        expect_error(lambda: w.wait(datetime.timedelta(milliseconds=100)), "did not complete",
                     "Work.wait(timeout)")
        w.wait()
    else:
        time.sleep(1.0)
        dist.all_reduce(t, group=g2)
    assert_equal(t, torch.full((8,), float(world)), "all_reduce after a Work.wait timeout")
    dist.barrier()



def check_paths_follow_nodes(rank, world):
    """Under a multi-node launcher (torchrun --nnodes): ranks of this node are reached through
    shared memory, ranks of the other nodes through TCP. torchrun numbers ranks node by node
    (GROUP_RANK, LOCAL_WORLD_SIZE), so a rank's node is rank // LOCAL_WORLD_SIZE."""
    per_node = int(os.environ["LOCAL_WORLD_SIZE"])
    node = int(os.environ["GROUP_RANK"])
    assert rank // per_node == node, (rank, per_node, node)
    pg = braid_torch.backend_of()
    for peer in range(world):
        path = pg.path_to(peer)
        if peer == rank:
            expected = ("self",)
        elif peer // per_node == node:
            expected = ("shm", "shm+cma")
        else:
            expected = ("tcp",)
        assert path in expected, f"rank {rank} reaches rank {peer} through {path!r}, " \
                                 f"expected one of {expected} (nodes of {per_node} ranks)"

CHECKS = [
    check_all_reduce, check_all_reduce_noncontiguous, check_all_reduce_complex,
    check_all_reduce_coalesced, check_sparse_all_reduce, check_reduce, check_reduce_scatter, check_reduce_scatter_uneven,
    check_reduce_scatter_tensor, check_broadcast, check_all_gather, check_all_gather_into_tensor,
    check_all_gather_coalesced, check_gather_scatter, check_all_to_all_single,
    check_all_to_all_list, check_barrier, check_send_recv, check_recv_any_source,
    check_batch_isend_irecv, check_p2p_pending_across_collectives, check_async_and_futures,
    check_new_group, check_errors, check_timeout,
]
# Only when asked for by name (needs a multi-node launcher's environment).
ON_REQUEST = [check_paths_follow_nodes]


def main():
    only = set(sys.argv[1:])
    rank, world = init("braid", timeout_s=60)
    checks = Checks(f"collectives (world {world})")
    for fn in CHECKS + ON_REQUEST:
        if (not only and fn not in ON_REQUEST) or fn.__name__ in only:
            checks.run(fn, rank, world)
    checks.done()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
