"""Each lint rule's documented example (tools/lint_examples/HSxxx.py) triggers that rule.

The lint-rules page of the docs shows these examples and what linting them reports
(tools/mkdocs_hooks.py); here each is run and must report its own rule, so an example
that stops showing its rule, or a rule without an example, fails.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from hookscope.lint.catalog import load_rules

EXAMPLES = Path(__file__).resolve().parents[2] / "tools" / "lint_examples"


def test_every_rule_has_an_example() -> None:
    documented = {p.stem for p in EXAMPLES.glob("HS*.py")}
    assert set(load_rules()) <= documented, sorted(set(load_rules()) - documented)
    assert documented <= set(load_rules()), sorted(documented - set(load_rules()))


@pytest.mark.parametrize("code", sorted(load_rules()))
def test_the_example_triggers_its_rule(code: str) -> None:
    path = EXAMPLES / f"{code}.py"
    if not path.exists():
        pytest.fail(f"no example for {code}: add {path}")
    report = runpy.run_path(str(path))["report"]
    assert code in {finding.code for finding in report.findings}
