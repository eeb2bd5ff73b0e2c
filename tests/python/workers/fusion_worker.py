"""braid_torch.FusionBuffer (the C++ braid::train::FusionBuffer through the extension): every
result compared with sums computed here from every rank's inputs; mixed dtypes and ops,
non-contiguous tensors, 1,000 tiny tensors, flushes by threshold, by cycle time and by flush(),
bad input, a failed all-reduce failing the future, the defaults from BRAID_FUSION_THRESHOLD / BRAID_CYCLE_TIME (argv: the expected
threshold in bytes and cycle time in ms), and that fusion_hook's state is this buffer.
"""

import sys
import time

import torch
import torch.distributed as dist

import braid_torch
from braid_torch.training import FusionState
from rank_util import Checks, assert_equal, expect_error, init

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int32, torch.int64]
SIZES = [0, 1, 7, 13, 61, 257, 1031, 3, 2, 97]
OPS = ["sum", "max", "min", "sum", "avg"]
DEADLINE_S = 120.0  # generous: the machine is shared


def values(t, rank, n, dtype):
    """Rank `rank`'s input for tensor t: small integers, so that sums of up to 8 ranks are exact
    in every dtype used (uint8: 0..10, others -5..5)."""
    i = torch.arange(n, dtype=torch.int64)
    v = (t * 31 + i * 7 + rank * 3 + (t * i) % 5) % 11
    if dtype != torch.uint8:
        v = v - 5
    return v.to(dtype)


def expected(t, n, dtype, op, world):
    rows = torch.stack([values(t, r, n, dtype).to(torch.float64) for r in range(world)]) if n else \
        torch.zeros(world, 0, dtype=torch.float64)
    if op == "sum":
        e = rows.sum(dim=0)
    elif op == "avg":
        e = rows.sum(dim=0) / world
    elif op == "max":
        e = rows.max(dim=0).values if n else rows[0]
    else:
        e = rows.min(dim=0).values if n else rows[0]
    return e.to(dtype)


def wait_done(fut, what):
    deadline = time.monotonic() + DEADLINE_S
    while not fut.done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not completed within {DEADLINE_S}s")
        time.sleep(0.001)
    return fut.wait()


def main():
    rank, world = init("braid", timeout_s=120)
    want_threshold, want_cycle = int(sys.argv[1]), float(sys.argv[2])
    checks = Checks(f"fusion buffer (world {world})")

    def defaults_from_environment():
        with braid_torch.FusionBuffer() as fb:
            assert fb.threshold_bytes == want_threshold, (fb.threshold_bytes, want_threshold)
            assert abs(fb.cycle_time_ms - want_cycle) < 1e-9, (fb.cycle_time_ms, want_cycle)
        with braid_torch.FusionBuffer(threshold_bytes=12345, cycle_time_ms=0.25) as fb:
            assert fb.threshold_bytes == 12345 and fb.cycle_time_ms == 0.25

    def mixed_dtypes_ops_sizes():
        # 80 tensors: every dtype, sizes 0..1031, sum/max/min/avg, every fourth one a transposed
        # (non-contiguous) view; threshold 512 B: many packs, large tensors alone, in place.
        fb = braid_torch.FusionBuffer(threshold_bytes=512, cycle_time_ms=60000)
        specs, tensors, futs = [], [], []
        for t in range(80):
            dtype = DTYPES[(t // 2) % len(DTYPES)]
            n = SIZES[t % len(SIZES)]
            op = OPS[t % len(OPS)]
            if op == "avg" and not dtype.is_floating_point:
                op = "sum"
            x = values(t, rank, n, dtype)
            if t % 4 == 3 and n > 1 and n % 2 == 0:
                x = x.view(2, n // 2).t()  # non-contiguous, same elements in a different order
            elif t % 4 == 3 and n > 1:
                x = torch.stack([x, x]).t()[:, 0]  # a strided view (stride 2)
            specs.append((t, n, dtype, op))
            tensors.append(x)
            futs.append(fb.add(x, op))
        fb.synchronize()
        for (t, n, dtype, op), x, fut in zip(specs, tensors, futs):
            assert fut.done(), f"tensor {t} not done after synchronize()"
            got = fut.value()
            assert got.data_ptr() == x.data_ptr() and got.shape == x.shape, f"tensor {t}"
            want = expected(t, n, dtype, op, world)
            if x.dim() == 2:
                want = want.view(2, n // 2).t()
            tol = {}
            if op == "avg":
                tol = dict(rtol=1e-2, atol=1e-2) if dtype in (torch.float16, torch.bfloat16) \
                    else dict(rtol=1e-6, atol=1e-6)
            assert_equal(x, want, f"tensor {t} ({dtype}, {n} elements, {op})", **tol)
        st = fb.stats()
        assert st["tensors"] == 80, st
        assert st["allreduces"] < 80, st
        fb.close()

    def reduce_op_enums():
        with braid_torch.FusionBuffer(cycle_time_ms=60000) as fb:
            a = values(1, rank, 33, torch.float32)
            b = values(2, rank, 33, torch.int32)
            fa = fb.add(a, dist.ReduceOp.MAX)
            fb_ = fb.add(b, dist.ReduceOp.SUM)
            fb.synchronize()
            assert_equal(fa.wait(), expected(1, 33, torch.float32, "max", world), "MAX")
            assert_equal(fb_.wait(), expected(2, 33, torch.int32, "sum", world), "SUM")

    def thousand_tiny_tensors():
        # The case: 1,000 tensors of 4 KiB, all queued before synchronize(): one round,
        # one fused all-reduce of 4 MB (under the 64M threshold).
        with braid_torch.FusionBuffer(threshold_bytes=64 << 20, cycle_time_ms=60000) as fb:
            xs = [values(t, rank, 1024, torch.float32) for t in range(1000)]
            futs = [fb.add(x) for x in xs]
            fb.synchronize()
            for t in range(0, 1000, 37):
                assert_equal(xs[t], expected(t, 1024, torch.float32, "sum", world), f"tensor {t}")
            assert all(f.done() for f in futs)
            st = fb.stats()
            assert st == {"tensors": 1000, "allreduces": 1, "rounds": 1,
                          "bytes": 1000 * 4096}, st

    def threshold_flushes():
        # Threshold 4 KiB, cycle time 60 s: 3 KiB queued stay queued (no rank has a reason to
        # send); the 4th KiB reaches the threshold and everything goes, without flush().
        with braid_torch.FusionBuffer(threshold_bytes=4096, cycle_time_ms=60000) as fb:
            xs = [values(t, rank, 256, torch.float32) for t in range(4)]
            futs = [fb.add(x) for x in xs[:3]]
            time.sleep(0.3)
            assert not any(f.done() for f in futs), "sent before the threshold was reached"
            futs.append(fb.add(xs[3]))
            for t, f in enumerate(futs):
                assert_equal(wait_done(f, f"tensor {t}"),
                             expected(t, 256, torch.float32, "sum", world), f"tensor {t}")
            st = fb.stats()
            assert st["rounds"] == 1 and st["allreduces"] == 1, st

    def cycle_time_flushes():
        # Threshold 64M, cycle time 20 ms: a lone tensor goes once it waited 20 ms.
        with braid_torch.FusionBuffer(threshold_bytes=64 << 20, cycle_time_ms=20) as fb:
            x = values(5, rank, 100, torch.float64)
            t0 = time.monotonic()
            fut = fb.add(x)
            assert_equal(wait_done(fut, "lone tensor"),
                         expected(5, 100, torch.float64, "sum", world), "lone tensor")
            assert time.monotonic() - t0 >= 0.019
            assert fb.stats()["rounds"] == 1

    def group_stays_free_and_then_chains():
        with braid_torch.FusionBuffer(cycle_time_ms=60000) as fb:
            x = values(6, rank, 10, torch.float32)
            fut = fb.add(x).then(lambda f: f.value() * 2)
            y = torch.full((3,), float(rank + 1))
            dist.all_reduce(y)  # the group's own collective, while x is queued in the buffer
            assert_equal(y, torch.full((3,), float(world * (world + 1) // 2)), "group allreduce")
            assert not fut.done()
            fb.flush()
            assert_equal(wait_done(fut, "then()"),
                         2 * expected(6, 10, torch.float32, "sum", world), "then()")

    def bad_input():
        fb = braid_torch.FusionBuffer()
        expect_error(lambda: fb.add(torch.zeros(3, dtype=torch.complex32)), "cannot reduce dtype",
                     "complex32 tensor")
        expect_error(lambda: fb.add(torch.zeros(3), "xor"), "unknown reduce op", "op name")
        e = expect_error(lambda: fb._impl.add(torch.zeros(3), "nand"), "unknown op", "C++ op")
        assert f"rank {rank}" in str(e), str(e)
        expect_error(lambda: braid_torch.FusionBuffer(threshold_bytes=0), "threshold_bytes",
                     "threshold 0")
        fb.close()
        expect_error(lambda: fb.add(torch.zeros(3)), "closed", "add after close")

    def fusion_hook_state_is_the_cpp_buffer():
        state = FusionState(threshold=1 << 20, cycle_time_ms=5)
        assert isinstance(state.buffer, braid_torch.FusionBuffer)
        assert isinstance(state.buffer._impl, braid_torch._C.FusionBuffer)
        assert state.threshold == 1 << 20 and state.allreduces == 0
        state.buffer.close()

    def failure_reaches_the_future():
        # Only rank 0 queues a tensor; the other ranks close their buffers at once, so rank 0's
        # negotiation fails (its peers left the buffer's communicator) and the future gets the
        # error. The group itself stays usable.
        fb = braid_torch.FusionBuffer(cycle_time_ms=1)
        if rank == 0:
            fut = fb.add(torch.ones(5))
            try:
                fut.wait()
            except RuntimeError as e:
                assert "braid" in str(e), str(e)
            else:
                raise AssertionError("the future completed without error")
            assert fut.done()
        fb.close()
        y = torch.ones(2)
        dist.all_reduce(y)
        assert_equal(y, torch.full((2,), float(world)), "group after the buffer failed")

    checks.run(defaults_from_environment)
    checks.run(mixed_dtypes_ops_sizes)
    checks.run(reduce_op_enums)
    checks.run(thousand_tiny_tensors)
    checks.run(threshold_flushes)
    checks.run(cycle_time_flushes)
    checks.run(group_stays_free_and_then_chains)
    checks.run(bad_input)
    checks.run(fusion_hook_state_is_the_cpp_buffer)
    if world > 1:
        checks.run(failure_reaches_the_future)
    checks.done()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
