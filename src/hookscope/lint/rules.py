"""The rule registry: every lint rule is one small function registered here.

A rule module in ``lint/checks/`` decorates each rule function with
:func:`register_rule`, which records its code, short name, severity, why it matters
and how to fix it. The runner (``lint/runner.py``) looks rules up here; nothing else
knows the list, so adding a rule touches no other rule. A rule function receives the
:class:`~hookscope.lint.context.LintContext` of the run and yields
:class:`~hookscope.lint.findings.Hit`\\ s.

Example:
    >>> @register_rule("HS999", "my-rule", severity=Severity.WARNING,
    ...                why="What goes wrong.", fix="What to write instead.")
    ... def my_rule(ctx: LintContext) -> Iterator[Hit]:
    ...     yield Hit("encoder", "cache", "self.cache is ...")
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from hookscope.errors import SpecError
from hookscope.lint.findings import Hit, Severity

if TYPE_CHECKING:
    from hookscope.lint.context import LintContext

RuleFn = Callable[["LintContext"], Iterable[Hit]]

CODE = re.compile(r"HS\d{3}")


class Needs(str, Enum):
    """What a rule needs to run: the model alone, a forward pass, or also a backward."""

    STATIC = "static"
    FORWARD = "forward"
    BACKWARD = "backward"


@dataclass(frozen=True, slots=True)
class Rule:
    """One registered rule.

    Attributes:
        code: stable code, ``HS`` and three digits; the first digit is the family.
        name: short kebab-case name.
        severity: the severity of every finding of this rule.
        why: what goes wrong when the model does this (a paragraph).
        fix: how to fix it, in one line.
        needs: static, forward (needs inputs) or backward (``backward=True``).
        check: ``fn(ctx: LintContext) -> Iterable[Hit]``.
    """

    code: str
    name: str
    severity: Severity
    why: str
    fix: str
    needs: Needs
    check: RuleFn

    def explain(self) -> str:
        """The rule's documentation, as ``hookscope lint --explain CODE`` prints it."""
        needs = {
            Needs.STATIC: "the model only (no forward pass)",
            Needs.FORWARD: "a forward pass (give inputs)",
            Needs.BACKWARD: "a forward and a backward pass (backward=True / --backward)",
        }[self.needs]
        body = textwrap.fill(" ".join(self.why.split()), width=88)
        return (
            f"{self.code} {self.name} [{self.severity.value}]\n\n{body}\n\n"
            f"Fix: {self.fix}\nNeeds: {needs}\n"
            f"Silence: ignore=[{self.code!r}] or ignore=[({self.code!r}, 'module.path')] "
            f"from Python; --ignore {self.code} on the command line.\n"
        )


RULES: dict[str, Rule] = {}


def register_rule(
    code: str, name: str, *, severity: Severity, why: str, fix: str,
    needs: Needs = Needs.STATIC,
) -> Callable[[RuleFn], RuleFn]:
    """Register the decorated function as the rule ``code``.

    Args:
        code: ``HS`` and three digits, unique.
        name: short kebab-case name, unique.
        severity: severity of its findings.
        why: what goes wrong (shown by ``--explain``).
        fix: the one-line fix added to every finding.
        needs: what the rule needs to run.

    Raises:
        SpecError: the code is malformed, or the code or name is already registered.
    """
    if not CODE.fullmatch(code):
        raise SpecError(f"a rule code is 'HS' and three digits, got {code!r}")
    if code in RULES:
        raise SpecError(f"rule {code} is already registered (as {RULES[code].name!r})")
    if any(rule.name == name for rule in RULES.values()):
        raise SpecError(f"a rule named {name!r} is already registered")

    def decorate(fn: RuleFn) -> RuleFn:
        RULES[code] = Rule(code, name, severity, why, fix, needs, fn)
        return fn

    return decorate

