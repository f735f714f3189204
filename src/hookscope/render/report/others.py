"""The report pages of a structure (:func:`hookscope.inspect`) and of a gradient
monitor's history, and :func:`write_html`.

A structure has no calls: its table is the module tree (``render/fold.py``'s
``structure_rows``, folded like the terminal table), with the same row attributes as
the call table so the page's script collapses, searches and sorts it alike. A history
has no tree: its page is the gradient norms over the steps (the total and each
module's, on a log scale) and the anomalies the monitor found.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hookscope.render.files import write_text_atomically
from hookscope.render.fold import FoldedModules, structure_rows
from hookscope.render.labels import structure_fold_text, structure_text
from hookscope.render.report.figures import figure
from hookscope.render.report.markup import tag, text
from hookscope.render.report.page import facts_table, page
from hookscope.render.report.svg import Series, step_chart
from hookscope.render.units import format_bytes, format_stat

if TYPE_CHECKING:
    from hookscope.core.model.structure import ModelInfo
    from hookscope.core.records.module_records import ModuleInfo

__all__ = ["history_report", "structure_report", "write_html"]

_STRUCTURE_COLUMNS = (("Module", "txt"), ("Class", "txt"), ("Own params", "num"),
                      ("Params", "num"), ("Buffers", "num"), ("extra_repr", "txt"))
_SHOWN_MODULES = 6  # a history chart's lines beside the total


def write_html(html: str, path: str | os.PathLike[str]) -> Path:
    """Write ``html`` to ``path`` (UTF-8) in one step: a page is never left half-written.

    Raises:
        SpecError: the folder of ``path`` does not exist, or ``path`` is a folder.
    """
    return write_text_atomically(Path(path), html, example="report.html")


def structure_report(info: ModelInfo, *, fold: bool = True) -> str:
    """The page of a model's structure: totals and the folded module tree."""
    facts = [("model", info.class_name), ("modules", f"{len(info.modules):,}"),
             ("parameters", f"{info.total_params:,} ({info.trainable_params:,} trainable, "
                            f"{format_bytes(info.param_bytes)})"),
             ("buffers", f"{info.total_buffers:,} elements ({format_bytes(info.buffer_bytes)})")]
    if info.tied:
        facts.append(("tied", ", ".join(f"{a} = {b}" for a, b in info.tied.items())))
    title = f"hookscope structure: {info.class_name}"
    head = "".join(tag("th", text(h), data_kind=k) for h, k in _STRUCTURE_COLUMNS)
    index = {p: i for i, p in enumerate(info.modules)}
    body = []
    for n, row in enumerate(structure_rows(info, fold=fold)):
        if isinstance(row, FoldedModules):
            body.append(_fold_row(row, n, index))
            body.extend(_module_row(m, info.class_name, index, fold=n) for m in row.inside)
        else:
            body.append(_module_row(row, info.class_name, index))
    table = (f'<table class="calls"><caption>{len(info.modules):,} modules</caption>'
             f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")
    controls = ('<div class="controls"><input type="search" class="hs-search" '
                'placeholder="search path or class" aria-label="search modules">'
                '<button type="button" class="hs-tree">tree order</button>'
                '<span class="hs-count"></span></div>')
    return page(title, f"<h1>{text(title)}</h1>{facts_table(facts)}<h2>Modules</h2>"
                       f'{controls}<div class="scroll">{table}</div>')


def _module_row(m: ModuleInfo, root: str, index: dict[str, int], *,
                fold: int | None = None) -> str:
    label = structure_text(m, root).strip()
    cells = [f'<td class="layer" data-v="{text(m.path)}" style="padding-left:'
             f'{0.4 + 1.2 * m.depth:.1f}em"><span class="nm">{text(label)}</span></td>',
             tag("td", text(m.class_name), data_v=m.class_name),
             tag("td", f"{m.own_params:,}", data_v=m.own_params),
             tag("td", f"{m.total_params:,}", data_v=m.total_params),
             tag("td", f"{m.own_buffers:,}" if m.own_buffers else "", data_v=m.own_buffers),
             tag("td", text(m.extra_repr or ""), data_v=m.extra_repr or None)]
    parent = index.get(m.parent) if m.parent is not None else None
    return tag("tr", "".join(cells), class_="infold" if fold is not None else None,
               data_i=index[m.path], data_p=parent, data_d=m.depth, data_f=fold,
               data_path=m.path, data_cls=m.class_name)


def _fold_row(row: FoldedModules, n: int, index: dict[str, int]) -> str:
    first = row.modules[0]
    label = structure_fold_text(row.modules, ascii=False).strip()
    total = sum(m.total_params for m in row.modules)
    cells = [f'<td class="layer" style="padding-left:{0.4 + 1.2 * first.depth:.1f}em">'
             f'<span class="nm">{text(label)}</span></td>', tag("td", text(first.class_name)),
             "<td></td>", tag("td", f"{total:,}"), "<td></td>", "<td></td>"]
    parent = index.get(first.parent) if first.parent is not None else None
    return tag("tr", "".join(cells), class_="fold", data_f=n, data_p=parent,
               title="identical blocks: click to show them")


def history_report(history: Any, anomalies: Sequence[Any] = (), *,
                   title: str = "hookscope gradient history") -> str:
    """The page of a :class:`~hookscope.monitor.history.GradHistory`: the total
    gradient norm and the modules' over the steps (log scale), and the anomalies."""
    facts = [("steps", f"{len(history.steps):,}"), ("parameters", f"{len(history.names):,}")]
    body = [f"<h1>{text(title)}</h1>", facts_table(facts)]
    if history.steps:
        modules = history.modules()
        shown = sorted(modules, key=lambda k: -_last_finite(modules[k]))[:_SHOWN_MODULES]
        series = [Series("total", history.total)]
        series += [Series(name or "(root)", modules[name]) for name in shown]
        body.append('<h2 id="hs-steps">Gradient norms over steps</h2><div class="charts">')
        body.append(figure(step_chart(
            "Gradient norm per step: total and the largest modules'", history.steps, series,
            fmt=lambda v: format_stat(v, digits=2), axis="gradient norm"),
            f"The total and the {len(shown)} modules with the largest last norm."))
        body.append("</div>")
    if anomalies:
        items = "".join(f"<li>{text(a.describe())}</li>" for a in anomalies)
        body.append(f'<h2>Anomalies</h2><div class="problem" id="hs-problems"><ul>{items}'
                    "</ul></div>")
    return page(title, "".join(body))


def _last_finite(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return finite[-1] if finite else -math.inf
