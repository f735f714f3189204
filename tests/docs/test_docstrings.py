"""The public API's docstrings follow one style (Google), checked by ruff's pydocstyle.

The modules checked are those that define a name of ``hookscope.__all__``, found from
the names themselves, so a new public name brings its module under the check. Left
out on purpose: D205/D209 (a summary may wrap onto a second line and the closing quotes
may end the last line, as everywhere in hookscope), and D105/D107 (magic methods and
``__init__`` are documented by their class's docstring, Google style).
"""

from __future__ import annotations

import inspect
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import hookscope

ROOT = Path(__file__).resolve().parents[2]
IGNORED = "D105,D107,D205,D209"


def public_modules() -> list[Path]:
    """The files that define the names of ``hookscope.__all__``, and the facade."""
    files = {Path(hookscope.__file__)}
    for name in hookscope.__all__:
        obj = getattr(hookscope, name)
        module = obj.__name__ if inspect.ismodule(obj) else getattr(obj, "__module__", "")
        if module and module.startswith("hookscope"):
            files.add(Path(str(sys.modules[module].__file__)))
    return sorted(files)


def test_public_modules_are_found() -> None:
    files = {p.relative_to(ROOT / "src").as_posix() for p in public_modules()}
    assert "hookscope/api/tracing.py" in files  # summary, trace
    assert "hookscope/monitor/monitor.py" in files  # GradientMonitor
    assert "hookscope/lint/runner.py" in files or "hookscope/lint/__init__.py" in files


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is not installed")
def test_public_docstrings_follow_google_style() -> None:
    done = subprocess.run(
        ["ruff", "check", "--no-cache", "--select", "D", "--ignore", IGNORED,
         "--config", "lint.pydocstyle.convention='google'", "--output-format", "concise",
         *map(str, public_modules())],
        capture_output=True, text=True, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
