"""The engine: the context manager that observes a user's model.

:class:`Tracer` is a context manager. On entry it makes a :class:`~hookscope.core.engine.run.Run`
(``core/engine/run.py``: the run's call stack, clock, failures and the one dispatch of events
to the probes), installs the probes (``core/engine/probe.py``) and has every module call of
the model observed (``core/engine/observe.py``): by per-module forward hooks
(``core/engine/module_hooks.py``), or, in ``trace()``/``summary()``, by a stand-in for
``Module._call_impl`` (``core/engine/fast_path.py``); each creates a
:class:`~hookscope.core.records.trace.Call` per module execution and hands it to the run's
dispatch. On exit, in a ``finally``, it removes every handle it registered (with
``restore_state=True``, as ``hookscope.trace`` uses it, it also puts ``training`` flags
and ``requires_grad`` back), and lets the probes finalise the
:class:`~hookscope.core.records.trace.Trace`.

What it installs follows what the probes declare: in ``trace()``/``summary()``, no
start bookkeeping for plain ``torch.nn`` leaves when no probe needs a call's start
(``core/engine/fast_path.py``); backward hooks only for the backward events probes take
(``core/engine/backward.py``). Hooks return ``None`` unless a
probe replaces a value, so the model computes exactly what it computes without
hookscope: outputs are bit-identical.

Control: a probe stops the run with :meth:`Tracer.stop` (the caller gets
:class:`~hookscope.errors.RunStopped` with the partial trace); a probe that raises is
reported as :class:`~hookscope.errors.ProbeError`, never as the model's failure.
Failure attribution is in ``core/engine/failures.py``, process-wide settings in
``core/engine/process.py``, every private torch API in ``core/torch_private/``.

``trace()`` (in ``hookscope/api/tracing.py``) is the one-call form.
"""

from __future__ import annotations

from collections.abc import Iterable
from time import perf_counter_ns
from types import TracebackType
from typing import Any, NoReturn

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from hookscope.core.engine.backward import BackwardWatch
from hookscope.core.engine.dispatch_plan import plan_dispatch, plan_starts, probe_error
from hookscope.core.engine.failures import add_note, describe_failure
from hookscope.core.engine.handles import CallbackHandle, HandleGroup
from hookscope.core.engine.node_owners import NodeOwners
from hookscope.core.engine.observe import observe_module_calls
from hookscope.core.engine.probe import Probe, ProbeSpec, build_probes, probe_flags
from hookscope.core.engine.process import PROCESS
from hookscope.core.engine.run import CONTROL, Run
from hookscope.core.engine.run_facts import cuda_devices, run_facts
from hookscope.core.internal import internal_work, is_internal
from hookscope.core.internal import shared as _shared
from hookscope.core.model.module_table import ModuleTable, module_table
from hookscope.core.model.selectors import (
    ModuleSelector,
    chosen_modules,
    compile_selector,
    module_classes,
)
from hookscope.core.model.state import ModelState
from hookscope.core.model.structure import check_model
from hookscope.core.model.wrappers import unwrap, wrapper_names
from hookscope.core.options import check_flags
from hookscope.core.records.trace import Call, StopRecord, Trace
from hookscope.core.torch_private import compiled_form, original_module
from hookscope.errors import HookscopeError, ProbeError, RunStopped, SpecError

__all__ = ["ProbeSpec", "Tracer", "describe_failure", "internal_work", "is_internal"]


class Tracer:
    """Observe every module call of ``model`` while the ``with`` block runs.

    Args:
        model: the model to observe. It is not modified: every hook is removed on exit,
            also when the block raises. A ``DistributedDataParallel`` (or
            ``DataParallel``) wrapper is looked through: its module is observed, by
            its own paths, while the wrapper runs as usual.
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

    hookscope's own entry points pass four more keyword arguments, which are not part
    of the public API:

    - ``exclusive``: nothing but the model (and its backward) runs inside the tracer
      (``trace()``/``summary()``): no user code can add a hook between two calls, so
      hook-free modules take the fast path (``core/engine/fast_path.py``).
    - ``restore_buffers``: with ``restore_state``, also put back the buffers of modules
      in training mode (BatchNorm's running statistics), for an entry point that runs
      the forward for its caller (``trace()``, ``capture()``, ``lint()``); a ``Tracer``
      around the user's own training loop keeps what that loop did to them.
    - ``saves_nothing``: the forward runs under ``torch.no_grad()``: autograd saves
      no tensor, so probe work need not be told apart for a probe that watches saved
      tensors only (``Probe.watches_tensor_work``).
    - ``select_option``: how the caller names ``select`` in its messages
      (``breakpoint(at=...)``).

    NB: while the tracer is active, ``torch.compile``d code runs eagerly (compiled code
    skips the hooks of the modules it inlined): a compiled model is observed as its
    original module (``torch.compile(model)``'s paths without ``_orig_mod.``, and
    ``trace.meta["compiled"]`` says how it was compiled), TorchScript submodules run unobserved
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
        exclusive: bool = False,
        restore_buffers: bool = False,
        saves_nothing: bool = False,
        select_option: str = "select",
        **options: bool,
    ) -> None:
        check_model(model)
        check_flags(restore_state=restore_state)
        flags = probe_flags(
            {"shapes": shapes, "time": time, "stats": stats, "memory": memory, "ops": ops},
            options,
        )
        #: how ``model`` was compiled, if it was (``meta["compiled"]``); the tracer
        #: observes the module ``torch.compile(model)`` wraps, by its own paths
        self.compiled = compiled_form(model)
        self.model = unwrap(original_module(model))
        #: a data-parallel wrapper's ``module`` is observed (paths without ``module.``:
        #: ``core/model/wrappers.py``); the wrapper itself runs unobserved
        self._wrappers = wrapper_names(original_module(model))
        self.probes: list[Probe] = build_probes(flags, probes)
        #: a module class selects its instances, found in the table on entry
        self._classes = module_classes(select) if select is not None else ()
        self._matches = None if select is None else (
            _no_path if self._classes else compile_selector(select))  # type: ignore[arg-type]
        self._selects = self._matches  # the same, by any path of a module (on entry)
        self._select = select
        self._select_option = select_option
        self._plan = plan_dispatch(self.probes)
        self._handles = HandleGroup()
        self._restore_state = restore_state
        #: nothing but the model runs inside the tracer (``exclusive=``, above)
        self.exclusive = exclusive
        self._restore_buffers = restore_buffers
        self._saves_nothing = saves_nothing
        self._state: ModelState | None = None
        self._lazy = False
        self._active = False
        self._run: Run | None = None
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
        if self.compiled is not None:
            self.trace.meta["compiled"] = self.compiled
        if self._wrappers:
            self.trace.meta["wrappers"] = list(self._wrappers)
        if self._selects is not None:  # what a view may call unobserved, not "not called"
            self.trace.meta["selected"] = [p for p, _ in table.members if self._selects(p)]
        self._state = ModelState(table, buffers=self._restore_buffers) \
            if self._restore_state else None
        run = self._run = Run(self._plan, self.trace.calls, origin_ns=perf_counter_ns())
        try:
            self._install(table, run)
        except BaseException:
            self._handles.remove()
            raise
        self._active = True
        return self

    def _install(self, table: ModuleTable, run: Run) -> None:
        self.cuda_devices = cuda_devices(table)
        handles, plan = self._handles, self._plan
        if plan.backward_probes:
            self._watch_backward(table, run)
        run.owners = NodeOwners() if plan.guarded else None
        for probe in self.probes:
            try:
                installed = probe.install(self)
                if not isinstance(installed, (list, tuple)):
                    raise TypeError(f"install() must return a list of handles to remove "
                                    f"([] for none), not {type(installed).__name__}")
                handles.extend(installed)
            except CONTROL:
                raise
            except Exception as e:
                raise probe_error(probe, "install", None, e) from e
        run.enters, run.needs_start = plan_starts(self.probes)
        observe_module_calls(
            run, handles, table.members, self._selects, exclusive=self.exclusive,
            scan=table.scan if plan.installs_keep_modules else None,
        )
        if run.recomputes.keeps_calls():  # each forward of the model starts anew
            handles.add(run.recomputes.watch_forwards(self.model))
        if plan.guarded or (plan.marks_work and not self._saves_nothing):
            _shared.watchers[0] += 1
            handles.add(CallbackHandle(_unwatch))
        handles.add(PROCESS.acquire(table.depth + 1))

    def _watch_backward(self, table: ModuleTable, run: Run) -> None:
        """Hooks on parameters and on the graph's tensors, for the backward events."""
        plan = self._plan
        grad_handles = HandleGroup()
        self._handles.add(grad_handles)
        run.backward = BackwardWatch(
            run.dispatch_backward, grad_handles,
            clock=run.backward_overhead_now if any(
                p.uses_backward_end for p in plan.backward_probes) else None,
            inputs=bool(plan.backward_handlers["on_backward_exit"]),
        )
        if plan.backward_handlers["on_param_grad"]:
            named = _named_parameters(table)
            lazy = [name for name, p in named if is_lazy(p)]
            if lazy:  # an UninitializedParameter takes no hook
                raise SpecError(
                    f"{lazy[0]!r} belongs to a lazy module that has not run yet: its "
                    "parameters have no shape to watch the gradients of; run the "
                    "model once (model(x)) before recording its gradients"
                )
            run.backward.watch_parameters(named)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._active = False
        run = self._run
        assert run is not None
        try:
            self._handles.remove()
        finally:
            # A lazy module's parameters have their shapes now: the table counts them,
            # read before the state is restored (which makes them lazy again)
            materialised = module_table(self.model, extra_repr=False) if self._lazy else None
            if self._state is not None:
                self._state.restore()
            run.end(exc)
        trace = self.trace
        assert trace is not None
        control = exc if isinstance(exc, CONTROL) else run.control
        if isinstance(control, RunStopped):
            trace.stop = StopRecord(control.probe, control.reason, control.call, control.path)
        elif exc is not None and control is None and trace.error is None:
            trace.error = run.failures.failure_of(exc, self.model, self._selects)
        if materialised is not None:
            trace.model, trace.modules = materialised.summary, materialised.modules
        try:
            self._finalize_probes(trace)
            run.overhead_at_start.clear()
        except ProbeError as also:
            if exc is None or isinstance(exc, CONTROL):
                raise
            # the model's own exception is the one to report; say what else went wrong
            add_note(exc, f"hookscope: also, {also}")
        if isinstance(control, (ProbeError, RunStopped)):
            control.trace = trace
            # the model swallowed one: the run still stopped (but one that left the model
            # reached the code in the block, which handled it: a loop skipping a batch)
            pending = run.undelivered
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

    # -- what probes read ------------------------------------------------------------

    @property
    def active(self) -> bool:
        """Whether the tracer has been entered and not yet exited."""
        return self._active

    @property
    def run(self) -> Run | None:
        """The engine's state of the current run (the last one once the block ended;
        ``None`` before the first): ``core/engine/run.py``. A probe working inside a module's
        forward (a saved-tensor hook) adds its own time to ``run.overhead_ns``."""
        return self._run

    @property
    def chain_start_ns(self) -> int:
        """Bookkeeping clock (``time.perf_counter_ns``): when the running hook began
        (``Run.chain_start_ns``)."""
        return 0 if self._run is None else self._run.chain_start_ns

    @property
    def overhead_ns(self) -> int:
        """The total time spent in finished hooks (tracer and probe work,
        ``Run.overhead_ns``). The timing probe subtracts it, so hookscope's own work is
        not timed as the model's; a probe working inside a module's forward (a
        saved-tensor hook, a dispatch mode) adds its own time for the same reason."""
        return 0 if self._run is None else self._run.overhead_ns

    @overhead_ns.setter
    def overhead_ns(self, value: int) -> None:
        if self._run is not None:
            self._run.overhead_ns = value

    @property
    def current_call(self) -> Call | None:
        """The innermost module call running now (``None`` outside any module)."""
        run = self._run
        return None if run is None or not run.stack else run.stack[-1][0]

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
        run = self._run
        at_start = None if run is None else run.overhead_at_start.get(call.index)
        if at_start is None or call.start_ns is None:
            return None
        assert run is not None
        overhead = run.overhead_ns + now - run.chain_start_ns - at_start
        return max(0, now - run.origin_ns - call.start_ns - overhead)

    def backward_overhead_now(self, now: int) -> int:
        """The time of hookscope's work in backward events so far, in ns, up to ``now``
        (``time.perf_counter_ns()``), the event running on this thread included: a
        probe timing a call's backward subtracts what it grew by in between, so no
        probe's work (its own, another's of this tracer) counts as the model's backward
        time. NB: one clock for every thread: with backward passes running on several
        threads at once (several CUDA devices), their probe work is counted together."""
        return 0 if self._run is None else self._run.backward_overhead_now(now)

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
        backward = None if self._run is None else self._run.backward
        return None if backward is None else backward.own_end(call)

    def backward_failed_in(self) -> Call | None:
        """Read right after a backward pass raised, inside the block: the innermost
        call whose backward was running (:meth:`BackwardWatch.failed_in`)."""
        backward = None if self._run is None else self._run.backward
        trace = self.trace
        return None if backward is None or trace is None else backward.failed_in(trace.calls)

    def node_owner(self, node: Any) -> int | None:
        """Index of the call whose forward created autograd ``node`` (``None``: no call,
        or no probe watching ops, the only ones for which the tracer keeps track)."""
        owners = None if self._run is None else self._run.owners
        return None if owners is None else owners.owner(node)

    def stop(self, reason: str) -> NoReturn:
        """Stop the run now: raise :class:`~hookscope.errors.RunStopped`, which leaves the
        model as before and reaches the caller with the partial trace. Call it from a
        probe's event."""
        raise RunStopped(reason)


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
