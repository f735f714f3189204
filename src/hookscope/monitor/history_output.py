"""Pictures and TensorBoard scalars of a :class:`~hookscope.monitor.GradHistory`.

matplotlib (``hookscope[plot]``) and tensorboard (``hookscope[tensorboard]``) are
optional: each is imported only when a picture or a log directory is asked for, and
a missing one is a :class:`~hookscope.errors.MissingDependencyError` naming the extra.
The figures are drawn on a ``matplotlib.figure.Figure`` with the Agg canvas, never
through ``pyplot``: no global figure state, no display needed.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from hookscope.errors import MissingDependencyError, SpecError
from hookscope.monitor.history import GradAnomaly, GradHistory

__all__ = ["open_writer", "plot_flow", "plot_history", "summary_writer", "write_scalars"]

_LEGEND_MAX = 12  # more lines than this: colours from first to last layer, no legend


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
    at their step (at the top of the axes when the value is not finite)."""
    series = _series(history, by)
    fig = _figure(9, 5)
    ax = fig.add_subplot()
    cmap = _colormap(len(series))
    for k, (name, values) in enumerate(series.items()):
        ys = [v if math.isfinite(v) and v > 0 else math.nan for v in values]
        line, = ax.plot(history.steps, ys, color=cmap(k), linewidth=1.2,
                        label=name if len(series) <= _LEGEND_MAX else None)
        alone = _isolated(ys)  # no line reaches them: one step, or gaps either side
        if alone:
            ax.plot([history.steps[i] for i in alone], [ys[i] for i in alone],
                    linestyle="none", marker="o", markersize=3, color=line.get_color())
    ax.set_yscale("log")
    _mark_anomalies(ax, history, anomalies)
    ax.set_xlabel("step")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("gradient L2 norm" + (" (per module)" if by == "module" else ""))
    ax.set_title(f"Gradient norms over {len(history)} steps, {len(series)} {by}s")
    ax.grid(True, which="major", alpha=0.3)
    if len(series) <= _LEGEND_MAX:
        ax.legend(fontsize=7, loc="best")
    else:
        ax.text(0.01, 0.01, "colour: first layer (dark) → last layer (light)",
                transform=ax.transAxes, fontsize=8)
    if any(history.skipped):
        for step, skipped in zip(history.steps, history.skipped, strict=True):
            if skipped:
                ax.axvline(step, color="grey", alpha=0.3, linewidth=3)
    fig.tight_layout()
    fig.savefig(path)


def _isolated(ys: Sequence[float]) -> list[int]:
    """The indices of values with no plotted neighbour: a line draws nothing there."""
    def plotted(i: int) -> bool:
        return 0 <= i < len(ys) and not math.isnan(ys[i])

    return [i for i in range(len(ys)) if plotted(i) and not plotted(i - 1)
            and not plotted(i + 1)]


def _mark_anomalies(ax: Any, history: GradHistory, anomalies: Sequence[GradAnomaly]) -> None:
    if not anomalies:
        return
    finite = [a for a in anomalies if math.isfinite(a.value) and a.value > 0]
    other = [a for a in anomalies if a not in finite]
    if finite:
        ax.scatter([a.step for a in finite], [a.value for a in finite], marker="x",
                   color="red", zorder=5, label=f"anomaly ({len(finite)})")
    if other:
        top = ax.get_ylim()[1]
        ax.scatter([a.step for a in other], [top] * len(other), marker="v", color="red",
                   zorder=5, label=f"non-finite ({len(other)})")


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


def summary_writer(logdir: Any) -> Any:
    """A ``torch.utils.tensorboard.SummaryWriter`` on ``logdir``.

    Raises:
        MissingDependencyError: tensorboard is not installed.
    """
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:
        raise MissingDependencyError("tensorboard", "tensorboard",
                                     needed_for="TensorBoard logging") from e
    return SummaryWriter(str(logdir))


def write_scalars(writer: Any, history: GradHistory, row: int) -> None:
    """Row ``row`` of ``history``: ``grad_norm/<parameter>`` per parameter and
    ``grad_norm/total`` (the joint norm), at the row's step."""
    step, values = history.steps[row], history.norms[row]
    total = 0.0
    # NB: a NaN norm of a gradient that was there is written (and makes the total NaN):
    # only a parameter without a gradient that step is left out
    for name, v, had in zip(history.names, values, history.had_gradient(row), strict=True):
        if had:
            writer.add_scalar(f"grad_norm/{name}", v, step)
            total += v * v
    writer.add_scalar("grad_norm/total", math.sqrt(total), step)


def open_writer(writer: Any) -> Any:
    """``writer`` itself when it is ``None`` or a ``SummaryWriter``-like object, else a
    writer for the log directory it names."""
    if writer is None or hasattr(writer, "add_scalar"):
        return writer
    if not isinstance(writer, (str, os.PathLike)):
        raise SpecError(
            f"writer= must be a TensorBoard SummaryWriter (anything with add_scalar) or a "
            f"log directory, got {type(writer).__name__}"
        )
    return summary_writer(writer)
