"""Starts N ranks of a Python script as separate processes and collects their results.

Used by the pytest files here; also importable by the examples' test. Every launch has a
deadline: ranks still running then are killed and the launch fails naming them.
"""

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYTHON_DIR = REPO / "python"
PYTHON = sys.executable if sys.executable else "/usr/bin/python3"


def free_port():
    """A free port for torch's store, from below the kernel's ephemeral range: a port bind(0)
    handed out would be free again once released, and the many listeners that other tests
    open with bind(0) meanwhile could take it (torch's store then fails with EADDRINUSE)."""
    low = 32768
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    if low > 12000:
        for _ in range(50):
            port = rng.randrange(10000, low)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def braid_run_path():
    """build/bin/braid-run of the build that made the extension (BRAID_RUN overrides)."""
    if os.environ.get("BRAID_RUN"):
        return Path(os.environ["BRAID_RUN"])
    for build in ("build", "build-torch"):
        p = REPO / build / "bin" / "braid-run"
        if p.exists():
            return p
    return None


def base_env(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(PYTHON_DIR), str(Path(__file__).resolve().parent)]
        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env.setdefault("OMP_NUM_THREADS", "1")  # ranks share two cores; no intra-op threads
    if extra:
        env.update({k: str(v) for k, v in extra.items()})
    return env


@dataclass
class Result:
    returncodes: list
    outputs: list
    seconds: float
    timed_out: list = field(default_factory=list)

    @property
    def ok(self):
        return not self.timed_out and all(rc == 0 for rc in self.returncodes)

    def report(self):
        lines = [f"launch took {self.seconds:.1f}s; exit codes {self.returncodes}"]
        if self.timed_out:
            lines.append(f"ranks {self.timed_out} were still running at the deadline (killed)")
        for r, out in enumerate(self.outputs):
            lines.append(f"----- rank {r} (exit {self.returncodes[r]}) -----")
            lines.append(out[-6000:])
        return "\n".join(lines)


def launch(nranks, script, args=(), init="env", timeout=120, env=None):
    """Runs `script` as ranks 0..nranks-1 with torchrun-style variables (RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT) and BRAID_TEST_INIT_METHOD set for `init` in env/tcp/file.
    A launch whose store port was taken between choosing it and binding it (EADDRINUSE in a
    rank's output) runs again on another port, up to twice more."""
    for attempt in range(3):
        result = _launch_once(nranks, script, args, init, timeout, env)
        if result.ok or not any("EADDRINUSE" in out for out in result.outputs) or attempt == 2:
            return result
        print("launch: the store port was taken (EADDRINUSE); launching again", file=sys.stderr)
    return result


def _launch_once(nranks, script, args, init, timeout, env):
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="braid_torch_test_")
    if init == "env":
        init_method = "env://"
    elif init == "tcp":
        init_method = f"tcp://127.0.0.1:{port}"
    elif init == "file":
        init_method = f"file://{tmp}/rendezvous"
    else:
        raise ValueError(init)
    procs, files = [], []
    start = time.monotonic()
    for rank in range(nranks):
        rank_env = base_env(env)
        rank_env.update(
            RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nranks),
            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
            BRAID_TEST_INIT_METHOD=init_method, BRAID_TEST_TMP=tmp,
        )
        out = open(os.path.join(tmp, f"rank{rank}.log"), "w+")
        files.append(out)
        procs.append(subprocess.Popen(
            [PYTHON, str(script), *map(str, args)], env=rank_env, stdout=out,
            stderr=subprocess.STDOUT, cwd=str(REPO), start_new_session=True))
    try:
        return _collect(procs, files, start, timeout)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the logs are in the Result


def launch_braid_run(nranks, script, args=(), timeout=120, env=None, options=()):
    """Runs `script` under build/bin/braid-run -n nranks (one process; output prefixed);
    `options`: more braid-run options (e.g. "--max-failures", "1")."""
    braid_run = braid_run_path()
    if braid_run is None:
        raise FileNotFoundError("braid-run not built (build/bin/braid-run); set BRAID_RUN")
    tmp = tempfile.mkdtemp(prefix="braid_torch_run_")
    out = open(os.path.join(tmp, "braid-run.log"), "w+")
    start = time.monotonic()
    proc = subprocess.Popen(
        [str(braid_run), "-n", str(nranks), "--timeout", str(timeout), *map(str, options), "--",
         PYTHON, str(script),
         *map(str, args)],
        env=base_env(env), stdout=out, stderr=subprocess.STDOUT, cwd=str(REPO),
        start_new_session=True)
    try:
        return _collect([proc], [out], start, timeout + 10)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the log is in the Result


def _collect(procs, files, start, timeout):
    deadline = start + timeout
    timed_out = []
    for rank, p in enumerate(procs):
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out.append(rank)
    for rank in timed_out:
        try:
            os.killpg(procs[rank].pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        procs[rank].wait()
    outputs = []
    for f in files:
        f.flush()
        f.seek(0)
        outputs.append(f.read())
        f.close()
    return Result([p.returncode for p in procs], outputs, time.monotonic() - start, timed_out)
