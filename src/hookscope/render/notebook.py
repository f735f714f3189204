"""HTML for Jupyter: what ``_repr_html_`` of a summary, a trace or a structure returns.

A notebook cell is as wide as it needs to be (it scrolls), so every column is shown:
no column is left out and no label shortened. Multi-line cells (one shape per line)
keep their lines (``white-space: pre``).
"""

from __future__ import annotations

from html import escape

from hookscope.render.grid import Grid

_STYLE = (
    "border-collapse:collapse;font-family:var(--jp-code-font-family,monospace);"
    "font-size:12px"
)
_CELL = "padding:1px 8px;white-space:pre;text-align:{align};vertical-align:top"


def grid_html(grid: Grid, *, max_rows: int | None = None) -> str:
    """``grid`` as an HTML ``<table>`` with its caption and notes below it."""
    cols = grid.columns
    aligns = ["right" if c.numeric else "left" for c in cols]
    out = [f'<table class="hookscope" style="{_STYLE}">']
    if grid.title:
        out.append(f"<caption style='caption-side:top'>{escape(grid.title)}</caption>")
    out.append("<thead><tr>")
    out.extend(
        f'<th style="{_CELL.format(align=a)};border-bottom:1px solid">{escape(c.header)}</th>'
        for c, a in zip(cols, aligns, strict=True)
    )
    out.append("</tr></thead><tbody>")
    rows = len(cols[0].cells) if cols else 0
    for r in range(rows if max_rows is None else min(rows, max_rows)):
        out.append("<tr>")
        out.extend(
            f'<td style="{_CELL.format(align=a)}">{escape(c.cells[r])}</td>'
            for c, a in zip(cols, aligns, strict=True)
        )
        out.append("</tr>")
    out.append("</tbody>")
    if any(c.footer for c in cols):
        out.append("<tfoot><tr>")
        out.extend(
            f'<td style="{_CELL.format(align=a)};border-top:1px solid">{escape(c.footer)}</td>'
            for c, a in zip(cols, aligns, strict=True)
        )
        out.append("</tr></tfoot>")
    out.append("</table>")
    lines = [" | ".join(grid.caption)] if grid.caption else []
    lines += grid.notes
    if lines:
        text = escape("\n".join(lines))
        out.append(f'<pre style="font-size:12px;margin-top:4px">{text}</pre>')
    return "".join(out)
