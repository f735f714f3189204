"""``GradientMonitor``: per-step gradient norms, thresholds and clipping for a training loop.

Where it sits: beside ``hookscope.trace`` in the API layer, but it registers no module
or tensor hook at all. A step is read where the gradients are final, after every
backward of the step (gradient accumulation) and before the optimizer uses them:

- ``mon.step()``, called by the user after ``backward()`` (with a ``GradScaler``: it
  calls ``scaler.unscale_(optimizer)`` first, so norms are unscaled), or
- an optimizer step pre-hook (``optimizer=``), its handle in a ``HandleGroup``
  removed by ``close()``.

Per step: one ``torch._foreach_norm`` over the ``.grad`` of the monitored parameters
(per device and dtype, on the device), stacked into one tensor per device; the rows
move to the host once per ``log_every`` steps (``monitor/history.py``), where the
thresholds are checked (``monitor/checks.py``). Clipping (``clip=``) multiplies or
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

from hookscope.core import torch_private
from hookscope.core.handles import HandleGroup
from hookscope.core.selectors import Selector, compile_selector
from hookscope.errors import HookscopeError, SpecError
from hookscope.monitor.checks import AnomalyChecker, check_action, check_threshold, clip_limits
from hookscope.monitor.history import GradAnomaly, GradHistory
from hookscope.monitor.output import open_writer, plot_flow, plot_history, write_scalars

__all__ = ["GradientMonitor"]

_EPS = 1e-6  # as torch.nn.utils.clip_grad_norm_: limit / (norm + eps)


_Scaled = bool | list[torch.Tensor]
"""Whether a scaler unscaled the step: its overflow flags, or ``True`` where they
cannot be read, ``False`` without a scaler."""


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
        if scaler is not None and optimizer is None:
            raise SpecError("scaler= needs optimizer= too (the scaler unscales its gradients)")
        if not isinstance(log_every, int) or isinstance(log_every, bool) or log_every < 1:
            raise SpecError(f"log_every= must be a positive integer, got {log_every!r}")
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise SpecError(f"window= must be a positive integer, got {window!r}")
        if clip_mode not in ("norm", "value"):
            raise SpecError(f"clip_mode= must be 'norm' or 'value', got {clip_mode!r}")
        matches = compile_selector(select) if select is not None else None
        # a tied parameter is watched once, by its first path, and selected or clipped
        # by any of its paths (``lm_head.weight`` of a model that ties it to the input
        # embedding)
        paths: dict[int, list[str]] = {}
        named = []
        for n, p in model.named_parameters(remove_duplicate=False):
            if p.requires_grad:
                if id(p) not in paths:
                    paths[id(p)] = []
                    named.append((n, p))
                paths[id(p)].append(n)
        named = [(n, p) for n, p in named
                 if matches is None or any(map(matches, paths[id(p)]))]
        if not named:
            raise SpecError("GradientMonitor found no parameter that requires grad to watch"
                            + (f" matching select={select!r}" if select is not None else ""))
        self.names = [n for n, _ in named]
        self._params = [p for _, p in named]
        self._clip = clip_limits([paths[id(p)] for p in self._params], clip)
        if clip_mode == "value":
            complex_ = [self.names[i] for i in self._clip if self._params[i].is_complex()]
            if complex_:
                raise SpecError(
                    f"clip_mode='value' clamps real values, but {complex_[0]!r} is complex; "
                    f"use clip_mode='norm' for it, or leave it out of clip="
                )
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
        self._pending: list[tuple[int, list[bool], list[torch.Tensor], _Scaled]] = []
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
        self._record(self._unscale())
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

    def _unscale(self) -> _Scaled:
        """With a scaler: unscale the optimizer's gradients (once per step); the
        scaler's overflow flags, which decide whether it skips the step (``True``
        where they cannot be read: judged from the monitored norms then); ``False``
        without a scaler."""
        scaler = self._scaler
        if scaler is None or not scaler.is_enabled():
            return False
        try:
            scaler.unscale_(self._optimizer)
        except RuntimeError as e:
            if "already been called" not in str(e):
                raise
        flags = torch_private.scaler_found_inf(scaler, self._optimizer)
        return True if flags is None else flags

    def _record(self, scaled: _Scaled, *, keep: bool = True) -> None:
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
                self._apply_clip(index, found, norms)
        if not keep:
            return
        self._pending.append((self._count, present, rows, scaled))
        self._count += 1
        if len(self._pending) >= self._log_every:
            self.flush()

    def _apply_clip(self, index: list[int], grads: list[torch.Tensor],
                    norms: list[torch.Tensor]) -> None:
        limits = self._clip
        if not limits:
            return
        chosen = [(j, limits[i]) for j, i in enumerate(index) if i in limits]
        if not chosen:
            return
        targets = [grads[j] for j, _ in chosen]
        if self._clip_mode == "value":
            # NB: every one checked before any is clamped: a refusal changes no .grad
            for g, (j, _) in zip(targets, chosen, strict=True):
                if g.layout != torch.strided:  # torch has no clamp_ of a sparse tensor
                    raise SpecError(
                        f"clip_mode='value' cannot clamp the sparse gradient of "
                        f"{self.names[index[j]]!r} (an nn.Embedding(sparse=True)?); use "
                        "clip_mode='norm' for it, or leave it out of clip="
                    )
            for g, (_, limit) in zip(targets, chosen, strict=True):
                g.clamp_(-limit, limit)
            return
        coefs = [(limit / (norms[j] + _EPS)).clamp(max=1.0) for j, limit in chosen]
        torch._foreach_mul_(targets, [c.to(g.dtype) for c, g in zip(coefs, targets, strict=True)])

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
            if isinstance(scaled, list):  # the scaler's own flags: every gradient
                skipped = any(bool(flag.item()) for flag in scaled)
            else:  # judged from the monitored gradients
                skipped = scaled and any(
                    p and not math.isfinite(v) for v, p in zip(full[0], present, strict=True)
                )
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


def grad_norms(grads: list[torch.Tensor], ord: float) -> list[torch.Tensor]:
    """The ``ord``-norm of each gradient, 0-d, accumulated in float32 at least (float64
    for float64 gradients): in a float16 one, the norm of finite values overflows at
    65504 (``_foreach_norm`` per dtype, as ``clip_grad_norm_`` groups them)."""
    out: list[torch.Tensor | None] = [None] * len(grads)
    groups: dict[torch.dtype, list[int]] = {}
    for i, g in enumerate(grads):
        groups.setdefault(g.dtype, []).append(i)
    for dtype, indices in groups.items():
        wide = _NORM_DTYPE.get(dtype, dtype)
        chosen = [grads[i] for i in indices]
        try:
            found = torch._foreach_norm(chosen, ord, dtype=None if wide is dtype else wide)
        except (TypeError, RuntimeError):  # no dtype= in this torch, or not a float dtype
            if wide is not dtype and not _NARROW_WARNED:
                _NARROW_WARNED.append(True)
                warnings.warn(f"hookscope: this torch cannot take {dtype} gradient norms in "
                              f"{wide}; they are taken in {dtype} (they may overflow)",
                              UserWarning, stacklevel=4)
            found = torch._foreach_norm(chosen, ord)
        for i, n in zip(indices, found, strict=True):
            out[i] = n
    return out  # type: ignore[return-value]


_NARROW_WARNED: list[bool] = []

#: The dtype a gradient's norm accumulates in, where it is not the gradient's own.
_NORM_DTYPE = {
    dtype: torch.float32 for dtype in (
        torch.float16, torch.bfloat16, *(
            getattr(torch, name) for name in ("float8_e4m3fn", "float8_e5m2")
            if hasattr(torch, name)
        ),
    )
}


def stack_norms(values: list[torch.Tensor]) -> torch.Tensor:
    """One float64 tensor per step (per device) from 0-d norms (NB: float64, not
    float32: a float64 gradient's norm keeps its digits and its range)."""
    devices = {v.device for v in values}
    if len(devices) > 1:
        values = [v.to(values[0].device) for v in values]
    wide = torch.float32 if values[0].device.type == "mps" else torch.float64  # MPS: no f64
    return torch.stack([v if v.dtype == wide else v.to(wide) for v in values])


def rows_to_host(rows: list[torch.Tensor]) -> list[list[float]]:
    """The steps' rows as lists of floats, in one transfer to the host."""
    if not rows:
        return []
    flat = torch.cat(rows).to("cpu", torch.float64).tolist()
    out, offset = [], 0
    for r in rows:
        out.append(flat[offset:offset + r.numel()])
        offset += r.numel()
    return out


def scatter_present(values: list[float], present: list[bool]) -> list[float]:
    """``values`` where ``present``, NaN elsewhere (a parameter without a gradient)."""
    it = iter(values)
    return [next(it) if p else math.nan for p in present]
