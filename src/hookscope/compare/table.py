"""A compare as people read it: a one-line answer, then side A's call tree with each
call's errors, repeated blocks folded as in the trace table (``render/fold.py``).

A folded row (``h.1 … h.11 ×11``) shows the worst of the blocks it stands for and of
everything inside them: the largest errors, the smallest cosine and SQNR, and
``introduced`` when any call in them introduced an error above the tolerance. A row at
the depth limit, whose calls below are hidden, shows its own output's measures but the
largest introduced error under it (and the first call's mark): where an error starts
does not vanish with the rows that would show it. Calls with no match are listed
under the table, by side.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from hookscope.render.fold import (
    Folded,
    Row,
    auto_depth,
    folded_rows,
    hidden_deeper,
    tree_rows,
)
from hookscope.render.grid import Grid, GridColumn, folded_caption
from hookscope.render.labels import fold_text, tree_text
from hookscope.render.table import GridTable, tree_column
from hookscope.render.units import format_bytes, format_stat

if TYPE_CHECKING:
    from hookscope.compare.result import CallError, CompareResult
    from hookscope.core.records.trace import Call, Trace

_LISTED = 8  # unmatched calls named under the table, per side


def answer_line(result: CompareResult) -> str:
    """Where side B starts to differ, in one line."""
    tol = format_stat(result.tolerance)
    unmatched = len(result.only_a) + len(result.only_b)
    calls = "call" if unmatched == 1 else "calls"
    tail = f" ({unmatched} {calls} unmatched, listed below)" if unmatched else ""
    first = result.first
    if first is not None:
        where = repr(first.path) if first.path else "the root"
        call = f", call {first.call_index}" if first.call_index else ""
        return (f"Side B first differs at {where} ({first.module_class}{call}): it "
                f"introduced a max abs error of {format_stat(first.introduced_max_abs)} "
                f"(tolerance {tol}){tail}")
    measured = [r for r in result.rows if not math.isnan(r.max_abs)]
    if measured and all(r.max_abs == 0 for r in measured):
        return f"Side A and side B agree exactly at all {len(measured)} matched calls{tail}"
    worst = max(measured, key=lambda r: r.max_abs, default=None)
    largest = "" if worst is None else (
        f"; the largest error, {format_stat(worst.max_abs)}, is at "
        f"{worst.path or '<root>'!r}")
    return f"No call introduced an error above the tolerance {tol}{largest}{tail}"


def _subtree(result: CompareResult, calls: Sequence[Call]) -> list[CallError]:
    by_index = {r.index: r for r in result.rows}
    all_calls = result.trace_a.calls
    out, stack = [], [c.index for c in calls]
    while stack:
        i = stack.pop()
        if i in by_index:
            out.append(by_index[i])
        stack.extend(all_calls[i].children)
    return out


def _cell(rows: Sequence[CallError], pick: Callable[[CallError], float | None],
          worst: Callable[..., float], digits: int) -> str:
    values = [v for v in map(pick, rows) if v is not None and not math.isnan(v)]
    return format_stat(worst(values), digits=digits) if values else ("-" if rows else "")


def compare_table(result: CompareResult, *, depth: int | None = None, fold: bool = True,
                  ascii: bool = False) -> GridTable:
    """The table of :func:`hookscope.compare`'s result (module docstring)."""
    return GridTable(lambda ascii: _grid(result, depth=depth, fold=fold, ascii=ascii),
                     ascii=ascii)


def _grid(result: CompareResult, *, depth: int | None, fold: bool, ascii: bool) -> Grid:
    trace = result.trace_a
    depth = depth if depth is not None else auto_depth(trace, fold=fold)
    rows = tree_rows(trace, depth=depth, fold=fold)
    by_index = {r.index: r for r in result.rows}
    groups = [_subtree(result, r.calls) if isinstance(r, Folded)
              else [by_index[r.index]] if r.index in by_index else [] for r in rows]
    # where a row's calls below are hidden (the depth limit, a fold), its introduced
    # error and its verdict are those of the whole subtree: where an error starts
    # must not vanish with the rows that show it
    subtrees = [_subtree(result, r.calls) if isinstance(r, Folded)
                else _subtree(result, [r]) if depth is not None and r.depth >= depth
                else own for r, own in zip(rows, groups, strict=True)]
    first = None if result.first is None else result.first.index
    shown = {r.index for r in rows if not isinstance(r, Folded)}
    labels = [_label(trace, r, ascii=ascii, first=first is not None and (
        getattr(r, "index", None) == first
        or (first not in shown and any(x.index == first for x in sub))))
        for r, sub in zip(rows, subtrees, strict=True)]
    tol = result.tolerance
    columns = [
        tree_column(labels, footer=""),
        _column("max_abs", "max abs", groups, lambda r: r.max_abs, max),
        _column("max_rel", "max rel", groups, lambda r: r.max_rel, max),
        _column("cosine", "cosine", groups, lambda r: r.cosine, min, digits=7),
        _column("sqnr", "SQNR dB", groups, lambda r: r.sqnr_db, min),
        _column("introduced", "introduced max abs", subtrees,
                lambda r: r.introduced_max_abs, max),
        GridColumn("origin", "error", [_origin(sub, tol) for sub in subtrees],
                   numeric=False, priority=60),
    ]
    return Grid(columns, caption=_caption(result, rows, depth, fold),
                notes=_unmatched(result))


def _label(trace: Trace, row: Row, *, ascii: bool, first: bool) -> str:
    mark = (" <- first" if ascii else " ◀ first") if first else ""
    if isinstance(row, Folded):
        return fold_text(trace, row.calls, ascii=ascii) + mark
    return tree_text(trace, row, ascii=ascii) + mark


def _column(name: str, header: str, groups: Sequence[Sequence[CallError]],
            pick: Callable[[CallError], float | None], worst: Callable[..., float], *,
            digits: int = 4) -> GridColumn:
    return GridColumn(name, header, [_cell(g, pick, worst, digits) for g in groups])


def _origin(group: Sequence[CallError], tolerance: float) -> str:
    kinds = {r.origin(tolerance) for r in group}
    return next((k for k in ("introduced", "propagated") if k in kinds),
                "" if group else "unmatched")


def _caption(result: CompareResult, rows: Sequence[object], depth: int | None,
             fold: bool) -> list[str]:
    settings = ", ".join(f"{k} {v}" for k, v in result.settings.items()) or "as side A"
    mem = result.memory
    parts = [f"side B: {settings}", f"tolerance {format_stat(result.tolerance)}",
             f"extra peak memory {format_bytes(mem.extra_peak_bytes)} (values "
             f"{format_bytes(mem.stored_bytes)}{' on disk' if mem.spilled else ''}, "
             f"copy {format_bytes(mem.copy_bytes)})"]
    runs, hidden = folded_rows([r for r in rows if isinstance(r, (Folded,))])
    if runs:
        parts.append(folded_caption(runs, hidden))
    deeper = hidden_deeper(result.trace_a, depth, fold=fold)
    if deeper:
        parts.append(f"{deeper} deeper rows hidden (depth={depth})")
    return parts


def _unmatched(result: CompareResult) -> list[str]:
    notes = []
    for side, calls in (("A", result.only_a), ("B", result.only_b)):
        if calls:
            names = [c.name or "<root>" for c in calls[:_LISTED]]
            more = f" and {len(calls) - _LISTED} more" if len(calls) > _LISTED else ""
            notes.append(f"only on side {side} ({len(calls)}): {', '.join(names)}{more}")
    return notes
