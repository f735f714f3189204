"""``GradientMonitor``: per-step gradient norms, thresholds and clipping for a training loop.

Where it sits: beside ``hookscope.trace`` in the API layer; it registers no module
hook. Each watched parameter gets a post-accumulate-grad hook
(``monitor/backward_stats.py``) that takes its gradient's statistics as backward made
them, at the end of the backward pass, before the loop's code can change them (its
``clip_grad_norm_``); under gradient accumulation the last backward's (the sum) stand.
A step is then closed where the loop is done with the gradients, before the
optimizer uses them:

- ``mon.step()``, called by the user after ``backward()`` (with a ``GradScaler``: it
  calls ``scaler.unscale_(optimizer)`` first: ``monitor/scaler.py``), or
- an optimizer step pre-hook (``optimizer=``).

Every handle is in a ``HandleGroup`` removed by ``close()``. At the step, one
``torch._foreach_norm`` per dtype takes the norms of ``.grad`` as the optimizer will
get it; both sets (``monitor/steps.py``) stay on the device, stacked, until the rows
move to the host once per ``log_every`` steps (``monitor/history.py``), where the
thresholds are checked (``monitor/thresholds.py``). Clipping (``clip=``,
``monitor/clipping.py``) multiplies or clamps the gradients in place, before the
optimizer step, from the norms at the step. Without clipping nothing is written:
training is bit-identical.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import torch
from torch import nn

from hookscope.core import torch_private
from hookscope.core.engine.handles import HandleGroup
from hookscope.core.model.selectors import Selector
from hookscope.core.model.wrappers import is_ddp, unwrap
from hookscope.core.options import check_flags
from hookscope.distributed import DivergenceReport
from hookscope.errors import HookscopeError, SpecError
from hookscope.monitor.clipping import check_value_clip
from hookscope.monitor.divergence_watch import DivergenceWatch, check_every
from hookscope.monitor.histograms import check_histograms
from hookscope.monitor.history import GradAnomaly, GradHistory, monitor_text
from hookscope.monitor.history_output import open_writer, write_history
from hookscope.monitor.plots import plot_flow, plot_histograms, plot_history
from hookscope.monitor.recorder import StepRecorder
from hookscope.monitor.scaler import Scaled, unscale
from hookscope.monitor.thresholds import (
    AnomalyChecker,
    check_action,
    check_steps,
    check_threshold,
    clip_limits,
)
from hookscope.monitor.updates import DEFAULT_BAND, check_band
from hookscope.monitor.watched_params import watched_params

__all__ = ["GradientMonitor"]


class GradientMonitor:
    """Record every parameter's gradient norm once per training step, as backward made
    it (before the loop's own ``clip_grad_norm_``: ``history.norms``, ``history.total``)
    and as the optimizer gets it (``history.step_norms``, ``history.step_total``).

    Args:
        model: the model whose parameters (those with ``requires_grad``) are watched.
        optimizer: step with the optimizer: a step pre-hook records (and clips) just
            before ``optimizer.step()``; ``mon.step()`` is then optional (when called,
            the hook does not record the same step again).
        scaler: the ``torch.amp.GradScaler`` of the loop; call ``mon.step()`` before
            ``scaler.step(optimizer)``: it unscales first, so norms are unscaled, and a
            step whose gradients overflowed is marked skipped. Needs ``optimizer``.
            Without ``mon.step()`` a skipped step is not recorded (``scaler.step``
            skips ``optimizer.step()`` and its hook): the monitor warns once when the
            scaler's ``update()`` ran with a backward's gradients unrecorded.
        select: watch only parameters whose path matches (glob, list, function).
        explode_above: a norm above it (as backward made it) is an anomaly; with
            ``relative=True`` a factor of the parameter's running median over the last
            ``window`` steps. Non-finite gradients are always reported.
        vanish_below: a norm below it is an anomaly, read as ``explode_above`` is.
        on_anomaly: ``"warn"`` (one warning per step, naming its worst parameters,
            for a step with a parameter and kind not warned about before), ``"raise"``
            (:class:`~hookscope.monitor.GradientAnomalyError`, before the optimizer
            step) or ``fn(anomaly: GradAnomaly) -> None``.
        clip: per-tensor limits by selector, ``{"fc.*": 1.0}``, applied after backward
            and before the optimizer step (the first matching pattern wins).
        clip_mode: ``"norm"`` (scale each gradient to norm ≤ limit) or ``"value"``
            (clamp each element to [-limit, limit]).
        flow: also record max-abs and mean-abs per parameter (for :meth:`plot_flow`).
        log_every: move values to the host (and check, and log) every N steps.
        writer: a ``SummaryWriter`` (or a log directory) to log every row into.
        updates: after each optimizer step, record each parameter's weight norm and
            update-to-weight ratio ``‖w_after − w_before‖ / ‖w_before‖`` (costs a copy
            of the watched weights during the step). Needs ``optimizer``.
        histograms: record histograms of the gradients and weights every N steps
            (``True``: every step; each costs one host transfer), for
            :meth:`plot_histograms` and TensorBoard.
        bins: the histograms' number of bins, over each tensor's own range.
        update_band: ``(low, high)``: a ratio outside is an anomaly
            (``"update_small"``/``"update_large"``), checked at the next host transfer;
            ``None``: not checked.
        check_divergence_every: under ``torchrun``, every N steps compare the
            parameters and buffers across the ranks (:func:`~hookscope.check_divergence`,
            a collective: every rank's monitor must record the same steps); a tensor
            that differs is a warning, each report in ``mon.divergences``.

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
        log_every: int = 1, writer: Any = None, updates: bool = False,
        update_band: tuple[float, float] | None = DEFAULT_BAND,
        histograms: bool | int = False, bins: int = 64,
        check_divergence_every: int | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise SpecError(f"GradientMonitor expects an nn.Module, got {type(model).__name__}")
        check_flags(relative=relative, flow=flow, updates=updates)
        check_steps(optimizer, scaler, updates=updates, log_every=log_every, window=window)
        if clip_mode not in ("norm", "value"):
            raise SpecError(f"clip_mode= must be 'norm' or 'value', got {clip_mode!r}")
        band = check_band(update_band)
        every_n = check_every(check_divergence_every)
        self._divergence = None if every_n is None else DivergenceWatch(model, every_n)
        every = check_histograms(histograms, bins)
        #: how ``model`` was compiled, if it was: its compiled code runs as compiled
        #: (the monitor hooks parameters, no module), said under the table
        self.compiled = torch_private.compiled_form(model)
        # a torch.compile wrapper's parameters by the paths of the module it holds
        self.names, self._params, paths = watched_params(
            unwrap(torch_private.original_module(model)), select)
        clip_by_index = clip_limits(paths, clip)
        if clip_mode == "value":
            check_value_clip(clip_by_index, self.names, self._params)
        checker = AnomalyChecker(
            self.names, explode_above=check_threshold("explode_above", explode_above),
            vanish_below=check_threshold("vanish_below", vanish_below), relative=relative,
            window=window, action=check_action(on_anomaly),
        )
        self.history = GradHistory(list(self.names))
        self._optimizer, self._scaler = optimizer, scaler
        opened = open_writer(writer)
        # a writer opened here from a log directory is closed by close(); one the
        # user passed stays theirs
        self._own_writer = opened if opened is not writer else None
        self._recorder = StepRecorder(
            self._params, self.history, checker, flow=flow, clip=clip_by_index,
            clip_mode=clip_mode, scaler=scaler, writer=opened,
            log_every=log_every, update_band=band, updates=updates, histograms=every,
            bins=bins, begun=self._backward_begun if scaler is not None else None,
        )
        self._manual = False
        self._by_hand = False  # mon.step() was called: every step is recorded
        self._scaler_marker: object | None = None
        self._warned_skip = False
        self._closed = False
        self._in_block = False
        self._handles = HandleGroup()
        try:
            # NB: under DistributedDataParallel a gradient is all-reduced after backward
            # accumulated it: both rows are read at the step, from the all-reduced .grad
            if not is_ddp(model):
                self._recorder.backward.install(self._handles)
            if optimizer is not None:
                self._handles.add(optimizer.register_step_pre_hook(self._pre_step))
            if optimizer is not None and updates:
                self._handles.add(optimizer.register_step_post_hook(self._post_step))
        except BaseException:
            self._handles.remove()
            raise

    # -- lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> GradientMonitor:
        # a monitor watches from when it is made until it is closed: a second block
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
        # when the loop raised, its last steps are still recorded (the NaN that made
        # it raise is in the history), but no anomaly is raised over its exception
        self._in_block = False
        self.close(quiet=exc is not None)

    def close(self, *, flush: bool = True, quiet: bool = False) -> None:
        """Remove the optimizer hook and move what is still on the device to the host
        (``quiet``: without raising for an anomaly found there). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if not quiet:
            self._warn_if_skipped()  # the last step
        try:
            if flush:
                self._recorder.flush(quiet=quiet)
        except Exception as e:
            if not quiet:
                raise
            # the loop's own exception is the one to see: this one only said so
            warnings.warn(f"hookscope: could not record the monitor's last steps: "
                          f"{type(e).__name__}: {e}", UserWarning, stacklevel=3)
        finally:
            self._handles.remove()
            if self._own_writer is not None:
                self._own_writer.close()

    # -- steps --------------------------------------------------------------------------

    @property
    def step_count(self) -> int:
        """How many steps were recorded."""
        return self._recorder.count

    @property
    def anomalies(self) -> list[GradAnomaly]:
        """Every anomaly found so far (up to the last host transfer), in step order."""
        return list(self._recorder.checker.found)

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
        self._by_hand = True

    def _backward_begun(self) -> None:
        # scaler.step() skips optimizer.step(), and with it the step pre-hook, when
        # the gradients overflowed; a backward that finds the last one's statistics
        # untaken after the scaler's update() ran (not a second micro-batch) follows
        # such a step, which only mon.step() could have recorded
        self._warn_if_skipped()
        self._scaler_marker = torch_private.scaler_update_marker(self._scaler)

    def _warn_if_skipped(self) -> None:
        marker = torch_private.scaler_update_marker(self._scaler)
        seen = self._scaler_marker
        if (self._scaler is None or self._by_hand or self._warned_skip or marker is None
                or seen is None or marker is seen or not self._recorder.backward.open):
            return
        self._warned_skip = True
        warnings.warn(
            "hookscope: the GradScaler skipped a step (its gradients overflowed) that "
            "GradientMonitor could not record: scaler.step() then skips "
            "optimizer.step() and the monitor's hook with it; call mon.step() before "
            "scaler.step(optimizer) to record every step, skipped ones marked",
            UserWarning, stacklevel=2)

    def _pre_step(self, optimizer: Any, args: Any, kwargs: Any) -> Any:
        self._recorder.before_optimizer_step(optimizer)
        if self._manual:  # mon.step() already recorded this step
            self._manual = False
            return None
        # torch hands the hook step()'s arguments with the optimizer first
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

    def _post_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._recorder.after_optimizer_step()

    def _record(self, scaled: Scaled, *, keep: bool = True) -> None:
        self._recorder.record(scaled, keep=keep)
        if keep and self._divergence is not None:
            self._divergence.after_step(self._recorder.count - 1)

    @property
    def divergences(self) -> list[tuple[int, DivergenceReport]]:
        """``(step, report)`` of each ``check_divergence_every`` check, in step order."""
        return [] if self._divergence is None else list(self._divergence.reports)

    def flush(self) -> None:
        """Move the recorded steps to the host, check them and log them.

        Raises:
            GradientAnomalyError: with ``on_anomaly="raise"``, for the first anomaly
                (every step is recorded and checked first).
        """
        self._recorder.flush(quiet=False)

    # -- output -------------------------------------------------------------------------

    def __str__(self) -> str:
        """A table of what was recorded: one row per parameter, anomalies flagged
        (steps still on the device are counted, not moved: ``flush()`` moves them)."""
        text = monitor_text(self.history, self.anomalies, len(self._recorder.pending))
        if self.compiled is not None:
            text += (f"\n[compiled] {self.compiled}: the gradients its compiled code made "
                     "(hooks on the parameters, none on modules)")
        return text

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

    def to_html(self, path: Any = None) -> str:
        """One self-contained HTML page of the history: the gradient norms over the
        steps (total and per module, log scale) and the anomalies; written to ``path``
        when one is given."""
        self.flush()
        return self.history.to_html(path, anomalies=self.anomalies)

    def to_tensorboard(self, writer: Any) -> None:
        """Write the whole history to a ``SummaryWriter`` (flushed, left open) or a log
        directory (its writer closed when written)."""
        self.flush()
        w = open_writer(writer)
        try:
            write_history(w, self.history)
        finally:
            if w is writer:
                w.flush()
            else:
                w.close()

    def plot_histograms(self, path: Any, *, of: str = "grad",
                        names: Sequence[str] | None = None) -> None:
        """The histograms over steps (``histograms=N``) of the gradients (``of="grad"``)
        or the weights (``of="weight"``): one panel per parameter (``names``, or the
        first 12), steps across, values up, the count as colour. Needs matplotlib."""
        self.flush()
        if not self.history.histogram_steps:
            raise SpecError("plot_histograms needs GradientMonitor(..., histograms=N) and "
                            "one histogram step")
        plot_histograms(self.history, path, of=of, names=names)
