"""torch.distributed.checkpoint over braid: a model sharded with FSDP2 (fully_shard) on this
world saves its state (sharded DTensors) with dcp.save, or loads a checkpoint another world size
saved, resharding it. Usage: dcp_worker.py save|load DIR. Every parameter is a deterministic
function of its name, so the loading ranks check the full tensors they reassemble against it."""

import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from rank_util import Checks, assert_equal, init


def model():
    return nn.Sequential(nn.Linear(13, 37), nn.ReLU(), nn.Linear(37, 5))


def reference(name, shape):
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    return torch.randn(shape, generator=g)


def sharded(world):
    m = model()
    mesh = init_device_mesh("cpu", (world,))
    for layer in m:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    return m


def check_save(rank, world, directory):
    m = sharded(world)
    with torch.no_grad():
        for name, p in m.named_parameters():
            full = reference(name, p.shape)
            p.copy_(torch.distributed.tensor.distribute_tensor(full, p.device_mesh, p.placements))
    dcp.save({"model": m.state_dict()}, checkpoint_id=directory)


def check_load(rank, world, directory):
    m = sharded(world)
    state = {"model": m.state_dict()}
    for v in state["model"].values():
        v.detach().zero_()
    dcp.load(state, checkpoint_id=directory)
    m.load_state_dict(state["model"])
    for name, p in m.named_parameters():
        assert_equal(p.full_tensor(), reference(name, p.shape), f"loaded {name}")
    # The loaded model computes: one step's all-gather and reduce-scatter run on braid.
    out = m(torch.ones(3, 13))
    out.sum().backward()
    assert all(p.grad is not None for p in m.parameters()), "gradients after the load"


def main():
    mode, directory = sys.argv[1], sys.argv[2]
    rank, world = init()
    checks = Checks(f"checkpoint {mode} (world {world})")
    checks.run(check_save if mode == "save" else check_load, rank, world, directory)
    dist.barrier()
    checks.done()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
