"""The model's own ``print(model)`` layout, annotated with what a trace recorded.

Where it sits: an API-layer module beside :mod:`hookscope.api.tracing`, the one place where a
model meets a renderer's output. The notes come from the trace alone
(:func:`hookscope.render.annotate.module_notes`, a renderer that never sees a model);
this module puts them into ``repr(model)`` through ``extra_repr``, the hook
``nn.Module.__repr__`` calls for every module.

The seeds do this with ``model.apply(partial(...))`` and leave the override in place;
here it is temporary: each module instance gets an ``extra_repr`` attribute for the one
``repr(model)`` call, and afterwards every instance ``__dict__`` is exactly as before
(an ``extra_repr`` the user had set on the instance is put back, one they had not is
removed), also when rendering fails. A module shared under several names prints the
same note at each place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from hookscope.core.model.structure import check_model
from hookscope.core.records.trace import Trace
from hookscope.errors import SpecError
from hookscope.render.annotate import NOT_CALLED, module_notes

if TYPE_CHECKING:
    from torch import nn


__all__ = ["annotated_repr"]

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
            :func:`hookscope.render.columns.columns`), in order.

    Returns:
        The annotated text, e.g. ``Conv2d(3, 16, kernel_size=(3, 3), ... | output=[1,
        16, 32, 32], params=448, time=41.2 µs)``.

    Raises:
        RenderError: an unknown field name.
        SpecError: ``model`` is not a module, or ``trace`` not a trace.

    Example:
        >>> print(hookscope.annotated_repr(model, hookscope.trace(model, x)))
    """
    check_model(model)
    if not isinstance(trace, Trace):
        raise SpecError(
            f"annotated_repr(model, trace) takes the trace of the model second, got "
            f"{type(trace).__name__}; pass hookscope.trace(model, x)"
        )
    notes = module_notes(trace, fields)  # raises before the model is touched
    saved: list[tuple[nn.Module, object]] = []
    try:
        for path, module in model.named_modules():
            saved.append((module, module.__dict__.get("extra_repr", _MISSING)))
            module.__dict__["extra_repr"] = _extended(
                module.extra_repr, notes.get(path, NOT_CALLED)
            )
        return repr(model)
    finally:
        for module, original in reversed(saved):
            if original is _MISSING:
                module.__dict__.pop("extra_repr", None)
            else:
                module.__dict__["extra_repr"] = original


def _extended(original: Callable[[], str], note: str) -> Callable[[], str]:
    def extra_repr() -> str:
        base = original()
        return f"{base} | {note}" if base else note

    return extra_repr
