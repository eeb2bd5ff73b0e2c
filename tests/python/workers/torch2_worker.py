"""What torch 2.x adds for a CPU backend, on backend "braid": coalesced collectives (the
_coalescing_manager fast paths FSDP uses), gather_into_tensor, all_to_all_single with uneven
splits, dist.monitored_barrier, per-call timeouts (option structs), set_timeout, abort(),
shutdown()/destroy_process_group, split_group, new_subgroups, init_device_mesh and DTensor
redistribution, reductions of every dtype with every op, and the errors for the combinations
no backend defines.

Results are compared with gloo (a gloo group of the same ranks, same inputs) or with values
computed here from each rank's known contribution. BRAID_TEST_BACKEND picks the string given to
init_process_group ("braid" or "cpu:braid").
"""

import datetime
import functools
import operator
import os
import sys
import threading
import time

import braid_torch
import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from rank_util import Checks, assert_equal, expect_error, init


def contribution(rank, n, dtype=torch.float32, salt=0):
    i = torch.arange(n, dtype=torch.int64)
    return ((i * 7 + rank * 13 + salt * 3) % 17).to(dtype)


GLOO = None


def gloo():
    global GLOO
    if GLOO is None:
        GLOO = dist.new_group(backend="gloo")
    return GLOO


def check_backend_is_braid(rank, world):
    pg = c10d._get_default_group()
    be = pg._get_backend(torch.device("cpu"))
    assert isinstance(be, braid_torch.ProcessGroupBraid), f"cpu backend is {be!r}"
    assert braid_torch.backend_of() is be
    assert torch.device("cpu") in pg._device_types
    assert "braid" in dist.get_backend(), dist.get_backend()
    # braid records its operations itself (BRAID_FLIGHT_RECORDER): torch's generic
    # FlightRecorder hook, which costs microseconds per call, is not attached to its groups
    # unless TORCH_FR_BUFFER_SIZE asks for it (braid_torch/__init__.py).
    hooks = getattr(c10d._world, "pg_flight_recorder_hooks", None)
    if hooks is not None and not os.environ.get("TORCH_FR_BUFFER_SIZE"):
        assert pg not in hooks, "torch's FlightRecorder hook is attached to braid's group"


def check_coalesced_all_reduce(rank, world):
    # _coalescing_manager's fast path: all_reduce inside -> one allreduce_coalesced.
    sizes = (1, 5, 1000, 0, 4097)
    for dtype in (torch.float32, torch.int64, torch.bfloat16):
        ours = [contribution(rank, n, dtype, k) for k, n in enumerate(sizes)]
        theirs = [t.clone() for t in ours]
        with c10d._coalescing_manager(async_ops=True) as cm:
            for t in ours:
                dist.all_reduce(t)
        cm.wait()
        for t in theirs:
            dist.all_reduce(t, group=gloo())
        for k, (a, b) in enumerate(zip(ours, theirs)):
            assert_equal(a, b, f"coalesced all_reduce {dtype} tensor {k} vs gloo")
    ts = [contribution(rank, n) for n in (3, 1000, 7)]
    dist.all_reduce_coalesced(ts, op=dist.ReduceOp.MAX)
    for t, n in zip(ts, (3, 1000, 7)):
        e = torch.stack([contribution(r, n) for r in range(world)]).max(0).values
        assert_equal(t, e, f"all_reduce_coalesced MAX n={n}")


def check_coalesced_all_gather_into_tensor(rank, world):
    sizes = (1, 333, 0, 70001)
    ins = [contribution(rank, n, torch.float32, k) for k, n in enumerate(sizes)]
    outs = [torch.empty(world * n) for n in sizes]
    with c10d._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    cm.wait()
    for k, (o, n) in enumerate(zip(outs, sizes)):
        e = torch.cat([contribution(r, n, torch.float32, k) for r in range(world)])
        assert_equal(o, e, f"coalesced all_gather_into_tensor tensor {k}")
    # Mixed dtypes in one coalesced call (one allgather of the packed bytes).
    mixed = [(torch.int8, 7), (torch.float64, 5), (torch.bool, 3), (torch.bfloat16, 1)]
    ins = [contribution(rank, n, dt, k) for k, (dt, n) in enumerate(mixed)]
    outs = [torch.empty(world * n, dtype=dt) for dt, n in mixed]
    with c10d._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    cm.wait()
    for k, (o, (dt, n)) in enumerate(zip(outs, mixed)):
        e = torch.cat([contribution(r, n, dt, k) for r in range(world)])
        assert_equal(o, e, f"coalesced all_gather_into_tensor mixed dtypes, tensor {k} ({dt})")
    # Directly, on the backend, and a 2-D output.
    be = braid_torch.backend_of()
    out = torch.empty(world, 3, 4, dtype=torch.int32)
    w = be.all_gather_single_coalesced([out], [torch.full((3, 4), rank, dtype=torch.int32)])
    w.wait()
    for r in range(world):
        assert_equal(out[r], torch.full((3, 4), r, dtype=torch.int32), "2-D coalesced all_gather")


def check_coalesced_reduce_scatter_tensor(rank, world):
    sizes = (1, 100, 0, 4097)
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX):
        ins = [contribution(rank, world * n, torch.float32, k) for k, n in enumerate(sizes)]
        outs = [torch.empty(n) for n in sizes]
        with c10d._coalescing_manager(async_ops=True) as cm:
            for o, i in zip(outs, ins):
                dist.reduce_scatter_tensor(o, i, op=op)
        cm.wait()
        for k, (o, i) in enumerate(zip(outs, ins)):
            g = torch.empty_like(o)
            dist.reduce_scatter_tensor(g, i, op=op, group=gloo())
            assert_equal(o, g, f"coalesced reduce_scatter_tensor {op} tensor {k} vs gloo")
            n = sizes[k]
            stacked = torch.stack([contribution(r, world * n, torch.float32, k)
                                   for r in range(world)])
            full = stacked.sum(0) if op == dist.ReduceOp.SUM else stacked.max(0).values
            assert_equal(o, full[rank * n:(rank + 1) * n], f"reduce_scatter {op} {k} expected")


def check_coalesced_reduce_scatter_mixed(rank, world):
    # Tensors of different dtypes in one coalesced call (one reduceScatter per dtype group is
    # not possible in one packed buffer: braid reduces them one by one), and 2-D tensors.
    specs = [(torch.float32, 6), (torch.int64, 3), (torch.float32, 0), (torch.float64, 11)]
    ins = [contribution(rank, world * n, dt, k) for k, (dt, n) in enumerate(specs)]
    outs = [torch.empty(n, dtype=dt) for dt, n in specs]
    with c10d._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.reduce_scatter_tensor(o, i)
    cm.wait()
    for k, (o, (dt, n)) in enumerate(zip(outs, specs)):
        full = torch.stack([contribution(r, world * n, dt, k) for r in range(world)]).sum(0)
        assert_equal(o, full[rank * n:(rank + 1) * n], f"mixed reduce_scatter tensor {k} ({dt})")
    ins = [contribution(rank, world * 2 * 3, torch.float32, k).view(world * 2, 3)
           for k in range(3)]
    outs = [torch.empty(2, 3) for _ in range(3)]
    with c10d._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.reduce_scatter_tensor(o, i)
    cm.wait()
    for k, o in enumerate(outs):
        full = torch.stack([contribution(r, world * 6, torch.float32, k)
                            for r in range(world)]).sum(0).view(world * 2, 3)
        assert_equal(o, full[rank * 2:(rank + 1) * 2], f"2-D coalesced reduce_scatter {k}")


def check_gather_into_tensor(rank, world):
    for root in range(world):
        for dtype in (torch.float32, torch.int16, torch.float8_e4m3fn):
            n = 37
            src = contribution(rank, n, torch.float32).to(dtype)
            out = torch.empty(world * n, dtype=dtype) if rank == root else None
            dist.gather_into_tensor(src, out, dst=root)
            if rank == root:
                e = torch.cat([contribution(r, n, torch.float32).to(dtype) for r in range(world)])
                assert torch.equal(out.view(torch.uint8), e.view(torch.uint8)), \
                    f"gather_into_tensor {dtype} root {root}"


def check_all_to_all_single_uneven_vs_gloo(rank, world):
    # Rank r sends (r + 2 * j) % 5 rows of 4 to rank j (some zero).
    def rows(src, dst):
        return (src + 2 * dst) % 5
    send = [rows(rank, j) for j in range(world)]
    recv = [rows(j, rank) for j in range(world)]
    inp = torch.cat([torch.full((send[j], 4), rank * 100 + j, dtype=torch.float64)
                     for j in range(world)])
    out = torch.empty(sum(recv), 4, dtype=torch.float64)
    ref = torch.empty_like(out)
    dist.all_to_all_single(out, inp, output_split_sizes=recv, input_split_sizes=send)
    dist.all_to_all_single(ref, inp, output_split_sizes=recv, input_split_sizes=send,
                           group=gloo())
    assert_equal(out, ref, "all_to_all_single uneven vs gloo")
    e = torch.cat([torch.full((recv[j], 4), j * 100 + rank, dtype=torch.float64)
                   for j in range(world)])
    assert_equal(out, e, "all_to_all_single uneven expected")


def check_move_dtypes(rank, world):
    # Collectives that move data take every dtype torch has, bit for bit.
    dtypes = [torch.bool, torch.int16, torch.uint16, torch.uint32, torch.uint64,
              torch.float8_e4m3fn, torch.float8_e5m2, torch.complex64, torch.complex128]
    for dtype in dtypes:
        n = 19
        base = contribution(rank, n, torch.float32)
        t = (base > 8) if dtype == torch.bool else base.to(dtype)
        outs = torch.empty(world * n, dtype=dtype)
        dist.all_gather_into_tensor(outs, t)
        e = torch.cat([(contribution(r, n) > 8) if dtype == torch.bool
                       else contribution(r, n).to(dtype) for r in range(world)])
        assert torch.equal(outs.view(torch.uint8), e.view(torch.uint8)), f"all_gather {dtype}"
        b = t.clone() if rank == 0 else torch.zeros_like(t)
        dist.broadcast(b, src=0)
        e0 = (contribution(0, n) > 8) if dtype == torch.bool else contribution(0, n).to(dtype)
        assert torch.equal(b.view(torch.uint8), e0.view(torch.uint8)), f"broadcast {dtype}"
    # complex SUM/AVG: torch hands braid the real view.
    c = torch.complex(contribution(rank, 9), -contribution(rank, 9, salt=1))
    dist.all_reduce(c)
    e = torch.complex(sum(contribution(r, 9) for r in range(world)),
                      -sum(contribution(r, 9, salt=1) for r in range(world)))
    assert_equal(c, e, "complex64 SUM")


def check_reductions_of_every_dtype(rank, world):
    # Every dtype torch reduces on the CPU, with every op braid defines on it, against values
    # computed here with Python integers (small ones, so every sum is exact in float8 too).
    n = 11
    per = [[(r + 2 * i) % 3 for i in range(n)] for r in range(world)]

    def fold(f):
        return [functools.reduce(f, [per[r][i] for r in range(world)]) for i in range(n)]

    R = dist.ReduceOp
    int_ops = ((R.SUM, operator.add), (R.PRODUCT, operator.mul), (R.MIN, min), (R.MAX, max),
               (R.BAND, operator.and_), (R.BOR, operator.or_), (R.BXOR, operator.xor))
    for dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16,
                  torch.uint32, torch.uint64):
        for op, f in int_ops:
            t = torch.tensor(per[rank], dtype=dtype)
            dist.all_reduce(t, op=op)
            assert t.tolist() == fold(f), f"all_reduce {op} {dtype}: {t.tolist()} != {fold(f)}"
        out = torch.empty(n, dtype=dtype)
        dist.reduce_scatter_tensor(out, torch.tensor(per[rank] * world, dtype=dtype), op=R.BXOR)
        assert out.tolist() == fold(operator.xor), f"reduce_scatter_tensor BXOR {dtype}"
    bool_ops = ((R.SUM, any), (R.MAX, any), (R.BOR, any), (R.PRODUCT, all), (R.MIN, all),
                (R.BAND, all), (R.BXOR, lambda xs: sum(xs) % 2 == 1))
    for op, f in bool_ops:
        t = torch.tensor([v > 0 for v in per[rank]])
        dist.all_reduce(t, op=op)
        e = [f([per[r][i] > 0 for r in range(world)]) for i in range(n)]
        assert t.tolist() == e, f"all_reduce {op} bool"
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        for op, f in ((R.SUM, operator.add), (R.MIN, min), (R.MAX, max)):
            t = torch.tensor(per[rank], dtype=torch.float32).to(dtype)
            dist.all_reduce(t, op=op)
            e = torch.tensor(fold(f), dtype=torch.float32).to(dtype)
            assert torch.equal(t.view(torch.uint8), e.view(torch.uint8)), f"all_reduce {op} {dtype}"
    # Complex: torch allows SUM and AVG (and hands the backend the real view).
    for dtype in (torch.complex64, torch.complex128):
        for op in (R.SUM, R.AVG):
            t = torch.complex(torch.tensor(per[rank], dtype=torch.float64),
                              -torch.tensor(per[rank], dtype=torch.float64)).to(dtype)
            dist.all_reduce(t, op=op)
            e = [sum(complex(per[r][i], -per[r][i]) for r in range(world)) for i in range(n)]
            if op == R.AVG:
                e = [v / world for v in e]
            assert torch.allclose(t, torch.tensor(e, dtype=dtype)), f"all_reduce {op} {dtype}"
    # PREMUL_SUM: each rank's input times the factor, then the sum (exact in these values).
    for dtype, factor in ((torch.float32, 0.5), (torch.float64, 3.0), (torch.bfloat16, 2.0),
                          (torch.int32, 3.0), (torch.complex64, 0.25)):
        t = torch.tensor(per[rank], dtype=torch.float64).to(dtype)
        dist.all_reduce(t, op=torch._C._distributed_c10d._make_nccl_premul_sum(factor))
        e = torch.tensor([v * factor for v in fold(operator.add)], dtype=torch.float64).to(dtype)
        assert torch.equal(t, e), f"PREMUL_SUM {dtype} x {factor}: {t.tolist()} != {e.tolist()}"
    t = torch.ones(3)
    dist.all_reduce(t, op=torch._C._distributed_c10d._make_nccl_premul_sum(torch.tensor([2.0])))
    assert_equal(t, torch.full((3,), 2.0 * world), "PREMUL_SUM with a tensor factor")


def check_unsupported_reductions(rank, world):
    # Combinations no backend defines raise on the calling rank, naming op and dtype (torch
    # itself refuses MIN, MAX, PRODUCT and the bitwise ops on complex tensors before braid).
    e = expect_error(lambda: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.BAND), "BAND",
                     "BAND float32")
    assert "Float" in str(e), f"the error does not name the dtype: {e}"
    for op, name in ((dist.ReduceOp.BOR, "BOR"), (dist.ReduceOp.BXOR, "BXOR")):
        expect_error(lambda: dist.all_reduce(torch.ones(3, dtype=torch.float64), op=op), name,
                     name)
    e = expect_error(lambda: dist.all_reduce(torch.ones(3, dtype=torch.float8_e4m3fn),
                                             op=dist.ReduceOp.BOR), "BOR", "BOR float8_e4m3fn")
    assert "Float8_e4m3fn" in str(e), f"the error does not name the dtype: {e}"
    expect_error(lambda: dist.all_reduce(torch.ones(3, dtype=torch.bool), op=dist.ReduceOp.AVG),
                 "AVG", "AVG bool")
    out = torch.empty(3)
    expect_error(lambda: dist.reduce_scatter_tensor(out, torch.zeros(3 * world),
                                                    op=dist.ReduceOp.BXOR), "BXOR",
                 "reduce_scatter_tensor BXOR float32")
    expect_error(lambda: dist.reduce(torch.ones(3), dst=0, op=dist.ReduceOp.BAND), "BAND",
                 "reduce BAND float32")
    # Nothing was sent: the group still works.
    y = torch.ones(5)
    dist.all_reduce(y)
    assert_equal(y, torch.full((5,), float(world)), "all_reduce after errors")


def check_monitored_barrier(rank, world):
    for _ in range(3):
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=30), wait_all_ranks=True)
    if world < 3:
        return
    # A group whose last rank never arrives: rank 0 names it; the others fail too.
    g = dist.new_group(timeout=datetime.timedelta(seconds=30))
    missing = world - 1
    if rank != missing:
        t0 = time.monotonic()
        e = expect_error(lambda: dist.monitored_barrier(
            g, timeout=datetime.timedelta(seconds=2), wait_all_ranks=True), "monitoredBarrier",
            "monitored_barrier with a missing rank")
        if rank == 0:
            assert f"Ranks {missing} failed" in str(e), f"rank 0's error: {e}"
        assert time.monotonic() - t0 < 20


def check_per_call_timeout(rank, world):
    g = dist.new_group(timeout=datetime.timedelta(seconds=60))
    be = braid_torch.backend_of(g)
    assert be.timeout == datetime.timedelta(seconds=60)
    if rank == 0:
        # Nobody else joins: the option struct's 1.5 s, not the group's 60 s, ends it.
        opts = dist.AllreduceOptions()
        opts.timeout = datetime.timedelta(milliseconds=1500)
        t0 = time.monotonic()
        w = g.allreduce([torch.ones(8)], opts)
        e = expect_error(w.wait, "timeout", "per-call timeout")
        took = time.monotonic() - t0
        assert "the call's timeout is 1500 ms" in str(e), str(e)
        assert 1.0 < took < 30, f"timed out after {took:.1f}s, expected ~1.5 s"
    # set_timeout changes the group's bound.
    g2 = dist.new_group(timeout=datetime.timedelta(seconds=50))
    c10d._set_pg_timeout(datetime.timedelta(seconds=20), g2)
    assert braid_torch.backend_of(g2).timeout == datetime.timedelta(seconds=20)
    t = torch.ones(3)
    opts = dist.AllreduceOptions()
    opts.timeout = datetime.timedelta(seconds=30)
    g2.allreduce([t], opts).wait()  # a per-call bound that does not expire
    assert_equal(t, torch.full((3,), float(world)), "all_reduce with a per-call timeout")
    dist.barrier()


def check_abort(rank, world):
    g = dist.new_group(timeout=datetime.timedelta(seconds=60))
    be = braid_torch.backend_of(g)
    if rank == 0:
        # An operation nobody else joins, then abort() from another thread: the wait fails
        # with braid's Aborted error long before the group's 60 s.
        w = dist.all_reduce(torch.ones(4), group=g, async_op=True)
        time.sleep(0.3)
        t0 = time.monotonic()
        threading.Thread(target=g.abort).start()
        e = expect_error(w.wait, "abort", "wait after abort")
        assert time.monotonic() - t0 < 20, "abort did not end the operation"
        expect_error(lambda: be.allreduce([torch.ones(2)], dist.AllreduceOptions()),
                     "shut down", "collective after abort")
        expect_error(lambda: dist.send(torch.ones(2), 1, group=g), "shut down", "send after abort")
    dist.barrier()


def check_shutdown_and_destroy(rank, world):
    g = dist.new_group()
    be = braid_torch.backend_of(g)
    t = torch.ones(6)
    w = dist.all_reduce(t, group=g, async_op=True)
    dist.destroy_process_group(g)  # shutdown(): what was queued still runs
    w.wait()
    assert_equal(t, torch.full((6,), float(world)), "all_reduce queued before destroy")
    expect_error(lambda: be.allreduce([torch.ones(2)], dist.AllreduceOptions()), "shut down",
                 "collective after destroy_process_group")
    t = torch.ones(2)
    dist.all_reduce(t)  # the world is untouched
    assert_equal(t, torch.full((2,), float(world)), "world after destroying a subgroup")


def check_split_group(rank, world):
    halves = [list(range(0, (world + 1) // 2)), list(range((world + 1) // 2, world))]
    halves = [h for h in halves if h]
    g = dist.split_group(split_ranks=halves, timeout=datetime.timedelta(seconds=40))
    mine = next(h for h in halves if rank in h)
    assert isinstance(braid_torch.backend_of(g), braid_torch.ProcessGroupBraid)
    assert dist.get_world_size(g) == len(mine) and dist.get_rank(g) == mine.index(rank)
    assert braid_torch.backend_of(g).timeout == datetime.timedelta(seconds=40)
    t = torch.full((100,), float(rank + 1))
    dist.all_reduce(t, group=g)
    assert_equal(t, torch.full((100,), float(sum(r + 1 for r in mine))), "all_reduce in a split")
    out = torch.empty(len(mine) * 3)
    dist.all_gather_into_tensor(out, torch.full((3,), float(rank)), group=g)
    assert_equal(out, torch.cat([torch.full((3,), float(r)) for r in mine]), "all_gather split")
    # A split leaving some ranks out: they get GroupMember.NON_GROUP_MEMBER.
    g0 = dist.split_group(split_ranks=[[0]])
    if rank == 0:
        t = torch.arange(4.0)
        dist.all_reduce(t, group=g0)
        assert_equal(t, torch.arange(4.0), "split of one rank")
    else:
        assert g0 is dist.GroupMember.NON_GROUP_MEMBER
    # Splitting a split: only where every half can be split, so that every rank creates the
    # same number of groups (torch names later groups by a per-rank count of group creations).
    if all(len(h) >= 2 for h in halves):
        gg = dist.split_group(parent_pg=g, split_ranks=[[0, 1]] if len(mine) == 2 else
                              [[0, 1], list(range(2, len(mine)))])
        if gg is not dist.GroupMember.NON_GROUP_MEMBER:
            t = torch.ones(2)
            dist.all_reduce(t, group=gg)
            assert_equal(t, torch.full((2,), float(dist.get_world_size(gg))), "split of a split")


def check_new_subgroups(rank, world):
    size = 2 if world % 2 == 0 else 1
    sub, subs = dist.new_subgroups(group_size=size)
    assert len(subs) == world // size
    t = torch.full((7,), float(rank))
    dist.all_reduce(t, group=sub)
    first = rank - rank % size
    assert_equal(t, torch.full((7,), float(sum(range(first, first + size)))), "new_subgroups")
    groups = [list(range(world))[i::2] for i in range(min(2, world))]
    sub2, _ = dist.new_subgroups_by_enumeration(ranks_per_subgroup_list=groups)
    mine = next(gr for gr in groups if rank in gr)
    t = torch.full((3,), float(rank))
    dist.all_reduce(t, group=sub2)
    assert_equal(t, torch.full((3,), float(sum(mine))), "new_subgroups_by_enumeration")


def check_device_mesh_and_dtensor(rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    shape = (2, world // 2) if world % 2 == 0 and world >= 4 else (world,)
    names = ("dp", "tp") if len(shape) == 2 else ("dp",)
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    for name in names:
        pg = mesh.get_group(name)
        assert isinstance(braid_torch.backend_of(pg), braid_torch.ProcessGroupBraid), name
        t = torch.full((5,), float(rank))
        dist.all_reduce(t, group=pg)
        members = dist.get_process_group_ranks(pg)
        assert_equal(t, torch.full((5,), float(sum(members))), f"mesh dim {name}")
    torch.manual_seed(1234)  # the same global tensor on every rank
    full = torch.randn(8, 6)
    placements = [Shard(0), Shard(1)] if len(shape) == 2 else [Shard(0)]
    d = distribute_tensor(full, mesh, placements)
    assert_equal(d.full_tensor(), full, "Shard -> full_tensor")
    r = d.redistribute(mesh, [Replicate()] * len(shape))
    assert_equal(r.to_local(), full, "Shard -> Replicate")
    s = r.redistribute(mesh, [Shard(1)] + ([Replicate()] if len(shape) == 2 else []))
    assert_equal(s.full_tensor(), full, "Replicate -> Shard(1)")
    local = s.to_local()
    k = mesh.get_local_rank(names[0])
    cols = full.tensor_split(shape[0], dim=1)[k]
    assert_equal(local, cols, "the local shard of Shard(1)")
    # A DTensor reduction: the sum of a sharded tensor is the sum of the full one.
    total = d.sum().full_tensor()
    torch.testing.assert_close(total, full.sum(), rtol=1e-5, atol=1e-5)


CHECKS = [
    check_backend_is_braid, check_coalesced_all_reduce, check_coalesced_all_gather_into_tensor,
    check_coalesced_reduce_scatter_tensor, check_coalesced_reduce_scatter_mixed,
    check_gather_into_tensor,
    check_all_to_all_single_uneven_vs_gloo, check_move_dtypes, check_reductions_of_every_dtype,
    check_unsupported_reductions,
    check_monitored_barrier, check_per_call_timeout, check_split_group, check_new_subgroups,
    check_device_mesh_and_dtensor, check_shutdown_and_destroy, check_abort,
]


def main():
    only = set(sys.argv[1:])
    rank, world = init(os.environ.get("BRAID_TEST_BACKEND", "braid"), timeout_s=60)
    checks = Checks(f"torch 2.x ops (world {world}, backend {dist.get_backend()})")
    for fn in CHECKS:
        if not only or fn.__name__ in only:
            checks.run(fn, rank, world)
    checks.done()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
