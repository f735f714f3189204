"""The layout of every table: cells as text, fitted to a width, never cutting a number.

A renderer (summary, trace, ops, structure) builds a :class:`Grid`: named columns of
finished cell text (a cell may hold several lines, one shape per line), a footer, a
caption made of parts. :func:`fit` then decides what fits a width:

1. every line of a cell is whole: no number, shape or unit is ever cut or wrapped;
2. long labels are shortened, distinguishably (a middle ellipsis keeps their start
   and end): tree labels (the class name first, then the module name) and the
   ``path:`` prefix of a shape line (``kwargs["po…ings"][0]: [1, 128, 64]``); the
   shape after the prefix is never touched;
3. when that is not enough, the lowest-:attr:`GridColumn.priority` columns are left
   out, and the caption says which, and at what width they fit;
4. the caption's parts go on one line when they fit, else one per line, a long part
   wrapped between words only (a number stays with its unit).

:mod:`hookscope.render.plain` draws a fitted grid as plain text (pipes, files,
``str()``), :func:`to_rich` as a rich table (terminals), and
:mod:`hookscope.render.notebook` as HTML (Jupyter).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

ELLIPSIS = "…"
LABEL_MIN = 12
"""A shortened ``path:`` label keeps this many characters (``kwarg…_ids"]``)."""
KEEP = 1000
"""A column with this priority or more is never left out (the layer column)."""

Shorten = Callable[[str, int], str]
"""``shorten(cell, width) -> cell``: a cell whose every line fits ``width`` if it can."""


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
        shorten: how its lines are shortened (``None``: never).
        min_width: the narrowest ``shorten`` may make it.
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
    styles: Sequence[str] = ()


@dataclass
class Grid:
    """A table before layout: columns, caption parts and notes.

    Attributes:
        columns: in display order.
        caption: short parts, joined by a separator on one line when they fit.
        notes: lines under the caption (legends), wrapped between words.
        title: a line above the table.
        hint: how to see left-out columns (``"--width N"``, ``"or pick --columns"``).
        label_style: a terminal-only style applied to ``(Class)`` in the first column.
    """

    columns: list[GridColumn]
    caption: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    title: str | None = None
    hint: str = "widen with --width {width}"


@dataclass(frozen=True)
class Fitted:
    """A grid laid out at a width: the kept columns with their widths."""

    columns: list[GridColumn]
    widths: list[int]
    dropped: list[str]
    caption: list[str]
    title: str | None
    gap: int

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


def fit(grid: Grid, width: int, *, gap: int = 2, sep: str = " | ") -> Fitted:
    """Lay ``grid`` out in ``width`` characters (see the module docstring)."""
    cols = list(grid.columns)
    natural = {c.name: natural_width(c) for c in cols}
    full = sum(natural.values()) + gap * max(len(cols) - 1, 0)
    dropped: list[str] = []

    def least(c: GridColumn) -> int:
        return min(natural[c.name], max(c.min_width, header_min(c.header))) if c.shorten \
            else content_width(c)

    while True:
        need = sum(least(c) for c in cols) + gap * max(len(cols) - 1, 0)
        removable = [c for c in cols if c.priority < KEEP]
        if need <= width or not removable:
            break
        worst = min(reversed(removable), key=lambda c: c.priority)
        cols.remove(worst)
        dropped.append(worst.name)
    widths = [natural[c.name] for c in cols]
    excess = sum(widths) + gap * max(len(cols) - 1, 0) - width
    # first wrap headers between words, lowest-priority columns first
    for i in sorted(range(len(cols)), key=lambda i: cols[i].priority):
        if excess <= 0:
            break
        room = widths[i] - content_width(cols[i])
        if room > 0:
            cut = min(room, excess)
            widths[i] -= cut
            excess -= cut
    # shorten the lowest-priority shortenable columns first
    for i in sorted(range(len(cols)), key=lambda i: cols[i].priority):
        if excess <= 0:
            break
        col = cols[i]
        if col.shorten is None:
            continue
        target = max(least(col), widths[i] - excess)
        if target < widths[i]:
            shortened = [col.shorten(c, target) for c in col.cells]
            cols[i] = replace(col, cells=shortened)
            new = max(max((cell_width(c) for c in shortened), default=0),
                      cell_width(col.footer), header_min(col.header))
            excess -= widths[i] - new
            widths[i] = new
    caption = list(grid.caption)
    if dropped:
        headers = {c.name: c.header for c in grid.columns}
        names = ", ".join(f"{n} ({headers[n]})" if headers[n].lower() != n else n
                          for n in dropped)
        caption.append(f"not shown at width {width}: {names}; "
                       + grid.hint.format(width=full))
    lines = wrap_caption(caption, width, sep=sep) + wrap_notes(grid.notes, width)
    return Fitted(cols, widths, dropped, lines, grid.title, gap)


_KEEP_TOGETHER = re.compile(r"(?<=[\d)]) (?=[A-Za-zµ%]+\b)")


def _wrap(text: str, width: int) -> list[str]:
    if len(text) <= width:
        return [text]
    glued = _KEEP_TOGETHER.sub("\u00a0", text)
    lines = textwrap.wrap(glued, width, break_long_words=False, break_on_hyphens=False,
                          subsequent_indent="  ")
    return [line.replace("\u00a0", " ") for line in lines] or [text]


def wrap_caption(parts: Sequence[str], width: int, *, sep: str = " | ") -> list[str]:
    """The caption parts on one line when they fit, else one per line (each wrapped
    between words, a number kept with its unit)."""
    parts = [p for p in parts if p]
    if not parts:
        return []
    joined = sep.join(parts)
    if len(joined) <= width:
        return [joined]
    out: list[str] = []
    for part in parts:
        out.extend(_wrap(part, width))
    return out


def wrap_notes(notes: Sequence[str], width: int) -> list[str]:
    out: list[str] = []
    for note in notes:
        for line in note.split("\n"):
            out.extend(_wrap(line, width))
    return out


def wrap_header(header: str, width: int) -> list[str]:
    if len(header) <= width:
        return [header]
    return textwrap.wrap(header, width, break_long_words=False) or [header]


# -- shortening, distinguishably --------------------------------------------------------


def elide(text: str, width: int, *, head: int | None = None) -> str:
    """``text`` in ``width`` characters with a middle ellipsis (start and end kept)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS
    keep = width - 1
    front = head if head is not None and head < keep else (keep + 1) // 2
    front = min(front, keep)
    return text[:front] + ELLIPSIS + (text[len(text) - (keep - front):] if keep > front else "")


def shorten_labelled(cell: str, width: int) -> str:
    """Shorten the ``path:`` prefix of each line of a shape cell; the shape stays whole."""
    out = []
    for line in cell.split("\n"):
        label, colon, value = line.partition(": ")
        if not colon or len(line) <= width:
            out.append(line)
            continue
        room = max(width - len(value) - 2, LABEL_MIN)
        out.append(f"{elide(label, room, head=max(room // 2, 3))}: {value}")
    return "\n".join(out)


def labelled_min(cells: Sequence[str]) -> int:
    """The narrowest :func:`shorten_labelled` can make these cells while the labels of
    each cell still read apart (``kwargs["input_ids"]`` and ``kwargs["decoder_input_ids"]``
    both read ``kwargs…ids"]`` at the narrowest), at that width of the column."""
    widest = 0
    several: list[str] = []  # cells of two or more distinct labels
    for cell in cells:
        lines = cell.split("\n")
        for line in lines:
            _, colon, value = line.partition(": ")
            widest = max(widest, min(len(line), len(value) + 2 + LABEL_MIN) if colon
                         else len(line))
        if len(lines) > 1:
            labels = [line.partition(": ")[0] for line in lines if ": " in line]
            if len(set(labels)) == len(labels) > 1:  # distinct whole: kept distinct
                several.append(cell)
    # NB: apart at one width, apart at every wider one (each keeps more of both ends)
    for cell in several:
        longest = max(map(len, cell.split("\n")))
        while widest < longest and not _labels_apart(cell, widest):
            widest += 1
    return widest


def _labels_apart(cell: str, width: int) -> bool:
    labels = [line.partition(": ")[0] for line in shorten_labelled(cell, width).split("\n")]
    return len(set(labels)) == len(labels)


def shorten_plain(cell: str, width: int) -> str:
    """Every line of ``cell`` in ``width`` characters, by a middle ellipsis."""
    return "\n".join(elide(line, width) for line in cell.split("\n"))



def distinct_shortener(labels: Sequence[str]) -> Shorten:
    """A :data:`Shorten` for one-line labels (parameter paths) that keeps them apart.

    Each label that does not fit is elided in the middle, more of its end kept than of
    its start (``layer…onv1.weight``: the end of a path tells its rows apart). Labels
    that would then read alike are given other elisions (more of the start, or of the
    end) by a matching over every label's possible forms, so two rows never look the
    same while distinct forms of the width exist (:func:`distinct_min` finds the
    narrowest width where they do).
    """
    chosen: dict[int, dict[str, str]] = {}

    def shorten(cell: str, width: int) -> str:
        forms = chosen.get(width)
        if forms is None:
            forms = chosen[width] = distinct_forms(labels, width)[0]
        return forms.get(cell) or elide(cell, width)

    return shorten


def distinct_min(labels: Sequence[str], floor: int) -> int:
    """The narrowest width from ``floor`` on where :func:`distinct_shortener` keeps every
    label apart (at most the widest label)."""
    widest = max(map(len, labels), default=0)
    width = min(floor, widest)
    while width < widest and not distinct_forms(labels, width)[1]:
        width += 1
    return width


def distinct_forms(labels: Sequence[str], width: int) -> tuple[dict[str, str], bool]:
    """Each label's form in ``width`` characters, and whether they are all distinct:
    labels that fit are themselves; the others get one of their elided forms, matched
    (augmenting paths) so that no two share one where that is possible."""
    unique = list(dict.fromkeys(labels))
    out = {label: label for label in unique if len(label) <= width}
    fixed = set(out)
    keep = max(width - 1, 1)
    default = max(keep // 3, 1)
    heads = [default, *range(default - 1, 0, -1), *range(default + 1, keep)]
    rest = [label for label in unique if label not in out]
    options = {label: [f for f in dict.fromkeys(elide(label, width, head=h) for h in heads)
                       if f not in fixed] for label in rest}
    owner: dict[str, str] = {}  # form -> the label it is given to

    def place(label: str, seen: set[str]) -> bool:
        for form in options[label]:
            if form in seen:
                continue
            seen.add(form)
            if form not in owner or place(owner[form], seen):
                owner[form] = label
                return True
        return False

    distinct = True
    for label in rest:
        if not place(label, set()):
            distinct = False
    out.update({label: form for form, label in owner.items()})
    for label in rest:
        out.setdefault(label, elide(label, width, head=default))
    return out, distinct
