"""Convergence of DDP training with braid_torch.training's comm hooks (docs/training.md).

A two-layer MLP learns a synthetic 3-class problem (labels from a fixed random "teacher"
network, 10% of them flipped) with DDP over braid on every rank of the job. Trained once without
a hook (the reference), once with the fusion hook (must match the reference to float rounding)
(on a wider model, since DDP puts the first MiB into one bucket), and once per compressor with
error feedback; each compressor's final loss on the whole dataset
must be within MARGIN of the reference's, and its bytes on the wire below the uncompressed ones.
Rank 0 prints a table: final loss, margin used, bytes each rank sent, saving.
"""

import copy
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from braid_torch.training import (BraidCompressionState, CompressionState, FusionState,
                                  braid_compression_hook, compression_hook, fusion_hook,
                                  sample_indices)
from rank_util import Checks, init

FEATURES, HIDDEN, CLASSES = 20, 64, 3
SAMPLES = 4096
BATCH = 64  # per rank
STEPS = 600
LR = 0.05
# A compressor's final loss may exceed the uncompressed one by at most this much (absolute, in
# nats of cross-entropy; the reference ends near 0.57 and the untrained model starts near 1.16).
# (BRAID_TRAINING_MARGIN overrides it, to look at the numbers of a failing configuration.)
MARGIN = float(os.environ.get("BRAID_TRAINING_MARGIN", "0.05"))
# random-k needs a large ratio here: with error feedback and momentum 0.9, randk:0.25 ended
# 0.20 above the reference after 600 steps (docs/training.md); randk:0.5 is within the margin.
METHODS = ["int8", "topk:0.05", "randk:0.5", "sign"]


def dataset():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    teacher = nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, CLASSES))
    with torch.no_grad():
        for p in teacher.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 1.5)
        y = teacher(x).argmax(dim=1)
    flip = torch.rand(SAMPLES, generator=g) < 0.1
    y[flip] = torch.randint(0, CLASSES, (int(flip.sum()),), generator=g)
    return x, y


def make_model():
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))


def full_loss(model, x, y):
    with torch.no_grad():
        return nn.functional.cross_entropy(model(x), y).item()


def train(ddp, rank, world, x, y, steps=STEPS):
    opt = torch.optim.SGD(ddp.parameters(), lr=LR, momentum=0.9)
    g = torch.Generator().manual_seed(99)
    for _ in range(steps):
        idx = torch.randint(0, SAMPLES, (world * BATCH,), generator=g)
        mine = idx[rank * BATCH:(rank + 1) * BATCH]
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(x[mine]), y[mine]).backward()
        opt.step()
    return ddp.module


def main():
    rank, world = init("braid", timeout_s=300)
    torch.set_num_threads(1)
    checks = Checks(f"training (world {world})")
    x, y = dataset()
    base = make_model()
    results = {}
    initial = full_loss(base, x, y)
    bucket_mb = 25  # (the default) one bucket for this small model

    def reference():
        t0 = time.monotonic()
        m = train(DDP(copy.deepcopy(base), bucket_cap_mb=bucket_mb), rank, world, x, y)
        results["none"] = {"loss": full_loss(m, x, y), "seconds": time.monotonic() - t0}
        results["_model"] = m
        assert results["none"]["loss"] < 0.6 * initial, (initial, results["none"])

    def fusion():
        # DDP puts the first 1 MiB of gradients in one bucket whatever bucket_cap_mb says: a
        # wider model (2.2 MB of fp32 gradients) in 256 KiB buckets gives several per step.
        def wide():
            torch.manual_seed(4321)
            return nn.Sequential(nn.Linear(FEATURES, 1024), nn.ReLU(), nn.Linear(1024, 512),
                                 nn.ReLU(), nn.Linear(512, CLASSES))
        steps = 10
        plain = DDP(wide(), bucket_cap_mb=0.25)
        # The C++ fusion buffer; cycle time 60 s: only the threshold and the step's last bucket
        # send, so every step's buckets go out together (with the default 1 ms, buckets also
        # go out while the backward pass goes on, and how many share an all-reduce depends on
        # timing).
        state = FusionState(threshold=8 << 20, cycle_time_ms=60000)
        fused = DDP(wide(), bucket_cap_mb=0.25)
        fused.register_comm_hook(state, fusion_hook)
        t0 = time.monotonic()
        m = train(fused, rank, world, x, y, steps)
        seconds = time.monotonic() - t0
        ref = train(plain, rank, world, x, y, steps)
        results["fusion (wide)"] = {"loss": full_loss(m, x, y), "seconds": seconds,
                                    "allreduces": state.allreduces, "buckets": state.buckets,
                                    "ref": full_loss(ref, x, y)}
        assert state.allreduces < state.buckets, (state.allreduces, state.buckets)
        for a, b in zip(m.parameters(), ref.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)

    def compressed(method, native=False):
        # native: braid's C++ compressor on braid's worker (BraidCompressionState); else the
        # Python rewrite on torch.distributed collectives (CompressionState).
        if native:
            state = BraidCompressionState(method)
            ddp = DDP(copy.deepcopy(base), bucket_cap_mb=bucket_mb)
            ddp.register_comm_hook(state, braid_compression_hook)
            method = f"{method} (C++)"
        else:
            state = CompressionState(method)
            ddp = DDP(copy.deepcopy(base), bucket_cap_mb=bucket_mb)
            ddp.register_comm_hook(state, compression_hook)
        t0 = time.monotonic()
        m = train(ddp, rank, world, x, y)
        loss = full_loss(m, x, y)
        results[method] = {"loss": loss, "seconds": time.monotonic() - t0,
                           "wire_bytes": state.wire_bytes,
                           "dense_wire_bytes": state.dense_wire_bytes}
        ref = results["none"]["loss"]
        assert loss <= ref + MARGIN, f"{method}: final loss {loss:.4f} > reference {ref:.4f} + {MARGIN}"
        assert state.wire_bytes < state.dense_wire_bytes, (state.wire_bytes,
                                                           state.dense_wire_bytes)
        # Replicas agree across ranks: every rank applied the same compressed gradients.
        for p in m.parameters():
            q = p.detach().clone()
            dist.broadcast(q, src=0)
            assert torch.equal(p.detach(), q), f"{method}: replicas diverged"

    def native_hook_is_asynchronous():
        # The C++ compressor's future is completed by braid's worker, not by the call: rank 0
        # queues its part and finds the future pending, and only then lets the other ranks
        # queue theirs (through the store), so the collective cannot have run inside the call
        # (had the call blocked until the result, rank 0 would never reach store.set). The
        # result: the average of every rank's contribution within the int8 error bound.
        store = dist.distributed_c10d._get_default_store()
        state = BraidCompressionState("int8", error_feedback=False)
        n = 10007
        mine = torch.linspace(-1, 1, n) * (rank + 1)
        t = mine.clone()
        if rank == 0:
            fut = state.allreduce_async(t, key=0)
            assert not fut.done(), "the compressed allreduce completed before other ranks joined"
            store.set("compression_async_go", "1")
        else:
            store.wait(["compression_async_go"])
            fut = state.allreduce_async(t, key=0)
        out = fut.wait()[0]
        assert out.data_ptr() == t.data_ptr()
        expected = torch.linspace(-1, 1, n) * (sum(range(1, world + 1)) / world)
        # int8, block 256: each rank's value within half a step (max|x| / 254) of its block's
        # scale, then the slice sum re-quantised once: at most (world + 1) half-steps of the
        # largest magnitude (world), averaged.
        bound = (world + 1) * world / 254 / world + 1e-6
        err = (out - expected).abs().max().item()
        assert err <= bound, (err, bound)
        assert state.allreduces == 1 and 0 < state.wire_bytes < state.dense_wire_bytes

    def randk_indices_match_cpp():
        # What braid::kernels::sampleIndices(42, 3, 10, 4) draws (printed by
        # braid_train_compress_test, CodecKernels.SampleIndicesDistinctSortedDeterministic).
        assert sample_indices(42, 3, 10, 4).tolist() == [2, 5, 6, 7]

    checks.run(randk_indices_match_cpp)
    checks.run(reference)
    checks.run(fusion)
    checks.run(native_hook_is_asynchronous)
    for method in METHODS:
        checks.run(compressed, method, label=f"compressed {method}")
    for method in METHODS:
        checks.run(compressed, method, True, label=f"compressed {method} (C++ compressor)")
    if rank == 0:
        ref = results["none"]["loss"]
        print(f"initial loss {initial:.4f}; {STEPS} steps, {world} ranks x batch {BATCH}, "
              f"margin {MARGIN}")
        print(f"{'method':<14} {'final loss':>10} {'vs none':>9} {'wire B/rank':>12} "
              f"{'dense B/rank':>12} {'saved':>7} {'time s':>7}")
        for name, r in results.items():
            if name.startswith("_"):
                continue
            wire = r.get("wire_bytes")
            dense = r.get("dense_wire_bytes")
            saved = f"{100 * (1 - wire / dense):6.1f}%" if wire is not None else "      -"
            print(f"{name:<14} {r['loss']:10.4f} {r['loss'] - r.get('ref', ref):+9.4f} "
                  f"{(wire if wire is not None else 0):12.0f} "
                  f"{(dense if dense is not None else 0):12.0f} {saved} {r['seconds']:7.1f}")
        out = os.environ.get("BRAID_TRAINING_RESULTS")
        if out:
            with open(out, "w") as f:
                json.dump({k: v for k, v in results.items() if not k.startswith("_")}, f)
    checks.done()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
