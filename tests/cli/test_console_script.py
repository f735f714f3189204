"""The installed entry points, run as real processes: the ``hookscope`` console script
and ``python -m hookscope``.

Everything else about the command line is tested in-process (``test_cli.py``); these
tests check what only a real process shows: the script is installed and runs, the exit
status reaches the shell, and a failure prints one line without a traceback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

MODEL_FILE = """
    from torch import nn


    def factory():
        return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
"""


def console_script() -> str:
    """Path of the ``hookscope`` script installed beside this Python."""
    name = "hookscope.exe" if os.name == "nt" else "hookscope"
    path = Path(sysconfig.get_path("scripts")) / name
    if path.exists():
        return str(path)
    found = shutil.which("hookscope")
    if found is None:
        pytest.fail("the hookscope console script is not installed; run pip install -e .")
    return found


def run(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100"}
    env.pop("FORCE_COLOR", None)
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(MODEL_FILE))
    return path


def test_console_script_summary(model_file: Path) -> None:
    result = run(console_script(), "summary", f"{model_file.name}:factory", "--input", "1,4",
                 cwd=model_file.parent)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Layer (type)")  # a pipe gets ASCII
    assert any("0 (Linear)" in line and "[1, 4]" in line and "[1, 8]" in line for line in lines)
    assert any(line.startswith("Total") and "58" in line for line in lines)  # 40 + 18


def test_console_script_bad_input_is_one_line(model_file: Path) -> None:
    result = run(console_script(), "summary", f"{model_file}:factory", "--input", "1,four")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "error: dimension 'four' in input spec '1,four' is not an integer; separate integer "
        "sizes with ',' or 'x', e.g. '1,3,224,224'"
    ]


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_closed_stdout_exits_quietly(model_file: Path, fmt: str) -> None:
    process = subprocess.Popen(
        [console_script(), "summary", f"{model_file}:factory", "--input", "1,4", "-f", fmt],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # like `| head -0`: the reader is gone before the table is written
    stderr = process.stderr.read()
    assert process.wait(timeout=300) == 1
    assert stderr == ""


def test_python_dash_m_help() -> None:
    result = run(sys.executable, "-m", "hookscope", "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage: hookscope" in result.stdout
    for command in ("summary", "trace", "inspect", "demo"):
        assert command in result.stdout


def test_console_script_sorts_by_a_probe_column(model_file: Path) -> None:
    """Regression: in a fresh process the columns the built-in probes declare were not
    registered yet when --sort was checked ("unknown trace column 'time'")."""
    result = run(console_script(), "trace", f"{model_file.name}:factory", "--input", "1,4",
                 "--sort", "time", "--top", "2", "--columns", "layer,time,mean",
                 cwd=model_file.parent)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].split()[:4] == ["Layer", "(type)", "Time", "Mean"]
