"""One :class:`~hookscope.GradientMonitor` step, from device rows to a history row.

At a step the monitor (``monitor/monitor.py``) has, per watched gradient, the
statistics backward left (``monitor/backward_stats.py``) and those of ``.grad`` now,
where the optimizer is about to use it. :func:`device_rows` stacks them into a few
device rows (no host sync); at a flush, ``norms.rows_to_host`` moves every pending row
at once and :func:`host_step` unpacks one step's rows into a :class:`HostStep`, which
:func:`append_step` adds to the :class:`~hookscope.monitor.GradHistory`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from hookscope.monitor.history import GradHistory, joint_norm
from hookscope.monitor.norms import scatter_present, stack_norms
from hookscope.monitor.scaler import Scaled, step_skipped

__all__ = ["HostStep", "PendingStep", "append_step", "device_rows", "host_step"]

_SAME = 1e-5  # relative: a norm taken twice of the same values differs by rounding only


@dataclass
class PendingStep:
    """A recorded step whose rows are still on the device."""

    step: int
    present: list[bool]
    rows: list[torch.Tensor]
    scaled: Scaled


@dataclass
class HostStep:
    """A recorded step on the host: rows by parameter, NaN where one had no gradient."""

    step: int
    present: list[bool]
    norms: list[float]
    step_norms: list[float]
    flow: list[list[float]] = field(default_factory=list)
    skipped: bool = False

    @property
    def changed(self) -> bool:
        """Whether the loop changed a gradient between backward and the step."""
        return any(p and _differ(a, b) for a, b, p in
                   zip(self.norms, self.step_norms, self.present, strict=True))


def _differ(a: float, b: float) -> bool:
    if math.isfinite(a) != math.isfinite(b):
        return True
    if not math.isfinite(a):
        return False
    return abs(a - b) > _SAME * max(abs(a), abs(b))


def device_rows(
    index: list[int], now: list[list[torch.Tensor]], after: dict[int, list[torch.Tensor]],
    scale: torch.Tensor | None,
) -> list[torch.Tensor]:
    """A step's rows: the backward statistics (each gradient's from ``after`` where its
    backward was seen, divided by a ``GradScaler``'s ``scale``, else from ``now``), then
    the norms ``now``, then the other backward statistics (``flow=True``).

    Args:
        index: the monitored parameters that have a gradient now.
        now: per statistic, the values of those gradients now (as ``grad_stats``).
        after: parameter index -> its statistics after its last backward.
        scale: the loss scale the backward gradients carry, or ``None``.
    """
    def backward_value(s: int, j: int) -> torch.Tensor:
        seen = after.get(index[j])
        if seen is None:
            return now[s][j]
        return seen[s] if scale is None else seen[s] / scale.to(seen[s].device)

    rows = [stack_norms([backward_value(s, j) for j in range(len(index))])
            for s in range(len(now))]
    return [rows[0], stack_norms(now[0]), *rows[1:]]


def host_step(pending: PendingStep, values: list[list[float]], *, flow: bool) -> HostStep:
    """``pending`` with its rows on the host (``values``; none for a step without any
    gradient: NaN rows then)."""
    present = pending.present
    full = [scatter_present(v, present) for v in values] or [
        [math.nan] * len(present) for _ in range(4 if flow else 2)]
    return HostStep(pending.step, present, full[0], full[1], full[2:],
                    step_skipped(pending.scaled, full[1], present))


def append_step(history: GradHistory, step: HostStep) -> None:
    """Add ``step`` as the last row of ``history``."""
    h = history
    h.steps.append(step.step)
    h.norms.append(step.norms)
    h.step_norms.append(step.step_norms)
    h.total.append(joint_norm([v for v, p in zip(step.norms, step.present, strict=True) if p]))
    h.step_total.append(
        joint_norm([v for v, p in zip(step.step_norms, step.present, strict=True) if p]))
    h.changed.append(step.changed)
    h.skipped.append(step.skipped)
    h.present.append(step.present)
    if step.flow:
        h.max_abs.append(step.flow[0])
        h.mean_abs.append(step.flow[1])
