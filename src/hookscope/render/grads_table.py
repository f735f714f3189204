"""The per-layer gradient table of ``hookscope grads``: one row per parameter.

Reads only plain values (a :class:`~hookscope.monitor.GradHistory`-shaped object and
a list of anomalies; no model, no tensor): the last norm, the median, min and max over
the steps, and the anomalies of that parameter, flagged. ``ascii=True`` draws plain
text without colour, what pipes and tests get.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from hookscope.render.grid import (
    KEEP,
    LABEL_MIN,
    Grid,
    GridColumn,
    distinct_min,
    distinct_shortener,
)
from hookscope.render.table import GridTable, plural
from hookscope.render.units import format_stats

__all__ = ["grads_table"]


def grads_table(history: Any, anomalies: Sequence[Any], *, ascii: bool = False,
                title: str = "Gradient norms", caption: Sequence[str] = ()) -> GridTable:
    """A table of ``history`` (``names``, ``column(name)``, ``steps``, ``had_gradient``)
    with the ``anomalies`` (``path``, ``kind``, ``step``) of each parameter in its last
    column, its rows in ``history``'s order; ``title`` is followed by "over N steps",
    ``caption`` (parts: how the values were made) goes under the table.

    Laid out as every table is (``render/grid.py``): at any width no number is cut;
    columns that do not fit are left out, least useful first, the caption naming them,
    before a long parameter path is shortened in the middle. Each column of numbers
    follows one rule (``render/units.format_stats``)."""

    def build(ascii: bool) -> Grid:
        flagged: dict[str, list[Any]] = {}
        for a in anomalies:
            flagged.setdefault(a.path, []).append(a)
        rows: list[list[float | None]] = []
        notes: list[str] = []
        none: list[bool] = []  # no gradient at the last step
        had = [history.had_gradient(r) for r in range(len(history.steps))]
        for i, name in enumerate(history.names):
            values = history.column(name)
            there = [row[i] for row in had]
            finite = [v for v, t in zip(values, there, strict=True) if t and math.isfinite(v)]
            last = values[-1] if values and there and there[-1] else None
            none.append(last is None)
            if finite:
                rows.append([last, statistics.median(finite), min(finite), max(finite)])
            else:
                rows.append([last, None, None, None])
            note = _describe(flagged.get(name, []))
            notes.append(note if any(there) or not there else (note or "no gradient"))
        names = list(history.names)
        styles = ["" if ascii or not n else "bold red" for n in notes]
        columns = [
            GridColumn("parameter", "Parameter", names, numeric=False, priority=KEEP,
                       shorten=distinct_shortener(names), min_width=distinct_min(names, LABEL_MIN)),
            # "-", not "nan", where the parameter had no gradient: a NaN gradient
            # shows "nan" (and is flagged non-finite)
            GridColumn("last", "Last", [c if not n else "-" for c, n in zip(
                format_stats([r[0] for r in rows]), none, strict=True)], priority=90),
            GridColumn("median", "Median", format_stats([r[1] for r in rows]), priority=60),
            GridColumn("min", "Min", format_stats([r[2] for r in rows]), priority=50),
            GridColumn("max", "Max", format_stats([r[3] for r in rows]), priority=70),
            GridColumn("anomalies", "Anomalies", notes, numeric=False, priority=80,
                       styles=styles),
        ]
        return Grid(columns, caption=list(caption),
                    title=f"{title} over {plural(len(history.steps), 'step')}")

    return GridTable(build, ascii=ascii)


def _describe(found: Sequence[Any]) -> str:
    kinds: dict[str, list[int]] = {}
    for a in found:
        kinds.setdefault(a.kind, []).append(a.step)
    return "; ".join(
        f"{kind} at step {steps[0]}" + (f" (+{len(steps) - 1} more)" if len(steps) > 1 else "")
        for kind, steps in kinds.items()
    )
