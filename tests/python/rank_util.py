"""Rank-side helpers for the worker scripts: join the job, run named checks, fail fast.

A rank that fails a check prints the traceback and exits at once, so its peers see braid's
PeerLost error instead of waiting for a collective that will never come.
"""

import datetime
import os
import sys
import time
import traceback
import warnings

import torch
import torch.distributed as dist

import braid_torch  # noqa: F401  (registers the backend)

# torch 1.13 warns that _all_gather_base & co. are private/deprecated: the tests call them on
# purpose.
warnings.filterwarnings("ignore", category=UserWarning, module="torch.distributed")


def rank_and_size():
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def init(backend="braid", timeout_s=60):
    """init_process_group with the method the launcher chose (BRAID_TEST_INIT_METHOD)."""
    rank, world = rank_and_size()
    method = os.environ.get("BRAID_TEST_INIT_METHOD", "env://")
    timeout = datetime.timedelta(seconds=timeout_s)
    if method == "env://":
        dist.init_process_group(backend, timeout=timeout)
    else:
        dist.init_process_group(backend, init_method=method, rank=rank, world_size=world,
                                timeout=timeout)
    return rank, world


def run_scenario(scenarios, **init_kwargs):
    """A worker with one scenario per launch: sys.argv[1] names one of `scenarios` (name ->
    fn(rank, world)). Joins the job with init_process_group("braid", **init_kwargs), prints
    "[rank R] pid P" (tests find the ranks' pids in it), runs the scenario, prints
    "[rank R] PASS <name>" and destroys the default group."""
    scenario = sys.argv[1]
    rank, world = rank_and_size()
    dist.init_process_group("braid", **init_kwargs)
    print(f"[rank {rank}] pid {os.getpid()}", flush=True)
    scenarios[scenario](rank, world)
    print(f"[rank {rank}] PASS {scenario}", flush=True)
    dist.destroy_process_group()


class Checks:
    """Runs checks in order, the same on every rank; prints one line per check."""

    def __init__(self, name):
        self.name = name
        self.rank, self.world = rank_and_size()
        self.count = 0
        self.start = time.monotonic()

    def run(self, fn, *args, label=None):
        label = label or fn.__name__
        t0 = time.monotonic()
        try:
            fn(*args)
        except BaseException:  # noqa: BLE001  (report anything, then stop this rank)
            print(f"[rank {self.rank}] FAIL {self.name}: {label}", flush=True)
            traceback.print_exc()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)
        self.count += 1
        if self.rank == 0:
            print(f"ok {label} ({time.monotonic() - t0:.2f}s)", flush=True)

    def done(self):
        if self.rank == 0:
            print(f"{self.name}: {self.count} checks passed in "
                  f"{time.monotonic() - self.start:.1f}s", flush=True)


def assert_equal(actual, expected, what, rtol=None, atol=None):
    if not isinstance(expected, torch.Tensor):
        expected = torch.tensor(expected)
    expected = expected.to(actual.dtype) if expected.dtype != actual.dtype else expected
    if actual.shape != expected.shape:
        raise AssertionError(f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}")
    if actual.is_floating_point() or actual.is_complex():
        kw = {}
        if rtol is not None:
            kw = dict(rtol=rtol, atol=atol if atol is not None else 0.0)
        torch.testing.assert_close(actual, expected, msg=lambda m: f"{what}: {m}", **kw)
    elif not torch.equal(actual, expected):
        bad = (actual != expected).nonzero()[:5].tolist()
        raise AssertionError(f"{what}: differs at {bad}: got {actual.flatten()[:8].tolist()}, "
                             f"expected {expected.flatten()[:8].tolist()}")


def expect_error(fn, pattern, what):
    """fn() must raise RuntimeError/ValueError whose message contains `pattern`."""
    try:
        fn()
    except (RuntimeError, ValueError) as e:
        if pattern.lower() not in str(e).lower():
            raise AssertionError(f"{what}: error {e!r} does not mention {pattern!r}") from e
        return e
    raise AssertionError(f"{what}: no error raised")
