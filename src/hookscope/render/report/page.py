"""The report page of a trace: header, problems, the call table and the charts.

:func:`trace_report` is the whole page (``Trace.to_html``, ``hookscope report``);
:func:`trace_fragment` the same table and charts without the page around them, for
Jupyter (``Trace._repr_html_``). Both put everything inline: the style sheet and the
script (``assets.py``), the charts as SVG (``svg.py``), the run's facts as JSON in a
``<script type="application/json">`` made safe by ``markup.script_json``.

A section appears only when the trace has its data: the charts of a probe that did
not run, or a problem section for a run that ended normally, are left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hookscope.core.records.trace import Trace
from hookscope.core.records.values import TensorMeta
from hookscope.render.report.assets import CSS, SCRIPT
from hookscope.render.report.calls_table import calls_table
from hookscope.render.report.figures import trace_charts
from hookscope.render.report.markup import script_json, text
from hookscope.render.report.problems import anomaly_section, lint_section, run_problems
from hookscope.render.report.thumbnails import feature_maps_section
from hookscope.render.units import format_bytes, format_count, format_time

__all__ = ["anomaly_report", "page", "trace_fragment", "trace_report"]

GENERATOR = "hookscope report"


def page(title: str, body: str, *, data: dict[str, object] | None = None) -> str:
    """A whole HTML document around ``body`` (markup), everything inline."""
    blob = ("" if data is None else '<script type="application/json" id="hs-data">'
            f"{script_json(data)}</script>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f'<meta name="generator" content="{GENERATOR}"><title>{text(title)}</title>'
        f"<style>{CSS}</style></head><body>"
        f'<div class="hsr" id="hs-report">{body}{blob}<script>{SCRIPT}</script></div>'
        "</body></html>\n"
    )


def _shapes(metas: Sequence[TensorMeta]) -> str:
    return "\n".join(
        f"{m.path}: {tuple(m.shape)} {m.dtype}" if m.layout != "object" else f"{m.path}: {m.dtype}"
        for m in metas
    )


def header_facts(trace: Trace) -> list[tuple[str, str]]:
    """``(name, value)`` rows of the header: only those the trace recorded."""
    m, meta = trace.model, trace.meta
    rows = [("model", m.class_name), ("inputs", _shapes(trace.inputs)),
            ("outputs", _shapes(trace.outputs)),
            ("parameters", f"{m.params_total:,} ({m.params_trainable:,} trainable, "
                           f"{format_bytes(m.param_bytes)})"),
            ("buffers", f"{m.buffers_total:,} elements ({format_bytes(m.buffer_bytes)})")]
    flops = trace.facts.get("totals_flops")
    if flops is not None:
        partial = " (a lower bound: ops without a formula ran)" if flops.partial else ""
        rows.append(("FLOPs", f"forward {format_count(flops.forward)}, backward "
                              f"{format_count(flops.backward)}{partial}"))
    if trace.total_time_ns is not None:
        rows.append(("time", format_time(trace.total_time_ns)))
    backward = [r.facts.get("backward_ns") for r in trace.roots]
    if backward and all(b is not None for b in backward):
        rows.append(("backward time", format_time(sum(b for b in backward if b is not None))))
    peaks = [mem.peak_bytes for c in trace.calls
             if (mem := c.facts.get("memory")) is not None and mem.peak_bytes is not None]
    if peaks:
        rows.append(("peak memory", format_bytes(max(peaks))))
    dtypes = sorted({t.dtype for t in (*trace.inputs, *trace.outputs) if t.layout != "object"})
    rows += [("calls", f"{len(trace.calls):,}"), ("probes", ", ".join(trace.probes)),
             ("device", str(meta.get("device", ""))), ("dtypes", ", ".join(dtypes))]
    if "rank" in meta:
        rows.append(("rank", f"{meta['rank']} of {meta.get('world_size', '?')}"))
    rows.append(("versions", f"torch {meta.get('torch_version', '?')}, "
                             f"hookscope {meta.get('hookscope_version', '?')}"))
    return [(k, v) for k, v in rows if v]


def facts_table(rows: Sequence[tuple[str, str]]) -> str:
    body = "".join(f"<tr><th>{text(k)}</th><td>{text(v)}</td></tr>" for k, v in rows)
    return f'<table class="facts">{body}</table>'


def _controls() -> str:
    return ('<div class="controls"><input type="search" class="hs-search" '
            'placeholder="search path or class" aria-label="search calls by path or class">'
            '<button type="button" class="hs-tree">tree order</button>'
            '<span class="hs-count"></span></div>')


def _body(trace: Trace, *, fold: bool, headings: str = "h2") -> str:
    """The table and the chart sections."""
    charts = trace_charts(trace)
    links = [("hs-tree", "Calls"), *((f"hs-{key}", head) for key, head, _ in charts)]
    nav = "".join(f'<a href="#{k}">{text(h)}</a>' for k, h in links)
    parts = [f"<nav>{nav}</nav>" if headings == "h2" else ""]
    parts += [f'<section id="hs-tree"><{headings}>Calls</{headings}>{_controls()}'
             f'<div class="scroll">{calls_table(trace, fold=fold)}</div></section>']
    for key, heading, figures in charts:
        parts.append(f'<section id="hs-{key}" class="chart-section"><{headings}>'
                     f'{text(heading)}</{headings}><div class="charts">{"".join(figures)}'
                     "</div></section>")
    return "".join(parts)


def trace_report(trace: Trace, *, title: str | None = None, fold: bool = True,
                 findings: Sequence[Any] = (), anomaly: Any = None,
                 feature_maps: Mapping[str, Any] | None = None) -> str:
    """The whole page of ``trace`` (see the module docstring).

    Args:
        trace: the trace.
        title: the page's title (default: ``hookscope report: <model class>``).
        fold: fold runs of identical blocks (expandable).
        findings: lint findings to show (``hookscope.lint(...)``'s, or its report).
        anomaly: a :func:`hookscope.find_anomaly` report to show first.
        feature_maps: captured activations (:func:`hookscope.capture`) to show as
            thumbnails, after the charts.
    """
    name = title or f"hookscope report: {trace.model.class_name}"
    head = (f"<header><h1>{text(name)}</h1>{facts_table(header_facts(trace))}</header>")
    data = {"model": trace.model.class_name, "meta": _json_meta(trace.meta),
            "calls": len(trace.calls), "probes": list(trace.probes)}
    body = (head + run_problems(trace) + anomaly_section(anomaly)
            + lint_section(list(findings)) + _body(trace, fold=fold)
            + feature_maps_section(feature_maps or {}))
    return page(name, body, data=data)


def _json_meta(meta: dict[str, object]) -> dict[str, object]:
    return {str(k): v if isinstance(v, (int, float, str, bool)) or v is None else str(v)
            for k, v in meta.items()}


def trace_fragment(trace: Trace, *, fold: bool = True) -> str:
    """The table and charts as one ``<div>`` with its own style and script (Jupyter)."""
    said = "; ".join(v.replace("\n", ", ") for k, v in header_facts(trace)
                     if k in ("model", "parameters", "FLOPs", "time"))
    return (f'<div class="hsr"><style>{CSS}</style><p>{text(said)}</p>{run_problems(trace)}'
            f"{_body(trace, fold=fold, headings='h3')}<script>{SCRIPT}</script></div>")


def anomaly_report(report: Any) -> str:
    """The page of a :func:`hookscope.find_anomaly` report: the anomaly first, then the
    page of its partial trace (the calls up to the stop)."""
    if report.trace is None:
        title = "hookscope: first non-finite value"
        return page(title, f"<h1>{text(title)}</h1>{anomaly_section(report)}")
    return trace_report(report.trace, anomaly=report,
                        title=f"hookscope anomaly: {report.trace.model.class_name}")
