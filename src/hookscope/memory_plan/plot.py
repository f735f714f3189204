"""The timeline of a memory plan as a picture: bytes allocated over the step, the
phases shaded, the peak marked, the device's memory as a line when one was given.

matplotlib (``hookscope[plot]``) is optional: it is imported only here, and a missing
one is a :class:`~hookscope.errors.MissingDependencyError` naming the extra. The figure
is drawn with the Agg canvas, never through ``pyplot`` (no global state, no display).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hookscope.errors import MissingDependencyError

if TYPE_CHECKING:
    from hookscope.memory_plan.result import MemoryPlan

_GIB = 2**30
_PHASE_COLORS = {"forward": "#dbeafe", "backward": "#fde68a", "optimizer": "#d1fae5"}


def plot_timeline(plan: MemoryPlan, path: str | None = None) -> Any:
    """A ``matplotlib.figure.Figure`` of ``plan``'s timeline (saved to ``path`` if given)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise MissingDependencyError("matplotlib", "plot", needed_for="plots") from e
    fig = Figure(figsize=(8, 3.2), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    points = [p for p in plan.timeline if p.phase != "start"]
    ax.plot(range(len(points)), [p.bytes / _GIB for p in points], color="#1f4e79", lw=1.2)
    start = 0
    for i in range(1, len(points) + 1):
        if i == len(points) or points[i].phase != points[start].phase:
            phase = points[start].phase
            ax.axvspan(start, i, color=_PHASE_COLORS.get(phase, "#eeeeee"), lw=0)
            ax.text((start + i) / 2, 0.02, phase, ha="center", transform=ax.get_xaxis_transform(),
                    fontsize=8)
            start = i
    peak = max(range(len(points)), key=lambda i: points[i].bytes) if points else 0
    if points:
        ax.plot([peak], [points[peak].bytes / _GIB], "o", color="#b91c1c")
    if plan.device_memory is not None:
        ax.axhline(plan.device_memory / _GIB, color="#b91c1c", ls="--", lw=1)
    ax.set_xlabel("allocations and frees over the step")
    ax.set_ylabel("GiB allocated")
    ax.set_title(plan.headline(), fontsize=9)
    if path is not None:
        fig.savefig(path, bbox_inches="tight")
    return fig
