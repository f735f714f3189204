"""The lines under a summary or trace table about a compiled model.

A trace of a compiled model records the original module run eagerly
(``trace.meta["compiled"]`` says how the model was compiled); with ``compiled=True`` it
also holds what dynamo made of it (``trace.meta["compile"]``, a
:class:`~hookscope.core.records.compile_report.CompileReport`). One line says which
facts are which; then one line per graph break and per recompilation.
"""

from __future__ import annotations

import os

from hookscope.core.records.compile_report import CompileReport, GraphBreak
from hookscope.core.records.trace import Trace
from hookscope.render.labels import path_text

__all__ = ["compiled_notes"]


def compiled_notes(trace: Trace) -> list[str]:
    """The ``[compiled]`` notes of ``trace`` (none for a model that is not compiled and
    was not run with ``compiled=True``)."""
    form = trace.meta.get("compiled")
    report = CompileReport.of(trace.meta)
    if form is None and report is None:
        return []
    how = f"{form}: " if form else ""
    eager = "module facts from the original module run eagerly"
    if report is None:
        return [f"[compiled] {how}{eager}; compiled=True (--compiled) reports its graphs "
                "and graph breaks"]
    if report.error is not None:
        return [f"[compiled] {how}{eager}; torch.compile failed: {report.error}"]
    breaks = len(report.breaks)
    split = f"split at {breaks} graph break{'s' if breaks != 1 else ''}" if breaks \
        else "no graph break"
    lines = [f"[compiled] {how}{eager}; the compiled code runs as "
             f"{report.graphs} graph{'s' if report.graphs != 1 else ''}, {split}"
             f"{_recompiled(report)}"]
    lines += [_break_line(i, b) for i, b in enumerate(report.breaks, 1)]
    frames: dict[tuple[tuple[str, ...], str, int], list[str]] = {}
    for r in report.recompiles:
        frames.setdefault((r.paths, r.file, r.line), []).append(r.reason)
    lines += [f"  recompiled {_modules(paths)}{_where(file, line)}: {'; '.join(reasons)}"
              for (paths, file, line), reasons in frames.items()]
    return lines


def _recompiled(report: CompileReport) -> str:
    n = len({(r.file, r.line) for r in report.recompiles})
    return f", {n} frame{'s' if n != 1 else ''} recompiled before" if n else ""


def _where(file: str | None, line: int | None) -> str:
    return "" if file is None else f" ({os.path.basename(file)}:{line})"


def _modules(paths: tuple[str, ...]) -> str:
    if not paths:
        return "outside any module's forward"
    return "in " + " or ".join(repr(path_text(p)) for p in paths)


def _break_line(i: int, b: GraphBreak) -> str:
    return f"  break {i} {_modules(b.paths)}{_where(b.file, b.line)}: {_reason(b.reason)}"


def _reason(reason: str) -> str:
    """Dynamo's first line, with its ``Explanation:`` line when it has one."""
    lines = [ln.strip() for ln in reason.strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    why = next((ln.removeprefix("Explanation:").strip() for ln in lines[1:]
                if ln.startswith("Explanation:")), "")
    return f"{lines[0]} ({why})" if why else lines[0]
