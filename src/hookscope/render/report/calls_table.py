"""The module-call tree of the report: one ``<tr>`` per call, every column in the HTML.

The columns are the trace table's (``render/columns.py``): ``layer``, then every column
of every probe that ran, in the probes' order (``Probe.column_rank``), those a probe
shows only ``when_present`` left out when no call has a value, and ``params``. A
probe defined anywhere (a notebook, a test) declares its columns in the facts
registry and they appear here with nothing in this module changed.

Runs of identical blocks are folded as in the terminal table (``render/fold.py``): the
first block, then one ``tr.fold`` row with the run's sums, then every call of the run
as ``tr.infold`` rows. The page's script hides those until the fold row is clicked;
without JavaScript (and printed) every row is shown. Each cell carries its raw sort
key in ``data-v``, each row its index, parent, depth, path and class, which the script
reads for collapsing, searching and sorting.

The heaviest calls (the :data:`HEAVY_COUNT` largest by self time, else by own FLOPs)
are marked here, not by the script, so the mark is there printed too.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

from hookscope.core.records.facts import Column, probe_columns
from hookscope.core.records.trace import Call, Trace
from hookscope.render.columns import View, column, fold_cell, render_cell, render_footer, sort_key
from hookscope.render.export import probe_rank
from hookscope.render.fold import Folded, tree_rows
from hookscope.render.labels import fold_text, tree_text
from hookscope.render.report.markup import tag, text

__all__ = ["HEAVY_COUNT", "calls_table", "heaviest_calls", "report_columns"]

HEAVY_COUNT = 5
"""How many calls the table marks as the heaviest."""


def report_columns(trace: Trace) -> list[Column]:
    """The columns of the report's table (see the module docstring)."""
    chosen = [column("layer")]
    for probe in sorted(trace.probes, key=probe_rank):
        chosen.extend(c for c in probe_columns(probe) if _shown(trace, c))
    chosen.append(column("params"))
    return chosen


def _shown(trace: Trace, col: Column) -> bool:
    if col.default and not col.when_present:
        return True
    view = View(trace)
    return any(sort_key(col, view, c) not in (None, 0) or
               col.value(c, trace) not in (None, 0, [], ()) for c in trace.calls)


def heaviest_calls(trace: Trace, *, count: int = HEAVY_COUNT) -> tuple[set[int], str]:
    """The indices of the ``count`` heaviest calls by self time (else own FLOPs) and
    what they were ranked by (``""``: nothing to rank by)."""
    def self_flops(c: Call) -> int | None:
        f = c.facts.get("self_flops")
        return None if f is None else f.forward + f.backward

    for what, weigh in (("self time", lambda c: c.facts.get("self_time_ns")),
                        ("own FLOPs", self_flops)):
        weights = [(w, c.index) for c in trace.calls if (w := weigh(c))]
        if weights:
            weights.sort(reverse=True)
            return {i for _, i in weights[:count]}, what
    return set(), ""


def calls_table(trace: Trace, *, fold: bool = True) -> str:
    """The ``<table>`` of every call (see the module docstring)."""
    view = View(trace)
    cols = report_columns(trace)
    heavy, by = heaviest_calls(trace)
    head = "".join(_header(c) for c in cols)
    body: list[str] = []
    for n, row in enumerate(tree_rows(trace, fold=fold)):
        if isinstance(row, Folded):
            body.append(_fold_row(view, cols, row, n))
            body.extend(_call_row(view, cols, c, heavy, fold=n)
                        for c in _subtrees(trace, row.calls))
        else:
            body.append(_call_row(view, cols, row, heavy))
    foot = "".join(tag("td", text(render_footer(c, view))) for c in cols)
    caption = (f"{len(trace.calls):,} calls; ● marks the {len(heavy)} heaviest by {by}"
               if heavy else f"{len(trace.calls):,} calls")
    return (
        f'<table class="calls" id="hs-calls"><caption>{text(caption)}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody>"
        f"<tfoot><tr>{foot}</tr></tfoot></table>"
    )


def _header(col: Column) -> str:
    kind = "num" if col.numeric else "txt"
    return tag("th", text(col.header), data_col=col.name, data_kind=kind,
               title=f"{col.name}: click to sort")


def _subtrees(trace: Trace, tops: Sequence[Call]) -> Iterator[Call]:
    """Every call of the blocks ``tops`` start, in call order."""
    for top in tops:
        stack = [top]
        while stack:
            call = stack.pop()
            yield call
            stack.extend(trace.calls[i] for i in reversed(call.children))


def _call_row(view: View, cols: Sequence[Column], call: Call, heavy: set[int],
              *, fold: int | None = None) -> str:
    cells = [_layer_cell(view, call, call.index in heavy)]
    cells.extend(_cell(view, c, call) for c in cols[1:])
    classes = " ".join(k for k, on in (("infold", fold is not None),
                                       ("heavy", call.index in heavy),
                                       ("raised", bool(call.error))) if on)
    return tag("tr", "".join(cells), class_=classes or None, data_i=call.index,
               data_p=call.parent, data_d=call.depth, data_f=fold, data_path=call.path,
               data_cls=call.module_class)


def _layer_cell(view: View, call: Call, heavy: bool) -> str:
    label = tree_text(view.trace, call, ascii=False, indent=0)
    mark = '<span class="mark" title="one of the heaviest calls">● </span>' if heavy else ""
    return (f'<td class="layer" data-v="{text(call.path)}" style="padding-left:'
            f'{0.4 + 1.2 * call.depth:.1f}em">{mark}<span class="nm">{text(label)}</span></td>')


def _cell(view: View, col: Column, call: Call) -> str:
    key = sort_key(col, view, call)
    alert = col.alert and bool(col.value(call, view.trace))
    return tag("td", text(render_cell(col, view, call)), data_v=_key_text(key),
               class_="alert" if alert else None)


def _key_text(key: float | str | None) -> str | None:
    if isinstance(key, float) and not math.isfinite(key):
        return "NaN" if math.isnan(key) else ("Infinity" if key > 0 else "-Infinity")
    return None if key is None else str(key)


def _fold_row(view: View, cols: Sequence[Column], row: Folded, n: int) -> str:
    label = fold_text(view.trace, row.calls, ascii=False).strip()
    first = row.calls[0]
    cells = [f'<td class="layer" style="padding-left:{0.4 + 1.2 * first.depth:.1f}em">'
             f'<span class="nm">{text(label)}</span>'
             f' <span class="hint">({row.hidden:,} rows folded)</span></td>']
    cells.extend(tag("td", text(fold_cell(c, view, row.calls))) for c in cols[1:])
    return tag("tr", "".join(cells), class_="fold", data_f=n, data_d=first.depth,
               data_p=first.parent, title="identical blocks: click to show them")
