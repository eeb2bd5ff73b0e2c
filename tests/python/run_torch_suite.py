#!/usr/bin/env python3
"""Runs PyTorch's own distributed test suite (torch/testing/_internal/distributed/
distributed_test.py, shipped in the torch wheel) against backend "braid", or "gloo" for
comparison, at several world sizes, and summarises every test's outcome.

    PYTHONPATH=python .venv/bin/python tests/python/run_torch_suite.py --quick
    PYTHONPATH=python .venv/bin/python tests/python/run_torch_suite.py --full \
        --backend braid --world-sizes 2,3,4 --json /tmp/braid-suite.json
    PYTHONPATH=python .venv/bin/python tests/python/run_torch_suite.py --full --backend gloo
    .venv/bin/python tests/python/run_torch_suite.py --summarize A.json B.json ...  # markdown

--quick runs a fixed subset (every collective, p2p, any-source, async, DDP) at world size 2 in
well under a minute on 2 cores: the CI mode. --full runs all 279 tests at each world size
(minutes per world size with the default --start fork; about an hour with --start spawn).
Exit status: 0 when nothing failed.

How the suite is wired to braid (what test/distributed/test_distributed_spawn.py does upstream,
which Debian does not ship): BACKEND and WORLD_SIZE are set; the `expecttest` module Debian
lacks is stubbed; braid_torch is imported (registering the backend) and "braid" is added to the
suite's "plugin", "ddp" and "subgroup" feature sets before distributed_test is imported; each
test spawns WORLD_SIZE processes that init_process_group("braid", file://...).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import types
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

# The CI ("quick") mode: a subset that runs in the native mode and touches every collective the
# suite enables there, p2p (tags, any source), async, and DDP; well under a minute with fork.
QUICK_TESTS = [
    "test_all_reduce_sum", "test_all_reduce_sum_async", "test_all_reduce_product",
    "test_all_reduce_complex_unsupported_ops", "test_broadcast", "test_reduce_sum",
    "test_all_gather", "test_all_gather_coalesced_simple", "test_gather", "test_scatter",
    "test_barrier", "test_send_recv", "test_send_recv_any_source", "test_send_recv_with_tag",
    "test_isend", "test_DistributedDataParallelCPU",
]


# Skip reasons of CPU tests the suite reserves for MPI although nothing in them is MPI-specific.
MPI_ONLY_CPU = ("Only MPI supports CPU all_to_all_single", "Only MPI supports all_to_all")


# ---------------------------------------------------------------- worker side (one world size)

def _stub_expecttest():
    """Debian's python3-torch lacks the expecttest package that common_utils imports; the
    distributed suite does not use expect-files, so a minimal stand-in is enough."""
    if "expecttest" in sys.modules:
        return
    try:
        import expecttest  # noqa: F401
        return
    except ImportError:
        pass
    stub = types.ModuleType("expecttest")
    stub.ACCEPT = False

    class TestCase(unittest.TestCase):
        def assertExpectedInline(self, actual, expect, skip=0):  # noqa: N802
            self.assertEqual(actual, expect)

    stub.TestCase = TestCase
    sys.modules["expecttest"] = stub


def _setup_suite():
    """Defines TestDistBackendWithSpawn in this module (also in the spawned rank processes,
    which import this file again as __mp_main__)."""
    _stub_expecttest()
    sys.argv = sys.argv[:1]  # common_utils parses the command line at import
    backend = os.environ["BACKEND"]
    as_gloo = os.environ.get("BRAID_SUITE_AS_GLOO") == "1"
    import torch
    if as_gloo:
        _serve_gloo_groups_with_braid()
    if backend == "braid":
        sys.path.insert(0, str(REPO / "python"))
        import braid_torch  # noqa: F401  (registers the backend)
        from torch.testing._internal.common_distributed import DistTestCases
        for feature in ("plugin", "ddp", "subgroup"):
            DistTestCases.backend_feature[feature].add("braid")
    # The suite turns on DDP's experimental ReplicatedTensor mode in every rank, which imports
    # torch.distributed._shard: that package does not import under Python 3.11 in torch 1.13
    # (a dataclass with a mutable default). Plain DDP is what users run; test that, on every
    # backend alike.
    try:  # torch 1.13 only; torch 2.x has no ReplicatedTensor mode
        import torch.nn.parallel._replicated_tensor_ddp_utils as replicated
        replicated._set_ddp_with_replicated_tensor = lambda value: None
    except ImportError:
        pass
    from torch.testing._internal.distributed import distributed_test as dt
    if as_gloo:
        # Profiler events are named after the real backend ("braid:all_reduce", checked in the
        # native mode); here the suite would look for "gloo:...".
        for allowlist in (dt.PROFILING_SUPPORTED_BACKENDS, dt.CUDA_PROFILING_SUPPORTED_BACKENDS,
                          dt.SEND_RECV_PROFILING_SUPPORTED_BACKENDS):
            while "gloo" in allowlist:
                allowlist.remove("gloo")
    if backend == "braid" and os.environ.get("BRAID_SUITE_PROFILING", "1") == "1":
        # braid records profiler events for its collectives like gloo does ("braid:all_reduce")
        for allowlist in (dt.PROFILING_SUPPORTED_BACKENDS, dt.SEND_RECV_PROFILING_SUPPORTED_BACKENDS):
            allowlist.append("braid")

    class TestDistBackendWithSpawn(dt.TestDistBackend, dt.DistributedTest._DistTestBase):
        def setUp(self):
            super().setUp()
            if os.environ.get("BRAID_SUITE_START", "spawn") == "fork":
                # Much faster (no re-import of torch and the suite per rank); the rank
                # processes inherit this parent, which never touched a process group.
                self._start_processes(torch.multiprocessing.get_context("fork").Process)
            else:
                self._spawn_processes()
            torch.backends.cudnn.flags(enabled=False).__enter__()

    if os.environ.get("BRAID_SUITE_UNGATE") == "1":
        # The suite runs its CPU all_to_all tests for MPI only; their bodies are
        # backend-agnostic and braid implements all_to_all(_single): run them.
        for name in dir(TestDistBackendWithSpawn):
            fn = getattr(TestDistBackendWithSpawn, name)
            if name.startswith("test_") and getattr(fn, "__unittest_skip_why__", "") in MPI_ONLY_CPU:
                fn.__unittest_skip__ = False

    TestDistBackendWithSpawn.__module__ = __name__
    TestDistBackendWithSpawn.__qualname__ = "TestDistBackendWithSpawn"
    globals()["TestDistBackendWithSpawn"] = TestDistBackendWithSpawn
    return TestDistBackendWithSpawn


def _serve_gloo_groups_with_braid():
    """--as-gloo: the suite runs with BACKEND=gloo, so every test it enables for gloo runs, but
    every group torch.distributed would create with ProcessGroupGloo is a braid group. Only the
    helper group of TORCH_DISTRIBUTED_DEBUG=DETAIL's wrapper stays gloo (it checks collectives
    with gloo's monitored barrier, a debugging aid outside the backend under test)."""
    import inspect

    sys.path.insert(0, str(REPO / "python"))
    import braid_torch
    import torch.distributed.distributed_c10d as c10d

    if hasattr(c10d.Backend, "_ensure_backend_registered"):  # torch 2.x registers lazily
        c10d.Backend._ensure_backend_registered("gloo")
    plugins = getattr(c10d.Backend, "_plugins", {})
    if "GLOO" in plugins and hasattr(c10d.Backend, "_BackendPlugin"):
        # torch 2.x: groups are made by the registered creator (extended API: subgroups share
        # the default group's connections, as under "braid"); the wrapper's helper group calls
        # ProcessGroupGloo directly and so stays gloo.
        plugins["GLOO"] = c10d.Backend._BackendPlugin(braid_torch._create_backend_extended, True)
        # Not BackendType.GLOO: torch 2.15's DDP logger casts a GLOO-typed backend to
        # ProcessGroupGloo to read its settings (a segfault on a braid backend).
        c10d.Backend.backend_type_map["gloo"] = c10d.ProcessGroup.BackendType.CUSTOM
        return

    real_gloo = c10d.ProcessGroupGloo

    def braid_in_place_of_gloo(store, rank, world_size, timeout=c10d.default_pg_timeout):
        caller = inspect.currentframe().f_back.f_code.co_name
        if caller == "_create_process_group_wrapper":
            return real_gloo(store, rank, world_size, timeout=timeout)
        return braid_torch._create_backend(store, rank, world_size, timeout)

    c10d.ProcessGroupGloo = braid_in_place_of_gloo


class _Recorder(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.records = []
        self._t0 = {}

    def startTest(self, test):  # noqa: N802
        self._t0[test.id()] = time.monotonic()
        super().startTest(test)

    out_json = None  # rewritten after every test, so a run stopped by --timeout keeps its results

    def _add(self, test, outcome, detail=""):
        name = test.id().split(".")[-1]
        seconds = time.monotonic() - self._t0.get(test.id(), time.monotonic())
        if len(detail) > 6000:  # keep the message (first) and the end; C++ frames sit between
            detail = detail[:3000] + "\n...\n" + detail[-3000:]
        self.records.append({"test": name, "outcome": outcome, "detail": detail,
                             "seconds": round(seconds, 2)})
        if self.out_json:
            Path(self.out_json).write_text(json.dumps(self.records, indent=1))

    def addSuccess(self, test):  # noqa: N802
        super().addSuccess(test)
        self._add(test, "pass")

    def addFailure(self, test, err):  # noqa: N802
        super().addFailure(test, err)
        self._add(test, "fail", self._exc_info_to_string(err, test))

    def addError(self, test, err):  # noqa: N802
        super().addError(test, err)
        self._add(test, "error", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):  # noqa: N802
        super().addSkip(test, reason)
        self._add(test, "skip", reason)

    def addExpectedFailure(self, test, err):  # noqa: N802
        super().addExpectedFailure(test, err)
        self._add(test, "xfail")

    def addUnexpectedSuccess(self, test):  # noqa: N802
        super().addUnexpectedSuccess(test)
        self._add(test, "pass")


def _worker(tests, out_json):
    cls = _setup_suite()
    names = sorted(n for n in dir(cls) if n.startswith("test_"))
    if tests:
        wanted = set(tests)
        names = [n for n in names if n in wanted]
    suite = unittest.TestSuite(cls(n) for n in names)
    _Recorder.out_json = out_json
    runner = unittest.TextTestRunner(resultclass=_Recorder, verbosity=2, stream=sys.stderr)
    result = runner.run(suite)
    Path(out_json).write_text(json.dumps(result.records, indent=1))
    return 0 if result.wasSuccessful() else 1


if os.environ.get("BRAID_SUITE_WORKER") == "1" and __name__ != "__main__":
    _setup_suite()  # a spawned rank process: the test class must exist before unpickling


# ---------------------------------------------------------------- driver

CUDA_PATTERNS = ("cuda", "gpu", "nccl", "CUDA", "GPU", "NCCL")


def _skip_reason(record, log_text):
    """The child-level skip reason, when the suite only reported a generic skip."""
    detail = record["detail"]
    if "subprocess level" in detail:
        m = re.search(r"skipping test %s for following reason: (.*)" % re.escape(record["test"]),
                      log_text)
        if m:
            return m.group(1).strip()
    return detail


def _list_tests():
    env = dict(os.environ, BRAID_SUITE_WORKER="1", BACKEND="gloo", WORLD_SIZE="2",
               PYTHONPATH=str(REPO / "python"))
    code = ("import sys; sys.path.insert(0, %r); import run_torch_suite as r; "
            "c = r.TestDistBackendWithSpawn; print('\\n'.join(sorted(n for n in dir(c) "
            "if n.startswith('test_'))))" % str(HERE))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    return out.stdout.split()


def run_world(backend, world, tests, timeout, log_dir, as_gloo=False, start="fork",
              ungate=False):
    label = "braid-as-gloo" if as_gloo else backend
    out_json = Path(log_dir) / f"{label}-w{world}.json"
    log_path = Path(log_dir) / f"{label}-w{world}.log"
    env = dict(os.environ, BRAID_SUITE_WORKER="1", BACKEND="gloo" if as_gloo else backend,
               WORLD_SIZE=str(world), BRAID_SUITE_AS_GLOO="1" if as_gloo else "0",
               BRAID_SUITE_START=start, BRAID_SUITE_UNGATE="1" if ungate else "0",
               PYTHONPATH=os.pathsep.join([str(REPO / "python"), str(HERE)]),
               OMP_NUM_THREADS="1",
               # Read by the suite's decorators at import: the tests use file:// (each test's
               # setUp sets the real path), and the timeout tests are gated on it.
               INIT_METHOD="file:///tmp/braid-suite-init")
    env.setdefault("DISTRIBUTED_TESTS_DEFAULT_TIMEOUT", "120")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--json", str(out_json),
           *tests]
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        try:
            subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout,
                           cwd=str(REPO))
        except subprocess.TimeoutExpired:
            print(f"  world {world}: stopped after {timeout}s (--timeout)", flush=True)
    records = json.loads(out_json.read_text()) if out_json.exists() else []
    log_text = log_path.read_text(errors="replace")
    for r in records:
        if r["outcome"] == "skip":
            r["detail"] = _skip_reason(r, log_text)
    return records, time.monotonic() - t0, log_path


def _brief(detail):
    """The exception line of a child's traceback (the suite nests them in its own)."""
    lines = [l.strip() for l in detail.strip().splitlines() if l.strip()]
    lines = [l for l in lines if not l.startswith(("frame #", "File ", "Exception raised from"))]
    for l in reversed(lines):
        if re.match(r"^(\w+\.)*\w*(Error|Exception)\b:", l) and "exited with error code" not in l:
            return l[:300]
    for l in reversed(lines):
        if "Error" in l or "error" in l or "assert" in l.lower():
            return l[:300]
    return (lines[-1] if lines else "")[:300]


GPU_ONLY = re.compile(r"CUDA|GPU|cuda|gpu|Nccl|NCCL|nccl|multigpu|peer access|ROCm",)


def summarize(paths):
    """Markdown summary of --json files: counts per run, then every test that did not pass on
    braid in any run, with its outcome per world size and the reason."""
    runs = []
    for p in paths:
        data = json.loads(Path(p).read_text())
        label = ("braid (as gloo)" if data.get("as_gloo") else data["backend"])
        runs.append((label, data["worlds"]))
    out = ["| run | world size | pass | fail | skip | total |", "|---|---|---|---|---|---|"]
    for label, worlds in runs:
        for w, recs in sorted(worlds.items()):
            n = {k: sum(1 for r in recs if r["outcome"] == k) for k in ("pass", "skip")}
            bad = sum(1 for r in recs if r["outcome"] in ("fail", "error"))
            out.append(f"| {label} | {w} | {n['pass']} | {bad} | {n['skip']} | {len(recs)} |")
    # Per test: outcomes in every run.
    table = {}
    for label, worlds in runs:
        for w, recs in worlds.items():
            for r in recs:
                table.setdefault(r["test"], {})[(label, w)] = r
    braid_runs = [(l, w) for l, ws in runs for w in ws if l.startswith("braid")]
    gpu_only, not_braid = [], []
    for test in sorted(table):
        cells = table[test]
        failed = any(cells.get(k, {}).get("outcome") in ("fail", "error") for k in braid_runs)
        if not failed and any(cells.get(k, {}).get("outcome") == "pass" for k in braid_runs):
            continue
        reasons = {c["detail"].strip().splitlines()[-1][:160] if c["detail"].strip() else ""
                   for c in cells.values() if c["outcome"] != "pass"}
        skipped_everywhere = all(c["outcome"] == "skip" for c in cells.values())
        # Skipped everywhere, for a GPU reason at least once (other reasons, such as the world
        # size, may come first at a given size): it cannot run on a machine without CUDA.
        if skipped_everywhere and (any(GPU_ONLY.search(x) for x in reasons) or "cuda" in test):
            gpu_only.append(test)
        else:
            not_braid.append(test)
    out.append("")
    out.append(f"Tests that need CUDA, GPUs or NCCL (skipped by every run): {len(gpu_only)}.")
    out.append("")
    out.append("Every other test that failed in a braid run or passed in none:")
    out.append("")
    cols = [f"{l} w{w}" for l, ws in runs for w in sorted(ws)]
    out.append("| test | " + " | ".join(cols) + " | reason |")
    out.append("|---|" + "---|" * len(cols) + "---|")
    short = {"pass": "pass", "skip": "skip", "fail": "FAIL", "error": "FAIL"}
    for test in not_braid:
        cells = table[test]
        row = []
        reason, failure = "", False
        for l, ws in runs:
            for w in sorted(ws):
                c = cells.get((l, w))
                row.append(short.get(c["outcome"], "?") if c else "-")
                if c and l.startswith("braid") and c["outcome"] != "pass":
                    # a failure's message wins over a skip reason; else the largest world size
                    if c["outcome"] != "skip":
                        reason = _brief(c["detail"])
                        failure = True
                    elif not failure:
                        reason = c["detail"].strip()
        out.append(f"| {test} | " + " | ".join(row) + f" | {reason[:200]} |")
    return "\n".join(out)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--summarize":
        print(summarize(sys.argv[2:]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="braid", choices=["braid", "gloo"])
    ap.add_argument("--as-gloo", action="store_true",
                    help="with --backend braid: run the suite as for gloo (BACKEND=gloo), so "
                         "every test it enables for gloo runs, with braid serving every group")
    ap.add_argument("--world-sizes", default=None,
                    help="comma-separated (default: 2 in --quick, 2,3,4 in --full)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="CI subset (default)")
    mode.add_argument("--full", action="store_true", help="every test of the suite")
    ap.add_argument("--keep-gates", action="store_true",
                    help="braid: keep the suite's MPI-only gate on its CPU all_to_all tests "
                         "(by default they run: nothing in them is MPI-specific)")
    ap.add_argument("--start", choices=["fork", "spawn"], default="fork",
                    help="how rank processes start: fork (default; ~10x faster: no re-import of "
                         "torch per rank) or spawn (what upstream's test_distributed_spawn does)")
    ap.add_argument("-k", "--filter", default=None, help="only tests whose name matches this regex")
    ap.add_argument("--timeout", type=int, default=None,
                    help="bound on each world size's run in seconds (default: 170 quick, none full)")
    ap.add_argument("--json", default=None, help="write all records here")
    ap.add_argument("--log-dir", default=None, help="keep per-world logs here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("tests", nargs="*", help="explicit test names")
    args = ap.parse_args()

    if args.worker:
        sys.argv = sys.argv[:1]
        return _worker(args.tests, args.json)

    quick = not args.full
    worlds = [int(w) for w in (args.world_sizes or ("2" if quick else "2,3,4")).split(",")]
    tests = args.tests or (QUICK_TESTS if quick else [])
    if args.filter:
        tests = [t for t in (tests or _list_tests()) if re.search(args.filter, t)]
    timeout = args.timeout or (170 if quick else None)
    log_dir = args.log_dir or tempfile.mkdtemp(prefix=f"torch-suite-{args.backend}-")
    Path(log_dir).mkdir(parents=True, exist_ok=True)

    all_records, failed = {}, 0
    for world in worlds:
        print(f"{'braid (as gloo)' if args.as_gloo else args.backend}, world size {world}: running "
              f"{len(tests) if tests else 'all'} tests (logs in {log_dir})", flush=True)
        records, seconds, log_path = run_world(args.backend, world, tests, timeout, log_dir,
                                               as_gloo=args.as_gloo, start=args.start,
                                               ungate=args.backend == "braid" and not args.keep_gates)
        all_records[str(world)] = records
        counts = {}
        for r in records:
            counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
        print(f"  world {world}: {len(records)} tests in {seconds:.0f}s: "
              + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), flush=True)
        for r in records:
            if r["outcome"] in ("fail", "error"):
                failed += 1
                print(f"    FAIL {r['test']}: {_brief(r['detail'])}", flush=True)
        if tests and len(records) < len(tests):
            missing = sorted(set(tests) - {r["test"] for r in records})
            failed += len(missing)
            print(f"    did not run (suite stopped or names unknown): {missing}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"backend": args.backend, "as_gloo": args.as_gloo,
                                               "worlds": all_records},
                                              indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
