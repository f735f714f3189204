"""The recording half of a :class:`~hookscope.GradientMonitor`: steps in, history out.

The monitor (``monitor/monitor.py``) decides when a step happens (its optimizer hooks,
``mon.step()``); :class:`StepRecorder` does the work: it takes the statistics of the
step on the device (``monitor/steps.py``, from ``monitor/backward_stats.py``), clips
(``monitor/clipping.py``), measures the optimizer's update (``monitor/updates.py``,
``updates=True``), and at a flush moves every pending row to the host in one transfer,
appends it to the :class:`~hookscope.monitor.GradHistory`, logs it and checks it
(``monitor/thresholds.py``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from hookscope.monitor.backward_stats import BackwardStats, grad_stats
from hookscope.monitor.clipping import clip_grads
from hookscope.monitor.histograms import HistogramTaker, PendingHistograms, host_histograms
from hookscope.monitor.history import GradHistory
from hookscope.monitor.history_output import write_histograms, write_scalars, write_updates
from hookscope.monitor.norms import rows_to_host
from hookscope.monitor.scaler import Scaled, loss_scale
from hookscope.monitor.steps import HostStep, PendingStep, append_step, device_rows, host_step
from hookscope.monitor.thresholds import AnomalyChecker, user_stacklevel
from hookscope.monitor.updates import PendingUpdate, UpdateTracker, host_updates

__all__ = ["StepRecorder"]


class StepRecorder:
    """Records the steps of one monitor (its options already checked)."""

    def __init__(
        self, params: Sequence[torch.Tensor], history: GradHistory, checker: AnomalyChecker, *,
        flow: bool, clip: dict[int, float], clip_mode: str, scaler: Any, writer: Any,
        log_every: int, update_band: tuple[float, float] | None, updates: bool,
        histograms: int, bins: int, begun: Callable[[], None] | None = None,
    ) -> None:
        self._params, self.history, self.checker = list(params), history, checker
        self._flow, self._clip, self._clip_mode = flow, clip, clip_mode
        self._scaler, self._writer, self._log_every = scaler, writer, log_every
        self._band = update_band
        self.backward = BackwardStats(params, flow=flow, begun=begun)
        self.updates = UpdateTracker(params) if updates else None
        self.histograms = HistogramTaker(params, every=histograms, bins=bins)
        self.pending: list[PendingStep] = []  # recorded, not yet on the host
        self.count = 0
        self._told_changed = False

    def record(self, scaled: Scaled, *, keep: bool = True) -> None:
        """Record (``keep``) and clip the gradients there are now as one step."""
        grads = [p.grad for p in self._params]
        present = [g is not None for g in grads]
        index = [i for i, g in enumerate(grads) if g is not None]
        found = [g for g in grads if g is not None]
        after = self.backward.take()
        if keep:
            self.histograms.maybe_take(self.count)  # before the clip, as every number
        rows: list[torch.Tensor] = []
        if found:
            with torch.no_grad():
                now = grad_stats(found, flow=self._flow and keep)
                if keep:
                    scale = loss_scale(self._scaler) if after else None
                    rows = device_rows(index, now, after, scale)
                clip_grads(self._clip, index, found, now[0], mode=self._clip_mode,
                           names=self.checker.names)
        if not keep:
            return
        self.pending.append(PendingStep(self.count, present, rows, scaled))
        self.count += 1
        if len(self.pending) >= self._log_every:
            self.flush(quiet=False)

    def before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.updates is not None:
            self.updates.before_step(optimizer)

    def after_optimizer_step(self) -> None:
        if self.updates is not None:
            self.updates.after_step(max(0, self.count - 1))  # the step just recorded

    def flush(self, *, quiet: bool) -> None:
        """Move the pending steps to the host, record, log and check them (``quiet``:
        without raising for an anomaly)."""
        pending, self.pending = self.pending, []
        updates = self.updates.take() if self.updates is not None else []
        histograms = self.histograms.take()
        if not pending and not updates and not histograms:
            return
        host = rows_to_host([t for p in pending for t in p.rows]
                            + [t for u in updates for t in u.rows]
                            + [h.counts for h in histograms if h.counts is not None])
        steps = []
        offset = 0  # a step without any gradient makes no rows
        for p in pending:
            steps.append(host_step(p, host[offset:offset + len(p.rows)], flow=self._flow))
            offset += len(p.rows)
            append_step(self.history, steps[-1])
            self._tell_changed(steps[-1])
            if self._writer is not None:
                write_scalars(self._writer, self.history, len(self.history) - 1)
        ratios = [self._append_update(u, host[offset + 2 * k:offset + 2 * k + 2])
                  for k, u in enumerate(updates)]
        counts = iter(host[offset + 2 * len(updates):])
        for h in histograms:
            self._append_histograms(h, next(counts) if h.counts is not None else [])
        self._check(steps, list(zip(updates, ratios, strict=True)), quiet=quiet)

    def _append_update(self, update: PendingUpdate, values: list[list[float]]) -> list[float]:
        h = self.history
        ratios, weights = host_updates(values, update.held)
        h.update_steps.append(update.step)
        h.update_ratio.append(ratios)
        h.weight_norms.append(weights)
        if self._writer is not None:
            write_updates(self._writer, h, len(h.update_steps) - 1)
        return ratios

    def _append_histograms(self, pending: PendingHistograms, counts: list[float]) -> None:
        h = self.history
        found = host_histograms(pending, counts, self.histograms.bins)
        half = len(found) // 2  # the gradients', then the weights'
        h.histogram_steps.append(pending.step)
        h.grad_histograms.append(found[:half])
        h.weight_histograms.append(found[half:])
        if self._writer is not None:
            write_histograms(self._writer, h, len(h.histogram_steps) - 1)

    def _check(self, steps: list[HostStep], updates: list[tuple[PendingUpdate, list[float]]],
               *, quiet: bool) -> None:
        # every step recorded before any check may raise, and every one checked
        first: Exception | None = None
        checks: list[Any] = [lambda s=s: self.checker.check(s) for s in steps]
        if self._band is not None:
            band = self._band
            checks += [lambda u=u, r=r: self.checker.check_updates(u.step, r, u.checked, band)
                       for u, r in updates]
        for check in checks:
            try:
                check()
            except Exception as e:  # on_anomaly="raise", or the user's function raised
                first = first or e
        if first is not None and not quiet:
            raise first

    def _tell_changed(self, step: HostStep) -> None:
        """Say once that the loop changes its gradients before the step (its clip)."""
        if self._told_changed or not step.changed:
            return
        self._told_changed = True
        h = self.history
        warnings.warn(
            f"hookscope: the loop changed the gradients between backward and the optimizer "
            f"step (its own clip_grad_norm_?): at step {step.step} their total norm was "
            f"{h.total[-1]:.4g} after backward and {h.step_total[-1]:.4g} at the step. "
            "GradientMonitor checks and records them as backward made them "
            "(history.norms, history.total); history.step_norms and history.step_total "
            "hold them as the optimizer got them (said once)",
            UserWarning, stacklevel=user_stacklevel(),
        )

