"""A trace diff as a table and as one line (``render/``'s grid, like every table).

One row per call, most changed first: the layer (``a -> b`` where the paths differ,
with its class), its status, the structural changes (parameters, shapes), then one
column per compared fact that changed somewhere, each cell ``+3.30 ms (+275%)``: the
change in the fact's unit and relative to side A (``x8.1`` from ten times on). Amount
columns (time, counts, bytes) are left out last when the width is short, statistics
first. ``top`` rows are shown; the caption says how many more there are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hookscope.compare.diff_calls import CallDiff
from hookscope.compare.diff_facts import AMOUNTS, FactChange, FactSpec
from hookscope.core.records.facts import Unit
from hookscope.render.columns import format_value
from hookscope.render.grid import (
    KEEP,
    LABEL_MIN,
    Grid,
    GridColumn,
    distinct_min,
    distinct_shortener,
)
from hookscope.render.table import GridTable
from hookscope.render.units import format_count

if TYPE_CHECKING:
    from hookscope.compare.diff_result import TraceDiff

__all__ = ["answer", "change_text", "diff_table", "label", "relative_text", "structure_text"]


def relative_text(change: FactChange, *, ascii: bool = False) -> str:
    """``+22%``, ``-5%``, ``×8.1`` (ten times or more), ``from 0``; empty when none."""
    rel = change.relative
    if rel is None or math.isnan(rel):
        return ""
    if math.isinf(rel):
        return "from 0"
    if abs(rel) >= 9 and change.a and change.b is not None:
        return f"{'x' if ascii else '×'}{change.b / change.a:.1f}"
    return f"{rel * 100:+.0f}%"


def _amount(value: float | int, unit: Unit, *, ascii: bool) -> str:
    if unit in (Unit.TIME_NS, Unit.BYTES, Unit.COUNT):
        value = round(value)
    return format_value(value, unit, ascii=ascii)


def change_text(change: FactChange, *, ascii: bool = False) -> str:
    """A cell: ``+3.30 ms (+275%)``; a value of one side only as it is; empty when
    the fact did not change."""
    delta = change.delta
    if delta is None:
        value = change.a if change.a is not None else change.b
        return "" if value is None else _amount(value, change.unit, ascii=ascii)
    if not change.changed:
        return ""
    sign = "+" if delta >= 0 else "-"
    text = f"{sign}{_amount(abs(delta), change.unit, ascii=ascii)}"
    rel = relative_text(change, ascii=ascii)
    return f"{text} ({rel})" if rel else text


def _arrow(ascii: bool) -> str:
    return " -> " if ascii else " → "


def label(row: CallDiff, *, ascii: bool = False) -> str:
    """``layer1.0.conv1 (Conv2d)``; ``fc -> head (Linear)`` where the paths differ;
    ``fc (Linear -> Conv1d)`` for a replaced module."""
    arrow = _arrow(ascii)
    name = row.name or "<root>"
    if row.path_a is not None and row.path_b is not None and row.path_a != row.path_b:
        name = f"{row.path_a or '<root>'}{arrow}{row.path_b or '<root>'}"
        name += f"#{row.call_index}" if row.call_index else ""
    classes = row.class_a if row.class_b in (None, row.class_a) else \
        row.class_b if row.class_a is None else f"{row.class_a}{arrow}{row.class_b}"
    return f"{name} ({classes})"


def _side(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, int) and not isinstance(value, bool):
        return format_count(value)
    return str(value)


def structure_text(row: CallDiff, *, ascii: bool = False, shapes: bool = False) -> str:
    """``params 1,000 -> 2,000`` (the class is in the label); with ``shapes``, the
    other non-numeric changes instead: ``outputs [1, 10] -> [8, 10]``."""
    arrow = _arrow(ascii)
    parts = []
    for name, (a, b) in row.changes.items():
        if name == "class" or (name == "params") == shapes:
            continue
        if row.status in ("added", "removed"):
            parts.append(f"{name} {_side(a if b is None else b)}")
        else:
            parts.append(f"{name} {_side(a)}{arrow}{_side(b)}")
    return "; ".join(parts)


def _fact_columns(result: TraceDiff, rows: Sequence[CallDiff], *, ascii: bool,
                  ) -> list[GridColumn]:
    columns = []
    for rank, spec in enumerate(_changed_facts(result.facts, rows)):
        cells = [change_text(r.facts[spec.name], ascii=ascii) if spec.name in r.facts else ""
                 for r in rows]
        priority = (80 if spec.unit in AMOUNTS else 40) - min(rank, 30)
        if spec.name == result.sort:
            priority = 90
        columns.append(GridColumn(spec.name, f"{spec.header} Δ" if not ascii else
                                  f"{spec.header} change", cells, priority=priority))
    return columns


def _shows(change: FactChange | None) -> bool:
    """A change, or a value other than 0 on a side that has the call alone."""
    if change is None or not change.changed:
        return False
    return change.delta is not None or (change.a or change.b or 0) != 0


def _changed_facts(facts: Sequence[FactSpec], rows: Sequence[CallDiff]) -> list[FactSpec]:
    return [s for s in facts if any(_shows(r.facts.get(s.name)) for r in rows)]


def diff_table(result: TraceDiff, *, top: int | None = 20, ascii: bool = False,
               more_hint: str = "top=None shows them") -> GridTable:
    """``result``'s rows as a table, the :func:`answer` as its title.

    Args:
        result: the diff.
        top: the most rows shown, most changed first (``None``: all).
        ascii: plain ASCII characters only.
        more_hint: how the caption says to show the rows left out.
    """
    rows = result.rows if top is None else result.rows[:top]

    def build(ascii: bool) -> Grid:
        labels = [label(r, ascii=ascii) for r in rows]
        columns = [
            GridColumn("layer", "Layer (type)", labels, numeric=False, priority=KEEP,
                       shorten=distinct_shortener(labels),
                       min_width=distinct_min(labels, LABEL_MIN)),
            GridColumn("status", "Status", [r.status for r in rows], numeric=False,
                       priority=95),
            GridColumn("structure", "Structure", [structure_text(r, ascii=ascii) for r in rows],
                       numeric=False, priority=85),
            GridColumn("shapes", "Shapes", [structure_text(r, ascii=ascii, shapes=True)
                                            for r in rows], numeric=False, priority=60),
            *_fact_columns(result, rows, ascii=ascii),
        ]
        columns = [c for c in columns if c.priority >= 95 or any(c.cells)]
        return Grid(columns, caption=_caption(result, len(rows), more_hint),
                    title=answer(result, ascii=ascii))

    return GridTable(build, ascii=ascii)


def _caption(result: TraceDiff, shown: int, more_hint: str) -> list[str]:
    order = f"ranked by the change of {result.sort}" if result.sort else \
        "ranked by the largest relative change (structure first)"
    parts = [f"A: {result.a.model.class_name}, B: {result.b.model.class_name}", order]
    if result.matching.unwrapped:
        parts.append("wrapper prefixes removed on side " + " and ".join(
            s.upper() for s in result.matching.unwrapped))
    hidden = len(result.rows) - shown
    if hidden:
        parts.append(f"{hidden:,} more row{'s' if hidden > 1 else ''} ({more_hint})")
    return parts


def answer(result: TraceDiff, *, ascii: bool = False) -> str:
    """The diff in one line: the call that changed most and by what, then the
    structural changes (calls of one side only, replaced modules, parameters)."""
    arrow = _arrow(ascii)
    matched = [r for r in result.rows if r.path_a is not None and r.path_b is not None]
    top = max(matched, key=lambda r: (r.score(result.sort), r.depth), default=None)
    fact = None if top is None else (
        top.facts.get(result.sort) if result.sort else top.largest())
    if top is None or fact is None or not fact.changed:
        head = f"No fact changed in the {len(matched):,} matched calls"
    else:
        spec = next(s for s in result.facts if s.name == fact.name)
        values = (f"{_amount(fact.a, fact.unit, ascii=ascii)}{arrow}"
                  f"{_amount(fact.b, fact.unit, ascii=ascii)}"
                  if fact.a is not None and fact.b is not None else "")
        rel = relative_text(fact, ascii=ascii)
        head = (f"Most changed: {label(top, ascii=ascii)}, {spec.header} {values}"
                + (f" ({rel})" if rel else ""))
    parts = [head]
    counts = [(len(result.matching.only_a), "only in A"), (len(result.matching.only_b),
              "only in B"), (sum(r.status == "replaced" for r in result.rows), "replaced")]
    said = [f"{n:,} call{'s' if n > 1 else ''} {what}" for n, what in counts if n]
    if said:
        parts.append(", ".join(said))
    pa, pb = result.a.model.params_total, result.b.model.params_total
    parts.append(f"parameters {pa:,}{arrow}{pb:,}" if pa != pb else "parameters unchanged")
    return "; ".join(parts)
