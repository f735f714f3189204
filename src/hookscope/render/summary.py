"""The ``summary`` table: module tree, input and output shapes, parameters per call."""

from __future__ import annotations

from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table

from hookscope.core.records import FlopCount, Trace
from hookscope.render.ops_table import uncounted_legend
from hookscope.render.table import (
    DEFAULT_WIDTH,
    format_count,
    format_shapes,
    params_cell,
    separator,
    table_box,
    to_text,
    tree_label,
    visible_calls,
)


class Summary:
    """Result of :func:`hookscope.summary`: print it, or read ``.trace``.

    Attributes:
        trace: the :class:`~hookscope.Trace` of the forward pass.
        depth: deepest module level shown (``None``: all).
    """

    def __init__(self, trace: Trace, *, depth: int | None = None) -> None:
        self.trace = trace
        self.depth = depth

    def table(self, *, ascii: bool = False) -> Table:
        trace = self.trace
        table = Table(box=table_box(ascii), show_footer=True, title=None)
        table.add_column("Layer (type)", footer="Total")
        table.add_column("Input shape")
        table.add_column("Output shape")
        table.add_column("Params", justify="right", footer=format_count(trace.model.params_total))
        table.add_column(
            "Trainable", justify="right", footer=format_count(trace.model.params_trainable)
        )
        flop_columns = _flop_columns(trace)
        for header, backward in flop_columns:
            table.add_column(
                header, justify="right", footer=_flops_text(trace.totals_flops, backward)
            )
        for call in visible_calls(trace, self.depth):
            params, trainable = params_cell(trace, call)
            row: list[Any] = [
                tree_label(trace, call, ascii=ascii),
                format_shapes(call.inputs, root="args[0]"),
                format_shapes(call.outputs, root="out"),
                params,
                trainable,
            ]
            row.extend(_flops_text(call.flops, backward) for _, backward in flop_columns)
            table.add_row(*row)
        table.caption = self.caption(ascii=ascii)
        return table

    def caption(self, *, ascii: bool = False) -> str:
        m = self.trace.model
        parts = [
            f"params: {m.params_total:,} ({m.params_trainable:,} trainable, "
            f"{m.params_total - m.params_trainable:,} frozen)",
            f"buffers: {m.buffers_total:,}",
            f"param size: {m.param_bytes / 2**20:,.2f} MiB",
        ]
        if self.trace.error is not None:
            err = self.trace.error
            parts.append(f"FAILED in {err.path!r}: {err.exception_type}: {err.message}")
        legend = uncounted_legend(self.trace)
        return separator(ascii).join(parts) + (f"\n{legend}" if legend else "")

    def to_json(self, *, indent: int | None = 2) -> str:
        return self.trace.to_json(indent=indent)

    def to_text(self, *, width: int = DEFAULT_WIDTH, ascii: bool = True) -> str:
        return to_text(self.table(ascii=ascii), width=width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table(ascii=console.no_color and not console.is_terminal)

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return f"<hookscope.Summary of {self.trace.model.class_name}: {len(self.trace)} calls>"


def _flop_columns(trace: Trace) -> list[tuple[str, bool]]:
    """(header, is_backward) of the FLOPs columns: none without the ops probe."""
    total = trace.totals_flops
    if total is None:
        return []
    if total.backward:
        return [("FLOPs fwd", False), ("FLOPs bwd", True)]
    return [("FLOPs", False)]


def _flops_text(f: FlopCount | None, backward: bool) -> str:
    """Exact count; ``+`` when an op without a formula ran inside (a lower bound)."""
    if f is None:
        return ""
    return format_count(f.backward if backward else f.forward) + ("+" if f.partial else "")
