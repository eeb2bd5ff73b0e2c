"""torch's groups share the default group's connections (workers/shared_groups_worker.py,
docs/pytorch.md "Shared connections"), at 4 ranks, every pair over TCP: new_group, new_subgroups
and split_group of a braid default group open no socket and give the right values, also from two
threads at once and across destroy_process_group; with BRAID_SHARE_CONNECTIONS=0, and with a
gloo default group, they bootstrap through torch's store with sockets of their own. braid's
INFO line says which path each group took. One launch runs the three phases (torch's import
dominates a launch on a loaded machine). On shared memory (every pair on this host's segment),
the same groups make no segment of their own: each takes a lane group of the default group's."""

from pathlib import Path

from launch import launch

WORKER = Path(__file__).resolve().parent / "workers" / "shared_groups_worker.py"

PATHS = {
    "share": "shares the connections of braid communicator",
    "noshare": "connections of its own, bootstrapped through torch's store (Comm::create): "
               "BRAID_SHARE_CONNECTIONS=0",
    "gloo": "connections of its own, bootstrapped through torch's store (Comm::create): "
            "the default group's CPU backend is not braid",
}


def test_shared_groups():
    result = launch(4, WORKER, init="env", timeout=150,
                    env={"BRAID_TEST_MODES": ",".join(PATHS), "BRAID_SHM_DISABLE": "1",
                         "BRAID_DEBUG": "INFO"})
    assert result.ok, result.report()
    for mode in PATHS:
        assert f"shared groups ({mode}): 6 checks passed" in result.outputs[0], result.report()
    for rank, out in enumerate(result.outputs):
        # Every subgroup's line (the default groups say "the default group (...)").
        lines = [line for line in out.splitlines()
                 if "torch group '" in line and "the default group (" not in line]
        for mode, path in PATHS.items():
            assert any(path in line for line in lines), (
                f"rank {rank}: no group logged '{path}' ({mode}):\n" + "\n".join(lines))
        assert all(any(p in line for p in PATHS.values()) for line in lines), "\n".join(lines)


def test_shared_groups_on_shared_memory():
    result = launch(4, WORKER, init="env", timeout=150,
                    env={"BRAID_TEST_MODES": "share", "BRAID_TEST_SHM": "1",
                         "BRAID_SHM_DISABLE": "0", "BRAID_DEBUG": "INFO"})
    assert result.ok, result.report()
    assert "shared groups (share): 6 checks passed" in result.outputs[0], result.report()
