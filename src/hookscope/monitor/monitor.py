"""``GradientMonitor``: per-step gradient norms, thresholds and clipping for a training loop.

Where it sits: beside ``hookscope.trace`` in the API layer, but it registers no module
or tensor hook at all. A step is read where the gradients are final, after every
backward of the step (gradient accumulation) and before the optimizer uses them:

- ``mon.step()``, called by the user after ``backward()`` (with a ``GradScaler``: it
  calls ``scaler.unscale_(optimizer)`` first, so norms are unscaled:
  ``monitor/scaler.py``), or
- an optimizer step pre-hook (``optimizer=``), its handle in a ``HandleGroup``
  removed by ``close()``.

Per step: one ``torch._foreach_norm`` over the ``.grad`` of the monitored parameters
(``monitor/watched_params.py``), per device and dtype, on the device, stacked into
one tensor per device (``monitor/norms.py``); the rows move to the host once per
``log_every`` steps (``monitor/history.py``), where the thresholds are checked
(``monitor/thresholds.py``). Clipping (``clip=``, ``monitor/clipping.py``) multiplies or
clamps the gradients in place, before the optimizer step, from the norms already
computed. Without clipping nothing is written: training is bit-identical.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import torch
from torch import nn

from hookscope.core.handles import HandleGroup
from hookscope.core.options import check_flags
from hookscope.core.selectors import Selector
from hookscope.errors import HookscopeError, SpecError
from hookscope.monitor.clipping import check_value_clip, clip_grads
from hookscope.monitor.history import GradAnomaly, GradHistory
from hookscope.monitor.history_output import open_writer, plot_flow, plot_history, write_scalars
from hookscope.monitor.norms import grad_norms, rows_to_host, scatter_present, stack_norms
from hookscope.monitor.scaler import Scaled, step_skipped, unscale
from hookscope.monitor.thresholds import (
    AnomalyChecker,
    check_action,
    check_optimizer,
    check_threshold,
    clip_limits,
)
from hookscope.monitor.watched_params import watched_params

__all__ = ["GradientMonitor"]


class GradientMonitor:
    """Record every parameter's gradient norm once per training step.

    Args:
        model: the model whose parameters (those with ``requires_grad``) are watched.
        optimizer: step with the optimizer: a step pre-hook records (and clips) just
            before ``optimizer.step()``; ``mon.step()`` is then optional (when called,
            the hook does not record the same step again).
        scaler: the ``torch.amp.GradScaler`` of the loop; call ``mon.step()`` before
            ``scaler.step(optimizer)``: it unscales first, so norms are unscaled, and a
            step whose gradients overflowed is marked skipped. Needs ``optimizer``.
        select: watch only parameters whose path matches (glob, list, function).
        explode_above, vanish_below: per-parameter thresholds on the norm; with
            ``relative=True`` they are factors of the parameter's running median over
            the last ``window`` steps. Non-finite gradients are always reported.
        on_anomaly: ``"warn"`` (once per parameter and kind), ``"raise"``
            (:class:`~hookscope.monitor.GradientAnomalyError`, before the optimizer
            step) or ``fn(anomaly: GradAnomaly) -> None``.
        clip: per-tensor limits by selector, ``{"fc.*": 1.0}``, applied after backward
            and before the optimizer step (the first matching pattern wins).
        clip_mode: ``"norm"`` (scale each gradient to norm ≤ limit) or ``"value"``
            (clamp each element to [-limit, limit]).
        flow: also record max-abs and mean-abs per parameter (for :meth:`plot_flow`).
        log_every: move values to the host (and check, and log) every N steps.
        writer: a ``SummaryWriter`` (or a log directory) to log every row into.

    Example:
        >>> with hookscope.GradientMonitor(model, optimizer=opt, explode_above=100) as mon:
        ...     for x, y in data:
        ...         loss_fn(model(x), y).backward()
        ...         opt.step(); opt.zero_grad()
        >>> mon.plot("grads.png")
    """

    def __init__(
        self, model: nn.Module, *, optimizer: torch.optim.Optimizer | None = None,
        scaler: Any = None, select: Selector | None = None,
        explode_above: float | None = None, vanish_below: float | None = None,
        relative: bool = False, window: int = 20, on_anomaly: Any = "warn",
        clip: Mapping[str, float] | None = None, clip_mode: str = "norm", flow: bool = False,
        log_every: int = 1, writer: Any = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise SpecError(f"GradientMonitor expects an nn.Module, got {type(model).__name__}")
        check_flags(relative=relative, flow=flow)
        if scaler is not None and optimizer is None:
            raise SpecError("scaler= needs optimizer= too (the scaler unscales its gradients)")
        check_optimizer(optimizer, scaler)
        if not isinstance(log_every, int) or isinstance(log_every, bool) or log_every < 1:
            raise SpecError(f"log_every= must be a positive integer, got {log_every!r}")
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise SpecError(f"window= must be a positive integer, got {window!r}")
        if clip_mode not in ("norm", "value"):
            raise SpecError(f"clip_mode= must be 'norm' or 'value', got {clip_mode!r}")
        self.names, self._params, paths = watched_params(model, select)
        self._clip = clip_limits(paths, clip)
        if clip_mode == "value":
            check_value_clip(self._clip, self.names, self._params)
        self._clip_mode, self._flow, self._log_every = clip_mode, flow, log_every
        self._checker = AnomalyChecker(
            self.names, explode_above=check_threshold("explode_above", explode_above),
            vanish_below=check_threshold("vanish_below", vanish_below), relative=relative,
            window=window, action=check_action(on_anomaly),
        )
        self.history = GradHistory(list(self.names))
        self._optimizer, self._scaler = optimizer, scaler
        self._writer = open_writer(writer)
        #: recorded steps not yet on the host: step, present, norm rows, scaler flags
        self._pending: list[tuple[int, list[bool], list[torch.Tensor], Scaled]] = []
        self._count = 0
        self._manual = False
        self._handles = HandleGroup()
        self._closed = False
        self._in_block = False
        if optimizer is not None:
            self._handles.add(optimizer.register_step_pre_hook(self._pre_step))

    # -- lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> GradientMonitor:
        # NB: a monitor watches from when it is made until it is closed: a second block
        # would close it under the first, and a closed one watches nothing any more
        if self._closed:
            raise HookscopeError("this GradientMonitor is closed (its with block ended, "
                                 "or close() was called); create a new one")
        if self._in_block:
            raise HookscopeError("this GradientMonitor is already in a with block; its "
                                 "end would stop the monitoring of the outer one")
        self._in_block = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        # NB: when the loop raised, its last steps are still recorded (the NaN that made
        # it raise is in the history), but no anomaly is raised over its exception
        self._in_block = False
        self.close(quiet=exc is not None)

    def close(self, *, flush: bool = True, quiet: bool = False) -> None:
        """Remove the optimizer hook and move what is still on the device to the host
        (``quiet``: without raising for an anomaly found there). Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if flush:
                self._flush(quiet=quiet)
        except Exception as e:
            if not quiet:
                raise
            # NB: the loop's own exception is the one to see: this one only said so
            warnings.warn(f"hookscope: could not record the monitor's last steps: "
                          f"{type(e).__name__}: {e}", UserWarning, stacklevel=3)
        finally:
            self._handles.remove()

    # -- steps --------------------------------------------------------------------------

    @property
    def step_count(self) -> int:
        """How many steps were recorded."""
        return self._count

    @property
    def anomalies(self) -> list[GradAnomaly]:
        """Every anomaly found so far (up to the last host transfer), in step order."""
        return list(self._checker.found)

    def step(self) -> None:
        """Record (and clip) the current gradients as one step; call it after the
        step's last ``backward()`` and before ``optimizer.step()``.

        Raises:
            HookscopeError: the monitor is closed.
            GradientAnomalyError: with ``on_anomaly="raise"``, at a host transfer.
        """
        if self._closed:
            raise HookscopeError("this GradientMonitor is closed; create a new one")
        self._record(unscale(self._scaler, self._optimizer))
        self._manual = self._optimizer is not None

    def _pre_step(self, optimizer: Any, args: Any, kwargs: Any) -> Any:
        if self._manual:  # mon.step() already recorded this step
            self._manual = False
            return None
        # NB: torch hands the hook step()'s arguments with the optimizer first
        at = 1 if args and args[0] is optimizer else 0
        closure = args[at] if len(args) > at else kwargs.get("closure")
        if not callable(closure):
            self._record(False)
            return None
        # an optimizer stepped with a closure (LBFGS) computes the gradients inside
        # step(): recorded after the closure's first call, clipped after every call
        calls = [0]

        def recorded() -> Any:
            loss = closure()
            self._record(False, keep=calls[0] == 0)
            calls[0] += 1
            return loss

        if len(args) > at:
            return (*args[:at], recorded, *args[at + 1:]), kwargs
        return args, {**kwargs, "closure": recorded}

    def _record(self, scaled: Scaled, *, keep: bool = True) -> None:
        """Record (``keep``) and clip the gradients there are now as one step."""
        grads = [p.grad for p in self._params]
        present = [g is not None for g in grads]
        index = [i for i, g in enumerate(grads) if g is not None]
        found = [g for g in grads if g is not None]
        rows: list[torch.Tensor] = []
        if found:
            with torch.no_grad():
                norms = grad_norms(found, 2)
                rows.append(stack_norms(norms))
                # NB: every number of a step is of the gradients as backward made them,
                # before the clip changes them (as the norm and an anomaly's value)
                if self._flow and keep:
                    rows.append(stack_norms(grad_norms(found, math.inf)))
                    l1 = grad_norms(found, 1)
                    sizes = [max(1, g.numel()) for g in found]
                    rows.append(stack_norms([n / k for n, k in zip(l1, sizes, strict=True)]))
                clip_grads(self._clip, index, found, norms, mode=self._clip_mode,
                           names=self.names)
        if not keep:
            return
        self._pending.append((self._count, present, rows, scaled))
        self._count += 1
        if len(self._pending) >= self._log_every:
            self.flush()

    def flush(self) -> None:
        """Move the recorded steps to the host, check them and log them.

        Raises:
            GradientAnomalyError: with ``on_anomaly="raise"``, for the first anomaly
                (every step is recorded and checked first).
        """
        self._flush(quiet=False)

    def _flush(self, *, quiet: bool) -> None:
        pending, self._pending = self._pending, []
        if not pending:
            return
        host = rows_to_host([t for *_, rows, _ in pending for t in rows])
        checks = []
        offset = 0  # NB: a step without any gradient made no rows
        for step, present, rows, scaled in pending:
            values = host[offset:offset + len(rows)]
            offset += len(rows)
            # a step without any gradient: NaN rows, as many as a step with them has
            full = [scatter_present(v, present) for v in values] or [
                [math.nan] * len(present) for _ in range(3 if self._flow else 1)]
            skipped = step_skipped(scaled, full[0], present)
            self._append(step, full, skipped, present)
            checks.append((step, full[0], present, skipped))
        # NB: every step recorded before any check may raise, and every one checked
        first: Exception | None = None
        for step, norms, present, skipped in checks:
            try:
                self._checker.check(step, norms, present, skipped=skipped)
            except Exception as e:  # on_anomaly="raise", or the user's function raised
                first = first or e
        if first is not None and not quiet:
            raise first

    def _append(self, step: int, full: list[list[float]], skipped: bool,
                present: list[bool]) -> None:
        h = self.history
        h.steps.append(step)
        h.norms.append(full[0])
        h.skipped.append(skipped)
        h.present.append(present)
        if self._flow:
            h.max_abs.append(full[1])
            h.mean_abs.append(full[2])
        if self._writer is not None:
            write_scalars(self._writer, h, len(h) - 1)

    # -- output -------------------------------------------------------------------------

    def plot(self, path: Any, *, by: str = "module") -> None:
        """Norms over steps per layer (``by="module"``) or per parameter, log scale,
        anomalies marked. Needs matplotlib (``pip install 'hookscope[plot]'``)."""
        self.flush()
        plot_history(self.history, self.anomalies, path, by=by)

    def plot_flow(self, path: Any, *, step: int = -1) -> None:
        """Mean and max gradient per layer at one step (the gradient-flow chart).
        Needs ``flow=True`` and matplotlib."""
        self.flush()
        if not self.history.max_abs:
            raise SpecError("plot_flow needs GradientMonitor(..., flow=True) and one step")
        plot_flow(self.history, path, step=step)

    def to_tensorboard(self, writer: Any) -> None:
        """Write the whole history to a ``SummaryWriter`` (or a log directory)."""
        self.flush()
        w = open_writer(writer)
        for row in range(len(self.history)):
            write_scalars(w, self.history, row)
        w.flush()
