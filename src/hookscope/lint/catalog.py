"""The rules there are: the registry of ``lint/rules.py`` with the built-in ones loaded.

The built-in rule modules (``lint/checks/``) import the registry to register their
rules with its decorator; this module imports them, so the registry never imports the
modules that import it.
"""

from __future__ import annotations

import hookscope.lint.checks  # noqa: F401  (registers the built-in rules)
from hookscope.errors import SpecError
from hookscope.lint.rules import RULES, Rule

__all__ = ["get_rule", "load_rules"]


def load_rules() -> dict[str, Rule]:
    """Every registered rule by code: the built-in ones and any registered since."""
    return dict(sorted(RULES.items()))


def get_rule(code: str) -> Rule:
    """The rule ``code`` (case-insensitive).

    Raises:
        SpecError: no rule has that code.
    """
    rules = load_rules()
    rule = rules.get(code.strip().upper())
    if rule is None:
        raise SpecError(f"no lint rule {code!r}; the rules are {', '.join(rules)}")
    return rule
