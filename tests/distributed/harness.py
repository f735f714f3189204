"""Spawned ``torch.distributed`` runs for the tests: a few gloo processes on the CPU.

:func:`run_ranks` starts one Python process per rank with the environment ``torchrun``
gives its workers (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` on a free
port), each running one scenario of ``workers.py``, which initialises the gloo process
group, runs its checks, writes what it found as JSON, and destroys the group. Each
process leads a session of its own, so a run that hangs or a test that fails kills the
whole process group of every rank (``finally``): no process is left behind. One
spawned run carries several checks: starting torch twice costs seconds.
:func:`run_torchrun` does the same for a command under ``torchrun``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

WORKERS = Path(__file__).with_name("workers.py")
SRC = Path(__file__).parents[2] / "src"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(SRC), str(WORKERS.parent), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def _stop(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """Kill each process's group (it and whatever it started) and reap it."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
    for p in procs:
        p.wait()


def _wait(procs: Sequence[subprocess.Popen[bytes]], logs: Sequence[Path],
          timeout: float) -> None:
    try:
        for p in procs:
            p.wait(timeout=timeout)  # NB: the budget of the whole run, per process
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the spawned run did not finish in {timeout} s:\n"
                             + _tails(logs)) from None


def _tails(logs: Sequence[Path]) -> str:
    return "\n".join(f"--- {log.name}\n{log.read_text()[-4000:]}" for log in logs)


def run_ranks(scenario: str, out: Path, *, world_size: int = 2,
              timeout: float = 240) -> list[dict[str, Any]]:
    """Run ``workers.py``'s ``scenario`` on ``world_size`` gloo ranks; each rank's JSON
    results, in rank order."""
    port = str(free_port())
    procs: list[subprocess.Popen[bytes]] = []
    logs = [out / f"rank{r}.log" for r in range(world_size)]
    try:
        for r in range(world_size):
            env = _env({"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(world_size),
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
            with logs[r].open("wb") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, str(WORKERS), scenario, str(out)], env=env,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        _wait(procs, logs, timeout)
    finally:
        _stop(procs)
    failed = [p.returncode for p in procs if p.returncode != 0]
    if failed:
        raise AssertionError(f"a rank exited with {failed[0]}:\n" + _tails(logs))
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world_size)]


def run_torchrun(args: Sequence[str], cwd: Path, *, nproc: int = 2,
                 timeout: float = 240) -> tuple[int, str]:
    """``torchrun --nproc-per-node nproc ARGS`` in ``cwd``: exit code and output."""
    log = cwd / "torchrun.log"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
           "--master-port", str(free_port()), *args]
    with log.open("wb") as f:
        proc = subprocess.Popen(cmd, cwd=cwd, env=_env({"NO_COLOR": "1"}), stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait([proc], [log], timeout)
    finally:
        _stop([proc])
    return proc.returncode, log.read_text()
