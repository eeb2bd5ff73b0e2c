"""Abort hooks over braid (tests/python/test_abort_hooks.py), 2 ranks:

- ProcessGroup.supports_abort_hooks is true; a second hook under one id and unregistering an
  unknown id raise; an unregistered hook never runs; successful operations run none.
- Rank 1 gives the group a 1 s timeout and all-reduces while rank 0 sleeps 4 s: rank 1's
  all_reduce fails with braid's Timeout and its hooks ran, in registration order, before the
  error reached the caller. Rank 0 (timeout 3 s) then fails within two all_reduces (rank 1
  gave up on the group), and its hooks ran the same way.
- abort() runs the hooks again before it aborts, and a hook that raises does not stop the next.

Prints "[rank R] PASS abort_hooks".
"""

import datetime
import os
import time

import torch
import torch.distributed as dist

import braid_torch  # noqa: F401  (registers the backend)


def main():
    rank = int(os.environ["RANK"])
    dist.init_process_group("braid", timeout=datetime.timedelta(seconds=30))
    pg = dist.group.WORLD
    assert pg.supports_abort_hooks
    calls = []
    pg.register_abort_hook(7, lambda: calls.append("first"))
    pg.register_abort_hook(8, lambda: calls.append("second"))
    pg.register_abort_hook(9, lambda: calls.append("unregistered"))
    for fn, text in [(lambda: pg.register_abort_hook(7, lambda: None), "registered already"),
                     (lambda: pg.unregister_abort_hook(42), "no hook with id 42")]:
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            assert text in str(e), e
        else:
            raise AssertionError(f"no error: {text}")
    pg.unregister_abort_hook(9)
    t = torch.ones(4)
    dist.all_reduce(t)
    dist.barrier()
    assert calls == [], calls

    # Rank 0 arrives late. Its first all_reduce may still complete: over shared memory rank 1's
    # contribution is in place before rank 1 gives up. The one after cannot.
    dist.set_timeout(datetime.timedelta(seconds=1 if rank == 1 else 3), pg)
    if rank == 0:
        time.sleep(4)
    msg = None
    for _ in range(1 if rank == 1 else 2):
        try:
            dist.all_reduce(t)
            print(f"[rank {rank}] all_reduce completed: {t.tolist()}", flush=True)
        except Exception as e:  # noqa: BLE001
            msg = str(e)
            break
    assert msg is not None, "the all_reduce did not fail"
    assert "braid Timeout" in msg or "braid PeerLost" in msg, msg
    assert calls == ["first", "second"], (calls, msg)

    def raising():
        calls.append("raising")
        raise RuntimeError("a hook that fails")

    pg.register_abort_hook(10, raising)
    pg.register_abort_hook(11, lambda: calls.append("after"))
    pg.abort()
    assert calls == ["first", "second", "first", "second", "raising", "after"], calls
    print(f"[rank {rank}] PASS abort_hooks", flush=True)


if __name__ == "__main__":
    main()
