"""Runs the examples of README.md and docs/ as tests (the runner is tests/doc_examples.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "tests"))

from doc_examples import SETTINGS, apply_rewrites, make_sybil

pytest_collect_file = make_sybil().pytest()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-docs", action="store_true",
                     help="write what each example printed into README.md and docs/")


def pytest_configure(config: pytest.Config) -> None:
    SETTINGS.update = bool(config.getoption("--update-docs"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks the examples under ``<!-- docs: slow -->`` slow, so ``-m`` selects them."""
    for item in items:
        example = getattr(item, "example", None)
        if example is not None and example.parsed[1] == "slow":
            item.add_marker(pytest.mark.slow)


def pytest_sessionfinish(session: pytest.Session) -> None:
    apply_rewrites()
