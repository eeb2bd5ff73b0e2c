"""Keep training when a rank dies: catch braid's error, shrink the group, rebalance, go on.

Data parallel training of a linear model in float64 over a fixed data set. Every step takes
the next global batch of GLOBAL_BATCH samples and splits it over the ranks there are; each rank
sums its samples' gradients, one all_reduce(SUM) adds them, and every replica divides by
GLOBAL_BATCH: the update is that of one process taking the whole batch, whatever the world size.

A rank (ELASTIC_KILL_RANK, default 1; -1: none) kills itself with SIGKILL at step
ELASTIC_KILL_STEP (default 7) just before that step's all_reduce. The others' all_reduce
fails with braid's PeerLost; they call braid_torch.shrink(), which agrees with the other live
ranks on who is left and returns the default group shrunk to them (renumbered 0..n-1), split the
same global batch over the new world size and redo the step. At the end rank 0 checks that the
replicas are identical and writes the weights (--out FILE) for the test to compare with one
process's run (tests/python/test_elastic.py).

    build/bin/braid-run -n 4 --max-failures 1 -- .venv/bin/python examples/elastic_training.py

Run it under braid-run --max-failures: it keeps the other ranks running when one dies and serves
braid's store outside the ranks, so a killed rank is known gone at once (docs/pytorch.md,
"Shrink"). torchrun stops every worker when one fails, so it cannot run this. Rank 0 serves
torch's own env:// store here, so the rank that dies must not be 0.
"""

import argparse
import datetime
import os
import signal
import time

import torch
import torch.distributed as dist

import _common  # noqa: F401  (imports braid_torch from the source tree if needed)
import braid_torch

FEATURES = 8
SAMPLES = 480
GLOBAL_BATCH = 24
STEPS = SAMPLES // GLOBAL_BATCH
LR = 0.05


def data():
    """The whole data set, the same on every rank: y = X w* + b* + noise."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(SAMPLES, FEATURES, generator=g, dtype=torch.float64)
    w = torch.linspace(-1.0, 1.0, FEATURES, dtype=torch.float64)
    y = x @ w + 0.5 + 0.01 * torch.randn(SAMPLES, generator=g, dtype=torch.float64)
    return x, y


def my_share(step, rank, world):
    """This rank's rows of the step's global batch: the batch cut into `world` near-equal
    contiguous pieces (so the shares change when the world does)."""
    rows = torch.arange(step * GLOBAL_BATCH, (step + 1) * GLOBAL_BATCH)
    return torch.tensor_split(rows, world)[rank]


def recover(step, params, last, shrinks, first_rank):
    """Shrinks the default group to the live ranks and agrees on the step to redo. A rank dying
    inside an all_reduce can leave it completed on some ranks and failed on others: those that
    completed it applied the update and went on to the next step, so every survivor goes back
    to the smallest step any of them is at, undoing its last update if it is ahead."""
    while True:
        start = time.monotonic()
        braid_torch.shrink()  # the default group, shrunk to the live ranks
        took = time.monotonic() - start
        shrinks += 1
        agreed = torch.tensor([step], dtype=torch.int64)
        try:
            dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
        except Exception as e:  # noqa: BLE001
            if not braid_torch.is_peer_failure(e):
                raise
            continue  # another rank died meanwhile: shrink again
        if agreed.item() < step:
            assert last is not None and last[0] == agreed.item(), "more than one step ahead"
            with torch.no_grad():
                for p, saved in zip(params, last[1]):
                    p.copy_(saved)
        print(f"[rank {first_rank}] shrunk in {took * 1000:.0f} ms: now rank {dist.get_rank()} "
              f"of {dist.get_world_size()}; redoing step {agreed.item()}", flush=True)
        return int(agreed.item()), shrinks


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", help="rank 0 writes the final weights here (torch.save)")
    args = parser.parse_args()
    kill_rank = int(os.environ.get("ELASTIC_KILL_RANK", "1"))
    kill_step = int(os.environ.get("ELASTIC_KILL_STEP", "7"))
    timeout = float(os.environ.get("ELASTIC_TIMEOUT", "60"))
    torch.set_num_threads(1)
    dist.init_process_group("braid", timeout=datetime.timedelta(seconds=timeout))
    first_rank = dist.get_rank()  # the rank in the job as started (the kill picks by it)
    if kill_rank == 0:
        raise SystemExit("ELASTIC_KILL_RANK=0: rank 0 serves torch's env:// store, which "
                         "the survivors still need; pick another rank")
    print(f"[rank {first_rank}] pid {os.getpid()}", flush=True)

    x, y = data()
    model = torch.nn.Linear(FEATURES, 1, dtype=torch.float64)
    with torch.no_grad():  # the same start everywhere, without a broadcast
        model.weight.zero_()
        model.bias.zero_()
    params = [model.weight, model.bias]
    shrinks = 0
    step = 0
    last = None  # (step, weights) before the last update: to undo it if the others did not
    while step < STEPS:
        rank, world = dist.get_rank(), dist.get_world_size()
        rows = my_share(step, rank, world)
        for p in params:
            p.grad = None
        # Summed (not averaged) over this rank's rows: the all_reduce adds the ranks' sums.
        loss = ((model(x[rows]).squeeze(1) - y[rows]) ** 2).sum()
        loss.backward()
        flat = torch.cat([p.grad.reshape(-1) for p in params] + [loss.detach().reshape(1)])
        if first_rank == kill_rank and step == kill_step:
            print(f"[rank {first_rank}] killing myself at step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        except Exception as e:  # noqa: BLE001  (only braid's peer failures are handled)
            if not braid_torch.is_peer_failure(e):
                raise
            print(f"[rank {first_rank}] step {step}: {str(e).splitlines()[0][:200]}",
                  flush=True)
            step, shrinks = recover(step, params, last, shrinks, first_rank)
            continue  # the same global batch, split over the survivors
        with torch.no_grad():
            last = (step, [p.detach().clone() for p in params])
            offset = 0
            for p in params:
                n = p.numel()
                p -= LR * flat[offset:offset + n].view_as(p) / GLOBAL_BATCH
                offset += n
        if dist.get_rank() == 0 and step % 5 == 0:
            print(f"step {step:2d}  world {world}  loss {flat[-1].item() / GLOBAL_BATCH:.6f}",
                  flush=True)
        step += 1

    # The replicas applied the same updates: identical, bit for bit.
    weights = torch.cat([p.detach().reshape(-1) for p in params])
    lo, hi = weights.clone(), weights.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    assert torch.equal(lo, hi), "replicas diverged"
    if dist.get_rank() == 0:
        print(f"done: {STEPS} steps, {shrinks} shrink(s), final world {dist.get_world_size()}, "
              f"replicas identical", flush=True)
        if args.out:
            torch.save({"weight": model.weight.detach().clone(),
                        "bias": model.bias.detach().clone(),
                        "world": dist.get_world_size(), "shrinks": shrinks}, args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
