"""The fast path of exclusive runs: the tracer's bookkeeping in ``Module._call_impl``.

In ``trace()``/``summary()`` nothing but the model runs inside the tracer, so no hook
can be added between two calls. There, every module without hooks of its own is
observed by one function that stands in for ``torch.nn.Module._call_impl`` while the
run lasts (``core/torch_private/``): it records the call around torch's own
``_call_impl``, which it calls unchanged, so the module's forward, its hooks, tracing
and compilation run exactly as they would; where torch's ``_call_impl`` would only
call ``forward`` (no hook anywhere, no ``torch.jit.trace`` recording module scopes:
checked per call, and once per process that torch's functions still read so,
``call_impl_shortcut``, ``jit_trace_scopes``), it calls
``forward`` itself, one frame less. Any other module (another model's, another
thread's) goes straight to torch's ``_call_impl``. Per module call this is one Python
frame, instead of a global forward pre-hook and an always-call forward hook, which
also send every module through torch's hooked call path: that path, the floor of any
hook-based tool (``benchmarks/bench_summary.py``'s no-op hook on every module), is
most of what observing a small model through hooks costs (``docs/architecture.md``,
"The fast path of exclusive runs"). A failure is an exception caught around the
call: no frame inspection.

A module with hooks of its own (which may replace its output) keeps per-module hooks
(``core/engine/module_hooks.py``), registered last, as do all modules in a ``Tracer`` block,
where user code runs between calls, and every module of a run whose probes replace
values or take a call's backward events (``on_param_grad`` alone keeps the fast path).
The fast path is also off while another tracer's (or
another library's) function stands in ``_call_impl``, or process-wide module hooks
exist: torch's hook order is then kept by plain hooks.

Which modules the stand-in observes, and which keep per-module hooks, is planned in
``core/engine/call_plan.py``.

**Leaves.** When no probe needs a call's start at all, the leaf modules of ``torch.nn``
itself (no submodules, no ``forward`` patched on the instance, not a user subclass) are
never put on the call stack and get no start event: such a ``forward`` calls no other
module, so no call can be their child (their ``children`` is one shared, read-only
empty list). Their ``start_ns`` and the engine's time window
(:meth:`~hookscope.core.engine.tracer.Tracer.model_time_ns`) are those of any other call: the
time probe needs no start event on the CPU, and its leaves take this path too.

The stand-in talks to the tracer's :class:`~hookscope.core.engine.run.Run` (``core/engine/run.py``):
it reads the run's attributes once, when it is made, and per call only the clock's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

from torch import nn

from hookscope.core import internal, torch_private
from hookscope.core.engine.call_plan import Entries, Plan
from hookscope.core.engine.handles import CallbackHandle
from hookscope.core.records.readonly import ReadOnlyList
from hookscope.core.records.trace import Call

if TYPE_CHECKING:
    from hookscope.core.engine.node_owners import NodeOwners
    from hookscope.core.engine.run import Frame, Run


def install_call_path(run: Run, plan: Plan) -> CallbackHandle | None:
    """Stand in ``Module._call_impl`` of the plan's classes for the modules in its
    entries while ``run`` lasts; ``None`` when another function stands there already
    (the caller then registers per-module hooks). The handle puts torch's function back.
    """
    original = torch_private.torch_call_impl()
    alive = [True]
    traced = make_traced_call(run, plan.entries, plan.counts, original, alive)
    put_back = torch_private.stand_in_call_impl(plan.classes, traced)
    if put_back is None:
        return None

    def remove() -> None:
        alive[0] = False  # a reference someone kept calls torch's function from now on
        put_back()

    return CallbackHandle(remove)


def make_traced_call(
    run: Run, entries: Entries, counts: list[int], original: Callable[..., Any],
    alive: list[bool],
) -> Callable[..., Any]:
    """The stand-in for ``Module._call_impl``: the call-start bookkeeping of
    ``core/engine/module_hooks.py``'s pre-hook, torch's ``_call_impl``, then its post-hook's.

    The bookkeeping is inline on purpose: between two kernels the interpreter's
    data is out of the caches (a cold attribute read costs 0.6-2 µs, a warm one
    0.1 µs), so one more Python call per module call shows at batch 1, where kernels
    are short (``docs/architecture.md``, "Cold caches decide the cost of the stand-in").
    """
    stack, calls, clocked, origin = run.stack, run.calls, run.clocked, run.origin_ns
    owners, at_start = run.owners, run.overhead_at_start
    dispatch_enter = run.dispatch_enter if run.enters else None
    get_ident, thread = threading.get_ident, run.thread
    graph_task = torch_private.graph_task_id_function()
    # torch's own hook-free shortcut, taken here: forward called without the frame of
    # _call_impl (torch_private.call_impl_shortcut)
    shortcut = torch_private.call_impl_shortcut()
    if shortcut is None:
        shortcut = ({0: None},) * 4  # never empty: always torch's _call_impl
    g_pre, g_post, g_back_pre, g_back = shortcut
    jit = torch_private.jit_trace_scopes()  # torch.jit.trace recording scopes: torch's path
    # the exit event inline, as Run.dispatch_exit does it when nothing replaces
    # values nor watches a call's backward (never on this path), unless probe work must
    # be marked as internal: one Python frame less per call (``watching``: this thread's
    # count of ops-watching tracers, the only thread whose calls the stand-in records)
    exits, watching = run.exits, internal.shared.watchers
    dispatch_exit, exit_failed, record_failure = (
        run.dispatch_exit, run.exit_failed, run.record_failure)
    new = object.__new__

    def traced_call_impl(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        entry = entries.get(id(module))
        # not this model's module, another thread's call, after the run, or a forward
        # run again by a backward pass (activation checkpointing): not a call of the run
        if entry is None or get_ident() != thread or not alive[0] or graph_task() != -1:
            return original(module, *args, **kwargs)
        path, cls, place, leaf = entry
        count = counts[place]
        counts[place] = count + 1
        # a leaf stays off the stack (unless a hook added meanwhile, which may call
        # another module, needs it there)
        if leaf and (module._forward_hooks or module._forward_pre_hooks):
            leaf = False
        start = perf_counter_ns()
        if clocked:
            run.chain_start_ns = start
        # the Call made inline, not by its dataclass constructor (a Python call
        # costs a few hundred ns between two kernels), one field a statement (a tuple
        # assignment builds a tuple): every field is set here (tests/core/
        # test_records.py), as the per-module hooks record it (test_leaf_fast_path.py)
        index = len(calls)
        call = new(Call)
        if stack:
            parent = stack[-1][0]
            parent.children.append(index)
            call.depth = len(stack)
            call.parent = parent.index
        else:
            call.depth = 0
            call.parent = None
        call.index = index
        call.path = path
        call.module_class = cls
        call.call_index = count
        # a leaf has no children, ever: one shared empty list, read-only (one object
        # less per call for the garbage collector's young generation)
        call.children = _NO_CHILDREN if leaf else []
        call.start_ns = start - origin
        call.error = None
        call.facts = {}
        calls.append(call)
        if clocked:
            at_start[index] = run.overhead_ns
        try:
            if not leaf:  # on the stack: the calls its forward makes are its children
                frame: Frame = (call, module, None)
                stack.append(frame)
                if owners is not None:
                    owners.mark(index)
                if dispatch_enter is not None:  # never for a leaf (no start event)
                    dispatch_enter(call, module, args, kwargs)
            if clocked:
                run.overhead_ns += perf_counter_ns() - start
            # torch's _call_impl would only call forward: call it, one frame less
            if (
                module._backward_hooks or module._backward_pre_hooks or g_pre or g_post
                or g_back_pre or g_back or jit._trace_module_map is not None
                or (not leaf and (module._forward_hooks or module._forward_pre_hooks))
            ):
                output = original(module, *args, **kwargs)
            else:
                output = module.forward(*args, **kwargs)
        except Exception as exc:
            if clocked:
                run.chain_start_ns = perf_counter_ns()
            if not leaf:
                _pop(stack, frame, owners, call)
            if record_failure(call, module, args, kwargs, exc) and clocked:
                run.overhead_ns += perf_counter_ns() - run.chain_start_ns
            raise
        if clocked:
            run.chain_start_ns = perf_counter_ns()
        if not leaf:
            if stack and stack[-1] is frame:
                stack.pop()
                if owners is not None:
                    owners.mark(call.parent)
            else:
                _pop(stack, frame, owners, call)
        # the exit event, inline as above
        if watching[0]:
            dispatch_exit(call, module, args, kwargs, output, False)
        else:
            try:
                for fn in exits:
                    fn(call, module, args, kwargs, output, False)
            except Exception as e:
                raise exit_failed(e, fn, call, module, args, kwargs, output, False) from e
        if clocked:
            run.overhead_ns += perf_counter_ns() - run.chain_start_ns
        return output

    return traced_call_impl


#: The children of every leaf's call (none, ever)
_NO_CHILDREN: ReadOnlyList[int] = ReadOnlyList()


def _pop(stack: list[Frame], frame: Frame, owners: NodeOwners | None, call: Call) -> None:
    if stack and stack[-1] is frame:
        stack.pop()
    elif frame in stack:  # frames above were left by calls that never ended
        del stack[stack.index(frame):]
    if owners is not None:
        owners.mark(call.parent)
