"""A forward run again by a backward pass: activation checkpointing's recompute.

``torch.utils.checkpoint`` runs a segment's forward a second time while the backward
pass runs (the per-module hooks see it: ``core/engine/module_hooks.py``; the exclusive fast
path lets it through unobserved). The recompute is not a call of the run and nothing
of it is recorded, but two things must happen in it, for the module calls of the
forward it repeats (:class:`Recomputes`):

- the probes that replace values (a patch) replace them again: the gradients are those
  of the recomputed forward;
- with ``use_reentrant=True`` the forward ran under ``torch.no_grad()``, so its calls
  got no backward hooks; the recompute, which builds the graph the backward then runs,
  gets them (``BackwardWatch.watch_recomputed_inputs``/``_outputs``): the calls inside
  a reentrant checkpoint have their backward events too.

NB: a recompute does not say which call of a module it repeats (segments recompute in
any order): only a module called once in the model's forward is told apart. A patched module called
more than once is refused (``SpecError``: a patch may depend on the call); such a call
gets no backward events from the recompute.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hookscope.core import torch_private
from hookscope.core.engine.dispatch_plan import as_inputs
from hookscope.core.internal import internal_work
from hookscope.errors import SpecError

if TYPE_CHECKING:
    from hookscope.core.engine.run import Run
    from hookscope.core.records.trace import Call


class Recomputes:
    """What a run keeps of its calls for their recomputes, and what it does in them."""

    def __init__(self, run: Run) -> None:
        self._run = run
        #: id(module) -> its last call of the run, its number of calls in the run
        self.calls: dict[int, tuple[Call, int]] = {}
        #: id(module) -> the exception being handled when each recompute of it began
        self._outer: dict[int, list[BaseException | None]] = {}
        #: the modules called in a forward that another forward followed before any
        #: recompute ran (gradient accumulation: forward, forward, backward): which of
        #: their calls a recompute repeats is not known, so it gets no backward events
        self._ambiguous: set[int] = set()
        self._recomputed = False  # a recompute ran since the model's last forward

    def clear(self) -> None:
        self.calls.clear()
        self._outer.clear()
        self._ambiguous.clear()
        self._recomputed = False

    def remember(self, module: nn.Module, call: Call) -> None:
        """``call`` of ``module`` starts in the forward: what a recompute repeats."""
        found = self.calls.get(id(module))
        self.calls[id(module)] = (call, 1 if found is None else found[1] + 1)

    def watch_forwards(self, model: nn.Module) -> Any:
        """A forward pre-hook on ``model`` (its handle): each forward of the model starts
        its calls anew, so that a block or a patch spanning training steps (forward,
        backward, forward, ...) tells apart the calls of the step a recompute repeats.
        NB: a module called in two forwards (with grad mode on) before a recompute ran
        (gradient accumulation) maps to its call in the second for the probes that
        replace values, which replace alike in both, and gets no backward events
        from a recompute: its numbers would be those of the other forward's call."""
        graph_task = torch_private.graph_task_id_function()
        thread = self._run.thread

        def forward_starts(module: nn.Module, args: Any) -> None:
            if graph_task() == -1 and threading.get_ident() == thread:
                if self._recomputed:  # a backward ran between: its forward is done
                    self._ambiguous.clear()
                elif torch.is_grad_enabled():  # a graph that a backward may still run
                    self._ambiguous.update(self.calls)
                self._recomputed = False
                self.calls.clear()

        return model.register_forward_pre_hook(forward_starts, prepend=True)

    def keeps_calls(self) -> bool:
        """Whether the run's calls must be kept (``self.calls``) for their recomputes."""
        run = self._run
        return bool(run.enter_replacers or run.exit_replacers) or self._watches()

    def started(
        self, module: nn.Module, path: str, args: tuple[Any, ...], kwargs: dict[str, Any],
    ) -> Any:
        """The recompute of ``module`` starts: the inputs to use instead (as a forward
        pre-hook returns them), or ``None``."""
        run = self._run
        self._recomputed = True
        if run.exit_replacers or self._watches():  # a backward run in an ``except``
            self._outer.setdefault(id(module), []).append(sys.exc_info()[1])  # block
        replaced = None
        if run.enter_replacers:
            call = recomputed_call(self.calls, module, path)
            if call is not None:
                replaced = replace_again(run, call, module, args, kwargs, None)
        call = self._watched_call(module)
        if call is not None:
            assert run.backward is not None
            if replaced is not None:
                args, kwargs = replaced
            run.backward.watch_recomputed_inputs(call, args, kwargs)
        return replaced

    def ended(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any,
    ) -> Any:
        """The recompute of ``module`` ends (or raised): the output to use instead, or
        ``None``."""
        run = self._run
        started = self._outer.get(id(module))
        # the recompute raised only if an exception other than the one being handled
        # when it began is active now
        if sys.exc_info()[1] is not (started.pop() if started else None):
            return None
        replaced = None
        if run.exit_replacers:
            call = recomputed_call(self.calls, module, None)
            if call is not None:
                replaced = replace_again(run, call, module, args, kwargs, (output,))
        call = self._watched_call(module)
        if call is not None:
            assert run.backward is not None
            run.backward.watch_recomputed_outputs(
                call, output if replaced is None else replaced)
        return replaced

    def _watches(self) -> bool:
        return self._run.backward is not None and self._run.watches_calls

    def _watched_call(self, module: nn.Module) -> Call | None:
        """The call of the run a recompute of ``module`` repeats, for backward events:
        ``None`` when no probe takes them, or the module was not called exactly once."""
        if not self._watches():
            return None
        found = self.calls.get(id(module))
        if found is None or found[1] != 1 or id(module) in self._ambiguous:
            return None
        return found[0]


def recomputed_call(
    recomputable: dict[int, tuple[Call, int]], module: nn.Module, path: str | None
) -> Call | None:
    """The call of ``module`` that a backward pass runs again, for the probes that
    replace values, which must replace them again. ``None`` when the module was not
    called in the run (nothing to replace).

    Raises:
        SpecError: the module was called more than once (a patch may depend on which
            call a recompute repeats: ``patches.replace_with`` finds a captured value by
            call name).
    """
    found = recomputable.get(id(module))
    if found is None:
        return None
    call, count = found
    if count > 1:
        raise SpecError(
            f"module {path or call.path or '<root>'!r} has values replaced (a patch) and "
            f"is recomputed by activation checkpointing, but it was called {count} times "
            "in the forward: which call a recompute repeats is not known. Patch a module "
            "called once, or run without activation checkpointing"
        )
    return call


def replace_again(
    run: Run, call: Call, module: nn.Module, args: tuple[Any, ...],
    kwargs: dict[str, Any], output: tuple[Any] | None,
) -> Any:
    """The replacing probes of ``run`` on a recomputed ``call`` (``output``: its
    output, boxed, at its end; ``None`` at its start): the inputs or output to use, or
    ``None``; nothing is recorded. A probe that raises is a ``ProbeError``, as ever."""
    fn: Callable[..., Any] | None = None
    event = "on_enter" if output is None else "on_exit"
    replaced = None
    with internal_work():
        try:
            if output is None:
                for fn in run.enter_replacers:
                    result = fn(call, module, args, kwargs)
                    if result is not None:
                        args, kwargs = replaced = as_inputs(result)
            else:
                value = output[0]
                for fn in run.exit_replacers:
                    result = fn(call, module, args, kwargs, value, False)
                    if result is not None:
                        value = replaced = result
        except Exception as e:
            raise run.failed(e, fn, event, call) from e
    return replaced
