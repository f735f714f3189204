"""The trace table: one row per module call, columns chosen by name, sortable.

``print(trace)`` shows this table. Columns are chosen by name from
:func:`hookscope.render.columns.columns` (the trace's own and every probe's); without
``columns=`` the table shows :func:`~hookscope.render.columns.default_columns`.

``sort=`` orders rows by a column: numbers descending (``"time"``: slowest first,
a NaN counts as largest), names ascending; rows without a value go last. ``top=``
keeps the K heaviest rows (the first K after sorting; without ``sort=``, sorted by
time, FLOPs or parameters, whichever the trace has), ``depth=`` only calls down to
that depth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hookscope.core.records.trace import Call, Trace
from hookscope.errors import RenderError
from hookscope.render.columns import (
    Column,
    View,
    cell_style,
    column,
    columns,
    default_columns,
    fold_cell,
    priority,
    render_cell,
    render_footer,
    sort_key,
)
from hookscope.render.compiled_notes import compiled_notes
from hookscope.render.fold import Folded, Row, folded_rows, hidden_deeper, tree_rows
from hookscope.render.grid import Grid, GridColumn, Worded, folded_caption, shapes_min, wrap_shapes
from hookscope.render.labels import ended_early, fold_text, tree_text
from hookscope.render.table import DEFAULT_WIDTH, GridTable, terminal_width, tree_column
from hookscope.render.units import format_stat, format_time

__all__ = [
    "Column",
    "View",
    "column",
    "columns",
    "default_columns",
    "describe_input_stats",
    "render_trace",
    "sort_calls",
    "trace_html",
    "trace_table",
]


def trace_table(
    trace: Trace,
    *,
    columns: Sequence[str] | None = None,
    sort: str | None = None,
    top: int | None = None,
    depth: int | None = None,
    ascii: bool = False,
    fold: bool = True,
    depth_hint: bool = False,
) -> GridTable:
    """The trace as a table, one row per call (repeated blocks folded).

    Args:
        trace: the trace to show.
        columns: column names from :func:`columns`, in display order (default:
            :func:`default_columns`).
        sort: order rows by this column (numbers descending, names ascending); sorted
            rows are not folded.
        top: keep only the ``top`` heaviest rows: the first after sorting by ``sort``,
            or, without it, by time, FLOPs or parameters, the first the trace has
            (:data:`HEAVY`).
        depth: only calls down to this depth (0: the root only).
        ascii: draw with ASCII characters and no colour.
        fold: show a run of identical blocks as its first block and one row for the
            rest (``render/fold.py``); ``False`` shows every call.
        depth_hint: the caption says how many deeper rows ``depth`` hides and how to
            see them (what the CLI does when it chose the depth).

    Raises:
        RenderError: an unknown column or a bad ``top``/``depth``.

    Example:
        >>> print(trace_table(trace, sort="time", top=10))
    """
    if isinstance(columns, str) or (columns is not None and not columns):
        raise RenderError(f"columns= needs a list of column names, got {columns!r}")
    chosen = [column(n) for n in (default_columns(trace) if columns is None else columns)]
    _check_limit("top", top, minimum=1)
    _check_limit("depth", depth, minimum=0)
    order = column(sort) if sort is not None else heaviest(trace) if top is not None else None

    def build(ascii: bool) -> Grid:
        view = View(trace, ascii=ascii, flat=order is not None)
        rows: list[Row]
        unsorted = False
        if order is not None:
            calls = [c for c in trace.calls if depth is None or c.depth <= depth]
            rows = list(sort_calls(view, calls, order))
            # e.g. CUDA memory on the CPU, saved bytes without grad: say so, or the
            # rows look sorted when they are in call order
            unsorted = all(sort_key(order, view, c) is None for c in calls)
        else:
            rows = tree_rows(trace, depth=depth, fold=fold)
        shown = rows if top is None else rows[:top]
        # columns the caller chose are dropped only when they cannot fit: the way
        # out is the width alone
        grid = Grid([_grid_column(col, view, shown) for col in chosen],
                    pickable=columns is None)
        visible = sum(1 for c in trace.calls if depth is None or c.depth <= depth)
        grid.caption = _caption(trace, shown=shown, total=rows, calls=visible, order=order,
                                ascii=ascii, unsorted=unsorted, depth=depth)
        if depth_hint and order is None:
            grid.caption.extend(depth_caption(trace, depth, fold=fold))
        grid.notes.extend(compiled_notes(trace))
        return grid

    return GridTable(build, ascii=ascii)


def _grid_column(col: Column, view: View, rows: Sequence[Row]) -> GridColumn:
    if col.name == "layer":
        return tree_column([_layer(view, r) for r in rows], footer=render_footer(col, view))
    cells = [fold_cell(col, view, r.calls) if isinstance(r, Folded)
             else render_cell(col, view, r) for r in rows]
    styles = [] if view.ascii or not col.alert else [
        "" if isinstance(r, Folded) else cell_style(col, view, r) for r in rows]
    labelled = col.unit.value == "shapes"
    return GridColumn(
        col.name, col.header, cells, footer=render_footer(col, view), numeric=col.numeric,
        priority=priority(col), styles=styles,
        wrap=wrap_shapes if labelled else None,
        wrap_min=shapes_min(cells) if labelled else 0,
    )


def _layer(view: View, row: Row) -> str:
    if isinstance(row, Folded):
        return fold_text(view.trace, row.calls, ascii=view.ascii)
    if not view.flat:
        return tree_text(view.trace, row, ascii=view.ascii)
    label = row.name or view.trace.model.class_name
    return f"{label} ({row.module_class})" if row.path else label


def render_trace(
    trace: Trace,
    *,
    columns: Sequence[str] | None = None,
    sort: str | None = None,
    top: int | None = None,
    depth: int | None = None,
    ascii: bool = True,
    width: int = DEFAULT_WIDTH,
    fold: bool = True,
) -> str:
    """:func:`trace_table` as plain text (no colour) at ``width`` characters."""
    table = trace_table(trace, columns=columns, sort=sort, top=top, depth=depth, ascii=ascii,
                        fold=fold)
    return table.to_text(width=width)


def depth_caption(trace: Trace, depth: int | None, *, fold: bool) -> list[str]:
    """``["depth 1: 12 deeper rows hidden (depth=4 shows them)"]``, or nothing."""
    hidden = hidden_deeper(trace, depth, fold=fold)
    if not hidden:
        return []
    deepest = max(c.depth for c in trace.calls)
    noun = "row" if hidden == 1 else "rows"
    head = f"depth {depth}: {hidden:,} deeper {noun} hidden"
    return [Worded(lambda w: f"{head} ({w.deeper.format(depth=deepest)})")]


HEAVY = ("time", "flops_fwd", "params")
"""What ``top=`` without ``sort=`` ranks rows by: the first of these the trace has."""


def heaviest(trace: Trace) -> Column:
    """The column ``top=`` ranks by when no ``sort=`` is given (:data:`HEAVY`): the
    heaviest rows, not the first rows of the tree, cut mid-block."""
    view = View(trace)
    for name in HEAVY:
        col = columns().get(name)
        if col is not None and any(sort_key(col, view, c) not in (None, 0)
                                   for c in trace.calls):
            return col
    return column("params")


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
    trace: Trace, *, shown: Sequence[Row], total: Sequence[Row], calls: int,
    order: Column | None, ascii: bool, unsorted: bool = False, depth: int | None = None,
) -> list[str]:
    n = len(trace.calls)
    noun = "call" if n == 1 else "calls"
    rows = f"{len(shown):,} of {len(total):,} rows" if len(shown) != len(total) else ""
    # every call of the run is counted; those ``depth`` leaves out are said so
    within = f", {calls:,} to depth {depth}" if calls < n else ""
    rows = f"{n:,} {noun}{within}" + (f", {rows}" if rows else "")
    if order is not None and unsorted:
        rows += f", in call order: no call has a {order.name!r} value to sort by"
    elif order is not None:
        rows += f", by {order.name}"
    parts = [rows]
    runs, hidden = folded_rows(shown)
    if runs:
        parts.append(folded_caption(runs, hidden))
    parts.append(f"params: {trace.model.params_total:,}")
    if trace.total_time_ns is not None:
        parts.append(f"time: {format_time(trace.total_time_ns, ascii=ascii)}")
    parts.extend(ended_early(trace))
    return parts


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


def render_trace_text(trace: Trace, *, width: int | None = None) -> str:
    """The trace table of a trace as plain ASCII text (``print(trace)``: as wide as
    the terminal, :func:`~hookscope.render.table.terminal_width`)."""
    return render_trace(trace, width=width or terminal_width())


def trace_html(trace: Trace) -> str:
    """The trace table as HTML (Jupyter): every column, repeated blocks folded."""
    return trace_table(trace)._repr_html_()
