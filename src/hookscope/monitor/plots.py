"""Pictures of a :class:`~hookscope.monitor.GradHistory`: norms over steps, the
gradient flow at one step, histograms over steps.

matplotlib (``hookscope[plot]``) is optional: it is imported only when a picture is
asked for, and a missing one is a :class:`~hookscope.errors.MissingDependencyError`
naming the extra. The figures are drawn on a ``matplotlib.figure.Figure`` with the Agg
canvas, never through ``pyplot``: no global figure state, no display needed. With more
than 12 lines, the worst ones (:func:`worst_series`) and each one a red label names
are drawn in colour and named, the rest in grey.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from hookscope.errors import MissingDependencyError, SpecError
from hookscope.monitor.histograms import Histogram
from hookscope.monitor.history import GradAnomaly, GradHistory

__all__ = ["plot_flow", "plot_histograms", "plot_history", "worst_series"]

_LEGEND_MAX = 12  # more lines than this: the worst named in colour, the rest grey
_NAMED = 8  # lines named (in colour) among more than _LEGEND_MAX
GREY = "0.75"  # the colour of the lines not named


def _figure(width: float, height: float) -> Any:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise MissingDependencyError("matplotlib", "plot", needed_for="plots") from e
    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _series(history: GradHistory, by: str) -> dict[str, list[float]]:
    if by == "module":
        return {name or "(root)": v for name, v in history.modules().items()}
    if by == "parameter":
        return {name: history.column(name) for name in history.names}
    raise SpecError(f"by= must be 'module' or 'parameter', got {by!r}")


def plot_history(
    history: GradHistory, anomalies: Sequence[GradAnomaly], path: Any, *, by: str = "module"
) -> None:
    """Gradient norm over steps, one line per layer, log scale; anomalies as red marks
    at their step (at the top of the axes when the value is not finite), each step's
    worst named. With more than 12 lines the 8 worst and every line a red label names
    are drawn in colour and named, the rest grey."""
    series = _series(history, by)
    fig = _figure(9, 5)
    ax = fig.add_subplot()
    ranked = worst_series(series, anomalies, by=by)
    named = list(series)
    if len(series) > _LEGEND_MAX:
        # a line a red label names is drawn in colour and in the legend, whatever
        # its rank: the label would otherwise point at a grey line nobody can name
        labelled = {_key(a, by) for a, _ in _step_worst(anomalies).values()} & set(series)
        first = [n for n in ranked if n in labelled] + [n for n in ranked if n not in labelled]
        chosen = set(first[:max(_NAMED, len(labelled))])
        named = [n for n in ranked if n in chosen]
    for name in series:  # the grey ones first: beneath, in the model's order
        if name not in named:
            _line(ax, history.steps, series[name], colour=GREY, label=None, zorder=2)
    colours = _colormap(len(named))
    never = _without_gradient(history, by)
    for k, name in enumerate(named):  # the legend lists the worst first
        label = f"{name} (no gradient)" if name in never else name
        _line(ax, history.steps, series[name], colour=colours(k), label=label, zorder=3)
    ax.set_yscale("log")
    _mark_anomalies(ax, anomalies)
    _decorate(ax, history, by=by, lines=len(series), grey=len(series) - len(named))
    fig.tight_layout()
    fig.savefig(path)


def _without_gradient(history: GradHistory, by: str) -> set[str]:
    """The lines (parameters, or modules by their own parameters) that had no gradient
    at any step: nothing to draw, unlike a NaN gradient, which is marked."""
    had = [any(history.had_gradient(r)[i] for r in range(len(history)))
           for i in range(len(history.names))]
    if by == "parameter":
        return {n for n, h in zip(history.names, had, strict=True) if not h}
    owners: dict[str, bool] = {}
    for name, h in zip(history.names, had, strict=True):
        owner = name.rpartition(".")[0] or "(root)"
        owners[owner] = owners.get(owner, False) or h
    return {owner for owner, h in owners.items() if not h}


def _line(ax: Any, steps: list[int], values: list[float], *, colour: Any,
          label: str | None, zorder: int) -> None:
    ys = [v if math.isfinite(v) and v > 0 else math.nan for v in values]
    ax.plot(steps, ys, color=colour, linewidth=1.2 if label else 0.8, label=label,
            zorder=zorder)
    alone = _isolated(ys)  # no line reaches them: one step, or gaps either side
    if alone:
        ax.plot([steps[i] for i in alone], [ys[i] for i in alone], linestyle="none",
                marker="o", markersize=3, color=colour, zorder=zorder)


def _decorate(ax: Any, history: GradHistory, *, by: str, lines: int, grey: int) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if len(set(history.steps)) == 1:  # around one point the locator ticks fractions
        ax.set_xticks(list(history.steps))
    ax.set_ylabel("gradient L2 norm" + (" (per module)" if by == "module" else ""))
    steps = f"{len(history)} step{'' if len(history) == 1 else 's'}"
    ax.set_title(f"Gradient norms over {steps}, {lines} {by}{'' if lines == 1 else 's'}")
    ax.grid(True, which="major", alpha=0.3)
    if grey:
        ax.plot([], [], color=GREY, label=f"{grey} other {by}s")
    ax.legend(fontsize=7, loc="best")
    for step, skipped in zip(history.steps, history.skipped, strict=True):
        if skipped:
            ax.axvline(step, color="grey", alpha=0.3, linewidth=3)


def worst_series(series: dict[str, list[float]], anomalies: Sequence[GradAnomaly], *,
                 by: str) -> list[str]:
    """The names of ``series`` from the worst: those with an anomaly first (the most
    first), then by their largest jump (the highest norm over the series' median)."""
    # steps, not anomalies: a layer whose weight and bias are both flagged at a
    # step is not twice as bad as one whose weight alone is
    steps: dict[str, set[int]] = {}
    for a in anomalies:
        steps.setdefault(_key(a, by), set()).add(a.step)
    count = {key: len(found) for key, found in steps.items()}

    def jump(values: list[float]) -> float:
        finite = [v for v in values if math.isfinite(v) and v > 0]
        if len(finite) != len([v for v in values if not math.isnan(v)]):
            return math.inf  # an Inf norm
        return max(finite) / statistics.median(finite) if finite else 0.0

    return sorted(series, key=lambda n: (count.get(n, 0), jump(series[n])), reverse=True)


def _key(anomaly: GradAnomaly, by: str) -> str:
    """The line ``anomaly`` is on: its parameter, or its parameter's module."""
    if by == "parameter":
        return anomaly.path
    return anomaly.path.rpartition(".")[0] or "(root)"


def _step_worst(anomalies: Sequence[GradAnomaly]) -> dict[int, tuple[GradAnomaly, int]]:
    """Per step, its worst anomaly (the one its red label names) and how many it has."""
    from hookscope.monitor.thresholds import worst_first

    by_step: dict[int, list[GradAnomaly]] = {}
    for a in anomalies:
        by_step.setdefault(a.step, []).append(a)
    return {step: (worst_first(found)[0], len(found)) for step, found in by_step.items()}


def _isolated(ys: Sequence[float]) -> list[int]:
    """The indices of values with no plotted neighbour: a line draws nothing there."""
    def plotted(i: int) -> bool:
        return 0 <= i < len(ys) and not math.isnan(ys[i])

    return [i for i in range(len(ys)) if plotted(i) and not plotted(i - 1)
            and not plotted(i + 1)]


def _mark_anomalies(ax: Any, anomalies: Sequence[GradAnomaly]) -> None:
    """Red marks at the anomalies; each step's worst one named beside its mark."""
    if not anomalies:
        return
    finite = [a for a in anomalies if math.isfinite(a.value) and a.value > 0]
    other = [a for a in anomalies if a not in finite]
    top = ax.get_ylim()[1]
    if finite:
        ax.scatter([a.step for a in finite], [a.value for a in finite], marker="x",
                   color="red", zorder=5, label=f"anomaly ({len(finite)})")
    if other:
        ax.scatter([a.step for a in other], [top] * len(other), marker="v", color="red",
                   zorder=5, label=f"non-finite ({len(other)})")
    for step, (worst, found) in _step_worst(anomalies).items():
        y = worst.value if worst in finite else top
        more = f" (+{found - 1})" if found > 1 else ""
        ax.annotate(f"{worst.path} {worst.kind}{more}", (step, y), xytext=(4, 4),
                    textcoords="offset points", fontsize=7, color="red", zorder=6)


def plot_flow(history: GradHistory, path: Any, *, step: int = -1) -> None:
    """Mean |grad| and max |grad| per parameter at one step (row ``step`` of the
    history), from the first layer to the last: the gradient-flow chart."""
    row = history.steps[step]
    i = history.steps.index(row)
    maxes, means = history.max_abs[i], history.mean_abs[i]
    names = history.names
    fig = _figure(max(6.0, 0.18 * len(names) + 2), 5)
    ax = fig.add_subplot()
    xs = list(range(len(names)))
    ax.bar(xs, [_positive(v) for v in maxes], color="tab:cyan", alpha=0.6, label="max |grad|")
    ax.bar(xs, [_positive(v) for v in means], color="tab:blue", alpha=0.9,
           label="mean |grad|")
    ax.set_yscale("log")
    ax.set_xticks(xs)
    ax.set_xticklabels(names, rotation=90, fontsize=6 if len(names) > 30 else 8)
    ax.set_ylabel("gradient magnitude")
    ax.set_title(f"Gradient flow at step {row} (first layer → last layer)")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)


def _positive(v: float) -> float:
    return v if math.isfinite(v) and v > 0 else math.nan


def _colormap(n: int) -> Any:
    from matplotlib import colormaps

    if n <= 10:
        return colormaps["tab10"]
    viridis = colormaps["viridis"]
    return lambda k: viridis(k / max(1, n - 1) * 0.9)




_PANELS = 12  # parameters drawn by plot_histograms unless named


def plot_histograms(history: GradHistory, path: Any, *, of: str = "grad",
                    names: Sequence[str] | None = None) -> None:
    """One panel per parameter: its histograms over the histogram steps, steps across,
    values up (each step's bins put on one grid over the panel's whole range), the
    count as colour (log scale; white: none)."""
    if of not in ("grad", "weight"):
        raise SpecError(f"of= must be 'grad' or 'weight', got {of!r}")
    chosen = list(history.names[:_PANELS] if names is None else names)
    unknown = [n for n in chosen if n not in history.names]
    if unknown or not chosen:
        raise SpecError(f"names= must name watched parameters, like {history.names[0]!r}; "
                        f"got {unknown[0] if unknown else chosen!r}")
    rows = history.grad_histograms if of == "grad" else history.weight_histograms
    cols = min(3, len(chosen))
    fig = _figure(4.2 * cols, 3.0 * math.ceil(len(chosen) / cols))
    for k, name in enumerate(chosen):
        ax = fig.add_subplot(math.ceil(len(chosen) / cols), cols, k + 1)
        i = history.names.index(name)
        found = [(s, r[i]) for s, r in zip(history.histogram_steps, rows, strict=True)
                 if r[i] is not None]
        _histogram_panel(fig, ax, found, name=name, of=of)
    what = "gradients" if of == "grad" else "weights"
    steps = len(history.histogram_steps)
    fig.suptitle(f"Histograms of the {what} over {steps} step{'' if steps == 1 else 's'}")
    fig.tight_layout()
    fig.savefig(path)


def _histogram_panel(fig: Any, ax: Any, found: list[tuple[int, Histogram | None]], *,
                     name: str, of: str) -> None:
    from matplotlib import colormaps
    from matplotlib.colors import LogNorm

    ax.set_title(name, fontsize=8)
    ax.set_xlabel("step")
    ax.set_ylabel(f"{of} value")
    hists = [h for _, h in found if h is not None]
    if not hists:
        ax.text(0.5, 0.5, "no histogram", ha="center", transform=ax.transAxes)
        return
    low, high = min(h.low for h in hists), max(h.high for h in hists)
    size = len(hists[0].counts)
    grid = [[0.0] * len(hists) for _ in range(size)]
    for col, h in enumerate(hists):
        edges = h.edges
        for b, count in enumerate(h.counts):
            centre = (edges[b] + edges[b + 1]) / 2
            grid[min(size - 1, int((centre - low) / (high - low) * size))][col] += count
    ys = [low + (r + 0.5) * (high - low) / size for r in range(size)]
    cmap = colormaps["viridis"].with_extremes(bad="white")
    mesh = ax.pcolormesh([s for s, _ in found], ys, grid, shading="nearest", cmap=cmap,
                         norm=LogNorm(vmin=1))
    fig.colorbar(mesh, ax=ax, label="count")
