"""Terminal tables of traces and structures, built with rich.

Every renderer here builds a ``rich.table.Table`` from records and either hands it to
a console (``print_renderable``) or renders it to a string at a fixed width
(``to_text``). ``ascii=True`` draws with ``+-|`` and no colour, which is what pipes,
files and golden tests get.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from hookscope.core.records import Call, TensorMeta, Trace
from hookscope.core.tensors import shapes_text

if TYPE_CHECKING:
    from hookscope.core.structure import ModelInfo

DEFAULT_WIDTH = 120


def make_console(
    *, file: Any = None, width: int | None = None, color: bool | None = None
) -> Console:
    """A console for ``file`` (default stdout): colour only on a terminal unless forced."""
    file = file if file is not None else sys.stdout
    is_tty = bool(getattr(file, "isatty", lambda: False)())
    use_color = is_tty if color is None else color
    return Console(
        file=file,
        width=width or (None if is_tty else DEFAULT_WIDTH),
        color_system="auto" if use_color else None,
        no_color=not use_color,
        force_terminal=use_color if color is not None else None,
        highlight=False,
        soft_wrap=False,
    )


def to_text(renderable: Any, *, width: int = DEFAULT_WIDTH, color: bool = False) -> str:
    """Render ``renderable`` to a string at a fixed width."""
    buf = io.StringIO()
    console = Console(
        file=buf, width=width, color_system="standard" if color else None,
        no_color=not color, force_terminal=color, highlight=False,
    )
    console.print(renderable)
    return buf.getvalue()


def table_box(ascii: bool) -> box.Box:
    return box.ASCII2 if ascii else box.SIMPLE_HEAD


def format_count(n: int | None) -> str:
    """``1234567`` -> ``1,234,567``; ``None`` -> empty."""
    return "" if n is None else f"{n:,}"


def format_shapes(metas: Sequence[TensorMeta], *, root: str = "out") -> str:
    """One line per tensor; the path is shown unless it is a bare root (``args[0]``,
    ``out``); see :func:`hookscope.core.tensors.shapes_text`."""
    return shapes_text(metas)


def separator(ascii: bool) -> str:
    """What joins the parts of a caption: `` | `` in plain ASCII, `` · `` otherwise."""
    return " | " if ascii else " · "


def tree_label(trace: Trace, call: Call, *, ascii: bool = False) -> Text:
    """Indented ``name (Class)`` label of a call for the tree column."""
    name = call.path.rsplit(".", 1)[-1] if call.path else trace.model.class_name
    label = Text("  " * call.depth)
    label.append(name, style="bold" if call.depth == 0 else "")
    if call.call_index:
        label.append(f"#{call.call_index}", style="dim")
    if call.path:
        label.append(f" ({call.module_class})", style="cyan")
    if call.error:
        label.append("  x raised" if ascii else "  ✗ raised", style="bold red")
    elif trace.stop is not None and trace.stop.call == call.index:
        label.append("  stopped" if ascii else "  ■ stopped", style="bold yellow")
    return label


def visible_calls(trace: Trace, depth: int | None) -> list[Call]:
    return [c for c in trace.calls if depth is None or c.depth <= depth]


def params_cell(trace: Trace, call: Call) -> tuple[str, str]:
    """(params, trainable) cells: counts on a module's first call, ``(reused)`` after."""
    info = trace.modules.get(call.path)
    if info is None:
        return "", ""
    if call.call_index:
        return "(reused)", ""
    return format_count(info.total_params), format_count(info.trainable_params)


def render_trace_text(trace: Trace, *, width: int = DEFAULT_WIDTH) -> str:
    """The trace table (``render/trace_table.py``) of a trace as plain ASCII text."""
    from hookscope.render.trace_table import render_trace

    return render_trace(trace, width=width)


def render_structure_text(info: ModelInfo, *, width: int = DEFAULT_WIDTH) -> str:
    """The module tree of :func:`hookscope.inspect` as plain ASCII text."""
    return to_text(structure_table(info, ascii=True), width=width)


def structure_table(info: ModelInfo, *, ascii: bool = False) -> Table:
    table = Table(box=table_box(ascii), title=f"{info.class_name} structure")
    for col in ("Module", "Class"):
        table.add_column(col)
    for col in ("Params", "Trainable", "Buffers"):
        table.add_column(col, justify="right")
    for m in info.modules.values():
        name = ("  " * m.depth) + (m.path.rsplit(".", 1)[-1] if m.path else info.class_name)
        if m.aliases:
            name += f" (= {', '.join(m.aliases)})"
        table.add_row(
            name, m.class_name, format_count(m.total_params),
            format_count(m.trainable_params), format_count(m.own_buffers) if m.own_buffers else "",
        )
    tied = f", {len(info.tied)} tied counted once" if info.tied else ""
    table.caption = separator(ascii).join([
        f"params: {info.total_params:,} ({info.trainable_params:,} trainable, "
        f"{info.frozen_params:,} frozen{tied})",
        f"buffers: {info.total_buffers:,}",
        f"param bytes: {info.param_bytes:,}",
    ])
    return table
