"""``GradientMonitor(check_divergence_every=N)``: the replicas compared every N steps.

Every N-th recorded step, :class:`DivergenceWatch` calls
:func:`~hookscope.check_divergence` (``distributed/divergence.py``), a collective: every
rank's monitor records its steps in the same order, so every rank calls it at the same
step. A report with a tensor that differs is kept (``mon.divergences``) and warned
about once per step.
"""

from __future__ import annotations

import warnings

from torch import nn

from hookscope.distributed import DivergenceReport, check_divergence
from hookscope.errors import SpecError

__all__ = ["DivergenceWatch", "check_every"]


def check_every(every: object) -> int | None:
    """``check_divergence_every=`` validated (``None``: never)."""
    if every is None:
        return None
    if not isinstance(every, int) or isinstance(every, bool) or every < 1:
        raise SpecError(f"check_divergence_every= must be a positive number of steps or "
                        f"None, got {every!r}")
    return every


class DivergenceWatch:
    """Compare the model's replicas across ranks every ``every`` steps.

    Args:
        model: the model (a ``DistributedDataParallel`` wrapper is looked through).
        every: the number of steps between two checks.
    """

    def __init__(self, model: nn.Module, every: int) -> None:
        self._model = model
        self._every = every
        #: ``(step, report)`` of every check made, in step order
        self.reports: list[tuple[int, DivergenceReport]] = []

    def after_step(self, step: int) -> None:
        """Check after the recorded step ``step`` (0-based) when it is due."""
        if (step + 1) % self._every:
            return
        report = check_divergence(self._model)
        self.reports.append((step, report))
        if not report.ok:
            warnings.warn(f"hookscope: at step {step}, {report.answer()}",
                          UserWarning, stacklevel=4)
