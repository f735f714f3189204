"""Plain-text drawing of a fitted :class:`~hookscope.render.grid.Grid`: pipes, files, ``str()``.

No rich here: joining padded strings is what makes ``print(hookscope.summary(...))``
cheap (a few milliseconds per hundred rows, ``benchmarks/bench_render.py``). The
layout is rich's ``SIMPLE`` box in ASCII: the header, a rule, the rows, a rule, the
footer, then the caption; columns are two spaces apart, without vertical lines, so
more columns fit. A shortened label's ``…`` is drawn as ``~``: the text is ASCII.
"""

from __future__ import annotations

from hookscope.render.grid import ELLIPSIS, Fitted, Grid, GridColumn, fit, wrap_header

GAP = 2
ASCII_ELLIPSIS = "~"
"""What a shortened label shows in plain text for the ``…`` of rich and HTML tables: one
character too, so the layout is the same, and the text stays ASCII."""


def render_plain(grid: Grid, *, width: int, sep: str = " | ") -> str:
    """``grid`` fitted to ``width`` and drawn as plain text, ending with a newline."""
    return draw(fit(grid, width, gap=GAP, sep=sep))


def draw(fitted: Fitted) -> str:
    """A fitted grid as text; no line is longer than the table or the caption needs."""
    cols, widths = fitted.columns, fitted.widths
    gap = " " * fitted.gap
    out: list[str] = []
    total = fitted.width
    if fitted.title:
        out.append(fitted.title.center(total).rstrip())
    headers = [wrap_header(c.header, w) for c, w in zip(cols, widths, strict=True)]
    out.extend(_block(headers, cols, widths, gap, top=False))
    rule = gap.join("-" * w for w in widths)
    out.append(rule)
    justify = [c.numeric for c in cols]
    for r in range(len(cols[0].cells) if cols else 0):
        cells = [c.cells[r] for c in cols]
        if all("\n" not in x for x in cells):
            out.append(_line(cells, widths, justify, gap))
        else:
            out.extend(_block([x.split("\n") for x in cells], cols, widths, gap, top=True))
    if any(c.footer for c in cols):
        out.append(rule)
        out.append(_line([c.footer for c in cols], widths, justify, gap))
    out.extend(fitted.caption)
    return ("\n".join(out) + "\n").replace(ELLIPSIS, ASCII_ELLIPSIS)


def _line(cells: list[str], widths: list[int], numeric: list[bool], gap: str) -> str:
    parts = [
        cell.rjust(w) if right else cell.ljust(w)
        for cell, w, right in zip(cells, widths, numeric, strict=True)
    ]
    return gap.join(parts).rstrip()


def _block(
    lines: list[list[str]], cols: list[GridColumn], widths: list[int], gap: str, *, top: bool
) -> list[str]:
    """Rows of a multi-line cell group: ``top`` aligns short cells at the top (rows),
    else at the bottom (headers)."""
    height = max(len(x) for x in lines) if lines else 0
    padded = [
        (x + [""] * (height - len(x))) if top else ([""] * (height - len(x)) + x) for x in lines
    ]
    numeric = [c.numeric for c in cols]
    return [
        _line([p[i] for p in padded], widths, numeric, gap) for i in range(height)
    ]
