"""The trace table: one row per module call, columns chosen by name, sortable.

``print(trace)`` shows this table. Columns are chosen by name from
:func:`hookscope.render.columns.columns` (the trace's own and every probe's); without
``columns=`` the table shows :func:`~hookscope.render.columns.default_columns`.

``sort=`` orders rows by a column: numbers descending (``"time"``: slowest first,
a NaN counts as largest), names ascending; rows without a value go last. ``top=``
keeps the first K rows (after sorting), ``depth=`` only calls down to that depth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich import box
from rich.table import Table
from rich.text import Text

from hookscope.core.records import Call, Trace
from hookscope.errors import RenderError
from hookscope.render.columns import (
    COLUMNS,
    Column,
    View,
    column,
    columns,
    default_columns,
    render_cell,
    render_footer,
    sort_key,
)
from hookscope.render.table import DEFAULT_WIDTH, separator, to_text, tree_label, visible_calls
from hookscope.render.units import format_stat, format_time

__all__ = [
    "COLUMNS",
    "Column",
    "View",
    "column",
    "columns",
    "default_columns",
    "describe_input_stats",
    "render_trace",
    "sort_calls",
    "trace_table",
]

# Rules under the header and above the footer only: no vertical lines, to fit more columns.
_ASCII_BOX = box.Box("    \n    \n -- \n    \n    \n -- \n    \n    \n", ascii=True)


def trace_table(
    trace: Trace,
    *,
    columns: Sequence[str] | None = None,
    sort: str | None = None,
    top: int | None = None,
    depth: int | None = None,
    ascii: bool = False,
) -> Table:
    """The trace as a ``rich`` table, one row per call.

    Args:
        trace: the trace to show.
        columns: column names from :data:`COLUMNS`, in display order (default:
            :func:`default_columns`).
        sort: order rows by this column (numbers descending, names ascending).
        top: keep only the first ``top`` rows (after sorting).
        depth: only calls down to this depth (0: the root only).
        ascii: draw with ASCII characters and no colour.

    Raises:
        RenderError: an unknown column or a bad ``top``/``depth``.

    Example:
        >>> rich.print(trace_table(trace, sort="time", top=10))
    """
    if isinstance(columns, str) or (columns is not None and not columns):
        raise RenderError(f"columns= needs a list of column names, got {columns!r}")
    chosen = [column(n) for n in (default_columns(trace) if columns is None else columns)]
    order = column(sort) if sort is not None else None
    _check_limit("top", top, minimum=1)
    _check_limit("depth", depth, minimum=0)
    view = View(trace, ascii=ascii, flat=order is not None)
    calls = visible_calls(trace, depth)
    unsorted = False
    if order is not None:
        calls = sort_calls(view, calls, order)
        # NB: e.g. CUDA memory on the CPU, saved bytes without grad: say so, or the
        # rows look sorted when they are in call order
        unsorted = all(sort_key(order, view, c) is None for c in calls)
    shown = calls if top is None else calls[:top]
    table = Table(
        box=_ASCII_BOX if ascii else box.SIMPLE, show_footer=True, collapse_padding=True,
        pad_edge=False, show_edge=False,
    )
    for col in chosen:
        table.add_column(
            col.header,
            justify="right" if col.numeric else "left",
            footer=render_footer(col, view),
            no_wrap=not col.wrap,
            min_width=10 if col.wrap else None,
        )
    for call in shown:
        table.add_row(*(_cell(col, view, call) for col in chosen))
    table.caption = _caption(
        trace, shown=len(shown), total=len(calls), order=order, ascii=ascii, unsorted=unsorted
    )
    return table


def render_trace(
    trace: Trace,
    *,
    columns: Sequence[str] | None = None,
    sort: str | None = None,
    top: int | None = None,
    depth: int | None = None,
    ascii: bool = True,
    width: int = DEFAULT_WIDTH,
) -> str:
    """:func:`trace_table` rendered to plain text (no colour) at ``width`` characters."""
    table = trace_table(trace, columns=columns, sort=sort, top=top, depth=depth, ascii=ascii)
    return to_text(table, width=width)


def _cell(col: Column, view: View, call: Call) -> str | Text:
    if col.name != "layer":
        return render_cell(col, view, call)
    if not view.flat:
        return tree_label(view.trace, call, ascii=view.ascii)
    label = Text(call.name or view.trace.model.class_name)
    if call.path:
        label.append(f" ({call.module_class})", style="cyan")
    return label


def sort_calls(view: View, calls: Sequence[Call], order: Column) -> list[Call]:
    """``calls`` ordered by ``order``'s key; calls without a value last, ties stable."""
    keyed = [(sort_key(order, view, c), c) for c in calls]
    present = [(_sortable(k), c) for k, c in keyed if k is not None]
    present.sort(key=lambda kc: kc[0], reverse=order.numeric)
    return [c for _, c in present] + [c for k, c in keyed if k is None]


def _sortable(key: float | str) -> float | str:
    return math.inf if isinstance(key, float) and math.isnan(key) else key


def _check_limit(name: str, value: int | None, *, minimum: int) -> None:
    if value is not None and (not isinstance(value, int) or value < minimum):
        raise RenderError(f"{name} must be an integer >= {minimum} or None, got {value!r}")


def _caption(
    trace: Trace, *, shown: int, total: int, order: Column | None, ascii: bool,
    unsorted: bool = False,
) -> str:
    noun = "call" if total == 1 else "calls"
    rows = f"{shown} of {total} {noun}" if shown != total else f"{total} {noun}"
    if order is not None and unsorted:
        rows += f", in call order: no call has a {order.name!r} value to sort by"
    elif order is not None:
        rows += f", by {order.name}"
    parts = [rows]
    parts.append(f"params: {trace.model.params_total:,}")
    if trace.total_time_ns is not None:
        parts.append(f"time: {format_time(trace.total_time_ns, ascii=ascii)}")
    err = trace.error
    if err is not None:
        where = "outside any module" if err.path is None else f"in {err.path or '<root>'!r}"
        parts.append(f"FAILED {where}: {err.exception_type}: {err.message}")
    return separator(ascii).join(parts)


def describe_input_stats(call: Call) -> str:
    """``"; input statistics: args[0] mean=... nan=0 inf=0"`` for a failed call, or ``""``."""
    stats = call.facts.get("input_stats")
    if not stats:
        return ""
    parts = []
    for s in stats:
        if s.mean is None:
            parts.append(f"{s.path} numel={s.numel}")
            continue
        values = " ".join(
            f"{name}={format_stat(getattr(s, name))}" for name in ("mean", "std", "min", "max")
        )
        parts.append(f"{s.path} {values} nan={s.nan_count} inf={s.inf_count}")
    return "; input statistics: " + "; ".join(parts)
