"""One run of a tracer: its call stack, its clock, its failures and the one dispatch of
events to the probes.

A :class:`~hookscope.core.engine.tracer.Tracer` makes a :class:`Run` each time its ``with``
block is entered, and ends it on exit. The code that observes the model talks to the
run and to nothing else of the tracer: the stand-in for ``Module._call_impl``
(``core/engine/fast_path.py``) and the per-module hooks (``core/engine/module_hooks.py``) push and
pop calls on :attr:`Run.stack` and hand them to :meth:`Run.dispatch_enter` and
:meth:`Run.dispatch_exit`; a call that raised goes to :meth:`Run.record_failure`; the
recompute handling (``core/engine/recompute.py``) replaces values again through
:meth:`Run.failed`; the backward watch (``core/engine/backward.py``) delivers its events to
:meth:`Run.dispatch_backward`.

The hot paths read the run's attributes once, when their hook or stand-in is
made, and keep them in local variables (a run's lists are never replaced, only
filled); the attributes they change per call are the clock's (``chain_start_ns``,
``overhead_ns``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

from torch import nn

from hookscope.core import torch_private
from hookscope.core.engine.dispatch_plan import DispatchPlan, as_inputs, probe_error
from hookscope.core.engine.failures import FailureTracker, add_note
from hookscope.core.engine.probe import BACKWARD_EVENTS, Probe
from hookscope.core.engine.recompute import Recomputes
from hookscope.core.internal import shared
from hookscope.core.records.trace import Call
from hookscope.errors import HookscopeError, ProbeError, RunStopped

if TYPE_CHECKING:
    from hookscope.core.engine.backward import BackwardWatch
    from hookscope.core.engine.node_owners import NodeOwners

__all__ = ["CONTROL", "Frame", "Run"]

CONTROL = (ProbeError, RunStopped)
"""hookscope's own exceptions: passing through the model, never the model's failure."""

Frame = tuple[Call, nn.Module, "BaseException | None"]
"""One entry of the runtime call stack: the call, its module, and the exception already
being handled when the call started (the model runs inside an ``except`` block): the
call failed only if a *different* one is active when it ends. A tuple, not a class:
one is made per module call, in a hook that runs with cold caches."""


class Run:
    """The state of one run of a tracer, shared by every path that observes it.

    Args:
        plan: what the tracer's probes take, by event.
        calls: the trace's calls, which the run fills.
        origin_ns: ``time.perf_counter_ns()`` when the run started.

    Attributes:
        calls: the calls so far, in the order they started (``Trace.calls``).
        stack: the calls running now, innermost last (:data:`Frame`).
        origin_ns: when the run started: a call's ``start_ns`` counts from it.
        thread: the thread the run started on; forward events come from it only (another
            thread running the same model meanwhile is not this run's; backward events
            may come from autograd's threads).
        plan: what the probes take, by event
            (:class:`~hookscope.core.engine.dispatch_plan.DispatchPlan`).
        enter_replacers, exit_replacers, exits, watches_calls, replaces_only, clocked:
            the plan's, read by the hot paths.
        enters: the recording probes' ``on_enter`` callbacks, and ``needs_start``:
            whether any probe needs a call's start; both set by the tracer once its
            probes are installed (:func:`~hookscope.core.engine.dispatch_plan.plan_starts`).
        chain_start_ns: when the running bookkeeping began (``perf_counter_ns``).
        overhead_ns: the time spent in finished bookkeeping (the engine's and the
            probes'): the timing probe subtracts it (``Tracer.model_time_ns``). Kept
            only when ``clocked``.
        overhead_at_start: call index -> ``overhead_ns`` when the call started.
        backward_overhead_ns: the time spent delivering backward events to the probes.
        owners: which call's forward made each autograd node, when a probe watches ops
            (set by the tracer on entry), else ``None``.
        backward: the watch that delivers backward events, when a probe takes them (set
            by the tracer on entry), else ``None``.
        recomputes: what a recompute (activation checkpointing) repeats.
        failures: where the model raised.
        control: the stop or probe error raised in this run, once raised.
        undelivered: the last stop or probe error not yet seen leaving the model (its
            root call) or a backward for the code in the block: the tracer raises it on
            exit if none did.
    """

    def __init__(self, plan: DispatchPlan, calls: list[Call], *, origin_ns: int) -> None:
        self.calls = calls
        self.stack: list[Frame] = []
        self.origin_ns = origin_ns
        self.thread = threading.get_ident()
        self.plan = plan
        self.enter_replacers, self.exit_replacers = plan.enter_replacers, plan.exit_replacers
        self.exits, self.watches_calls = plan.exits, plan.watches_calls
        self.replaces_only, self.clocked = plan.replaces_only, plan.clocked
        self.enters: list[Callable[..., Any]] = []
        self.needs_start = False
        self.chain_start_ns = 0
        self.overhead_ns = 0
        self.overhead_at_start: dict[int, int] = {}
        self.backward_overhead_ns = 0
        self._backward_lock = threading.Lock()  # autograd's device threads add to it
        self.owners: NodeOwners | None = None
        self.backward: BackwardWatch | None = None
        self.recomputes = Recomputes(self)
        self.failures = FailureTracker(calls)
        self.control: HookscopeError | None = None
        self.undelivered: ProbeError | RunStopped | None = None

    @property
    def current_call(self) -> Call | None:
        """The innermost call running now (``None`` outside any module)."""
        return self.stack[-1][0] if self.stack else None

    def start_call(self, path: str, module_class: str, count: int, start_ns: int) -> Call:
        """Record a call of ``path`` (its ``count``-th) that starts now, as the next of
        :attr:`calls` and a child of the call on top of the stack (not pushed)."""
        stack, calls = self.stack, self.calls
        index = len(calls)
        # every argument positional: the dataclass constructor is quickest so
        if stack:
            parent = stack[-1][0]
            parent.children.append(index)
            call = Call(index, path, module_class, count, len(stack), parent.index, [], start_ns)
        else:
            call = Call(index, path, module_class, count, 0, None, [], start_ns)
        calls.append(call)
        return call

    def end(self, exc: BaseException | None) -> None:
        """The run ends, with ``exc`` raised in the block: the calls still on the stack
        never finished (a ``BaseException``, ``KeyboardInterrupt``, skips torch's
        always-call hooks)."""
        if exc is not None and not isinstance(exc, CONTROL):
            for call, _, _ in reversed(self.stack):
                self.failures.record(call, exc)
        self.stack.clear()
        self.backward = None
        self.owners = None

    # -- the clocks -----------------------------------------------------------------

    def backward_overhead_now(self, now: int) -> int:
        """``Tracer.backward_overhead_now``: the time spent in backward events so far,
        the one running on this thread included."""
        total, running = self.backward_overhead_ns, shared.backward_event
        if running is None or running[0] is not self:
            return total
        return total + now - int(running[1])

    # -- dispatch: the one path from an event to the probes ----------------------------

    def dispatch_enter(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """``call`` starts: the probes' ``on_enter``; the inputs a probe replaced, or
        ``None``."""
        replaced = None
        fn: Callable[..., Any] | None = None
        guarded = shared.watchers[0]
        if guarded:
            shared.internal += 1
        try:
            for fn in self.enter_replacers:
                result = fn(call, module, args, kwargs)
                if result is not None:
                    args, kwargs = replaced = as_inputs(result)
            for fn in self.enters:
                fn(call, module, args, kwargs)
        except Exception as e:
            raise self.failed(e, fn, "on_enter", call) from e
        finally:
            if guarded:
                shared.internal -= 1
        if self.backward is not None and self.watches_calls:
            self.backward.watch_inputs(call, args, kwargs)
        return replaced

    def dispatch_exit(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
        output: Any, failed: bool,
    ) -> Any:
        """``call`` ended (``failed``: raised): the probes' ``on_exit``; the output a
        probe replaced, or ``None``."""
        replaced = None
        fn: Callable[..., Any] | None = None
        guarded = shared.watchers[0]
        if guarded:
            shared.internal += 1
        try:
            for fn in self.exit_replacers:
                result = fn(call, module, args, kwargs, output, failed)
                if result is not None and not failed:
                    output = replaced = result
            for fn in self.exits:
                fn(call, module, args, kwargs, output, failed)
        except Exception as e:
            raise self.exit_failed(e, fn, call, module, args, kwargs, output, failed) from e
        finally:
            if guarded:
                shared.internal -= 1
        if self.backward is not None and self.watches_calls:
            if failed:
                self.backward.forget(call)
            else:
                self.backward.watch_outputs(call, output)
        return replaced

    def exit_failed(
        self, error: Exception, fn: Any, call: Call, module: nn.Module,
        args: tuple[Any, ...], kwargs: dict[str, Any], output: Any, failed: bool,
    ) -> Exception:
        """The exception to raise when the exit callback ``fn`` raised ``error``. A stop
        takes effect once every recording probe has seen the call end: the call it
        stopped in is recorded whole (its shapes too)."""
        if isinstance(error, RunStopped):
            exits = self.exits
            rest = exits[exits.index(fn) + 1:] if fn in exits else exits
            other: Any = None
            try:
                for other in rest:
                    with contextlib.suppress(RunStopped):  # stopping already
                        other(call, module, args, kwargs, output, failed)
            except Exception as e:  # a probe that fails is reported, as ever
                fn, error = other, e
        if self.backward is not None:
            self.backward.forget(call)
        return self.failed(error, fn, "on_exit", call)

    def record_failure(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
        exc: BaseException,
    ) -> bool:
        """``call`` raised ``exc``: record the failure and hand it to the exit dispatch
        (``True``), unless it is hookscope's own stop or error passing through
        (``False``). A probe that raises meanwhile becomes a note on ``exc``: the
        model's exception is the one to report, not a stop of the run that hides it."""
        if isinstance(exc, CONTROL):
            if not self.stack and not call.path:  # out of the model: in the block's hands
                self.delivered(exc)
            return False
        self.failures.record(call, exc)
        control = self.control
        try:
            self.dispatch_exit(call, module, args, kwargs, None, True)
        except Exception as error:
            self.control = control
            cause = error.__cause__ or error
            add_note(exc, f"hookscope: also, a probe raised while recording this failure "
                          f"in {call.path or '<root>'!r}: {type(cause).__name__}: {cause}")
        return True

    def dispatch_backward(self, event: str, call: Call | None, payload: Any) -> None:
        """A backward event (``core/engine/backward.py``) for the probes that take it, timed
        into :attr:`backward_overhead_ns`."""
        handler: Callable[..., Any] | None = None
        shared.internal += 1
        outer = shared.backward_event
        start = perf_counter_ns()
        shared.backward_event = (self, start)
        try:
            for handler in self.plan.backward_handlers[event]:
                if call is None:  # on_param_grad
                    handler(payload)
                else:
                    handler(call, payload)
        except Exception as e:
            raise self.failed(e, handler, event, call) from e
        finally:
            shared.internal -= 1
            shared.backward_event = outer
            if outer is None or outer[0] is not self:  # else counted with the outer one
                spent = perf_counter_ns() - start
                with self._backward_lock:  # ``+=`` is a read and a write
                    self.backward_overhead_ns += spent

    def failed(self, error: Exception, fn: Any, event: str, call: Call | None) -> Exception:
        """The exception to raise when a probe's callback ``fn`` raised ``error``."""
        probe = fn if isinstance(fn, Probe) else getattr(fn, "__self__", None)
        if isinstance(error, RunStopped):
            error.locate(probe.name if isinstance(probe, Probe) else "", call)
            found: ProbeError | RunStopped = error
        elif isinstance(error, ProbeError):
            return error
        else:
            found = probe_error(probe, event, call, error)
        self.control = found
        # raised out of a backward, or out of the model's own root call: the code in the
        # block gets it (and may handle it); anywhere else, the model may swallow it
        if event not in BACKWARD_EVENTS and not (
            call is not None and not call.path and not self.stack
            and not torch_private.inside_another_module_call()
        ):
            self.undelivered = found
        return found

    def delivered(self, error: BaseException) -> None:
        """``error`` left the model's root call: it is in the block's hands now (unless
        the model is a submodule called by another module's forward, which may swallow
        it)."""
        if error is self.undelivered and not torch_private.inside_another_module_call():
            self.undelivered = None

    def unwind(self, module: nn.Module) -> Frame | None:
        """The frame of ``module``'s call when it is not on top of the stack: a pre-hook
        registered before ours raised, so our pre-hook never ran for this call; or
        frames above were left by such calls. Unwind to the matching frame."""
        stack = self.stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i][1] is module:
                frame = stack[i]
                del stack[i:]
                return frame
        return None
