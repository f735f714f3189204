"""The runner of the documentation's examples (tests/doc_examples.py) itself.

It must see every fence of every page (a page or a fence it skips silently would let
an example go stale), and a broken example must fail it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from doc_examples import ROOT, SETTINGS, doc_paths, make_sybil, matches, normalize

FIXTURE = Path(__file__).parent / "broken_example.md"


def _fences(text: str) -> int:
    """Opening fences counted by hand: a line starting with three backticks toggles."""
    return sum(1 for line in text.splitlines() if re.match(r"\s*```", line)) // 2


def test_every_page_is_collected() -> None:
    sybil = make_sybil()
    docs = {ROOT / "README.md", *(ROOT / "docs").rglob("*.md")}
    assert {p for p in docs if sybil.should_parse(p)} == docs
    assert not sybil.should_parse(FIXTURE)
    assert (ROOT / "README.md") in doc_paths()
    assert len([p for p in doc_paths() if p.parent.name in ("docs", "guides")]) >= 10


@pytest.mark.parametrize("page", doc_paths(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_fence_is_an_example(page: Path) -> None:
    examples = list(make_sybil().parse(page))
    assert len(examples) == _fences(page.read_text(encoding="utf-8"))
    languages = {example.parsed[0] for example in examples}
    assert languages <= {"python", "output", "console", "text"}, languages


def _evaluate(page: Path) -> list[str]:
    """Evaluates every example of the page; the failures, as messages."""
    document = make_sybil().parse(page)
    failures = []
    namespace = document.namespace
    from doc_examples import setup, teardown

    setup(namespace)
    try:
        for example in document:
            try:
                example.evaluate()
            except Exception as e:  # each failure is what is checked
                failures.append(f"line {example.line}: {type(e).__name__}: {e}")
    finally:
        teardown(namespace)
    return failures


def test_a_broken_example_fails_the_runner() -> None:
    assert not SETTINGS.update
    failures = _evaluate(FIXTURE)
    assert len(failures) == 2, failures
    assert "13" in failures[0] and "12" in failures[0]
    assert "broken on purpose" in failures[1]


def test_times_are_masked_and_columns_realigned() -> None:
    shown = "Layer   Time\n-----  ------\nconv   686 us\n"
    printed = "Layer  Time\n-----  -------\nconv   1.20 ms\n"
    assert normalize(shown) == normalize(printed)
    assert not matches("params: 58\n", "params: 59\n")
    assert not matches("norm 0.0356\n", "norm 0.0355\n")
    assert matches("norm 0.0356, [1, 3] 58\n", "norm 0.0355, [1, 3] 58\n", stats=True)
    assert not matches("[1, 3] 58\n", "[1, 3] 59\n", stats=True)
    assert matches("First line\n...\nlast line", "First line\nanything\nmore\nlast line")
