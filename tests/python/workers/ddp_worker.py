"""DDP over braid against DDP over gloo and against single-process training.

Every rank builds the same model from one seed and trains three replicas on its own shard of a
deterministic global batch: DDP on the braid world group, DDP on a gloo group of the same ranks,
and (locally) a plain model on the whole global batch, which is what data-parallel SGD with
averaged gradients must reproduce. All three end within float tolerance of each other. A fourth
replica uses a comm hook (the Python future path) with fp16 compression, compared loosely.
"""

import copy

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from rank_util import Checks, init

STEPS = 12
BATCH = 8  # per rank


def make_model():
    torch.manual_seed(1234)
    return nn.Sequential(
        nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4))


def global_batch(step, world):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(world * BATCH, 32, generator=g)
    y = torch.randn(world * BATCH, 4, generator=g)
    return x, y


def train(model, rank, world, shard=True):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(STEPS):
        x, y = global_batch(step, world)
        if shard:
            x, y = x[rank * BATCH:(rank + 1) * BATCH], y[rank * BATCH:(rank + 1) * BATCH]
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    return model


def params(m):
    m = m.module if isinstance(m, DDP) else m
    return [p.detach().clone() for p in m.parameters()]


def check_ddp_matches_gloo_and_reference(rank, world):
    gloo = dist.new_group(backend="gloo")
    base = make_model()
    # Small buckets: several allreduces in flight per step, completed through futures.
    braid_ddp = train(DDP(copy.deepcopy(base), process_group=None, bucket_cap_mb=0.01), rank, world)
    gloo_ddp = train(DDP(copy.deepcopy(base), process_group=gloo, bucket_cap_mb=0.01), rank, world)
    reference = train(copy.deepcopy(base), rank, world, shard=False)
    for i, (b, g, r) in enumerate(zip(params(braid_ddp), params(gloo_ddp), params(reference))):
        torch.testing.assert_close(b, g, rtol=1e-5, atol=1e-6,
                                   msg=lambda m: f"param {i}: braid vs gloo: {m}")
        torch.testing.assert_close(b, r, rtol=1e-4, atol=1e-5,
                                   msg=lambda m: f"param {i}: braid vs single process: {m}")
    # Replicas agree across ranks (bitwise: every rank applied the same averaged gradients).
    for p in params(braid_ddp):
        q = p.clone()
        dist.broadcast(q, src=0)
        assert torch.equal(p, q), "DDP replicas diverged across ranks"


def check_ddp_comm_hook(rank, world):
    base = make_model()
    hooked = DDP(copy.deepcopy(base))
    hooked.register_comm_hook(state=None, hook=default_hooks.fp16_compress_hook)
    train(hooked, rank, world)
    plain = train(DDP(copy.deepcopy(base)), rank, world)
    for i, (a, b) in enumerate(zip(params(hooked), params(plain))):
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-3,
                                   msg=lambda m: f"param {i}: fp16 hook vs plain: {m}")


def check_ddp_options_match_gloo(rank, world):
    """static_graph and gradient_as_bucket_view (torch 2.x DDP options), alone and together,
    with and without a comm hook: braid ends where gloo ends with the same options, and where
    single-process training ends."""
    gloo = dist.new_group(backend="gloo")
    base = make_model()
    reference = params(train(copy.deepcopy(base), rank, world, shard=False))
    variants = [dict(static_graph=True), dict(gradient_as_bucket_view=True),
                dict(static_graph=True, gradient_as_bucket_view=True)]
    for kw in variants:
        for hook in (None, default_hooks.allreduce_hook):
            runs = []
            for pg in (None, gloo):
                ddp = DDP(copy.deepcopy(base), process_group=pg, bucket_cap_mb=0.01, **kw)
                if hook is not None:
                    ddp.register_comm_hook(state=pg, hook=hook)
                runs.append(params(train(ddp, rank, world)))
            what = f"{kw} hook={hook.__name__ if hook else None}"
            for i, (b, g, r) in enumerate(zip(*runs, reference)):
                torch.testing.assert_close(b, g, rtol=1e-5, atol=1e-6,
                                           msg=lambda m: f"{what} param {i}: braid vs gloo: {m}")
                torch.testing.assert_close(b, r, rtol=1e-4, atol=1e-5,
                                           msg=lambda m: f"{what} param {i}: vs one process: {m}")
    # bf16 compression hook (the future path) against plain DDP, loosely.
    hooked = DDP(copy.deepcopy(base), gradient_as_bucket_view=True)
    hooked.register_comm_hook(state=None, hook=default_hooks.bf16_compress_hook)
    for i, (a, r) in enumerate(zip(params(train(hooked, rank, world)), reference)):
        torch.testing.assert_close(a, r, rtol=5e-2, atol=5e-3,
                                   msg=lambda m: f"param {i}: bf16 hook vs one process: {m}")


def main():
    rank, world = init("braid", timeout_s=120)
    torch.set_num_threads(1)
    checks = Checks(f"ddp (world {world})")
    checks.run(check_ddp_matches_gloo_and_reference, rank, world)
    checks.run(check_ddp_comm_hook, rank, world)
    checks.run(check_ddp_options_match_gloo, rank, world)
    checks.done()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
