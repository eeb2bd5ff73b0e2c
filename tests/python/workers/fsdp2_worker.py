"""FSDP2 (torch.distributed.fsdp.fully_shard) over braid on a small transformer: every rank
trains its shard of a deterministic global batch; the losses and the final parameters equal
single-process training on the whole global batch within float tolerance. Under the hood:
FSDP2's all_gather_into_tensor of the parameter shards and reduce_scatter_tensor of the
gradients, on a CPU DeviceMesh of the braid world."""

import copy

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from rank_util import Checks, init

STEPS = 6
BATCH = 4  # sequences per rank
SEQ = 8
DIM = 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(DIM, 4, batch_first=True)
        self.norm1 = nn.LayerNorm(DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))
        self.norm2 = nn.LayerNorm(DIM)

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(64, DIM)
        self.blocks = nn.ModuleList([Block() for _ in range(2)])
        self.head = nn.Linear(DIM, 64)

    def forward(self, tokens):
        x = self.embed(tokens)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def batch(step, world):
    g = torch.Generator().manual_seed(500 + step)
    tokens = torch.randint(0, 64, (world * BATCH, SEQ), generator=g)
    targets = torch.randint(0, 64, (world * BATCH, SEQ), generator=g)
    return tokens, targets


def loss_of(model, tokens, targets):
    return nn.functional.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())


def check_fsdp2_matches_one_process(rank, world):
    # SGD, not Adam: Adam divides by the gradient's running magnitude, so parameters whose true
    # gradient is zero (the attention's key bias) would amplify rounding noise into updates.
    torch.manual_seed(42)
    base = Transformer()
    reference = copy.deepcopy(base)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    model = copy.deepcopy(base)
    mesh = init_device_mesh("cpu", (world,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(STEPS):
        tokens, targets = batch(step, world)
        ref_opt.zero_grad()
        ref_loss = loss_of(reference, tokens, targets)
        ref_loss.backward()
        ref_opt.step()
        mine = slice(rank * BATCH, (rank + 1) * BATCH)
        opt.zero_grad()
        loss = loss_of(model, tokens[mine], targets[mine])
        loss.backward()  # FSDP2 reduce-scatters the gradients, averaged over ranks
        opt.step()
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss, op=dist.ReduceOp.AVG)
        torch.testing.assert_close(global_loss, ref_loss.detach(), rtol=1e-4, atol=1e-5,
                                   msg=lambda m: f"step {step} loss: {m}")
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        full = p.full_tensor()
        torch.testing.assert_close(full, q.detach(), rtol=1e-4, atol=1e-5,
                                   msg=lambda m: f"parameter {name}: {m}")


def main():
    rank, world = init("braid", timeout_s=120)
    torch.set_num_threads(1)
    checks = Checks(f"fsdp2 (world {world})")
    checks.run(check_fsdp2_matches_one_process, rank, world)
    checks.done()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
