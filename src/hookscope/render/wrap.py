"""Line breaks that cut nothing, for the tables of :mod:`hookscope.render.grid`.

A caption part, a note or a header wraps between words only, a number kept with its
unit (``12.3 ms`` never splits); a shape cell wraps by putting its ``path:`` label on
a line of its own, the shape below it; a shape itself is never broken.
:func:`~hookscope.render.grid.fit` calls these while it lays a grid out, and the
drawers (plain text, rich) wrap headers with :func:`wrap_header`.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence

INDENT = "  "
"""How a wrapped shape's continuation lines are indented under their first line."""

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


def wrap_shapes(cell: str, width: int) -> str:
    """Each line of a shape cell in ``width`` characters where it can, nothing cut: a
    line that is too long puts its ``path:`` label on a line of its own and the shape
    below it, indented. A shape itself is never broken (``[1, 64, 56, 56]`` on four
    lines reads worse than a column left out)."""
    out: list[str] = []
    for line in cell.split("\n"):
        label, colon, value = line.partition(": ")
        if len(line) <= width or not colon:
            out.append(line)
        else:
            out.extend((label + ":", INDENT + value))
    return "\n".join(out)


def shapes_min(cells: Sequence[str]) -> int:
    """The narrowest :func:`wrap_shapes` can make these cells: each label whole with its
    colon, each shape whole after its indentation."""
    widest = 0
    for cell in cells:
        for line in cell.split("\n"):
            label, colon, value = line.partition(": ")
            need = max(len(label) + 1, len(INDENT) + len(value)) if colon else len(line)
            widest = max(widest, min(len(line), need))
    return widest
