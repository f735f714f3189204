"""SVG charts drawn in Python: horizontal bars, values per layer, lines over steps.

No chart library: each function returns one ``<svg>`` element with labelled axes, tick
values formatted by the caller's ``fmt`` (``render/units.py``), and a ``<title>`` per
bar or point, which a browser shows on hover without any script. Every label is
escaped (``markup.text``): layer names are the model's.

A log scale leaves out values that are not positive and finite (a zero gradient norm
has no place on it) and says how many it left out under the chart.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hookscope.render.report.markup import text

__all__ = ["Bar", "Series", "hbar_chart", "layer_chart", "step_chart"]

Fmt = Callable[[float], str]

_W = 860  # the drawing's width in SVG units (the page scales it to fit)
_LEFT = 70
_COLORS = ("#3b6fb6", "#e07b39", "#4a9d5b", "#b8475a", "#7d5ba6", "#8c6d31")


@dataclass(frozen=True)
class Bar:
    """One bar of :func:`hbar_chart`: ``value`` drawn dark over ``outer`` drawn light."""

    label: str
    value: float
    outer: float | None = None


@dataclass(frozen=True)
class Series:
    """Values per x position; ``low``/``high`` (optional) draw an error bar at each."""

    name: str
    values: Sequence[float | None]
    low: Sequence[float | None] | None = None
    high: Sequence[float | None] | None = None


def _svg(width: int, height: int, body: str, label: str) -> str:
    return (f'<svg class="chart" viewBox="0 0 {width} {height}" width="100%" role="img" '
            f'aria-label="{text(label)}" xmlns="http://www.w3.org/2000/svg">{body}</svg>')


def _nice_ticks(lo: float, hi: float, count: int = 4) -> list[float]:
    """Round tick values from at most ``lo`` to at least ``hi`` (0 among them)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi - lo <= 0:
        return [0.0, 1.0] if lo == hi == 0 else [min(lo, 0.0), max(hi, 0.0) or 1.0]
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * (1 - 1e-9))
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [i * step for i in range(first, last + 1)]


class _Scale:
    """Value -> pixel offset along an axis of ``length``: linear through 0, or log."""

    def __init__(self, values: Sequence[float], length: float, *, log: bool) -> None:
        shown = [v for v in values if math.isfinite(v) and (v > 0 if log else True)]
        self.log = log
        self.length = length
        if log:
            lo = math.floor(math.log10(min(shown))) if shown else 0
            hi = math.ceil(math.log10(max(shown))) if shown else 1
            self.lo, self.hi = float(lo), float(max(hi, lo + 1))
            every = 1 + (int(self.hi - self.lo) - 1) // 6  # at most about 7 labels
            self.ticks = [10.0 ** e for e in range(int(self.lo), int(self.hi) + 1, every)]
        else:
            self.ticks = _nice_ticks(min(shown, default=0.0), max(shown, default=0.0))
            self.lo, self.hi = min(self.ticks[0], 0.0), max(self.ticks[-1], 0.0)

    def ok(self, v: float | None) -> bool:
        return v is not None and math.isfinite(v) and (v > 0 or not self.log)

    def __call__(self, v: float) -> float:
        if self.log:
            return self.length * (math.log10(v) - self.lo) / (self.hi - self.lo)
        return self.length * (v - self.lo) / (self.hi - self.lo)

    @property
    def zero(self) -> float:
        """Where bars start: 0, or the bottom of a log axis."""
        return 0.0 if self.log else self(0.0)


def hbar_chart(title: str, bars: Sequence[Bar], *, fmt: Fmt, axis: str,
               legend: tuple[str, str] | None = None) -> str:
    """Horizontal bars, one labelled row each, largest first as given."""
    row, label_w, top = 18, 260, 28
    plot_w = _W - label_w - 20
    scale = _Scale([b.outer if b.outer is not None else b.value for b in bars], plot_w,
                   log=False)
    height = top + row * len(bars) + 40
    out = [f'<text class="ttl" x="0" y="16">{text(title)}</text>']
    out += _x_ticks(scale, label_w, top, top + row * len(bars), fmt)
    for i, b in enumerate(bars):
        y = top + i * row
        out.append(f'<text class="lbl" x="{label_w - 6}" y="{y + 13}" text-anchor="end">'
                   f"{text(_clip(b.label, 40))}</text>")
        tip = f"{b.label}: {fmt(b.value)}" + (f" of {fmt(b.outer)}" if b.outer else "")
        if b.outer is not None:
            out.append(_rect(label_w, y + 2, scale(b.outer), row - 4, 1, tip))
        out.append(_rect(label_w, y + 2, scale(b.value), row - 4, 0, tip))
    out.append(f'<text class="axis" x="{label_w + plot_w / 2:.0f}" y="{height - 6}" '
               f'text-anchor="middle">{text(axis)}</text>')
    if legend:
        out.append(_legend(legend, _W - 300, 14, paired=True))
    return _svg(_W, height, "".join(out), title)


def _rect(x: float, y: float, w: float, h: float, color: int, tip: str) -> str:
    light = ' opacity="0.35"' if color == 1 else ""
    return (f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0.5):.1f}" height="{h:.1f}" '
            f'fill="{_COLORS[0]}"{light}><title>{text(tip)}</title></rect>')


def _x_ticks(scale: _Scale, left: float, top: float, bottom: float, fmt: Fmt) -> list[str]:
    out = []
    for t in scale.ticks:
        x = left + scale(t)
        out.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{bottom}"/>'
                   f'<text class="tick" x="{x:.1f}" y="{bottom + 13}" '
                   f'text-anchor="middle">{text(fmt(t))}</text>')
    return out


def _legend(names: Sequence[str], x: float, y: float, *, paired: bool = False) -> str:
    """Coloured squares with names; ``paired``: one colour, dark then light."""
    parts = []
    for i, name in enumerate(names):
        color = _COLORS[0] if paired else _COLORS[i % len(_COLORS)]
        light = ' opacity="0.35"' if paired and i == 1 else ""
        parts.append(f'<rect x="{x + i * 150:.0f}" y="{y - 9}" width="10" height="10" '
                     f'fill="{color}"{light}/><text class="lbl" x="{x + i * 150 + 14:.0f}" '
                     f'y="{y}">{text(name)}</text>')
    return "".join(parts)


def layer_chart(title: str, labels: Sequence[str], series: Sequence[Series], *, fmt: Fmt,
                axis: str, log: bool = False, points: bool = False,
                what: str = "layers in call order") -> str:
    """Values per layer, in call order: one bar group (or, on a log scale or with
    ``points``, one point) per layer and series, error bars where a series has them;
    ``what`` names the x axis's items."""
    height, top, bottom = 260, 28, 40
    plot_h, plot_w = height - top - bottom, _W - _LEFT - 10
    every = [v for s in series for vs in (s.values, s.low or (), s.high or ())
             for v in vs if v is not None]
    scale = _Scale(every, plot_h, log=log)
    out = [f'<text class="ttl" x="0" y="16">{text(title)}</text>']
    base = top + plot_h
    for t in scale.ticks:
        y = base - scale(t)
        out.append(f'<line class="grid" x1="{_LEFT}" x2="{_W - 10}" y1="{y:.1f}" y2="{y:.1f}"/>'
                   f'<text class="tick" x="{_LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">'
                   f"{text(fmt(t))}</text>")
    slot = plot_w / max(len(labels), 1)
    skipped = 0
    for k, s in enumerate(series):
        width = slot / len(series)
        for i, v in enumerate(s.values):
            if v is None:
                continue
            if not scale.ok(v):
                skipped += 1
                continue
            x = _LEFT + i * slot + k * width
            tip = f"{labels[i]}: {s.name} {fmt(v)}"
            out.append(_mark(x, width, base, scale, v, k, tip, point=points or log))
            if s.low is not None and s.high is not None:
                out.append(_error_bar(x + width / 2, base, scale, s.low[i], s.high[i]))
    zero = base - scale.zero
    out.append(f'<line class="axisline" x1="{_LEFT}" x2="{_W - 10}" y1="{zero:.1f}" '
               f'y2="{zero:.1f}"/>')
    note = f" ({skipped} values not shown: not positive)" if skipped else ""
    out.append(f'<text class="axis" x="{_LEFT + plot_w / 2:.0f}" y="{height - 8}" '
               f'text-anchor="middle">{text(f"{len(labels)} {what}{note}")}'
               "</text>")
    out.append(f'<text class="axis" transform="rotate(-90)" x="{-(top + plot_h / 2):.0f}" '
               f'y="12" text-anchor="middle">{text(axis + (" (log)" if log else ""))}</text>')
    if len(series) > 1:
        out.append(_legend([s.name for s in series], _W - 150 * len(series) - 10, 14))
    return _svg(_W, height, "".join(out), title)


def _mark(x: float, w: float, base: float, scale: _Scale, v: float, k: int, tip: str, *,
          point: bool) -> str:
    color = _COLORS[k % len(_COLORS)]
    if point:
        return (f'<circle cx="{x + w / 2:.1f}" cy="{base - scale(v):.1f}" '
                f'r="{min(max(w / 3, 1.5), 3.5):.1f}" fill="{color}"><title>{text(tip)}</title>'
                "</circle>")
    y0, y1 = base - scale.zero, base - scale(v)
    return (f'<rect x="{x:.1f}" y="{min(y0, y1):.1f}" width="{max(w * 0.85, 0.6):.2f}" '
            f'height="{max(abs(y1 - y0), 0.5):.1f}" fill="{color}"><title>{text(tip)}</title>'
            "</rect>")


def _error_bar(x: float, base: float, scale: _Scale, low: float | None,
               high: float | None) -> str:
    if low is None or high is None or not (scale.ok(high) and math.isfinite(low)):
        return ""
    y1 = base - scale(max(low, scale.lo) if not scale.log else max(low, 10.0 ** scale.lo))
    y2 = base - scale(high)
    return f'<line class="err" x1="{x:.1f}" x2="{x:.1f}" y1="{y1:.1f}" y2="{y2:.1f}"/>'


def step_chart(title: str, steps: Sequence[int], series: Sequence[Series], *, fmt: Fmt,
               axis: str, log: bool = True) -> str:
    """One line per series over training steps (the x axis)."""
    height, top, bottom = 280, 28, 40
    plot_h, plot_w = height - top - bottom, _W - _LEFT - 10
    every = [v for s in series for v in s.values if v is not None]
    scale = _Scale(every, plot_h, log=log)
    base = top + plot_h
    out = [f'<text class="ttl" x="0" y="16">{text(title)}</text>']
    for t in scale.ticks:
        y = base - scale(t)
        out.append(f'<line class="grid" x1="{_LEFT}" x2="{_W - 10}" y1="{y:.1f}" y2="{y:.1f}"/>'
                   f'<text class="tick" x="{_LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">'
                   f"{text(fmt(t))}</text>")
    first, last = (steps[0], steps[-1]) if steps else (0, 1)
    span = max(last - first, 1)
    for k, s in enumerate(series):
        points = [f"{_LEFT + plot_w * (st - first) / span:.1f},{base - scale(v):.1f}"
                  for st, v in zip(steps, s.values, strict=True) if v is not None and scale.ok(v)]
        out.append(f'<polyline fill="none" stroke="{_COLORS[k % 6]}" stroke-width="1.5" '
                   f'points="{" ".join(points)}"><title>{text(s.name)}</title></polyline>')
    for st in (first, last):
        x = _LEFT + plot_w * (st - first) / span
        out.append(f'<text class="tick" x="{x:.1f}" y="{base + 14}" text-anchor="middle">'
                   f"{st}</text>")
    out.append(f'<text class="axis" x="{_LEFT + plot_w / 2:.0f}" y="{height - 8}" '
               f'text-anchor="middle">step</text>')
    out.append(f'<text class="axis" transform="rotate(-90)" x="{-(top + plot_h / 2):.0f}" '
               f'y="12" text-anchor="middle">{text(axis + (" (log)" if log else ""))}</text>')
    out.append(_legend([s.name for s in series[:5]], _LEFT + 10, top + 12))
    return _svg(_W, height, "".join(out), title)


def _clip(label: str, n: int) -> str:
    return label if len(label) <= n else "…" + label[-(n - 1):]
