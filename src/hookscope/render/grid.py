"""The layout of every table: cells as text, fitted to a width, never cutting a number.

A renderer (summary, trace, ops, structure) builds a :class:`Grid`: named columns of
finished cell text (a cell may hold several lines, one shape per line), a footer, a
caption made of parts. :func:`fit` then decides what fits a width, by one rule: **a
name is cut last**. A module path, a class name, a keyword name (``kwargs["input_ids"]``)
and an op name are what a reader looks for, so while anything else can give way, they
stay whole:

1. every line of a cell is whole where it is kept: no number, shape or unit is ever
   cut, and a number is never split from its unit;
2. headers wrap between words, and long shape lines wrap onto two (the ``path:``
   label on one line, the shape below it; a shape itself is never broken), lowest
   :attr:`GridColumn.priority` first;
3. when the names still do not fit whole, the lowest-priority columns are left out
   (a probe's headline facts rank high, input shapes lowest), and the caption says
   which, and at what width they all fit (:class:`Wording` words it for Python or
   for the command line);
4. only when no column is left to leave out are names shortened, distinguishably (a
   middle ellipsis keeps their start and end: the class name first, then the module
   name);
5. the caption's parts go on one line when they fit, else one per line, a long part
   wrapped between words only (a number stays with its unit).

The line breaking of rules 2 and 5 is in :mod:`hookscope.render.wrap`.

:mod:`hookscope.render.plain` draws a fitted grid as plain text (pipes, files,
``str()``), :func:`to_rich` as a rich table (terminals), and
:mod:`hookscope.render.notebook` as HTML (Jupyter).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

# re-exported: the renderers take their layout from this module
from hookscope.render.names import ELLIPSIS as ELLIPSIS
from hookscope.render.names import LABEL_MIN as LABEL_MIN
from hookscope.render.names import Shorten as Shorten
from hookscope.render.names import distinct_forms as distinct_forms
from hookscope.render.names import distinct_min as distinct_min
from hookscope.render.names import distinct_shortener as distinct_shortener
from hookscope.render.names import elide as elide
from hookscope.render.names import shorten_plain as shorten_plain
from hookscope.render.wrap import shapes_min as shapes_min
from hookscope.render.wrap import wrap_caption, wrap_notes
from hookscope.render.wrap import wrap_header as wrap_header
from hookscope.render.wrap import wrap_shapes as wrap_shapes

KEEP = 1000
"""A column with this priority or more is never left out (the layer column)."""


@dataclass(frozen=True)
class GridColumn:
    """One column of finished cells.

    Attributes:
        name: what ``columns=`` calls it (named in the caption when left out).
        header: its title; wraps between words only.
        cells: one text per row; ``"\\n"`` separates the lines of a cell.
        footer: the total below the rows (``""``: none).
        numeric: right-justified.
        priority: columns are left out lowest first when the width is too small.
        shorten: how its names are shortened when nothing else can give way
            (``None``: never).
        min_width: the narrowest ``shorten`` may make it.
        wrap: how its lines are wrapped onto more lines, nothing cut (``None``: never).
        wrap_min: the narrowest ``wrap`` can make it.
        styles: per row, a rich style for the terminal (``""``: none).
    """

    name: str
    header: str
    cells: list[str]
    footer: str = ""
    numeric: bool = True
    priority: int = 50
    shorten: Shorten | None = None
    min_width: int = 0
    wrap: Shorten | None = None
    wrap_min: int = 0
    styles: Sequence[str] = ()


@dataclass(frozen=True)
class Wording:
    """How a caption tells the reader to see the columns left out.

    Attributes:
        widen: the way to a wider table, ``{width}`` being the width where all fit.
        pick: the way to choose columns (said when the table's columns were not chosen).
    """

    widen: str = "width={width} shows them"
    pick: str = "or pick them with columns=[...]"
    unfold: str = "fold=False shows them"
    deeper: str = "depth={depth} shows them"


PYTHON = Wording()
"""The caption's words for a table drawn from Python (``to_text(width=...)``)."""


class Worded(str):
    """A caption part that tells the reader what to pass, in the caller's terms.

    As a ``str`` it is the Python wording (``str()``, ``GridTable.caption``);
    :func:`fit` asks it again with the table's :class:`Wording`, so that the command
    line says ``--no-fold`` where Python says ``fold=False``.
    """

    say: Callable[[Wording], str]

    def __new__(cls, say: Callable[[Wording], str]) -> Worded:
        part = super().__new__(cls, say(PYTHON))
        part.say = say
        return part


def folded_caption(runs: int, hidden: int) -> Worded:
    """``1 run of repeated blocks folded (131 rows; fold=False shows them)``."""
    rows = f"{hidden:,} row{'' if hidden == 1 else 's'}"
    head = f"{runs} run{'s' if runs > 1 else ''} of repeated blocks folded ({rows}"
    return Worded(lambda w: f"{head}; {w.unfold})")


@dataclass
class Grid:
    """A table before layout: columns, caption parts and notes.

    Attributes:
        columns: in display order.
        caption: short parts, joined by a separator on one line when they fit.
        notes: lines under the caption (legends), wrapped between words.
        title: a line above the table.
        pickable: the columns are a default set, so choosing others is a way to see
            those left out (:attr:`Wording.pick`).
    """

    columns: list[GridColumn]
    caption: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    title: str | None = None
    pickable: bool = False


@dataclass(frozen=True)
class Fitted:
    """A grid laid out at a width: the kept columns with their widths.

    Attributes:
        dropped: the names of the columns left out.
        fits_at: the narrowest width where every column fits with its names whole.
    """

    columns: list[GridColumn]
    widths: list[int]
    dropped: list[str]
    caption: list[str]
    title: str | None
    gap: int
    fits_at: int = 0

    @property
    def width(self) -> int:
        return sum(self.widths) + self.gap * max(len(self.widths) - 1, 0)


def cell_width(text: str) -> int:
    if "\n" not in text:
        return len(text)
    return max(len(line) for line in text.split("\n"))


def header_min(header: str) -> int:
    return max((len(w) for w in header.split()), default=0)


def content_width(col: GridColumn) -> int:
    """The width the cells need, the header wrapped between words."""
    widest = max((cell_width(c) for c in col.cells), default=0)
    return max(widest, cell_width(col.footer), header_min(col.header))


def natural_width(col: GridColumn) -> int:
    """The width with the header on one line: what a table gets when it fits."""
    return max(content_width(col), len(col.header))


def whole_width(col: GridColumn) -> int:
    """The narrowest ``col`` gets with nothing cut: headers and shapes wrapped."""
    if col.wrap is None:
        return content_width(col)
    return min(content_width(col),
               max(col.wrap_min, cell_width(col.footer), header_min(col.header)))


def _cut_width(col: GridColumn) -> int:
    """The narrowest ``col`` gets with its names shortened too (the last resort)."""
    if col.shorten is None:
        return whole_width(col)
    return min(whole_width(col), max(col.min_width, header_min(col.header)))


def fit(grid: Grid, width: int, *, gap: int = 2, sep: str = " | ",
        wording: Wording = PYTHON) -> Fitted:
    """Lay ``grid`` out in ``width`` characters (see the module docstring)."""
    cols = list(grid.columns)

    def need(cs: list[GridColumn], size: Callable[[GridColumn], int]) -> int:
        return sum(size(c) for c in cs) + gap * max(len(cs) - 1, 0)

    fits_at = need(cols, whole_width)
    dropped: list[str] = []
    while need(cols, whole_width) > width:
        removable = [c for c in cols if c.priority < KEEP]
        if not removable:
            break
        worst = min(reversed(removable), key=lambda c: c.priority)
        cols.remove(worst)
        dropped.append(worst.name)
    widths = [natural_width(c) for c in cols]
    excess = need(cols, natural_width) - width
    order = sorted(range(len(cols)), key=lambda i: cols[i].priority)
    for i in order:  # headers wrap between words
        if excess <= 0:
            break
        cut = min(max(widths[i] - content_width(cols[i]), 0), excess)
        widths[i] -= cut
        excess -= cut
    for stage, floor in ((_wrapped, whole_width), (_shortened, _cut_width)):
        for i in order:
            if excess <= 0:
                break
            target = max(floor(cols[i]), widths[i] - excess)
            if target < widths[i]:
                cols[i] = stage(cols[i], target)
                new = content_width(cols[i])
                excess -= widths[i] - new
                widths[i] = new
    caption = [p.say(wording) if isinstance(p, Worded) else p for p in grid.caption]
    if dropped:
        caption.append(left_out_text(grid, dropped, width, fits_at, wording))
    lines = wrap_caption(caption, width, sep=sep) + wrap_notes(grid.notes, width)
    return Fitted(cols, widths, dropped, lines, grid.title, gap, fits_at)


def _wrapped(col: GridColumn, width: int) -> GridColumn:
    if col.wrap is None:
        return col
    wrap = col.wrap
    return replace(col, cells=[wrap(c, width) for c in col.cells])


def _shortened(col: GridColumn, width: int) -> GridColumn:
    if col.shorten is None:
        return col
    shorten = col.shorten
    return replace(col, cells=[shorten(c, width) for c in col.cells])


def left_out_text(grid: Grid, dropped: Sequence[str], width: int, fits_at: int,
                  wording: Wording) -> str:
    """``not shown at width 80: zeros, input (Input shape); width=142 shows them``."""
    headers = {c.name: c.header for c in grid.columns}
    names = ", ".join(f"{n} ({headers[n]})" if headers[n].lower() != n else n
                      for n in dropped)
    how = wording.widen.format(width=fits_at)
    if grid.pickable:
        how += f", {wording.pick}"
    return f"not shown at width {width}: {names}; {how}"
