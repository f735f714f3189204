"""The engine: the one place that registers hooks on a user's model.

:class:`Tracer` is a context manager. On entry it registers, on every module of the
model, a forward pre-hook and a forward hook (``with_kwargs=True``,
``always_call=True``, so it also runs when ``forward`` raises), keeps the runtime call
stack, creates a :class:`~hookscope.core.records.Call` per module execution and hands
it to the probes (``core/probe.py``). On exit, in a ``finally``, it removes every
handle it registered (with ``restore_state=True``, as ``hookscope.trace`` uses it, it
also puts ``training`` flags and ``requires_grad`` back), and lets the probes finalise
the :class:`~hookscope.core.records.Trace`.

What it installs follows what the probes declare: in ``trace()``/``summary()``, no
start bookkeeping for plain ``torch.nn`` leaves when no probe needs a call's start
(``core/fast_path.py``); backward hooks only for the backward events probes take
(``core/backward.py``). Hooks return ``None`` unless a
probe replaces a value, so the model computes exactly what it computes without
hookscope: outputs are bit-identical.

Control: a probe stops the run with :meth:`Tracer.stop` (the caller gets
:class:`~hookscope.errors.RunStopped` with the partial trace); a probe that raises is
reported as :class:`~hookscope.errors.ProbeError`, never as the model's failure.
Failure attribution is in ``core/failures.py``, process-wide settings in
``core/process.py``, every private torch API in ``core/torch_private/``.

``trace()`` (in ``hookscope/api/tracing.py``) is the one-call form.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable
from time import perf_counter_ns
from types import TracebackType
from typing import Any, NoReturn

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from hookscope.core import torch_private
from hookscope.core.backward import BackwardWatch
from hookscope.core.dispatch_plan import plan_dispatch, plan_starts, probe_error
from hookscope.core.failures import FailureTracker, add_note, describe_failure
from hookscope.core.handles import CallbackHandle, HandleGroup
from hookscope.core.internal import internal_work, is_internal
from hookscope.core.internal import shared as _shared
from hookscope.core.model_state import ModelState
from hookscope.core.module_hooks import as_inputs
from hookscope.core.module_table import ModuleTable, module_table
from hookscope.core.node_owners import NodeOwners
from hookscope.core.observe import observe_module_calls
from hookscope.core.options import check_flags
from hookscope.core.probe import (
    BACKWARD_EVENTS,
    Probe,
    ProbeSpec,
    build_probes,
    probe_flags,
)
from hookscope.core.process import PROCESS
from hookscope.core.recompute import Recomputes
from hookscope.core.records import Call, StopRecord, Trace
from hookscope.core.run_facts import cuda_devices, run_facts
from hookscope.core.selectors import (
    ModuleSelector,
    chosen_modules,
    compile_selector,
    module_classes,
)
from hookscope.core.structure import check_model
from hookscope.errors import HookscopeError, ProbeError, RunStopped, SpecError

__all__ = ["ProbeSpec", "Tracer", "describe_failure", "internal_work", "is_internal"]

_CONTROL = (ProbeError, RunStopped)


# One entry of the runtime call stack: the call, its module, and the exception already
# being handled when the call started (the model runs inside an ``except`` block): the
# call failed only if a *different* one is active when it ends. A tuple, not a class:
# one is made per module call, in a hook that runs with cold caches.
_Frame = tuple[Call, nn.Module, "BaseException | None"]


class Tracer:
    """Observe every module call of ``model`` while the ``with`` block runs.

    Args:
        model: the model to observe. It is not modified: every hook is removed on exit,
            also when the block raises.
        shapes: record input and output shapes and dtypes of every call.
        time: record inclusive and self time per call.
        stats: record activation statistics of every output tensor.
        memory: record output bytes, saved-for-backward bytes and CUDA memory.
        ops: record every aten op with its FLOPs.
        probes: more probes: instances, probe classes, or names of registered probes.
        select: only observe modules whose path matches (glob string, list of globs,
            or ``fn(path: str) -> bool``), or the instances of a module class (or a
            tuple of classes); ``None`` observes every module.
        restore_state: on exit, put every module's ``training`` flag and every
            parameter's ``requires_grad`` back as they were on entry. Off by default:
            hookscope itself changes neither, and what your own code inside the
            ``with`` block changes (``model.eval()``, freezing a layer) is yours to
            keep. ``hookscope.trace`` turns it on, so the forward it runs leaves no trace
            (and puts back the buffers of modules in training mode too: BatchNorm's
            running statistics).
        **options: ``NAME=True`` switches on the registered probe ``NAME``.

    NB: while the tracer is active, ``torch.compile``d code runs eagerly (compiled code
    skips the hooks of the modules it inlined), TorchScript submodules run unobserved
    (their work counts as their caller's), and a forward pre-hook you register inside
    the block runs after hookscope's. Backward events are delivered for a backward run
    inside the block.

    Raises:
        SpecError: ``model`` is not an ``nn.Module`` or is a TorchScript module, or an
            option is wrong.

    Example:
        >>> with hookscope.Tracer(model, time=True) as tracer:
        ...     loss = model(x).sum()
        ...     loss.backward()
        >>> print(tracer.trace)
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        shapes: bool = True,
        time: bool = False,
        stats: bool = False,
        memory: bool = False,
        ops: bool = False,
        probes: Iterable[ProbeSpec] = (),
        select: ModuleSelector | None = None,
        restore_state: bool = False,
        **options: bool,
    ) -> None:
        check_model(model)
        check_flags(restore_state=restore_state)
        flags = probe_flags(
            {"shapes": shapes, "time": time, "stats": stats, "memory": memory, "ops": ops},
            options,
        )
        self.model = model
        self.probes: list[Probe] = build_probes(flags, probes)
        #: a module class selects its instances, found in the table on entry
        self._classes = module_classes(select) if select is not None else ()
        self._matches = None if select is None else (
            _no_path if self._classes else compile_selector(select))  # type: ignore[arg-type]
        self._selects = self._matches  # the same, by any path of a module (on entry)
        self._select = select
        self._select_option = "select"  # how the caller named it (breakpoint: at=)
        plan = plan_dispatch(self.probes)
        self._enters: list[Callable[..., Any]] = []  # set on entry (plan_starts)
        self._enter_replacers, self._exit_replacers = plan.enter_replacers, plan.exit_replacers
        #: the run's calls, for what a recompute (activation checkpointing) does again
        self._recomputes = Recomputes(self)
        self._exits, self._backward_probes = plan.exits, plan.backward_probes
        self._backward_handlers, self._watches_calls = plan.backward_handlers, plan.watches_calls
        self._replaces_only, self._installs_keep_modules = (
            plan.replaces_only, plan.installs_keep_modules)
        self._clocked, self._guarded, self._marks_work = (
            plan.clocked, plan.guarded, plan.marks_work)
        self._needs_start = False
        self._handles = HandleGroup()
        self._stack: list[_Frame] = []
        self._restore_state = restore_state
        #: Set by ``trace()``/``summary()``, which run nothing but the model inside the
        #: tracer: no user code can add a hook between two calls (``core/fast_path.py``).
        self._exclusive = False
        #: With ``restore_state``, also put the buffers of modules in training mode back
        #: on exit (``core/model_state.py``): set by ``trace()``/``summary()`` and
        #: ``capture()``, which run the forward for their caller. A ``Tracer`` around the
        #: user's own training loop keeps what that loop did to them.
        self._restore_buffers = False
        #: Set by ``trace()``/``summary()`` for a forward under ``torch.no_grad()``:
        #: autograd saves no tensor, so probe work need not be told apart for a probe
        #: that watches saved tensors only (``Probe.watches_tensor_work``).
        self._saves_nothing = False
        self._state: ModelState | None = None
        self._lazy = False
        self._failures = FailureTracker([])
        self._control: HookscopeError | None = None  # a stop or probe error, once raised
        #: the last stop or probe error not yet seen leaving the model (its root call)
        #: or a backward for the code in the block: raised at the exit if none did
        self._undelivered: ProbeError | RunStopped | None = None
        self._control_types = _CONTROL
        self._backward: BackwardWatch | None = None
        self._owners: NodeOwners | None = None
        self._active = False
        self._t0 = 0
        self._thread = 0
        #: Bookkeeping clock (``time.perf_counter_ns``): when the running hook began, and
        #: the total time spent in finished hooks (tracer and probe work). The timing
        #: probe subtracts it, so hookscope's own work is not timed as the model's; a
        #: probe working inside a module's forward (a saved-tensor hook, a dispatch
        #: mode) adds its own time to ``overhead_ns`` for the same reason.
        self.chain_start_ns = 0
        self.overhead_ns = 0
        self._overhead_at_start: dict[int, int] = {}  # call index -> overhead_ns then
        #: Time spent delivering backward events to the probes (every probe, every
        #: thread): :meth:`backward_overhead_now` reads it.
        self.backward_overhead_ns: int = 0
        self._backward_lock = threading.Lock()  # autograd's device threads add to it
        #: The CUDA devices that hold the model's parameters or buffers (set on entry,
        #: from the one walk of the model the tracer makes).
        self.cuda_devices: list[torch.device] = []
        self.trace: Trace | None = None

    # -- lifecycle ---------------------------------------------------------------

    def __enter__(self) -> Tracer:
        if self._active:
            raise HookscopeError("this Tracer is already active; create a new Tracer instead")
        table = module_table(self.model, extra_repr=False)
        if self._classes:
            classes = self._classes
            self._matches = {p for p, m in table.members if isinstance(m, classes)}.__contains__
        self._selects = None if self._matches is None else chosen_modules(
            self._select, self._matches, table, type(self.model).__name__,
            option=self._select_option)
        # A lazy module's parameters have no shape until the first forward (counted as
        # 0 elements): count them again on exit, once materialised (before a run for
        # the caller makes them lazy again: ModelState).
        self._lazy = table.lazy
        self.trace = Trace(
            model=table.summary, modules=table.modules, probes=[p.name for p in self.probes],
            meta=run_facts(table),
        )
        if self._selects is not None:  # what a view may call unobserved, not "not called"
            self.trace.meta["selected"] = [p for p, _ in table.members if self._selects(p)]
        self._stack.clear()
        self._overhead_at_start.clear()
        self._recomputes.clear()
        self._failures = FailureTracker(self.trace.calls)
        self._control = None
        self._undelivered = None
        self._state = ModelState(table, buffers=self._restore_buffers) \
            if self._restore_state else None
        self._t0 = perf_counter_ns()
        #: forward events come from this thread only: another thread running the same
        #: model meanwhile is not this trace's (backward events may come from autograd's)
        self._thread = threading.get_ident()
        try:
            self._install(table)
        except BaseException:
            self._handles.remove()
            raise
        self._active = True
        return self

    def _install(self, table: ModuleTable) -> None:
        self.cuda_devices = cuda_devices(table)
        handles = self._handles
        if self._backward_probes:
            grad_handles = HandleGroup()  # hooks on parameters and on the graph's tensors
            handles.add(grad_handles)
            self._backward = BackwardWatch(
                self._dispatch_backward, grad_handles,
                clock=self.backward_overhead_now if any(
                    p.uses_backward_end for p in self._backward_probes) else None,
                inputs=bool(self._backward_handlers["on_backward_exit"]),
            )
            if self._backward_handlers["on_param_grad"]:
                named = _named_parameters(table)
                lazy = [name for name, p in named if is_lazy(p)]
                if lazy:  # an UninitializedParameter takes no hook
                    raise SpecError(
                        f"{lazy[0]!r} belongs to a lazy module that has not run yet: its "
                        "parameters have no shape to watch the gradients of; run the "
                        "model once (model(x)) before recording its gradients"
                    )
                self._backward.watch_parameters(named)
        self._owners = NodeOwners() if self._guarded else None
        for probe in self.probes:
            try:
                installed = probe.install(self)
                if not isinstance(installed, (list, tuple)):
                    raise TypeError(f"install() must return a list of handles to remove "
                                    f"([] for none), not {type(installed).__name__}")
                handles.extend(installed)
            except _CONTROL:
                raise
            except Exception as e:
                raise probe_error(probe, "install", None, e) from e
        self._enters, self._needs_start = plan_starts(self.probes)
        observe_module_calls(
            self, table.members, table.scan if self._installs_keep_modules else None
        )
        if self._recomputes.keeps_calls():  # each forward of the model starts anew
            handles.add(self._recomputes.watch_forwards(self.model))
        if self._guarded or (self._marks_work and not self._saves_nothing):
            _shared.watchers[0] += 1
            handles.add(CallbackHandle(_unwatch))
        handles.add(PROCESS.acquire(table.depth + 1))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._active = False
        try:
            self._handles.remove()
        finally:
            # A lazy module's parameters have their shapes now: the table counts them,
            # read before the state is restored (which makes them lazy again)
            materialised = module_table(self.model, extra_repr=False) if self._lazy else None
            if self._state is not None:
                self._state.restore()
            # Calls still on the stack never finished: a BaseException (KeyboardInterrupt)
            # skips torch's always-call hooks.
            if exc is not None and not isinstance(exc, _CONTROL):
                for call, _, _ in reversed(self._stack):
                    self._failures.record(call, exc)
            self._stack.clear()
            self._backward = None
            self._owners = None
        trace = self.trace
        assert trace is not None
        control = exc if isinstance(exc, _CONTROL) else self._control
        if isinstance(control, RunStopped):
            trace.stop = StopRecord(control.probe, control.reason, control.call, control.path)
        elif exc is not None and control is None and trace.error is None:
            trace.error = self._failures.failure_of(exc, self.model, self._selects)
        if materialised is not None:
            trace.model, trace.modules = materialised.summary, materialised.modules
        try:
            self._finalize_probes(trace)
            self._overhead_at_start.clear()
        except ProbeError as also:
            if exc is None or isinstance(exc, _CONTROL):
                raise
            # the model's own exception is the one to report; say what else went wrong
            add_note(exc, f"hookscope: also, {also}")
        if isinstance(control, (ProbeError, RunStopped)):
            control.trace = trace
            # the model swallowed one: the run still stopped (but one that left the model
            # reached the code in the block, which handled it: a loop skipping a batch)
            pending = self._undelivered
            if exc is None and pending is not None:
                pending.trace = trace
                raise pending
        if exc is not None and trace.error is not None and trace.error.path is not None:
            add_note(exc, f"hookscope: {describe_failure(trace)}")

    def _finalize_probes(self, trace: Trace) -> None:
        error: ProbeError | None = None
        for probe in self.probes:
            try:
                probe.finalize(trace)
            except Exception as e:  # finalise the others, then report the first
                error = error or probe_error(probe, "finalize", None, e)
        if error is not None:
            error.trace = trace
            raise error

    @property
    def active(self) -> bool:
        """Whether the tracer has been entered and not yet exited."""
        return self._active

    @property
    def current_call(self) -> Call | None:
        """The innermost module call running now (``None`` outside any module)."""
        return self._stack[-1][0] if self._stack else None

    @property
    def internal(self) -> int:
        """> 0 while probe work runs on this thread; the ops probe ignores those ops."""
        return _shared.internal

    def internal_work(self) -> Any:
        """:func:`internal_work`, for probes that hold a tracer."""
        return internal_work()

    def model_time_ns(self, call: Call) -> int | None:
        """The time since ``call`` started, less hookscope's own work in that window
        (the engine's bookkeeping, the probes' work for the call's children): the time
        the call takes without hookscope, read in ``on_exit``. ``None`` unless a probe
        of this tracer declares ``uses_overhead_clock`` (then the engine keeps the
        clock), or for a call not handed to ``on_exit`` by this tracer's current run."""
        now = perf_counter_ns()
        at_start = self._overhead_at_start.get(call.index)
        if at_start is None or call.start_ns is None:
            return None
        overhead = self.overhead_ns + now - self.chain_start_ns - at_start
        return max(0, now - self._t0 - call.start_ns - overhead)

    def backward_overhead_now(self, now: int) -> int:
        """The time of hookscope's work in backward events so far, in ns, up to ``now``
        (``time.perf_counter_ns()``), the event running on this thread included: a
        probe timing a call's backward subtracts what it grew by in between, so no
        probe's work (its own, another's of this tracer) counts as the model's backward
        time. NB: one clock for every thread: with backward passes running on several
        threads at once (several CUDA devices), their probe work is counted together."""
        total, running = self.backward_overhead_ns, _shared.backward_event
        if running is None or running[0] is not self:
            return total
        return total + now - int(running[1])

    def backward_end(self, call: Call) -> tuple[int, int] | None:
        """When ``call``'s backward ended, read in ``on_backward_exit``: the time
        (``perf_counter_ns``) the last autograd node its forward made finished in the
        backward running now, and :meth:`backward_overhead_now` then. Kept only when a
        probe of the tracer declares ``uses_backward_end``. ``None`` when none of its
        nodes has run (a call that returned its input) or the engine cannot tell its
        nodes (no sequence numbers): the exit event's own time is the end then.

        NB: the exit event comes once the gradient of all the call's inputs is known:
        for a branch (a ResNet ``downsample``) that is after the other branch's backward
        too, and for a call whose inputs need no gradient (the first layer) at the end
        of the backward pass; its own nodes end it where it ends."""
        backward = self._backward
        return None if backward is None else backward.own_end(call)

    def backward_failed_in(self) -> Call | None:
        """Read right after a backward pass raised, inside the block: the innermost
        call whose backward was running (:meth:`BackwardWatch.failed_in`)."""
        backward, trace = self._backward, self.trace
        return None if backward is None or trace is None else backward.failed_in(trace.calls)

    def node_owner(self, node: Any) -> int | None:
        """Index of the call whose forward created autograd ``node`` (``None``: no call,
        or no probe watching ops, the only ones for which the tracer keeps track)."""
        return None if self._owners is None else self._owners.owner(node)

    def stop(self, reason: str) -> NoReturn:
        """Stop the run now: raise :class:`~hookscope.errors.RunStopped`, which leaves the
        model as before and reaches the caller with the partial trace. Call it from a
        probe's event."""
        raise RunStopped(reason)

    # -- dispatch: the one path from an event to the probes ----------------------------

    def _dispatch_enter(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        replaced = None
        fn: Callable[..., Any] | None = None
        shared = _shared
        guarded = shared.watchers[0]
        if guarded:
            shared.internal += 1
        try:
            for fn in self._enter_replacers:
                result = fn(call, module, args, kwargs)
                if result is not None:
                    args, kwargs = replaced = as_inputs(result)
            for fn in self._enters:
                fn(call, module, args, kwargs)
        except Exception as e:
            raise self._failed(e, fn, "on_enter", call) from e
        finally:
            if guarded:
                shared.internal -= 1
        if self._backward is not None and self._watches_calls:
            self._backward.watch_inputs(call, args, kwargs)
        return replaced

    def _dispatch_exit(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
        output: Any, failed: bool,
    ) -> Any:
        replaced = None
        fn: Callable[..., Any] | None = None
        shared = _shared
        guarded = shared.watchers[0]
        if guarded:
            shared.internal += 1
        try:
            for fn in self._exit_replacers:
                result = fn(call, module, args, kwargs, output, failed)
                if result is not None and not failed:
                    output = replaced = result
            for fn in self._exits:
                fn(call, module, args, kwargs, output, failed)
        except Exception as e:
            raise self._exit_failed(e, fn, call, module, args, kwargs, output, failed) from e
        finally:
            if guarded:
                shared.internal -= 1
        if self._backward is not None and self._watches_calls:
            if failed:
                self._backward.forget(call)
            else:
                self._backward.watch_outputs(call, output)
        return replaced

    def _exit_failed(
        self, error: Exception, fn: Any, call: Call, module: nn.Module,
        args: tuple[Any, ...], kwargs: dict[str, Any], output: Any, failed: bool,
    ) -> Exception:
        """The exception to raise when the exit callback ``fn`` raised ``error``. A stop
        takes effect once every recording probe has seen the call end: the call it
        stopped in is recorded whole (its shapes too)."""
        if isinstance(error, RunStopped):
            exits = self._exits
            rest = exits[exits.index(fn) + 1:] if fn in exits else exits
            other: Any = None
            try:
                for other in rest:
                    with contextlib.suppress(RunStopped):  # stopping already
                        other(call, module, args, kwargs, output, failed)
            except Exception as e:  # a probe that fails is reported, as ever
                fn, error = other, e
        if self._backward is not None:
            self._backward.forget(call)
        return self._failed(error, fn, "on_exit", call)

    def _dispatch_backward(self, event: str, call: Call | None, payload: Any) -> None:
        handler: Callable[..., Any] | None = None
        shared = _shared
        shared.internal += 1
        outer = shared.backward_event
        start = perf_counter_ns()
        shared.backward_event = (self, start)
        try:
            for handler in self._backward_handlers[event]:
                if call is None:  # on_param_grad
                    handler(payload)
                else:
                    handler(call, payload)
        except Exception as e:
            raise self._failed(e, handler, event, call) from e
        finally:
            shared.internal -= 1
            shared.backward_event = outer
            if outer is None or outer[0] is not self:  # else counted with the outer one
                spent = perf_counter_ns() - start
                with self._backward_lock:  # NB: ``+=`` is a read and a write
                    self.backward_overhead_ns += spent

    def _failed(self, error: Exception, fn: Any, event: str, call: Call | None) -> Exception:
        """The exception to raise when a probe's callback raised ``error``."""
        probe = fn if isinstance(fn, Probe) else getattr(fn, "__self__", None)
        probe = probe if isinstance(probe, Probe) else getattr(fn, "probe", None)
        if isinstance(error, RunStopped):
            error.locate(probe.name if isinstance(probe, Probe) else "", call)
            found: ProbeError | RunStopped = error
        elif isinstance(error, ProbeError):
            return error
        else:
            found = probe_error(probe, event, call, error)
        self._control = found
        # raised out of a backward, or out of the model's own root call: the code in the
        # block gets it (and may handle it); anywhere else, the model may swallow it
        if event not in BACKWARD_EVENTS and not (
            call is not None and not call.path and not self._stack
            and not torch_private.inside_another_module_call()
        ):
            self._undelivered = found
        return found

    def _delivered(self, error: BaseException) -> None:
        """``error`` left the model's root call: it is in the block's hands now (unless
        the model is a submodule called by another module's forward, which may swallow
        it)."""
        if error is self._undelivered and not torch_private.inside_another_module_call():
            self._undelivered = None

    # -- hooks -------------------------------------------------------------------

    def _unwind(self, module: nn.Module) -> _Frame | None:
        """The frame of ``module``'s call when it is not on top of the stack: a pre-hook
        registered before ours raised, so our pre-hook never ran for this call; or
        frames above were left by such calls. Unwind to the matching frame."""
        stack = self._stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i][1] is module:
                frame = stack[i]
                del stack[i:]
                return frame
        return None


# -- helpers --------------------------------------------------------------------------


def _named_parameters(table: ModuleTable) -> list[tuple[str, nn.Parameter]]:
    """Each parameter once, at its first path."""
    seen: set[int] = set()
    out: list[tuple[str, nn.Parameter]] = []
    for path, module in table.members:
        for name, p in module._parameters.items():
            if p is not None and id(p) not in seen:
                seen.add(id(p))
                out.append((f"{path}.{name}" if path else name, p))
    return out


def _no_path(path: str) -> bool:
    return False


def _unwatch() -> None:
    _shared.watchers[0] -= 1
