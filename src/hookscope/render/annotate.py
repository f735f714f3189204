"""Per-module notes for the annotated model print: what a trace recorded, as text.

Where it sits: a renderer, so it reads only the trace (``core/records/trace.py``) and never a
model. :func:`module_notes` turns a trace into one short note per module path (its
output shape, parameter count and time, or any other column of the trace table by
name); :func:`hookscope.annotated_repr` (``hookscope/api/annotated_repr.py``, one layer up) puts
those notes into the model's own ``print(model)`` layout.

A module called several times shows its first call and ``calls=N``; a module that
never ran shows ``not called``. The trace-table column API (``render/columns.py``) is
used here only, in :func:`module_notes` and :func:`_note`.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from hookscope.core.records.trace import Call, Trace
from hookscope.errors import RenderError
from hookscope.render.columns import Column, View, column, render_cell

__all__ = ["NOT_CALLED", "NOT_SELECTED", "module_notes"]

NOT_CALLED = "not called"
"""The note of a module that never ran in the trace."""

NOT_SELECTED = "not observed (outside select=)"
"""The note of a module a trace with ``select=`` did not observe."""


def module_notes(trace: Trace, fields: Sequence[str]) -> dict[str, str]:
    """One note per module path of ``trace``, from the trace-table columns ``fields``.

    Args:
        trace: a trace (:func:`hookscope.trace`).
        fields: trace-table column names to show (see
            :func:`hookscope.render.columns.columns`), in order.

    Returns:
        Module path -> note, e.g. ``"output=[1, 16, 32, 32], params=448, time=41.2 µs"``;
        :data:`NOT_CALLED` for a module that never ran, :data:`NOT_SELECTED` for one
        a trace with ``select=`` did not observe. A module registered under
        several paths has the same note under each.

    Raises:
        RenderError: ``fields`` is a string or empty, or names an unknown column.

    Example:
        >>> module_notes(hookscope.trace(model, x), ["output"])["0"]
        'output=[1, 16, 32, 32]'
    """
    if isinstance(fields, str) or not fields:
        raise RenderError(f"fields= needs a list of column names, got {fields!r}")
    columns = [column(name) for name in fields]
    view = View(trace)
    calls: dict[str, list[Call]] = {}
    for call in trace.calls:
        calls.setdefault(call.path, []).append(call)
    selected = trace.meta.get("selected")
    observed = None if selected is None else set(selected)
    notes: dict[str, str] = {}
    for path, info in trace.modules.items():
        if observed is not None and path not in observed and path not in calls:
            note = NOT_SELECTED
        else:
            note = _note(view, columns, calls.get(path, []))
        notes.update(dict.fromkeys((path, *info.aliases), note))
    for path, path_calls in calls.items():  # paths the module table lacks (a trace without one)
        notes.setdefault(path, _note(view, columns, path_calls))
    return notes


def _note(view: View, columns: list[Column], calls: list[Call]) -> str:
    if not calls:
        return NOT_CALLED
    parts = []
    for col in columns:
        cell = _plain_cell(col, view, calls[0])
        text = (cell.plain if isinstance(cell, Text) else cell).strip().replace("\n", "; ")
        if text:
            parts.append(f"{col.name}={text}")
    if len(calls) > 1:
        parts.append(f"calls={len(calls)}")
    return ", ".join(parts)


def _plain_cell(col: Column, view: View, call: Call) -> str | Text:
    if col.name == "layer":
        return call.name or view.trace.model.class_name
    return render_cell(col, view, call)
