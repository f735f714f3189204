"""Text rendering of a :class:`~hookscope.lint.findings.LintReport`.

One finding is three lines, in the convention editors and CI annotate::

    models/net.py:12:9: HS101 [error] self.layers is a plain list holding ...
        module: <root> (Net), attribute: layers
        fix: hold them in nn.ModuleList (list, tuple) or nn.ModuleDict (dict), ...

A finding without a source location starts with ``<model>:``. File names under the
working directory are shown relative to it. A summary line, the report's notes (a rule
that needs a backward pass none was asked for) and, when there are findings, a line
saying how to silence or explain one end the text.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hookscope.lint.findings import Finding, LintReport


def _where(finding: Finding) -> str:
    if finding.file is None:
        return "<model>"
    file = finding.file
    try:
        relative = os.path.relpath(file)
    except ValueError:  # another drive on Windows
        relative = file
    shown = relative if not relative.startswith("..") else file
    return f"{shown}:{finding.line}:{finding.col}"


def render_finding(finding: Finding) -> str:
    """The three lines of one finding."""
    path = finding.path or "<root>"
    attribute = f", attribute: {finding.attribute}" if finding.attribute else ""
    return (f"{_where(finding)}: {finding.code} [{finding.severity.value}] {finding.message}\n"
            f"    module: {path}{attribute}\n"
            f"    fix: {finding.fix}")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 or word == "info" else "s")


def render_text(report: LintReport) -> str:
    """Every finding, then the summary and how to silence one."""
    blocks = [render_finding(f) for f in report]
    c = report.counts()
    counts = ", ".join(_plural(c[s], s) for s in ("error", "warning", "info"))
    scope = "static rules and one forward pass" if report.dynamic else (
        "static rules only: the selected rules need no forward pass"
        if report.inputs_given else "static rules only; give inputs for the HS5xx rules")
    if report.backward:
        scope += " and backward"
    elif report.backward_skipped:
        scope += f"; no backward pass: {report.backward_skipped}"
    summary = f"{report.model}: {counts} ({scope})" if report.findings else (
        f"{report.model}: no findings ({scope})")
    if report.suppressed:
        summary += f"; {report.suppressed} silenced by ignore"
    lines = [*blocks, summary, *report.notes]
    if report.findings:
        code = report.findings[0].code
        lines.append(
            f"silence: ignore=[{code!r}] or ignore=[({code!r}, 'module.path')] in "
            f"hookscope.lint, --ignore {code} on the command line; "
            f"explain: hookscope lint --explain {code}"
        )
    return "\n".join(lines) + "\n"
