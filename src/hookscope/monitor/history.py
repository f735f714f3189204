"""What a :class:`~hookscope.GradientMonitor` recorded: plain host-side records.

The monitor (``monitor/monitor.py``) keeps each step's norms on the device and moves
them here once per step (or per ``log_every`` steps): a :class:`GradHistory` of rows
(steps × parameters, float64, NaN where a parameter got no gradient that step) and a
list of :class:`GradAnomaly`. Plots (``monitor/plots.py``), the TensorBoard writer and
the command line's table read only these records.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hookscope.errors import MissingDependencyError
from hookscope.monitor.histograms import Histogram

__all__ = ["GradAnomaly", "GradHistory", "joint_norm", "monitor_text"]


@dataclass(frozen=True)
class GradAnomaly:
    """One gradient that crossed a threshold, or was not finite.

    Attributes:
        step: the monitor's step (0 is the first recorded step).
        path: the parameter's path.
        kind: ``"nonfinite"``, ``"explode"`` or ``"vanish"`` (of the gradient's norm),
            ``"update_large"`` or ``"update_small"`` (of its update-to-weight ratio).
        value: the gradient's norm (as backward made it), or the update ratio.
        threshold: the limit it crossed (absolute; ``None`` for ``"nonfinite"``).
        skipped: the step was skipped by the ``GradScaler`` (its gradients overflowed).
    """

    step: int
    path: str
    kind: str
    value: float
    threshold: float | None = None
    skipped: bool = False

    def describe(self) -> str:
        """One line: ``step 3: fc.weight gradient norm 1.2e+04 > 100 (explode)``."""
        if self.kind == "nonfinite":
            what = f"gradient norm {self.value} (non-finite)"
            if self.skipped:
                what += ", step skipped by the GradScaler"
        else:
            sign = ">" if self.kind in ("explode", "update_large") else "<"
            of = "update/weight ratio" if self.kind.startswith("update") else "gradient norm"
            what = f"{of} {self.value:.4g} {sign} {self.threshold:.4g} ({self.kind})"
        return f"step {self.step}: {self.path} {what}"


@dataclass
class GradHistory:
    """Gradient norms over steps, one column per monitored parameter.

    Attributes:
        names: parameter paths, the columns.
        steps: the step number of each row.
        norms: per step, each parameter's gradient norm as backward made it (before
            the loop's own clipping, unscaled) (NaN: no gradient that step, or a
            gradient whose norm is NaN: ``present`` tells them apart).
        total: per step, the total norm of those gradients (the joint norm
            ``clip_grad_norm_`` would compute; NaN when one of them is NaN).
        step_norms: the same shape as ``norms``: each gradient's norm as the loop left it
            for the optimizer step (after its own ``clip_grad_norm_``; before the
            monitor's ``clip=``).
        step_total: per step, the total norm of those.
        changed: per step, whether the loop changed the gradients between backward and
            the step (``step_norms`` differ from ``norms``).
        max_abs, mean_abs: the same shape, recorded with ``flow=True`` (else empty).
        update_steps: with ``updates=True``, the steps the optimizer took (a step a
            ``GradScaler`` skipped has none).
        update_ratio: per optimizer step, each parameter's ``‖w_after − w_before‖ /
            ‖w_before‖``.
        weight_norms: per optimizer step, each parameter's ``‖w_before‖``.
        histogram_steps: with ``histograms=N``, the steps whose histograms were taken.
        grad_histograms, weight_histograms: per such step, each parameter's
            :class:`~hookscope.monitor.histograms.Histogram` of its gradient (at the
            step) and of its weight (before the optimizer step); ``None`` where there
            was none.
        skipped: per step, whether the ``GradScaler`` skipped it.
        present: the same shape as ``norms``: whether the parameter had a gradient that
            step (empty in a history made without it: then NaN means no gradient).
    """

    names: list[str]
    steps: list[int] = field(default_factory=list)
    norms: list[list[float]] = field(default_factory=list)
    total: list[float] = field(default_factory=list)
    step_norms: list[list[float]] = field(default_factory=list)
    step_total: list[float] = field(default_factory=list)
    changed: list[bool] = field(default_factory=list)
    max_abs: list[list[float]] = field(default_factory=list)
    mean_abs: list[list[float]] = field(default_factory=list)
    update_steps: list[int] = field(default_factory=list)
    update_ratio: list[list[float]] = field(default_factory=list)
    weight_norms: list[list[float]] = field(default_factory=list)
    histogram_steps: list[int] = field(default_factory=list)
    grad_histograms: list[list[Histogram | None]] = field(default_factory=list)
    weight_histograms: list[list[Histogram | None]] = field(default_factory=list)
    skipped: list[bool] = field(default_factory=list)
    present: list[list[bool]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.steps)

    def __str__(self) -> str:
        """A table, one row per parameter: its last, median, min and max norm."""
        from hookscope.render.grads_table import grads_table

        return str(grads_table(self, ()))

    def column(self, name: str) -> list[float]:
        """The norms of parameter ``name`` over the steps."""
        i = self.names.index(name)
        return [row[i] for row in self.norms]

    def had_gradient(self, row: int) -> list[bool]:
        """Whether each parameter had a gradient at step row ``row``."""
        if row < len(self.present):
            return self.present[row]
        return [not math.isnan(v) for v in self.norms[row]]

    def modules(self) -> dict[str, list[float]]:
        """Per module (the owner of the parameters), the joint norm of its own
        parameters' gradients per step: ``sqrt(sum of squares)`` (NaN when none had a
        gradient, and when one's norm is NaN: a NaN gradient is not left out)."""
        owners: dict[str, list[int]] = {}
        for i, name in enumerate(self.names):
            owners.setdefault(name.rpartition(".")[0], []).append(i)
        rows = [(row, self.had_gradient(n)) for n, row in enumerate(self.norms)]
        return {
            module: [joint_norm([row[i] for i in cols if had[i]]) for row, had in rows]
            for module, cols in owners.items()
        }

    def median(self, name: str) -> float:
        """The median finite norm of parameter ``name`` (NaN when there is none)."""
        values = [v for v in self.column(name) if math.isfinite(v)]
        return statistics.median(values) if values else math.nan

    def to_html(self, path: Any = None, *, anomalies: Sequence[GradAnomaly] = ()) -> str:
        """One self-contained HTML page of these norms over the steps (total and per
        module, log scale) and of ``anomalies``; written to ``path`` when one is given.

        Raises:
            SpecError: ``path``'s folder does not exist, or ``path`` is a folder.
        """
        from hookscope.render.report import history_report, write_html

        html = history_report(self, anomalies)
        if path is not None:
            write_html(html, path)
        return html

    def to_dataframe(self) -> Any:
        """A ``pandas.DataFrame``: one row per step (index ``step``), one column per
        parameter, plus ``skipped``.

        Raises:
            MissingDependencyError: pandas is not installed.
        """
        try:
            import pandas as pd
        except ImportError as e:
            raise MissingDependencyError("pandas", "pandas", needed_for="to_dataframe") from e
        frame = pd.DataFrame(self.norms, columns=self.names, index=self.steps, dtype="float64")
        frame.index.name = "step"
        frame["skipped"] = self.skipped
        return frame


def joint_norm(values: list[float]) -> float:
    """The joint norm of the norms that were there (NaN when none was)."""
    return math.sqrt(sum(v * v for v in values)) if values else math.nan


def monitor_text(history: GradHistory, anomalies: Sequence[GradAnomaly], pending: int) -> str:
    """``str(monitor)``: a line of counts and the last total norm, then the table."""
    from hookscope.render.grads_table import grads_table

    h = history
    head = (f"GradientMonitor: {len(h.names)} parameters, {len(h)} steps, "
            f"{len(anomalies)} anomalies")
    if pending:
        head += f" (+{pending} step{'s' if pending > 1 else ''} not yet on the host: flush())"
    if h.total:
        head += f"; total norm after backward at the last step {h.total[-1]:.4g}"
        if h.changed[-1]:
            head += f", at the optimizer step {h.step_total[-1]:.4g}"
    return head + "\n" + str(grads_table(h, anomalies))
