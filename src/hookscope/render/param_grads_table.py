"""The per-parameter gradient table of a traced backward (``hookscope trace
--backward``): one row per parameter of ``trace.param_grads``.

Reads only plain records (:class:`~hookscope.probes.grads.ParamGradStats`-shaped:
``path``, ``status``, ``norm``, ``max_abs``, ``mean``, ``nan_count``, ``inf_count``,
``aliases``): the statistics of the parameters that got a gradient, and the status of
those that did not (``unused``, ``frozen``, ``no_backward``), so an unused parameter
is named, not only left out. Laid out on the shared grid (``render/grid.py``).
"""

from __future__ import annotations

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
from hookscope.render.table import GridTable
from hookscope.render.units import format_stats

__all__ = ["param_grads_table"]


def param_grads_table(records: Sequence[Any], *, ascii: bool = False) -> GridTable:
    """A table of ``records`` (``trace.param_grads``), in their order."""

    def build(ascii: bool) -> Grid:
        names = [r.path + (f" (= {', '.join(r.aliases)})" if r.aliases else "")
                 for r in records]
        status = [r.status for r in records]

        def stat(name: str) -> list[str]:
            return format_stats([getattr(r, name) for r in records])  # one rule a column

        def count(name: str) -> list[str]:
            return [f"{getattr(r, name):,}" if getattr(r, name) else "" for r in records]

        styles = ["" if ascii or s in ("ok", "frozen") else "yellow" for s in status]
        columns = [
            GridColumn("parameter", "Parameter", names, numeric=False, priority=KEEP,
                       shorten=distinct_shortener(names), min_width=distinct_min(names, LABEL_MIN)),
            GridColumn("status", "Status", status, numeric=False, priority=95, styles=styles),
            GridColumn("norm", "|grad|", stat("norm"), priority=90),
            GridColumn("max_abs", "max |g|", stat("max_abs"), priority=70),
            GridColumn("mean", "mean", stat("mean"), priority=60),
            GridColumn("nan", "NaN", count("nan_count"), priority=80),
            GridColumn("inf", "Inf", count("inf_count"), priority=80),
        ]
        return Grid(columns, title=f"Gradients of {len(records):,} parameters")

    return GridTable(build, ascii=ascii)
