"""A job's end in the order it usually comes: rank 0, whose process serves torch's TCPStore
(env://), finishes and exits first; rank 1 finishes later, when that server is gone. Rank 1's
braid group must then end quietly (its store clean-up finds the server gone: no torch warning
with a C++ stack trace). sys.argv[1]: "implicit" (the group is left to the interpreter's exit)
or "destroy" (destroy_process_group after rank 0 has gone)."""

import os
import socket
import sys
import time

import torch
import torch.distributed as dist

import braid_torch  # noqa: F401  (registers the backend)
from rank_util import init

mode = sys.argv[1]
rank, world = init()
t = torch.ones(4)
dist.all_reduce(t)
assert t.tolist() == [float(world)] * 4, t
dist.barrier()
print(f"[rank {rank}] all_reduce done", flush=True)
if rank == 0:
    sys.exit(0)  # the interpreter's exit destroys the group and stops the store's server

# Until the store's server (rank 0's process) refuses connections.
address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
deadline = time.monotonic() + 60
while True:
    try:
        socket.create_connection(address, timeout=1).close()
    except ConnectionRefusedError:
        break
    assert time.monotonic() < deadline, "rank 0's store server did not go within 60 s"
    time.sleep(0.05)
print(f"[rank {rank}] the store's server has gone", flush=True)
if mode == "destroy":
    dist.destroy_process_group()
print(f"[rank {rank}] leaving", flush=True)
