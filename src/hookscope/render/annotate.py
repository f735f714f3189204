"""The model's own ``print(model)`` layout, annotated with what a trace recorded.

``annotated_repr(model, trace)`` appends to each module's line its output shape,
parameter count and time (any column of the trace table, by name) through
``extra_repr``, the hook ``nn.Module.__repr__`` calls for every module. The seeds do
this with ``model.apply(partial(...))`` and leave the override in place; here it is
temporary: each module instance gets an ``extra_repr`` attribute for the one
``repr(model)`` call, and afterwards every instance ``__dict__`` is exactly as before
(an ``extra_repr`` the user had set on the instance is put back, one they had not
is removed), also when rendering fails.

A module shared under several names prints the same note at each place; a module
called several times shows its first call and ``calls=N``; a module that never ran
shows ``not called``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.text import Text
from torch import nn

from hookscope.core.records import Call, Trace
from hookscope.errors import RenderError
from hookscope.render.columns import Column, View, column

_MISSING = object()


def annotated_repr(
    model: nn.Module,
    trace: Trace,
    *,
    fields: Sequence[str] = ("output", "params", "time"),
) -> str:
    """``repr(model)`` with each module's line annotated from ``trace``.

    Args:
        model: the model the trace was recorded from; it is not changed.
        trace: its trace (:func:`hookscope.trace`).
        fields: trace-table column names to show (see
            :data:`hookscope.render.columns.COLUMNS`), in order.

    Returns:
        The annotated text, e.g. ``Conv2d(3, 16, kernel_size=(3, 3), ... | output=[1,
        16, 32, 32], params=448, time=41.2 µs)``.

    Raises:
        RenderError: an unknown field name.

    Example:
        >>> print(hookscope.annotated_repr(model, hookscope.trace(model, x)))
    """
    if isinstance(fields, str) or not fields:
        raise RenderError(f"fields= needs a list of column names, got {fields!r}")
    columns = [column(name) for name in fields]
    view = View(trace)
    calls: dict[str, list[Call]] = {}
    for call in trace.calls:
        calls.setdefault(call.path, []).append(call)
    saved: list[tuple[nn.Module, object]] = []
    try:
        for path, module in model.named_modules():
            note = _note(view, columns, calls.get(path, []))
            saved.append((module, module.__dict__.get("extra_repr", _MISSING)))
            module.__dict__["extra_repr"] = _extended(module.extra_repr, note)
        return repr(model)
    finally:
        for module, original in reversed(saved):
            if original is _MISSING:
                module.__dict__.pop("extra_repr", None)
            else:
                module.__dict__["extra_repr"] = original


def _note(view: View, columns: list[Column], calls: list[Call]) -> str:
    if not calls:
        return "not called"
    parts = []
    for col in columns:
        cell = col.cell(view, calls[0])
        text = (cell.plain if isinstance(cell, Text) else cell).strip().replace("\n", "; ")
        if text:
            parts.append(f"{col.name}={text}")
    if len(calls) > 1:
        parts.append(f"calls={len(calls)}")
    return ", ".join(parts)


def _extended(original: Callable[[], str], note: str) -> Callable[[], str]:
    def extra_repr() -> str:
        base = original()
        return f"{base} | {note}" if base else note

    return extra_repr
