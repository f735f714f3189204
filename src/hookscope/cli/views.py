"""Pick the renderer for a command's result and output format.

Each function maps a result (a :class:`~hookscope.Summary`, a
:class:`~hookscope.Trace`, a :class:`~hookscope.ModelInfo`) and a format name to a
:class:`~hookscope.cli.output.Rendered`. The renderers themselves live in
``hookscope.render``; nothing here formats a number.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.text import Text

from hookscope.cli.output import Rendered

if TYPE_CHECKING:
    from hookscope.core.records import Trace
    from hookscope.core.structure import ModelInfo
    from hookscope.render.summary import Summary


SUMMARY_TOP_OPS = 10
"""``summary --ops`` lists this many op types, heaviest first (``trace --ops`` takes --top)."""


@dataclass(frozen=True)
class TraceView:
    """How ``hookscope trace`` shows a trace as a table.

    Attributes:
        columns: the columns to show (``None``: the renderer's default set).
        sort: sort calls by this column, largest first (``None``: call order).
        top: show only this many calls (and ops, with ``ops``).
        depth: show modules down to this depth.
        ops: add the per-op table (FLOPs by aten op).
    """

    columns: Sequence[str] | None = None
    sort: str | None = None
    top: int | None = None
    depth: int | None = None
    ops: bool = False


def check_trace_view(view: TraceView, fmt: str) -> None:
    """Reject unknown table columns before the model runs.

    Raises:
        RenderError: ``--columns`` or ``--sort`` names a column the table does not have.
    """
    if fmt != "table":
        return
    from hookscope.render.trace_table import column

    for name in [*(view.columns or ()), *([view.sort] if view.sort else [])]:
        column(name)


def summary_view(result: Summary, fmt: str, *, ops: bool = False) -> Rendered:
    """The summary table (plus the per-op table with ``ops``), or its JSON document."""
    if fmt == "json":
        return Rendered.of_text(result.to_json())

    def build(ascii: bool) -> list[Any]:
        tables: list[Any] = [result.table(ascii=ascii)]
        if ops:
            tables.append(_ops_table(result.trace, top=SUMMARY_TOP_OPS, ascii=ascii))
        return tables

    return Rendered.of_tables(build)


def trace_view(trace: Trace, fmt: str, view: TraceView) -> Rendered:
    """The trace table (plus the per-op table), its JSON document, or its CSV rows."""
    if fmt == "json":
        return Rendered.of_text(trace.to_json())
    if fmt == "csv":
        from hookscope.render.export import trace_to_csv

        columns = None if view.columns is None else list(view.columns)
        return Rendered.of_text(trace_to_csv(trace, columns=columns))
    from hookscope.render.trace_table import trace_table

    def build(ascii: bool) -> list[Any]:
        tables: list[Any] = [
            trace_table(
                trace, columns=None if view.columns is None else list(view.columns),
                sort=view.sort, top=view.top, depth=view.depth, ascii=ascii,
            )
        ]
        if view.ops:
            tables.append(_ops_table(trace, top=view.top, ascii=ascii))
        repeat = trace.meta.get("repeat")
        if repeat:
            tables.append(Text(f"times are medians of {repeat} runs"))
        return tables

    return Rendered.of_tables(build)


def structure_view(info: ModelInfo, fmt: str) -> Rendered:
    """The module tree of ``hookscope inspect``, or its JSON document."""
    if fmt == "json":
        from hookscope.cli.structure import structure_to_json

        return Rendered.of_text(structure_to_json(info))
    from hookscope.render.table import structure_table

    return Rendered.of_tables(lambda ascii: [structure_table(info, ascii=ascii)])


def _ops_table(trace: Trace, *, top: int | None, ascii: bool) -> Any:
    from hookscope.render.ops_table import ops_table

    return ops_table(trace, top=top, ascii=ascii)
