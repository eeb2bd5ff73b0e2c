#!/usr/bin/env python3
"""Creating a braid group for torch: derived from the default group (shared connections) vs
through torch's store (sockets of its own), interleaved in one world (docs/pytorch.md, "Shared
connections"; docs/benchmarks.md).

    PYTHONPATH=python .venv/bin/python bench/torch_group_bench.py --ranks 4 --rounds 21

Starts `--ranks` processes (every pair over TCP: BRAID_SHM_DISABLE=1; eager connections, so
that the world's sockets are all made before the first round). Each round creates, on every
rank, a backend of all ranks both ways, the order alternating every round, each through the
creator braid_torch registers with torch (ProcessGroupBraid._create_group: with the default
group's backend as parent, or without, on a store prefix of its own), and times from a barrier
of the world to the end of the new group's first all_reduce of 8 bytes; the slowest rank counts.
Reported: the median over rounds of each, the median per-round ratio, and the data sockets
each way opened per creation (all ranks; braid_torch._C.tcp_sockets_opened()).
"""

import argparse
import datetime
import gc
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def rank_main(args):
    import braid_torch
    import torch
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    dist.init_process_group("braid", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    parent = braid_torch.backend_of()
    store = c10d._get_default_store()
    ranks = list(range(world))
    one = torch.ones(2)
    dist.all_reduce(one)
    times = {"shared": [], "own": []}
    sockets = {"shared": 0, "own": 0}
    keep = []  # the groups stay alive (as torch's would) until the end
    for i in range(args.rounds):
        order = ["shared", "own"] if i % 2 == 0 else ["own", "shared"]
        for way in order:
            dist.barrier()
            s0, t0 = braid_torch._C.tcp_sockets_opened(), time.perf_counter()
            pg = braid_torch.ProcessGroupBraid._create_group(
                c10d.PrefixStore(f"bench/{way}/{i}/", store), rank, world,
                datetime.timedelta(seconds=120), braid_torch.listen_address_for(), 1000,
                parent if way == "shared" else None, ranks, f"bench-{way}-{i}", "benchmark")
            pg.allreduce([one]).wait()
            times[way].append(time.perf_counter() - t0)
            sockets[way] += braid_torch._C.tcp_sockets_opened() - s0
            keep.append(pg)
    with open(args.out, "w") as f:
        json.dump({"times": times, "sockets": sockets}, f)
    for pg in keep:
        pg.shutdown()
    keep.clear()
    gc.collect()  # their communicators leave the store while every rank's store client is up
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank_main:
        rank_main(args)
        return
    tmp = Path(tempfile.mkdtemp(prefix="braid_group_bench_"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(args.ranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.ranks), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), BRAID_SHM_DISABLE="1", BRAID_CONNECT="eager",
                   OMP_NUM_THREADS="1")
        # The ranks' output goes to files (torch's store client warns at exit when rank 0's
        # store is gone first); shown when a rank fails.
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--rank-main", "--rounds", str(args.rounds),
             "--out", str(tmp / f"rank{r}.json")], env=env,
            stdout=open(tmp / f"rank{r}.log", "w"), stderr=subprocess.STDOUT))
    if [p.wait() for p in procs] != [0] * args.ranks:
        for r in range(args.ranks):
            print(f"----- rank {r}\n" + (tmp / f"rank{r}.log").read_text()[-4000:])
        sys.exit("a rank failed")
    res = [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(args.ranks)]
    slowest = {way: [max(res[r]["times"][way][i] for r in range(args.ranks))
                     for i in range(args.rounds)] for way in ("shared", "own")}
    for way in ("own", "shared"):
        sockets = sum(res[r]["sockets"][way] for r in range(args.ranks)) / args.rounds
        print(f"{way:7s} median {statistics.median(slowest[way]) * 1e3:7.2f} ms  "
              f"sockets per creation (all ranks) {sockets:.1f}")
    ratio = statistics.median(o / s for o, s in zip(slowest["own"], slowest["shared"]))
    print(f"median per-round ratio own/shared: {ratio:.2f}")


if __name__ == "__main__":
    main()
