"""braid_torch.training's compressors against the bounds of docs/training.md, on every rank of
the job: each rank computes every rank's input from a seed, so the exact sum and each method's
expected result are computed here independently (as tests/train/compress_test.cpp does for C++).
"""

import torch
import torch.distributed as dist

from braid_torch.training import CompressionState
from rank_util import Checks, init

BLOCK = 16
COUNTS = [1, 7, 16, 17, 61, 257, 1031]


def inputs(rank, n, step=0):
    g = torch.Generator().manual_seed(1000 * step + 17 * rank + n)
    scale = 1.0 + 2.5 * ((torch.arange(n) // 23) % 5).to(torch.float32)
    bias = 0.3 * torch.sin(torch.arange(n, dtype=torch.float32) * 0.7)
    return ((torch.rand(n, generator=g) * 2 - 1 + bias) * scale).to(torch.float32)


def all_inputs(world, n, step=0):
    return [inputs(r, n, step) for r in range(world)]


def block_reduce(x, n, fn):
    """fn over each block of BLOCK elements, repeated per element."""
    out = torch.empty(n, dtype=torch.float64)
    for b0 in range(0, n, BLOCK):
        out[b0:b0 + BLOCK] = fn(x[b0:b0 + BLOCK].to(torch.float64))
    return out


def same_everywhere(t, what):
    q = t.clone()
    dist.broadcast(q, src=0)
    assert torch.equal(q, t), f"{what}: results differ across ranks"


def check_one_step(rank, world):
    for n in COUNTS:
        xs = all_inputs(world, n)
        exact = torch.stack(xs).to(torch.float64).sum(0)
        abs_sum = torch.stack(xs).abs().to(torch.float64).sum(0)
        tol = 1e-5 * abs_sum + 1e-6
        for method in ["int8", "topk:0.1", "randk:0.1", "sign", "none"]:
            st = CompressionState(method, error_feedback=False, block=BLOCK)
            out = st.allreduce_sum(xs[rank].clone()).to(torch.float64)
            what = f"{method} n={n} world={world}"
            same_everywhere(out.to(torch.float32), what)
            if method == "none":
                assert torch.all((out - exact).abs() <= tol), what
            elif method == "int8":
                m = sum(block_reduce(x, n, lambda b: b.abs().max()) for x in xs)
                assert torch.all((out - exact).abs() <= m / 127 + tol), what
            elif method == "topk:0.1":
                k = max(1, round(0.1 * n))
                expected = torch.zeros(n, dtype=torch.float64)
                for x in xs:
                    idx = sorted(range(n), key=lambda i: (-abs(float(x[i])), i))[:k]
                    expected[idx] += x[idx].to(torch.float64)
                assert torch.all((out - expected).abs() <= tol), what
            elif method == "randk:0.1":
                k = max(1, round(0.1 * n))
                through = out != 0
                assert int(through.sum()) == k, (what, int(through.sum()), k)
                assert torch.all((out[through] - exact[through]).abs() <= tol[through]), what
            elif method == "sign":
                expected = torch.zeros(n, dtype=torch.float64)
                for x in xs:
                    s = block_reduce(x, n, lambda b: b.abs().mean())
                    expected += torch.where(x >= 0, s, -s)
                assert torch.all((out - expected).abs() <= tol), what
            if method != "none" and world > 1:
                assert st.wire_bytes < st.dense_wire_bytes or n < 4, (what, st.wire_bytes)


def check_error_feedback(rank, world):
    n, steps = 257, 30
    for method in ["int8", "topk:0.1", "randk:0.1", "sign"]:
        ef = CompressionState(method, block=BLOCK)
        plain = CompressionState(method, error_feedback=False, block=BLOCK)
        sum_ef = torch.zeros(n, dtype=torch.float64)
        sum_plain = torch.zeros(n, dtype=torch.float64)
        sum_exact = torch.zeros(n, dtype=torch.float64)
        for t in range(steps):
            xs = all_inputs(world, n, t)
            sum_ef += ef.allreduce_sum(xs[rank].clone()).to(torch.float64)
            sum_plain += plain.allreduce_sum(xs[rank].clone()).to(torch.float64)
            sum_exact += torch.stack(xs).to(torch.float64).sum(0)
        res = ef.residuals[0].clone()
        gathered = [torch.empty_like(res) for _ in range(world)]
        dist.all_gather(gathered, res)
        total_res = torch.stack(gathered).to(torch.float64).sum(0)
        gap = (sum_ef + total_res - sum_exact).abs().max().item()
        assert gap < 1e-2, f"{method}: results + residuals miss the exact sums by {gap}"
        if world > 1:
            e_ef = (sum_ef - sum_exact).norm().item()
            e_plain = (sum_plain - sum_exact).norm().item()
            assert e_ef < e_plain, f"{method}: error with feedback {e_ef} >= without {e_plain}"


def main():
    rank, world = init("braid", timeout_s=120)
    torch.set_num_threads(1)
    checks = Checks(f"compressors (world {world})")
    checks.run(check_one_step, rank, world)
    checks.run(check_error_feedback, rank, world)
    checks.done()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
