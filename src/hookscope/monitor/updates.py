"""The update-to-weight ratio of each parameter (``GradientMonitor(updates=True)``).

How far one optimizer step moves each weight, relative to its size:
``‖w_after − w_before‖ / ‖w_before‖``, usually near 1e-3 for a weight matrix in a
healthy run (much smaller: the layer barely learns; much larger: the step is too big
for it); ``update_band=`` checks the matrices (two dimensions or more) only. The monitor
(``monitor/monitor.py``) calls :meth:`UpdateTracker.before_step` from its optimizer
step pre-hook, which copies the watched weights (the feature's cost: one copy of them
until the step ends) and takes their norms, and :meth:`UpdateTracker.after_step` from a
step post-hook, which takes the norms of the differences; every value stays on the
device until the monitor's next host transfer, where :func:`host_updates` divides.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from hookscope.errors import SpecError
from hookscope.monitor.norms import grad_norms, stack_norms

__all__ = ["DEFAULT_BAND", "PendingUpdate", "UpdateTracker", "check_band", "host_updates"]

#: The ratios outside which an update is an anomaly: two decades either side of 1e-3.
DEFAULT_BAND = (1e-5, 1e-1)


@dataclass
class PendingUpdate:
    """One optimizer step's norms, still on the device."""

    step: int
    checked: list[bool]  # which ratios the band checks (see UpdateTracker.before_step)
    rows: list[torch.Tensor]  # the norms of the updates, of the weights before
    held: list[bool]  # which parameters the optimizer holds (the others have no ratio)


class UpdateTracker:
    """Copies the watched weights before each optimizer step, measures the update after."""

    def __init__(self, params: Sequence[torch.Tensor]) -> None:
        self._params = list(params)
        self._before: list[torch.Tensor] | None = None
        self._checked: list[bool] = []
        self._held: list[bool] = []
        self._weight_norms: torch.Tensor | None = None
        self.pending: list[PendingUpdate] = []

    def before_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Copy the weights before ``optimizer`` steps (the pre-hook)."""
        # a parameter outside the optimizer's groups (an optimizer over the head
        # only) never moves: its ratio would be a 0 that says nothing about learning
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        self._held = [id(p) in held for p in self._params]
        with torch.no_grad():
            self._before = [p.detach().clone() for p in self._params]
            self._weight_norms = stack_norms(grad_norms(self._before, 2))
        # only weights of two dimensions or more, that had a gradient: the usual
        # 1e-3 is of weight matrices; a bias or a norm's scale starts at 0 or 1 and
        # moves relatively more in a healthy run
        self._checked = [h and p.grad is not None and p.dim() >= 2
                         for p, h in zip(self._params, self._held, strict=True)]

    def after_step(self, step: int) -> None:
        """Measure the update just made (the post-hook)."""
        before, self._before = self._before, None
        if before is None or self._weight_norms is None:
            return  # a step whose pre-hook did not run (it raised)
        with torch.no_grad():
            for b, p in zip(before, self._params, strict=True):
                b.sub_(p.detach())  # in place: no second copy
            moved = stack_norms(grad_norms(before, 2))
        self.pending.append(PendingUpdate(step, self._checked, [moved, self._weight_norms],
                                          self._held))

    def take(self) -> list[PendingUpdate]:
        pending, self.pending = self.pending, []
        return pending


def host_updates(values: list[list[float]],
                 held: Sequence[bool]) -> tuple[list[float], list[float]]:
    """One step's host rows (update norms, weight norms): the ratios and the weight
    norms (the ratio of a zero weight, a bias initialised to 0, is NaN: none; so is
    that of a parameter the optimizer does not hold, ``held`` false)."""
    moved, weights = values
    return [_ratio(m, w) if h else math.nan
            for m, w, h in zip(moved, weights, held, strict=True)], weights


def _ratio(moved: float, weight: float) -> float:
    return moved / weight if weight != 0 else math.nan


def check_band(band: object) -> tuple[float, float] | None:
    """``update_band=``: ``(low, high)`` with ``0 < low < high``, or ``None``.

    Raises:
        SpecError: anything else.
    """
    if band is None:
        return None
    ok = isinstance(band, (tuple, list)) and len(band) == 2 and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in band)
    if not ok or not 0 < band[0] < band[1]:  # type: ignore[index]
        raise SpecError(f"update_band= must be (low, high) with 0 < low < high, like "
                        f"(1e-5, 1e-1), or None, got {band!r}")
    return float(band[0]), float(band[1])  # type: ignore[index]
