"""The report's sections about what went wrong: where the run raised or was stopped,
the first non-finite value (:func:`hookscope.find_anomaly`'s report) with its op and
inputs, and lint findings (:func:`hookscope.lint`) with their codes and source lines.

They read plain records only, by attribute (a ``Finding``, an ``AnomalyReport``): the
lint and debug packages sit above the renderers and are not imported.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hookscope.core.records.trace import Trace
from hookscope.render.anomaly_report import render_anomaly_text
from hookscope.render.labels import ended_early
from hookscope.render.report.markup import tag, text

__all__ = ["anomaly_section", "lint_section", "run_problems"]


def run_problems(trace: Trace) -> str:
    """Where the model raised or a probe stopped the run, or ``""``."""
    said = ended_early(trace)
    if not said:
        return ""
    detail = (trace.error.message if trace.error is not None
              else trace.stop.reason if trace.stop is not None else "")
    return (tag("h2", "Problems") + '<div class="problem" id="hs-problems">'
            f"<p>{text(said[0])}</p><pre>{text(detail)}</pre></div>")


def anomaly_section(report: Any) -> str:
    """The first non-finite value: the call, its inputs' statistics, the op that made
    it (the text ``print(report)`` shows), or ``""`` when nothing was found."""
    if report is None or not report.anomalies:
        return ""
    first = report.first
    where = first.path or first.module_class
    return (f'<section id="hs-anomaly"><h2>First non-finite value: {text(where)}</h2>'
            f'<div class="problem"><pre>{text(render_anomaly_text(report))}</pre></div>'
            "</section>")


_LINT_HEAD = ("Code", "Severity", "Where", "Problem", "Fix", "Source")


def lint_section(findings: Sequence[Any]) -> str:
    """A table of lint findings (code, severity, module and attribute, message, fix,
    ``file:line``), or ``""`` when there are none."""
    if not findings:
        return ""
    head = "".join(tag("th", h) for h in _LINT_HEAD)
    rows = []
    for f in findings:
        where = ".".join(p for p in (f.path, f.attribute) if p) or "<root>"
        source = f"{f.file}:{f.line}" if f.file and f.line else (f.file or "")
        cells = (f"{f.code} {f.name}", str(getattr(f.severity, "value", f.severity)), where,
                 f.message, f.fix, source)
        rows.append(tag("tr", "".join(tag("td", text(c)) for c in cells),
                        class_=f"lint-{getattr(f.severity, 'value', f.severity)}"))
    noun = "finding" if len(findings) == 1 else "findings"
    return (f'<section id="hs-lint"><h2>Lint: {len(findings)} {noun}</h2>'
            f'<table class="lint"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
            "</tbody></table></section>")
