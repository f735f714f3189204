"""Which charts a trace can draw, from the facts its probes recorded.

Each function returns the ``<figure>`` elements of one kind of chart, or nothing when
the trace lacks the facts (a trace without the time probe has no time chart): time and
FLOPs of the heaviest calls (self and inclusive), FLOPs, host time (when the ops carry
times) and executions by aten op type,
activation statistics, memory and gradient flow per layer. "Per layer" is per leaf
call (a call that made no module call inside), in call order: the calls that do the
work, each once.

NB: the time by aten op type is host time (``OpRecord.time_ns``): on CUDA the time to
launch each kernel, not the kernel's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hookscope.core.records.trace import Call, Trace
from hookscope.flops.registry import by_op
from hookscope.render.report.markup import text
from hookscope.render.report.svg import Bar, Series, hbar_chart, layer_chart
from hookscope.render.units import (
    format_bytes,
    format_count,
    format_percent,
    format_stat,
    format_time,
)

__all__ = ["CHART_SECTIONS", "leaf_calls", "trace_charts"]

TOP_BARS = 25
"""How many calls (or op types) a bar chart of the heaviest shows."""


def figure(svg: str, caption: str = "") -> str:
    note = f"<figcaption>{text(caption)}</figcaption>" if caption else ""
    return f'<figure class="chart-box">{svg}{note}</figure>'


def leaf_calls(trace: Trace) -> list[Call]:
    """The calls that made no module call inside, in call order."""
    return [c for c in trace.calls if not c.children]


def _label(trace: Trace, call: Call) -> str:
    name = call.path or trace.model.class_name
    return f"{name}#{call.call_index}" if call.call_index else name


def _time(v: float) -> str:
    return format_time(int(v))


def _count(v: float) -> str:
    for scale, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{unit}"
    return f"{v:.3g}" if v != int(v) else format_count(int(v))


def _heaviest(trace: Trace, own: Callable[[Call], float | None],
              whole: Callable[[Call], float | None]) -> list[Bar]:
    rows = [(v, c) for c in trace.calls if (v := own(c))]
    rows.sort(key=lambda vc: -vc[0])
    return [Bar(_label(trace, c), v, whole(c)) for v, c in rows[:TOP_BARS]]


def time_charts(trace: Trace) -> list[str]:
    """The heaviest calls by self time, beside their inclusive time."""
    bars = _heaviest(trace, lambda c: c.facts.get("self_time_ns"),
                     lambda c: c.facts.get("time_ns"))
    if not bars:
        return []
    svg = hbar_chart(f"Time: the {len(bars)} heaviest calls by self time", bars, fmt=_time,
                     axis="time", legend=("self", "inclusive"))
    return [figure(svg, "Self time excludes the calls made inside; inclusive includes them.")]


def _flops(f: Any) -> float | None:
    return None if f is None else float(f.forward + f.backward)


def flops_charts(trace: Trace) -> list[str]:
    """The heaviest calls by own FLOPs beside their subtree's, and FLOPs by op type."""
    if trace.facts.get("totals_flops") is None:
        return []
    out = []
    bars = _heaviest(trace, lambda c: _flops(c.facts.get("self_flops")),
                     lambda c: _flops(c.facts.get("flops")))
    if bars:
        out.append(figure(hbar_chart(
            f"FLOPs (forward + backward): the {len(bars)} heaviest calls by own FLOPs", bars,
            fmt=_count, axis="FLOPs", legend=("own", "inclusive"))))
    groups = list(by_op(trace).items())
    heavy = [Bar(name, float(t.total)) for name, t in groups if t.total][:TOP_BARS]
    if heavy:
        out.append(figure(hbar_chart("FLOPs by aten op type", heavy, fmt=_count,
                                     axis="FLOPs")))
    out += op_time_charts(trace)
    runs = sorted(groups, key=lambda nt: -nt[1].count)[:TOP_BARS]
    if runs:
        out.append(figure(hbar_chart(
            "Executions by aten op type", [Bar(n, float(t.count)) for n, t in runs],
            fmt=_count, axis="executions")))
    return out


def op_time_charts(trace: Trace) -> list[str]:
    """Host time by aten op type (forward and backward), when the ops carry times."""
    times: dict[str, int] = {}
    for op in trace.facts.get("ops") or ():
        if op.time_ns is not None:
            times[op.name] = times.get(op.name, 0) + op.time_ns
    rows = sorted(times.items(), key=lambda nt: (-nt[1], nt[0]))[:TOP_BARS]
    if not rows:
        return []
    svg = hbar_chart("Time by aten op type", [Bar(n, float(t)) for n, t in rows],
                     fmt=_time, axis="time")
    return [figure(svg, "Host time around each op, forward and backward (on CUDA: the "
                        "time to launch its kernels, not the kernels' time).")]


def _first_stats(call: Call) -> Any:
    stats = call.facts.get("stats")
    return stats[0] if stats else None


def stats_charts(trace: Trace) -> list[str]:
    """Mean ± std, the zero fraction and non-finite counts of each layer's output."""
    calls = [c for c in leaf_calls(trace) if _first_stats(c) is not None
             and _first_stats(c).mean is not None]
    if not calls:
        return []
    stats = [_first_stats(c) for c in calls]
    labels = [_label(trace, c) for c in calls]
    mean = [s.mean for s in stats]
    std = [s.std or 0.0 for s in stats]
    out = [figure(layer_chart(
        "Activations: mean ± std of each layer's (first) output", labels,
        [Series("mean", mean, [m - d for m, d in zip(mean, std, strict=True)],
                [m + d for m, d in zip(mean, std, strict=True)])],
        fmt=lambda v: format_stat(v, digits=3), axis="value", points=True))]
    out.append(figure(layer_chart(
        "Activations: fraction of zeros", labels,
        [Series("zeros", [s.zero_fraction for s in stats])],
        fmt=format_percent, axis="zeros")))
    bad = [float(s.nan_count + s.inf_count) for s in stats]
    if any(bad):
        out.append(figure(layer_chart("Activations: NaN + Inf elements", labels,
                                      [Series("non-finite", bad)], fmt=_count,
                                      axis="elements")))
    else:
        out.append(f'<p class="note">No NaN or Inf in any of the {len(calls):,} layers\' '
                   "outputs.</p>")
    return out


def memory_charts(trace: Trace) -> list[str]:
    """Output bytes and bytes saved for backward per layer."""
    calls = [c for c in leaf_calls(trace) if c.facts.get("memory") is not None]
    if not calls:
        return []
    mem = [c.facts["memory"] for c in calls]
    series = [Series("outputs", [m.output_bytes for m in mem])]
    if any(m.saved_bytes for m in mem):
        series.append(Series("saved for backward", [m.saved_bytes for m in mem]))
    return [figure(layer_chart("Memory per layer", [_label(trace, c) for c in calls], series,
                               fmt=lambda v: format_bytes(int(v)), axis="bytes"))]


def grad_charts(trace: Trace) -> list[str]:
    """Gradient flow: each layer's output-gradient norm, each parameter's gradient
    norm; both on a log scale."""
    out = []
    calls = [c for c in leaf_calls(trace) if c.facts.get("grad_output_norm") is not None]
    if calls:
        out.append(figure(layer_chart(
            "Gradient flow: norm of the gradient of each layer's output",
            [_label(trace, c) for c in calls],
            [Series("|grad out|", [c.facts["grad_output_norm"] for c in calls])],
            fmt=lambda v: format_stat(v, digits=2), axis="norm", log=True)))
    params = [p for p in trace.facts.get("param_grads") or () if p.norm is not None]
    if params:
        out.append(figure(layer_chart(
            "Gradient flow: gradient norm of each parameter", [p.path for p in params],
            [Series("|grad|", [p.norm for p in params])],
            fmt=lambda v: format_stat(v, digits=2), axis="norm", log=True,
            what="parameters in model order")))
    return out


CHART_SECTIONS: Sequence[tuple[str, str, Callable[[Trace], list[str]]]] = (
    ("time", "Time", time_charts),
    ("flops", "FLOPs", flops_charts),
    ("stats", "Activation statistics", stats_charts),
    ("memory", "Memory", memory_charts),
    ("grads", "Gradient flow", grad_charts),
)
"""``(id, heading, charts)`` of each chart section, in page order."""


def trace_charts(trace: Trace) -> list[tuple[str, str, list[str]]]:
    """The chart sections the trace has data for: ``(id, heading, figures)``."""
    found = [(key, head, draw(trace)) for key, head, draw in CHART_SECTIONS]
    return [f for f in found if f[2]]
