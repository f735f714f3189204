"""The per-layer gradient table of ``hookscope grads``: one row per parameter.

Reads only plain values (a :class:`~hookscope.monitor.GradHistory`-shaped object and
a list of anomalies; no model, no tensor): the last norm, the median, min and max over
the steps, and the anomalies of that parameter, flagged. ``ascii=True`` draws with
``+-|`` and no colour, what pipes and tests get.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from hookscope.render.table import table_box
from hookscope.render.units import format_stat

__all__ = ["grads_table"]


def grads_table(history: Any, anomalies: Sequence[Any], *, ascii: bool = False) -> Table:
    """A table of ``history`` (``names``, ``column(name)``, ``steps``) with the
    ``anomalies`` (``path``, ``kind``, ``step``) of each parameter in its last column."""
    table = Table(box=table_box(ascii), title=f"Gradient norms over {len(history.steps)} steps")
    table.add_column("Parameter", no_wrap=True)
    for header in ("Last", "Median", "Min", "Max"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("Anomalies")
    flagged: dict[str, list[Any]] = {}
    for a in anomalies:
        flagged.setdefault(a.path, []).append(a)
    for name in history.names:
        values = history.column(name)
        finite = [v for v in values if math.isfinite(v)]
        last = values[-1] if values else None
        cells = [format_stat(last)]
        if finite:
            cells += [format_stat(statistics.median(finite)), format_stat(min(finite)),
                      format_stat(max(finite))]
        else:
            cells += ["", "", ""]
        note = _describe(flagged.get(name, []))
        style = "" if ascii or not note else "bold red"
        table.add_row(name, *cells, Text(note, style=style))
    return table


def _describe(found: Sequence[Any]) -> str:
    kinds: dict[str, list[int]] = {}
    for a in found:
        kinds.setdefault(a.kind, []).append(a.step)
    return "; ".join(
        f"{kind} at step {steps[0]}" + (f" (+{len(steps) - 1} more)" if len(steps) > 1 else "")
        for kind, steps in kinds.items()
    )
