"""Shared pytest configuration: command-line options, markers, fixtures, per-test hygiene.

Options:
    --update-golden   regenerate golden files under tests/golden/ instead of comparing.
    --device          device for device-parametrized tests (``cpu`` default, or ``cuda``);
                      any test that takes the ``device`` fixture runs on it.

Markers (declared in pyproject.toml): ``slow`` (deselected by default, run with
``-m slow``), ``cuda`` (skipped when no CUDA device is available).

Every test starts with torch's RNG seeded to 0 and without ``NO_COLOR``,
``FORCE_COLOR``, ``COLUMNS``, ``LINES`` or ``TERM_PROGRAM`` in the environment, so
rendered output does not depend on the terminal the tests run in.

The helpers that the safety tests are built on (``count_hooks``, ``snapshot_state``,
``assert_state_unchanged``, ``assert_outputs_identical``, ...) live in
``tests/helpers.py``; the tiny single-pitfall models in ``tests/zoo.py``. Both are
importable from any test module (``from helpers import count_hooks``) because this
directory is on ``sys.path``, and the most used ones are also fixtures here.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from helpers import (
    assert_outputs_identical,
    assert_state_unchanged,
    count_hooks,
    snapshot_state,
)

__all__ = [
    "assert_outputs_identical",
    "assert_state_unchanged",
    "count_hooks",
    "snapshot_state",
]

SCRUBBED_ENV = ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "TERM_PROGRAM")
GOLDEN_DIR = Path(__file__).parent / "golden"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="regenerate golden files in tests/golden/ instead of comparing against them",
    )
    parser.addoption(
        "--device",
        action="store",
        default="cpu",
        help="device for device-parametrized tests: cpu (default) or cuda",
    )


def _parametrizes(metafunc: pytest.Metafunc, name: str) -> bool:
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if name in names:
            return True
    return False


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test taking a ``device`` argument runs on ``--device`` (unless it parametrizes
    ``device`` itself)."""
    if "device" in metafunc.fixturenames and not _parametrizes(metafunc, "device"):
        device = metafunc.config.getoption("--device")
        marks = [pytest.mark.cuda] if str(device).startswith("cuda") else []
        metafunc.parametrize("device", [pytest.param(device, marks=marks, id=device)])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (none available)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seeded_rng() -> Iterator[None]:
    """Seed torch's RNG for every test and restore the state afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        yield


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remove environment variables that change how rich renders."""
    for name in SCRUBBED_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    """True when golden files should be rewritten (``pytest --update-golden``)."""
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture
def golden(request: pytest.FixtureRequest, update_golden: bool):  # type: ignore[no-untyped-def]
    """``golden(renderer, text, ext="txt")``: compare ``text`` with
    ``tests/golden/<renderer>/<test name>.<ext>``, or write it under ``--update-golden``."""

    def check(renderer: str, text: str, ext: str = "txt") -> None:
        name = request.node.name.replace("/", "_").replace("[", "-").rstrip("]")
        path = GOLDEN_DIR / renderer / f"{name}.{ext}"
        if update_golden:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            return
        if not path.exists():
            pytest.fail(f"golden file {path} is missing; create it with pytest --update-golden")
        assert text == path.read_text(encoding="utf-8")

    return check


@pytest.fixture
def hook_counter():  # type: ignore[no-untyped-def]
    """The :func:`helpers.count_hooks` function, as a fixture."""
    return count_hooks
