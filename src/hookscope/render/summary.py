"""The ``summary`` table: module tree, input and output shapes, parameters per call."""

from __future__ import annotations

from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table

from hookscope.core.records import Trace
from hookscope.render.table import (
    DEFAULT_WIDTH,
    format_count,
    format_shapes,
    params_cell,
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
        flops = trace.totals_flops is not None
        if flops:
            total = trace.totals_flops
            table.add_column(
                "FLOPs", justify="right",
                footer=format_count(total.forward if total else None)
                + ("+" if total and total.partial else ""),
            )
        for call in visible_calls(trace, self.depth):
            params, trainable = params_cell(trace, call)
            row: list[Any] = [
                tree_label(trace, call),
                format_shapes(call.inputs, root="args[0]"),
                format_shapes(call.outputs, root="out"),
                params,
                trainable,
            ]
            if flops:
                f = call.flops
                row.append("" if f is None else format_count(f.forward) + ("+" if f.partial else ""))
            table.add_row(*row)
        table.caption = self.caption()
        return table

    def caption(self) -> str:
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
        return " · ".join(parts)

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
