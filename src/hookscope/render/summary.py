"""The ``summary`` table: module tree, input and output shapes, parameters per call.

Repeated blocks are folded (``render/fold.py``): the first block expanded, one row for
the rest with their parameters and FLOPs summed; ``fold=False`` shows every row. The
caption gives parameter counts, buffers as a count and in bytes, and a memory line:
parameter and buffer bytes, the bytes of the leaf calls' outputs (what torchinfo
estimates as the forward pass size), the bytes autograd saved for backward when the
memory probe measured them, and their total.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cache

from rich.console import Console, ConsoleOptions, RenderResult

from hookscope.core.records.trace import Call, Trace
from hookscope.core.records.values import TensorMeta
from hookscope.flops.registry import flops_text
from hookscope.render.columns import PRIORITY
from hookscope.render.compiled_notes import compiled_notes
from hookscope.render.fold import Folded, Row, folded_rows, tree_rows
from hookscope.render.grid import Grid, GridColumn, folded_caption, shapes_min, wrap_shapes
from hookscope.render.labels import (
    ended_early,
    fold_text,
    shapes_cell,
    shared_here,
    tied_here,
    tied_names,
    tree_text,
)
from hookscope.render.ops_table import uncounted_legend
from hookscope.render.table import (
    DEFAULT_WIDTH,
    GridTable,
    plural,
    terminal_width,
    tree_column,
)
from hookscope.render.units import format_bytes, format_count


class Summary:
    """Result of :func:`hookscope.summary`: print it, or read ``.trace``.

    In Jupyter it shows as an HTML table (``_repr_html_``); ``repr()`` is one line.

    Attributes:
        trace: the :class:`~hookscope.Trace` of the forward pass.
        depth: deepest module level shown (``None``: all).
        fold: repeated blocks shown as one row (``False``: every row).
        depth_hint: the caption says how many deeper rows ``depth`` hides (the CLI
            sets it when it chose the depth).
    """

    def __init__(
        self, trace: Trace, *, depth: int | None = None, fold: bool = True,
        depth_hint: bool = False,
    ) -> None:
        self.trace = trace
        self.depth = depth
        self.fold = fold
        self.depth_hint = depth_hint

    def table(self, *, ascii: bool = False) -> GridTable:
        """The table, ready for ``console.print`` or ``to_text``."""
        return GridTable(self.grid, ascii=ascii)

    def grid(self, ascii: bool = False) -> Grid:
        """The table's cells (plain ASCII when ``ascii``)."""
        trace = self.trace
        rows = tree_rows(trace, depth=self.depth, fold=self.fold)
        labels = [fold_text(trace, r.calls, ascii=ascii) if isinstance(r, Folded)
                  else tree_text(trace, r, ascii=ascii) for r in rows]
        ins = [shapes_cell(_first(r).inputs) for r in rows]
        outs = [shapes_cell(_first(r).outputs) for r in rows]
        m = trace.model
        cols = [
            tree_column(labels),
            GridColumn("input", "Input shape", ins, numeric=False, priority=PRIORITY["input"],
                       wrap=wrap_shapes, wrap_min=shapes_min(ins)),
            GridColumn("output", "Output shape", outs, numeric=False,
                       priority=PRIORITY["output"], wrap=wrap_shapes, wrap_min=shapes_min(outs)),
            GridColumn("params", "Params", [_params(trace, r) for r in rows],
                       footer=format_count(m.params_total), priority=90),
        ]
        if m.params_trainable != m.params_total:
            cols.append(GridColumn(
                "trainable", "Trainable", [_params(trace, r, trainable=True) for r in rows],
                footer=format_count(m.params_trainable), priority=40))
        total = trace.facts.get("totals_flops")
        if total is not None:
            both = bool(total.backward)
            cols.append(GridColumn(
                "flops_fwd", "FLOPs fwd" if both else "FLOPs",
                [_flops(r, False) for r in rows], footer=flops_text(total, False),
                priority=78))
            if both:
                cols.append(GridColumn(
                    "flops_bwd", "FLOPs bwd", [_flops(r, True) for r in rows],
                    footer=flops_text(total, True), priority=65))
        grid = Grid(cols, self.caption_parts(rows), self.notes(rows))
        return grid

    def caption_parts(self, rows: Sequence[Row] | None = None) -> list[str]:
        """The parts of the caption under the table (totals, sizes), for ``rows``."""
        trace = self.trace
        m = trace.model
        rows = tree_rows(trace, depth=self.depth, fold=self.fold) if rows is None else rows
        parts = [
            f"params: {m.params_total:,} ({m.params_trainable:,} trainable, "
            f"{m.params_total - m.params_trainable:,} frozen)",
            f"buffers: {plural(m.buffers_total, 'element')} ({format_bytes(m.buffer_bytes)})",
            f"param size: {format_bytes(m.param_bytes)}",
        ]
        sharded = trace.meta.get("sharded")
        if sharded:  # FSDP2: the counts are the full parameters'; this rank holds less
            local = sum(n for _, n in sharded.values())
            parts.append(f"sharded: {len(sharded)} params, {local:,} elements on rank "
                         f"{trace.meta.get('rank')}")
        runs, hidden = folded_rows(rows)
        if runs:
            parts.append(folded_caption(runs, hidden))
        if self.depth_hint:
            from hookscope.render.trace_table import depth_caption

            parts.extend(depth_caption(trace, self.depth, fold=self.fold))
        parts.extend(ended_early(trace))
        return parts

    def notes(self, rows: Sequence[Row]) -> list[str]:
        """The lines under the table for ``rows``: memory, tied and shared modules."""
        out = [memory_line(self.trace)]
        trace = self.trace
        for r in rows:
            if isinstance(r, Call) and tied_here(trace, r):
                named = tied_names(trace, r.path)
                what = ", ".join(f"{a} is {b}" for a, b in named) if named else (
                    f"{r.path} holds {tied_here(trace, r):,} params counted at another path")
                out.append(f"[tied] {what} (counted once in the totals)")
            elif isinstance(r, Call) and (shared := shared_here(trace, r)):
                out.append(f"[shared] {r.path or '<root>'} holds {', '.join(shared[:3])}"
                           f"{' ...' if len(shared) > 3 else ''}, registered first there "
                           "(counted once in the totals)")
            elif isinstance(r, Folded) and (shared := sorted(
                    {p for c in r.calls for p in shared_here(trace, c)})):
                out.append(f"[shared] {r.calls[0].path} ... {r.calls[-1].path} hold "
                           f"{', '.join(shared[:3])}{' ...' if len(shared) > 3 else ''}, "
                           "registered first there (counted once in the totals)")
        legend = uncounted_legend(trace)
        return out + ([legend] if legend else []) + compiled_notes(trace)

    def caption(self, *, ascii: bool = False) -> str:
        """The caption and notes as text (what is printed under the table)."""
        sep = " | " if ascii else " · "
        rows = tree_rows(self.trace, depth=self.depth, fold=self.fold)
        return "\n".join([sep.join(self.caption_parts(rows)), *self.notes(rows)])

    def to_json(self, *, indent: int | None = 2) -> str:
        """The summary as a JSON document."""
        return self.trace.to_json(indent=indent)

    def to_text(self, *, width: int = DEFAULT_WIDTH, ascii: bool = True) -> str:
        """The table as plain text ``width`` characters wide."""
        return self.table(ascii=ascii).to_text(width=width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table(ascii=console.no_color and not console.is_terminal)

    def to_html(self, path: str | os.PathLike[str] | None = None) -> str:
        """The report page of the summary's trace (``Trace.to_html``), written to
        ``path`` when one is given.

        Raises:
            SpecError: ``path``'s folder does not exist, or ``path`` is a folder.
        """
        from hookscope.render.report import trace_report, write_html

        html = trace_report(self.trace, fold=self.fold,
                            title=f"hookscope summary: {self.trace.model.class_name}")
        if path is not None:
            write_html(html, path)
        return html

    def _repr_html_(self) -> str:
        from hookscope.render.notebook import grid_html

        return grid_html(self.grid(False))

    def __str__(self) -> str:
        return self.to_text(width=terminal_width())

    def __repr__(self) -> str:
        return f"<hookscope.Summary of {self.trace.model.class_name}: {len(self.trace)} calls>"


def _first(row: Row) -> Call:
    return row.calls[0] if isinstance(row, Folded) else row


def _params(trace: Trace, row: Row, *, trainable: bool = False) -> str:
    calls = row.calls if isinstance(row, Folded) else (row,)
    if len(calls) == 1 and calls[0].call_index and calls[0].path in trace.modules:
        return "(reused)"
    total, found = 0, False
    for c in calls:
        info = trace.modules.get(c.path)
        if info is not None and not c.call_index:
            total += info.trainable_params if trainable else info.total_params
            found = True
    return format_count(total) if found else ""


def _flops(row: Row, backward: bool) -> str:
    calls = row.calls if isinstance(row, Folded) else (row,)
    counts = [c.facts.get("flops") for c in calls]
    if all(f is None for f in counts):
        return ""
    total = sum((f.backward if backward else f.forward) for f in counts if f is not None)
    return format_count(total) + ("+" if any(f is not None and f.partial for f in counts) else "")



@cache
def _itemsize(dtype: str) -> int:
    import torch

    found = getattr(torch, dtype, None)
    return found.itemsize if isinstance(found, torch.dtype) else 0


def tensor_bytes(metas: Sequence[TensorMeta]) -> int:
    """``numel * itemsize`` of each tensor (a ragged one counts 0)."""
    return sum(max(m.numel, 0) * _itemsize(m.dtype) for m in metas)


def memory_line(trace: Trace) -> str:
    """``memory: params 1.75 KiB + buffers 0 B + leaf outputs 12.0 KiB = 13.8 KiB``."""
    m = trace.model
    leaves = [c for c in trace.calls if not c.children]
    measured = "memory" in trace.probes
    outputs = 0
    saved: int | None = None
    for c in leaves:
        rec = c.facts.get("memory") if measured else None
        out = rec.output_bytes if rec is not None else None
        outputs += out if out is not None else tensor_bytes(c.facts.get("outputs", ()))
    if measured:
        values = [r.saved_bytes for c in trace.calls
                  if (r := c.facts.get("memory")) is not None and r.saved_bytes is not None]
        saved = sum(values) if values else None
    parts = [("params", m.param_bytes), ("buffers", m.buffer_bytes), ("leaf outputs", outputs)]
    if saved is not None:
        parts.append(("saved for backward", saved))
    total = sum(v for _, v in parts)
    body = " + ".join(f"{name} {format_bytes(v)}" for name, v in parts)
    return f"memory: {body} = {format_bytes(total)}"
