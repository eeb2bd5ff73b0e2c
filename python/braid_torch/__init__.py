"""braid as a torch.distributed backend.

Importing this package registers the backend ``"braid"``::

    import braid_torch  # noqa: F401  (registers the backend)
    import torch.distributed as dist
    dist.init_process_group("braid")  # env://, tcp://, file:// or an explicit store

Rendezvous goes through torch's store (only to bootstrap); data goes over braid's transports.
See docs/pytorch.md for what is supported, how it maps onto braid, and measured results.
"""

import datetime
import inspect
import ipaddress
import os
import socket
import sys

import torch
import torch.distributed as dist

from . import _C

__all__ = ["ProcessGroupBraid", "BACKEND_NAME", "braid_version", "listen_address_for",
           "backend_of", "FusionBuffer", "shrink", "is_peer_failure"]

BACKEND_NAME = "braid"
ProcessGroupBraid = _C.ProcessGroupBraid
braid_version = _C.braid_version
__version__ = _C.braid_version()

# The address chosen for the default group is reused by its subgroups (same host, same network).
_chosen_listen_address = None


def _local_address_towards(host):
    """The address of this host that routes to `host` ("" when it cannot be found)."""
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_DGRAM)
    except OSError:
        return ""
    for *_, sockaddr in infos:
        ip = sockaddr[0]
        if ipaddress.ip_address(ip).is_loopback:
            return "127.0.0.1"
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((ip, 9))  # UDP connect sends nothing; it only picks the route
                return s.getsockname()[0]
        except OSError:
            continue
    return ""


def _rendezvous_host():
    """The host the ranks met at, if this process can tell: torchrun/braid-run's MASTER_ADDR, or
    the tcp:// init_method of the init_process_group call being executed."""
    if os.environ.get("MASTER_ADDR"):
        return os.environ["MASTER_ADDR"]
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "init_process_group":
            init_method = frame.f_locals.get("init_method") or ""
            if init_method.startswith("tcp://"):
                return init_method[len("tcp://"):].rsplit(":", 1)[0].strip("[]")
            break
        frame = frame.f_back
    return ""


def listen_address_for(host=None):
    """The address braid listens on for peers: BRAID_LISTEN_ADDR, else the local address that
    routes to the rendezvous host, else 127.0.0.1 (single host)."""
    if os.environ.get("BRAID_LISTEN_ADDR"):
        return os.environ["BRAID_LISTEN_ADDR"]
    host = host if host is not None else _rendezvous_host()
    return (_local_address_towards(host) if host else "") or "127.0.0.1"


def _create_backend(store, rank, world_size, timeout, parent=None, global_ranks=(), name="",
                    why="torch did not say the group's global ranks (register_backend without "
                        "extended_api)", enable_reconfigure=False):
    """The creator torch.distributed calls for each group using backend "braid" (torch's plain
    API: store, rank, size, timeout; _create_backend_extended passes the rest). With `parent`
    (the default group's ProcessGroupBraid) the group is derived from its communicator and
    shares its connections; otherwise it bootstraps through the store with sockets of its own
    (`why` says why, in the line logged at BRAID_DEBUG=INFO). With `enable_reconfigure` it has
    no communicator until torch.distributed._reconfigure() (docs/pytorch.md, "Reconfigure")."""
    global _chosen_listen_address
    if _chosen_listen_address is None:
        _chosen_listen_address = listen_address_for()
    if not isinstance(timeout, datetime.timedelta):
        timeout = datetime.timedelta(seconds=float(timeout))
    grace_us = int(os.environ.get("BRAID_TORCH_GRACE_US", "1000"))
    return ProcessGroupBraid._create_group(store, rank, world_size, timeout,
                                           _chosen_listen_address, grace_us, parent,
                                           list(global_ranks), str(name), why,
                                           bool(enable_reconfigure))


def _sharing_parent(global_ranks, group_rank):
    """The ProcessGroupBraid a new group of `global_ranks` can be derived from (the default
    group's, sharing its connections), or None and why not."""
    from torch.distributed import distributed_c10d as c10d
    if not global_ranks:
        return None, "the default group (its connections are the ones its subgroups share)"
    if not dist.is_initialized():
        return None, "no default group in this process"
    default = c10d._get_default_group()
    try:
        parent = backend_of(default)
    except ValueError:
        return None, "the default group's CPU backend is not braid"
    if not parent.initialized:
        return None, "the default group has no communicator yet (enable_reconfigure=True)"
    if not parent.shares_connections:
        return None, "BRAID_SHARE_CONNECTIONS=0"
    if not 0 <= group_rank < len(global_ranks) or global_ranks[group_rank] != default.rank():
        return None, (f"torch's global ranks {list(global_ranks)} do not list this rank "
                      f"({default.rank()}) at its group rank {group_rank}")
    return parent, ""


def _create_backend_extended(opts, backend_options=None):
    """The creator under torch's extended backend API: `opts` (_DistributedBackendOptions) also
    carries the group's name and global ranks, so a subgroup of a braid default group is
    derived from the default group's communicator (docs/pytorch.md, "Shared connections")."""
    global_ranks = list(getattr(opts, "global_ranks_in_group", None) or [])
    enable_reconfigure = bool(getattr(opts, "enable_reconfigure", False))
    if enable_reconfigure:
        parent, why = None, "enable_reconfigure=True (members meet through the store)"
    else:
        parent, why = _sharing_parent(global_ranks, opts.group_rank)
    return _create_backend(opts.store, opts.group_rank, opts.group_size, opts.timeout,
                           parent=parent, global_ranks=global_ranks,
                           name=getattr(opts, "group_id", "") or "", why=why,
                           enable_reconfigure=enable_reconfigure)


def backend_of(group=None):
    """The ProcessGroupBraid serving `group` (default: the world), for its braid-specific
    properties (timeout, comm_id, listen_address, selected_algorithm). torch 1.x hands the
    backend object itself to the user as the group; torch 2.x wraps it in a ProcessGroup."""
    from torch.distributed import distributed_c10d as c10d
    pg = c10d._get_default_group() if group is None or group is dist.group.WORLD else group
    if isinstance(pg, ProcessGroupBraid):
        return pg
    get = getattr(pg, "_get_backend", None)
    if get is not None:
        backend = get(torch.device("cpu"))
        if isinstance(backend, ProcessGroupBraid):
            return backend
    raise ValueError(f"{pg!r} is not served by the braid backend")


def shrink(group=None):
    """Keep going after a rank died: every live rank of `group` (default: the world) calls it,
    e.g. after a collective failed with braid's PeerLost or Timeout. braid agrees through the
    store on which ranks are alive (braid::Comm::shrink, docs/reliability.md) and this returns
    a new ProcessGroup of exactly those, renumbered 0..n-1 in their old order, registered with
    torch like torch.distributed.shrink_group's result (which it is: shrink_group is called with
    the ranks braid left out). `group` is destroyed; if it was the default group, the result is
    the new default group and torch destroys every other group (ranks are renumbered).
    A rank the others left out (it came after the group's timeout) gets RuntimeError
    "braid PeerLost: ... this rank was left out"."""
    from torch.distributed import distributed_c10d as c10d
    if not hasattr(dist, "shrink_group"):
        raise RuntimeError(f"braid_torch.shrink needs torch.distributed.shrink_group "
                           f"(torch >= 2.15), and this is torch {torch.__version__}")
    backend = backend_of(group)
    target = c10d._get_default_group() if group is None or group is dist.group.WORLD else group
    left_out = backend._agree_shrink()
    if left_out:
        kept = [g for i, g in enumerate(dist.get_process_group_ranks(target))
                if i not in set(left_out)]
        new = dist.shrink_group(left_out, group=group)
        if dist.get_process_group_ranks(new) != kept:
            # torch 2.15's shrink_group removes the excluded *group* ranks from the list of
            # *global* ranks: wrong for a subgroup whose ranks are not 0..n-1. The right map:
            c10d._world.pg_group_ranks[new] = {g: i for i, g in enumerate(kept)}
        return new
    # Nobody was left out (e.g. the group was revoked after a timeout or a mismatch, and every
    # rank is alive): shrink_group refuses an empty list; its own steps make the same group.
    info = c10d._prepare_shrink_target_group(group)
    return c10d._finalize_shrunk_group(info, set(), backend.shrink([], 0, None))


def is_peer_failure(error):
    """True when `error` (an exception from a collective or Work.wait()) is braid's sign that
    the group can only go on shrunk: PeerLost (a rank died, or the group was revoked) or
    Timeout."""
    text = str(error)
    return "braid PeerLost" in text or "braid Timeout" in text


_OP_NAMES = {"sum": "sum", "avg": "avg", "product": "prod", "prod": "prod", "min": "min",
             "max": "max"}


def _op_name(op):
    if isinstance(op, str):
        name = _OP_NAMES.get(op.lower())
        if name is None:
            raise ValueError(f"unknown reduce op {op!r} (sum, avg, prod, min, max)")
        return name
    for name, value in (("sum", dist.ReduceOp.SUM), ("avg", getattr(dist.ReduceOp, "AVG", None)),
                        ("prod", dist.ReduceOp.PRODUCT), ("min", dist.ReduceOp.MIN),
                        ("max", dist.ReduceOp.MAX)):
        if value is not None and op == value:
            return name
    raise ValueError(f"braid's FusionBuffer does not support {op!r} (SUM, AVG, PRODUCT, MIN, MAX)")


class FusionBuffer:
    """braid's C++ fusion buffer (braid::train::FusionBuffer) over a braid process group: many
    small in-place all-reduces packed into few (docs/training.md).

    Collective: every rank of the group constructs it at the same point (it splits off a braid
    communicator of its own, so the group stays free for other collectives). Every rank must
    then add() the same tensors (numel, dtype, op) in the same order. A thread of the buffer
    sends what is queued once ``threshold_bytes`` are queued, once the oldest tensor waited
    ``cycle_time_ms``, or on flush()/synchronize(); tensors of equal (dtype, op) are packed into
    all-reduces of at most ``threshold_bytes`` (a larger tensor goes alone).

    threshold_bytes / cycle_time_ms: default BRAID_FUSION_THRESHOLD (64M) / BRAID_CYCLE_TIME
    (1 ms), as read when the process group was created (docs/env.md).
    """

    def __init__(self, process_group=None, threshold_bytes=None, cycle_time_ms=None):
        self._impl = _C.FusionBuffer(backend_of(process_group),
                                     None if threshold_bytes is None else int(threshold_bytes),
                                     None if cycle_time_ms is None else float(cycle_time_ms))

    def add(self, tensor, op=dist.ReduceOp.SUM):
        """Queues an in-place all-reduce of a CPU tensor (any dtype braid reduces; contiguous or
        not). Returns a torch Future completed with `tensor` once its result is in place, or
        with the error. Leave the tensor alone until then."""
        return self._impl.add(tensor, _op_name(op))

    def flush(self):
        """Sends what is queued now (does not wait)."""
        self._impl.flush()

    def synchronize(self):
        """flush() and wait for every tensor added so far; raises the first failure."""
        self._impl.synchronize()

    def close(self):
        """Sends and waits for what is queued, then stops the buffer (also on garbage
        collection). Idempotent."""
        self._impl.close()

    def stats(self):
        """{"tensors", "allreduces", "rounds", "bytes"}: completed tensors, data all-reduces
        issued, negotiation rounds, bytes all-reduced."""
        return self._impl.stats()

    @property
    def threshold_bytes(self):
        return self._impl.threshold_bytes

    @property
    def cycle_time_ms(self):
        return self._impl.cycle_time_ms

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _register():
    if BACKEND_NAME.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    kwargs = {}
    params = inspect.signature(dist.Backend.register_backend).parameters
    if "devices" in params:  # torch >= 2.1: the backend serves CPU tensors only
        kwargs["devices"] = ["cpu"]
    creator = _create_backend
    if "extended_api" in params and hasattr(dist.distributed_c10d, "_DistributedBackendOptions"):
        # The group's name and global ranks come with it: subgroups share connections.
        kwargs["extended_api"] = True
        creator = _create_backend_extended
    dist.Backend.register_backend(BACKEND_NAME, creator, **kwargs)
    # torch 2.15 attaches its generic FlightRecorder hook (a Python-visible pre/post hook on
    # every operation) to the groups of every out-of-tree backend; on an 8-byte all_reduce it
    # costs about as much as the rest of torch's dispatch (docs/pytorch.md, "Per-call
    # overhead"). braid records every operation in its own flight recorder
    # (BRAID_FLIGHT_RECORDER, dumped on failure and on SIGUSR1, docs/env.md), so braid's groups
    # are treated as self-recording, as gloo's are, unless torch's recorder is asked for
    # explicitly (TORCH_FR_BUFFER_SIZE or TORCH_NCCL_TRACE_BUFFER_SIZE set, as torch reads them).
    self_recording = getattr(dist.distributed_c10d, "_FR_SELF_RECORDING_BACKENDS", None)
    if self_recording is not None and not (os.environ.get("TORCH_FR_BUFFER_SIZE")
                                           or os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE")):
        self_recording.add(BACKEND_NAME)


_register()
