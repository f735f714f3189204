"""``hookscope.breakpoint``: open the debugger inside a module call, when a condition holds.

The seed steps into ``nn.Conv2d`` by editing the model (``pdb.set_trace()`` in a
wrapper). Here a probe on the engine watches the calls of the selected modules (the
tracer hooks only those: ``Tracer(select=at)``) and, when the condition holds, calls
:func:`~hookscope.debug.stops.in_call` (``debug/stops.py``), whose only locals are
``module``, ``path``, ``inputs``, ``kwargs``, ``output`` (and ``grad_output`` in the
backward). With Python's own hook and ``PYTHONBREAKPOINT`` unset (or
``pdb.set_trace``), pdb opens in that frame, its stack going from there straight to
the module's caller (``up`` reaches the caller's code); otherwise the frame calls
``sys.breakpointhook()``, what the builtin ``breakpoint()`` calls, so
``PYTHONBREAKPOINT`` chooses the debugger (``ipdb.set_trace``, pudb, an IDE's) and
``PYTHONBREAKPOINT=0`` turns it off. A one-line banner says where it stopped
and how to continue; ``q`` raises :class:`~hookscope.errors.DebuggerQuit`.

A named condition (``"nan"``, ``"inf"``, ``"nonfinite"``) stops once by default, at the
call where it first becomes true: in the forward, the first call whose output holds the
value while its inputs did not (a NaN's wake, every later call that holds it, is not
stopped in); ``every=True`` stops at each call where it holds.

One probe class per phase, each overriding its events, so that a forward breakpoint
installs no backward hooks and a backward one no pre-hook work.
"""

from __future__ import annotations

import bdb
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hookscope.core.engine.probe import Probe
from hookscope.core.records.tensor_paths import iter_tensors
from hookscope.debug.checks import all_finite, counts
from hookscope.debug.stops import debugger_disabled, in_backward_of_call, in_call
from hookscope.errors import DebuggerQuit, SpecError

if TYPE_CHECKING:
    from hookscope.core.engine.handles import Removable
    from hookscope.core.engine.tracer import Tracer
    from hookscope.core.model.selectors import ModuleSelector
    from hookscope.core.records.trace import Call

Condition = Callable[[nn.Module, Any], bool]
"""``fn(module, value) -> bool``; ``value`` is what the phase sees: the ``(args,
kwargs)`` of the call (``pre``), its output (``forward``), the gradients of its
outputs (``backward``)."""

_WHEN = ("nonfinite", "nan", "inf")
_PHASES = ("pre", "forward", "backward")


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    for _, t in iter_tensors(value, "v"):
        yield t


def _holds(when: str | Condition | None, module: nn.Module, value: Any) -> bool:
    if when is None:
        return True
    if callable(when):
        return bool(when(module, value))
    for t in _tensors(value):
        if when == "nonfinite":
            if not all_finite(t):
                return True
            continue
        nans, infs = counts(t)
        if (nans if when == "nan" else infs):
            return True
    return False


class _BreakProbe(Probe):
    """Stops in matching calls: with ``once``, at the first call where a named condition
    (``"nan"``...) becomes true, and no other."""

    name = "breakpoint"
    install_touches_modules = False

    def __init__(self, when: str | Condition | None, *, every: bool = True) -> None:
        self.when = when
        self.once = isinstance(when, str) and not every
        self.done = False
        self.hits = 0

    def install(self, tracer: Tracer) -> list[Removable]:
        self.tracer = tracer
        return []

    def _holds(self, module: nn.Module, value: Any) -> bool:
        return not self.done and _holds(self.when, module, value)

    def _stop(self, call: Call, where: str, module: nn.Module, inputs: tuple[Any, ...],
              kwargs: dict[str, Any], output: Any = None, grad_output: Any = None) -> None:
        self.hits += 1
        self.done = self.once
        name = call.path or "<root>"
        cond = "" if self.when is None else f" ({getattr(self.when, '__name__', self.when)})"
        locals_ = "module, path, inputs, kwargs, output" + (
            ", grad_output" if grad_output is not None else "")
        banner = (
            f"hookscope.breakpoint: {where} {name!r} ({call.module_class}, call "
            f"{call.call_index}){cond}; locals: {locals_}; 'c' continues, 'q' stops the run"
        )
        if not debugger_disabled():
            sys.stderr.write(banner + "\n")
            sys.stderr.flush()
        try:
            if grad_output is None:
                in_call(module, call.path, inputs, kwargs, output)
            else:
                in_backward_of_call(module, call.path, inputs, kwargs, output, grad_output)
        except bdb.BdbQuit:
            raise DebuggerQuit(f"quit from the debugger in {name!r}") from None


class _PreBreak(_BreakProbe):
    def on_enter(self, call: Call, module: nn.Module, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> None:
        if self._holds(module, (args, kwargs)):
            self._stop(call, "before", module, args, kwargs)


class _ForwardBreak(_BreakProbe):
    """With ``once``, the inputs of each call are checked as it starts: the call to stop
    in is the first whose output holds the value while its inputs did not."""

    def __init__(self, when: str | Condition | None, *, every: bool = True) -> None:
        super().__init__(when, every=every)
        self._came_in: dict[int, bool] = {}

    def on_enter(self, call: Call, module: nn.Module, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> None:
        if self.once and not self.done:
            self._came_in[call.index] = _holds(self.when, module, (args, kwargs))

    def on_exit(self, call: Call, module: nn.Module, args: tuple[Any, ...],
                kwargs: dict[str, Any], output: Any, failed: bool) -> None:
        came_in = self._came_in.pop(call.index, False)
        if not failed and not came_in and self._holds(module, output):
            self._stop(call, "after", module, args, kwargs, output)


class _BackwardBreak(_BreakProbe):
    """Keeps each call's module and values until the first call of a forward after its
    backward: every backward pass through the call before then (a second loss over a
    retained graph: multi-loss training) checks the condition, and a training loop in
    the block keeps no more than one step's values."""

    def on_enter(self, call: Call, module: nn.Module, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> None:
        if self._done:
            for index in self._done:
                self._calls.pop(index, None)
            self._done.clear()
        self._calls[call.index] = (module, args, kwargs)

    def on_exit(self, call: Call, module: nn.Module, args: tuple[Any, ...],
                kwargs: dict[str, Any], output: Any, failed: bool) -> None:
        # a call whose outputs need no gradient (torch.no_grad(), evaluation inside
        # the block) never reaches a backward: its values are let go at once, not kept
        # for the rest of the block
        if failed or not _needs_grad(output):
            self._calls.pop(call.index, None)
            return
        entry = self._calls.get(call.index)
        if entry is not None:
            self._calls[call.index] = (*entry[:3], output)

    def on_backward_enter(self, call: Call, grad_outputs: tuple[Any, ...]) -> None:
        entry = self._calls.get(call.index)
        if entry is None:
            return
        self._done.add(call.index)
        module, args, kwargs, *rest = entry
        if self._holds(module, grad_outputs):
            self._stop(call, "in the backward of", module, args, kwargs,
                       rest[0] if rest else None, grad_outputs)

    def __init__(self, when: str | Condition | None, *, every: bool = True) -> None:
        super().__init__(when, every=every)
        self._calls: dict[int, tuple[Any, ...]] = {}
        self._done: set[int] = set()  # calls whose backward ran: let go at the next call


def _needs_grad(output: Any) -> bool:
    return torch.is_grad_enabled() and any(
        t.requires_grad for _, t in iter_tensors(output, "out")
    )


_CLASSES: dict[str, type[_BreakProbe]] = {
    "pre": _PreBreak, "forward": _ForwardBreak, "backward": _BackwardBreak,
}


@contextmanager
def breakpoint(
    model: nn.Module,
    *,
    at: ModuleSelector | None = None,
    when: str | Condition | None = None,
    phase: str = "forward",
    every: bool = False,
) -> Iterator[None]:
    """Open the debugger inside matching module calls while the block runs.

    The debugger is whatever ``sys.breakpointhook()`` opens (``pdb`` unless
    ``PYTHONBREAKPOINT`` says otherwise; ``PYTHONBREAKPOINT=0`` disables it). It stops
    in a frame whose locals are ``module``, ``path``, ``inputs`` (the positional
    arguments), ``kwargs``, ``output`` (``None`` before the call) and ``grad_output``
    (the gradients of the outputs, in the backward), and nothing else, after a
    one-line banner; pdb's ``up`` goes to the code that called the module. ``c``
    continues; ``q`` stops the run (:class:`~hookscope.errors.DebuggerQuit`, a
    :class:`~hookscope.RunStopped`).

    Args:
        model: the model to watch; every hook is removed when the block ends.
        at: which modules (a glob over module paths, a list of globs,
            ``fn(path: str) -> bool``, or a module class such as ``nn.ReLU``);
            ``None``: every module.
        when: ``None`` (every matching call), ``"nonfinite"``, ``"nan"``, ``"inf"``
            (a tensor the phase sees holds one), or ``fn(module, value) -> bool``
            where ``value`` is ``(args, kwargs)`` for ``pre``, the output for
            ``forward``, the tuple of output gradients for ``backward``.
        phase: ``"pre"`` (before ``forward`` runs), ``"forward"`` (after it
            returned) or ``"backward"`` (when the gradients of its outputs arrive).
        every: with a named ``when``, stop at every call where it holds; by default
            stop once, where it first becomes true: in the forward phase, the first
            call whose output holds it while its inputs did not (a value that came
            with the model's inputs stops nowhere then); in the others, the first call
            where it holds. ``None`` and a callable ``when`` stop at every call.

    In the backward phase the call's inputs, kwargs and output are kept alive
    until its backward runs (or the block ends).

    Raises:
        SpecError: ``when``, ``phase`` or ``every`` is not one of the above.

    Example:
        >>> with hookscope.breakpoint(model, at="layer3.*", when="nonfinite"):
        ...     model(x)
    """
    from hookscope.api.tracing import Tracer

    if phase not in _PHASES:
        raise SpecError(f"phase must be one of {', '.join(_PHASES)}, got {phase!r}")
    if not (when is None or callable(when) or when in _WHEN):
        raise SpecError(
            f"when must be None, {', '.join(map(repr, _WHEN))} or a callable "
            f"fn(module, value) -> bool, got {when!r}"
        )
    if not isinstance(every, bool):
        raise SpecError(f"every must be True or False, got {every!r}")
    probe = _CLASSES[phase](when, every=every)
    tracer = Tracer(model, shapes=False, probes=[probe], select=at, select_option="at")
    with tracer:
        yield
