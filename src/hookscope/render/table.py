"""Tables of traces and structures: one :class:`GridTable` per table, drawn three ways.

Every renderer here builds a :class:`~hookscope.render.grid.Grid` of finished cell
text and wraps it in a :class:`GridTable`, which

- prints as plain text (``str()``, ``to_text``, a pipe, a file: ``render/plain.py``,
  no rich, a few milliseconds per hundred rows);
- renders as a rich table on a terminal (``console.print(table)``), fitted to the
  console's width, with colour;
- shows as HTML in Jupyter (``_repr_html_``, ``render/notebook.py``).

Whatever the width, no number is cut: columns that do not fit are left out, lowest
priority first, and the caption says which (``render/grid.py``).
"""

from __future__ import annotations

import io
import os
import shutil
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from hookscope.render.fold import FoldedModules, StructureRow, structure_rows
from hookscope.render.grid import (
    PYTHON,
    Fitted,
    Grid,
    GridColumn,
    Wording,
    fit,
    folded_caption,
    wrap_header,
)
from hookscope.render.labels import (
    structure_fold_text,
    structure_text,
    tree_min,
    tree_shortener,
)
from hookscope.render.plain import GAP, draw
from hookscope.render.units import format_bytes, format_count

if TYPE_CHECKING:
    from hookscope.core.model.structure import ModelInfo
    from hookscope.core.records.module_records import ModuleInfo

DEFAULT_WIDTH = 120
RICH_GAP = GAP
"""Columns are as far apart on a terminal (a divider and a padding) as in plain text, so
the same width gives the same layout in both."""


def make_console(
    *, file: Any = None, width: int | None = None, color: bool | None = None
) -> Console:
    """A console for ``file`` (default stdout): colour only on a terminal unless forced;
    as wide as ``width``, else the terminal, else :func:`pipe_width`."""
    file = file if file is not None else sys.stdout
    is_tty = bool(getattr(file, "isatty", lambda: False)())
    use_color = is_tty if color is None else color
    return Console(
        file=file,
        width=width or (None if is_tty else pipe_width()),
        color_system="auto" if use_color else None,
        no_color=not use_color,
        force_terminal=use_color if color is not None else None,
        highlight=False,
        soft_wrap=False,
    )


def to_text(renderable: Any, *, width: int = DEFAULT_WIDTH, color: bool = False) -> str:
    """Render ``renderable`` to a string at a fixed width (a :class:`GridTable` without
    colour is drawn as plain text, without rich)."""
    if isinstance(renderable, GridTable) and not color:
        return renderable.to_text(width=width)
    buf = io.StringIO()
    console = Console(
        file=buf, width=width, color_system="standard" if color else None,
        no_color=not color, force_terminal=color, highlight=False,
    )
    console.print(renderable)
    return buf.getvalue()


def pipe_width() -> int:
    """The width of a table written to a pipe or a file: ``COLUMNS`` when it is set
    (as rich and most command-line tools read it), else :data:`DEFAULT_WIDTH`."""
    columns = os.environ.get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and int(columns) > 0 else DEFAULT_WIDTH


def terminal_width() -> int:
    """The terminal's width when there is one (``COLUMNS`` when set), else
    :data:`DEFAULT_WIDTH`: what ``print(table)`` in a script is drawn at."""
    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns or DEFAULT_WIDTH


def table_box(ascii: bool) -> box.Box:
    return box.ASCII2 if ascii else box.SIMPLE_HEAD


def separator(ascii: bool) -> str:
    """What joins the parts of a caption: `` | `` in plain ASCII, `` · `` otherwise."""
    return " | " if ascii else " · "


class GridTable:
    """A table ready to draw at any width (see the module docstring).

    Attributes:
        build: ``build(ascii) -> Grid``: the table's cells, in ASCII or not.
        ascii: how it was asked for (``str()`` always draws ASCII).
        wording: how the caption says to see columns left out (the command line sets
            its own: ``--width``, ``--columns``).
    """

    def __init__(self, build: Callable[[bool], Grid], *, ascii: bool = False,
                 wording: Wording = PYTHON) -> None:
        self.build = build
        self.ascii = ascii
        self.wording = wording
        self._grids: dict[bool, Grid] = {}

    def grid(self, ascii: bool | None = None) -> Grid:
        key = self.ascii if ascii is None else ascii
        if key not in self._grids:
            self._grids[key] = self.build(key)
        return self._grids[key]

    @property
    def caption(self) -> str | None:
        """The caption and notes as one text (``None``: none)."""
        grid = self.grid()
        parts = [separator(self.ascii).join(grid.caption)] if grid.caption else []
        return "\n".join(parts + grid.notes) or None

    def to_text(self, *, width: int = DEFAULT_WIDTH) -> str:
        """Plain ASCII text at ``width`` characters."""
        return draw(self.fit(width, ascii=True))

    def fit(self, width: int, *, ascii: bool) -> Fitted:
        """The table laid out at ``width`` (``render/grid.py``): what is kept, how wide."""
        return fit(self.grid(ascii), width, gap=GAP, sep=separator(ascii),
                   wording=self.wording)

    def __str__(self) -> str:
        return self.to_text(width=terminal_width())

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        if self.ascii or (console.no_color and not console.is_terminal):
            for line in self.to_text(width=width).splitlines():
                yield Segment(line)
                yield Segment.line()
            return
        fitted = self.fit(width, ascii=False)
        yield to_rich(fitted)
        for line in fitted.caption:
            yield Text(line, style="dim", no_wrap=True, overflow="ignore")

    def _repr_html_(self) -> str:
        from hookscope.render.notebook import grid_html

        return grid_html(self.grid(False))


def to_rich(fitted: Fitted) -> Table:
    """A fitted grid as a rich table (colour, box characters), every column its width."""
    table = Table(
        box=box.SIMPLE_HEAD, show_footer=any(c.footer for c in fitted.columns),
        pad_edge=False, show_edge=False, title=fitted.title,
        padding=(0, 0, 0, RICH_GAP - 1),  # a divider and a left padding: RICH_GAP apart
    )
    for col, width in zip(fitted.columns, fitted.widths, strict=True):
        table.add_column(
            "\n".join(wrap_header(col.header, width)), footer=col.footer,
            justify="right" if col.numeric else "left", no_wrap=True,
            min_width=width, max_width=width,
        )
    tree = fitted.columns[0] if fitted.columns else None
    for r in range(len(tree.cells) if tree is not None else 0):
        cells: list[Any] = []
        for i, col in enumerate(fitted.columns):
            style = col.styles[r] if col.styles else ""
            text = Text(col.cells[r], style=style)
            if i == 0:
                text.highlight_regex(r"\([A-Za-z_][\w.…]*\)", "cyan")
            cells.append(text)
        table.add_row(*cells)
    return table


def tree_column(cells: list[str], *, footer: str = "Total", header: str = "Layer (type)",
                styles: list[str] | None = None) -> GridColumn:
    """The first column of a tree table: never left out, shortened class first."""
    return GridColumn(
        "layer", header, cells, footer=footer, numeric=False, priority=1000,
        shorten=tree_shortener(cells), min_width=tree_min(cells), styles=styles or (),
    )


def _first_module(row: StructureRow) -> ModuleInfo:
    return row.modules[0] if isinstance(row, FoldedModules) else row


def _total(m: ModuleInfo) -> int:
    return m.total_params


def _trainable(m: ModuleInfo) -> int:
    return m.trainable_params


def plural(n: int, noun: str) -> str:
    """``1 element``, ``2,048 elements``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def render_structure_text(info: ModelInfo, *, width: int | None = None) -> str:
    """The module tree of :func:`hookscope.inspect` as plain ASCII text (``print(info)``:
    as wide as the terminal, :func:`terminal_width`)."""
    return structure_table(info, ascii=True).to_text(width=width or terminal_width())


def structure_html(info: ModelInfo) -> str:
    """The module tree of :func:`hookscope.inspect` as an HTML table (Jupyter)."""
    return structure_table(info)._repr_html_()


def structure_table(info: ModelInfo, *, ascii: bool = False, fold: bool = True) -> GridTable:
    """The module tree of :func:`hookscope.inspect`: params, trainable, buffers; runs
    of identical blocks folded as in a summary (``fold=False``: every module)."""

    def build(ascii: bool) -> Grid:
        rows = structure_rows(info, fold=fold)
        tied_at: dict[str, list[str]] = {}
        for later, first in info.tied.items():
            tied_at.setdefault(later.rpartition(".")[0], []).append(f"{later} = {first}")

        def label(row: StructureRow) -> str:
            if isinstance(row, FoldedModules):
                return structure_fold_text(row.modules, ascii=ascii)
            return structure_text(row, info.class_name) + (
                " [tied]" if row.path in tied_at else "")

        def count(row: StructureRow, of: Callable[[ModuleInfo], int]) -> str:
            tops = row.modules if isinstance(row, FoldedModules) else (row,)
            return format_count(sum(of(m) for m in tops))

        def buffers(row: StructureRow) -> str:
            mods = row.inside if isinstance(row, FoldedModules) else (row,)
            total = sum(m.own_buffers for m in mods)
            return format_count(total) if total else ""

        cols = [
            tree_column([label(r) for r in rows], footer="Total", header="Module"),
            GridColumn("class", "Class", [_first_module(r).class_name for r in rows],
                       numeric=False, priority=60),
            GridColumn("params", "Params", [count(r, _total) for r in rows],
                       footer=format_count(info.total_params), priority=90),
            GridColumn("trainable", "Trainable", [count(r, _trainable) for r in rows],
                       footer=format_count(info.trainable_params), priority=40),
            GridColumn("buffers", "Buffer elements", [buffers(r) for r in rows],
                       footer=format_count(info.total_buffers), priority=30),
        ]
        tied = f", {len(info.tied):,} tied counted once" if info.tied else ""
        caption = [
            f"params: {info.total_params:,} ({info.trainable_params:,} trainable, "
            f"{info.frozen_params:,} frozen{tied})",
            f"buffers: {len(info.buffers):,} ({plural(info.total_buffers, 'element')}, "
            f"{format_bytes(info.buffer_bytes)})",
            f"param size: {format_bytes(info.param_bytes)}",
        ]
        notes = [f"tied: {', '.join(v)}" for v in tied_at.values()]
        runs = [r for r in rows if isinstance(r, FoldedModules)]
        if runs:
            hidden = sum(len(r.inside) for r in runs) - len(runs)
            caption.append(folded_caption(len(runs), hidden))
        return Grid(cols, caption, notes, title=f"{info.class_name} structure")

    return GridTable(build, ascii=ascii)
