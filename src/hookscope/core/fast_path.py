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
also send every module through torch's hooked call path (``benchmarks/README.md``:
most of what observing a small model cost). A failure is an exception caught around
the call: no frame inspection.

A module with hooks of its own (which may replace its output) keeps per-module hooks
(``core/module_hooks.py``), registered last, as do all modules in a ``Tracer`` block,
where user code runs between calls, and every module of a run whose probes replace
values or take a call's backward events (``on_param_grad`` alone keeps the fast path).
The fast path is also off while another tracer's (or
another library's) function stands in ``_call_impl``, or process-wide module hooks
exist: torch's hook order is then kept by plain hooks.

Which modules the stand-in observes, and which keep per-module hooks, is planned in
``core/call_plan.py``.

**Leaves.** When no probe needs a call's start at all, the leaf modules of ``torch.nn``
itself (no submodules, no ``forward`` patched on the instance, not a user subclass) are
recorded whole when they end. This is exact: such a ``forward`` calls no other module,
so no call starts between its start and its end, and the index, parent and depth a call
gets at the end are those it would have got at the start. Its start time is read before
``forward`` runs, so ``start_ns`` and the engine's time window
(:meth:`~hookscope.core.tracer.Tracer.model_time_ns`) are those of any other call: the
time probe needs no start event on the CPU, and its leaves take this path too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

from torch import nn

from hookscope.core import internal, torch_private
from hookscope.core.call_plan import Entries, Plan
from hookscope.core.failures import add_note
from hookscope.core.handles import CallbackHandle
from hookscope.core.module_hooks import new_call
from hookscope.core.readonly import ReadOnlyList
from hookscope.core.records import Call

if TYPE_CHECKING:
    from hookscope.core.node_owners import NodeOwners
    from hookscope.core.tracer import Tracer


def install_call_path(tracer: Tracer, plan: Plan) -> CallbackHandle | None:
    """Stand in ``Module._call_impl`` of the plan's classes for the modules in its
    entries while ``tracer`` runs; ``None`` when another function stands there already
    (the caller then registers per-module hooks). The handle puts torch's function back.
    """
    original = torch_private.torch_call_impl()
    alive = [True]
    traced = make_traced_call(tracer, plan.entries, plan.counts, original, alive)
    put_back = torch_private.stand_in_call_impl(plan.classes, traced)
    if put_back is None:
        return None

    def remove() -> None:
        alive[0] = False  # a reference someone kept calls torch's function from now on
        put_back()

    return CallbackHandle(remove)


def make_traced_call(
    tracer: Tracer, entries: Entries, counts: list[int], original: Callable[..., Any],
    alive: list[bool],
) -> Callable[..., Any]:
    """The stand-in for ``Module._call_impl``: the call-start bookkeeping of
    ``core/module_hooks.py``'s pre-hook, torch's ``_call_impl``, then its post-hook's.

    NB: the bookkeeping is inline on purpose: one more Python call per module call is
    measurable at batch 1 (``benchmarks/README.md``).
    """
    stack, clocked, dispatch_exit = tracer._stack, tracer._clocked, tracer._dispatch_exit
    assert tracer.trace is not None
    calls, owners, origin = tracer.trace.calls, tracer._owners, tracer._t0
    at_start = tracer._overhead_at_start
    dispatch_enter = tracer._dispatch_enter if tracer._enters else None
    get_ident, thread = threading.get_ident, tracer._thread
    graph_task = torch_private.graph_task_id_function()
    # torch's own hook-free shortcut, taken here: forward called without the frame of
    # _call_impl (torch_private.call_impl_shortcut)
    shortcut = torch_private.call_impl_shortcut()
    if shortcut is None:
        shortcut = ({0: None},) * 4  # never empty: always torch's _call_impl
    g_pre, g_post, g_back_pre, g_back = shortcut
    jit = torch_private.jit_trace_scopes()  # torch.jit.trace recording scopes: torch's path
    # NB: the exit event inline, as Tracer._dispatch_exit does it when nothing replaces
    # values nor watches a call's backward (never on this path), unless probe work must
    # be marked as internal: one Python frame less per call (``watching``: this thread's
    # count of ops-watching tracers, the only thread whose calls the stand-in records)
    exits, watching, exit_failed = tracer._exits, internal.shared.watchers, tracer._exit_failed
    new = object.__new__

    def traced_call_impl(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        entry = entries.get(id(module))
        # not this model's module, another thread's call, after the run, or a forward
        # run again by a backward pass (activation checkpointing): not a call of the run
        if entry is None or get_ident() != thread or not alive[0] or graph_task() != -1:
            return original(module, *args, **kwargs)
        path, cls, place = entry[0], entry[1], entry[2]
        count = counts[place]
        counts[place] = count + 1
        # a leaf, recorded whole when it ends (unless a hook added meanwhile, which may
        # call another module, needs its start)
        if entry[3] and not (module._forward_hooks or module._forward_pre_hooks):
            if clocked:
                overhead = tracer.overhead_ns
            start = perf_counter_ns()
            try:
                if (
                    module._backward_hooks or module._backward_pre_hooks or g_pre or g_post
                    or g_back_pre or g_back or jit._trace_module_map is not None
                ):
                    output = original(module, *args, **kwargs)
                else:
                    output = module.forward(*args, **kwargs)
            except Exception as exc:
                if clocked:
                    tracer.chain_start_ns = perf_counter_ns()
                call = new_call(stack, calls, path, cls, count, start - origin)
                if clocked:
                    at_start[call.index] = overhead
                _raised(tracer, call, exc, module, args, kwargs)
                raise
            if clocked:
                tracer.chain_start_ns = perf_counter_ns()
            # NB: new_call, started_call and the exit bookkeeping inline (most calls of a
            # CNN end here): a Python call costs a few hundred ns between two kernels.
            # Every field of Call is set (tests/core/test_leaf_fast_path.py checks).
            index = len(calls)
            call = new(Call)
            if stack:
                parent = stack[-1][0]
                parent.children.append(index)
                call.depth, call.parent = len(stack), parent.index
            else:
                call.depth, call.parent = 0, None
            call.index, call.path, call.module_class, call.call_index = index, path, cls, count
            # NB: a leaf has no children, ever: one shared empty list, read-only (one
            # object less per call for the garbage collector's young generation)
            call.children, call.start_ns, call.error, call.facts = (
                _NO_CHILDREN, start - origin, None, {})
            calls.append(call)
            if clocked:
                at_start[index] = overhead
        else:  # a call that may contain others: recorded when it starts
            start = perf_counter_ns()
            if clocked:
                tracer.chain_start_ns = start
            begun = start - origin
            index = len(calls)  # NB: new_call inline, as in the leaf path above
            call = new(Call)
            if stack:
                parent = stack[-1][0]
                parent.children.append(index)
                call.depth, call.parent = len(stack), parent.index
            else:
                call.depth, call.parent = 0, None
            call.index, call.path, call.module_class, call.call_index = index, path, cls, count
            call.children, call.start_ns, call.error, call.facts = [], begun, None, {}
            calls.append(call)
            if clocked:
                at_start[index] = tracer.overhead_ns
            frame = (call, module, None)
            stack.append(frame)
            if owners is not None:
                owners.mark(index)
            try:
                if dispatch_enter is not None:
                    dispatch_enter(call, module, args, kwargs)
                if clocked:
                    tracer.overhead_ns += perf_counter_ns() - start
                # NB: torch's shortcut, as in the leaf path above (inline: the hot path)
                if (
                    module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                    or module._backward_pre_hooks or g_pre or g_post or g_back_pre or g_back
                    or jit._trace_module_map is not None
                ):
                    output = original(module, *args, **kwargs)
                else:
                    output = module.forward(*args, **kwargs)
            except Exception as exc:
                if clocked:
                    tracer.chain_start_ns = perf_counter_ns()
                _pop(stack, frame, owners, call)
                _raised(tracer, call, exc, module, args, kwargs)
                raise
            if clocked:
                tracer.chain_start_ns = perf_counter_ns()
            if stack and stack[-1] is frame:
                stack.pop()
                if owners is not None:
                    owners.mark(call.parent)
            else:
                _pop(stack, frame, owners, call)
        # the exit event, of either kind of call (NB: inline, as above)
        if watching[0]:
            dispatch_exit(call, module, args, kwargs, output, False)
        else:
            try:
                for fn in exits:
                    fn(call, module, args, kwargs, output, False)
            except Exception as e:
                raise exit_failed(e, fn, call, module, args, kwargs, output, False) from e
        if clocked:
            tracer.overhead_ns += perf_counter_ns() - tracer.chain_start_ns
        return output

    return traced_call_impl


#: The children of every call recorded whole at its end (a leaf: none)
_NO_CHILDREN: ReadOnlyList[int] = ReadOnlyList()


def _pop(stack: list[Any], frame: Any, owners: NodeOwners | None, call: Call) -> None:
    if stack and stack[-1] is frame:
        stack.pop()
    elif frame in stack:  # frames above were left by calls that never ended
        del stack[stack.index(frame):]
    if owners is not None:
        owners.mark(call.parent)


def _raised(
    tracer: Tracer, call: Call, exc: Exception, module: nn.Module, args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    """``call`` raised ``exc``: record the failure and hand it to the exit dispatch,
    unless it is hookscope's own stop or error passing through."""
    if isinstance(exc, tracer._control_types):
        if not tracer._stack and not call.path:  # out of the model: in the block's hands
            tracer._delivered(exc)
        return
    tracer._failures.record(call, exc)
    control = tracer._control
    try:
        tracer._dispatch_exit(call, module, args, kwargs, None, True)
    except Exception as probe_error:  # the model's exception is the one to report
        tracer._control = control
        cause = probe_error.__cause__ or probe_error
        add_note(exc, f"hookscope: also, a probe raised while recording this failure "
                      f"in {call.path or '<root>'!r}: {type(cause).__name__}: {cause}")
    if tracer._clocked:
        tracer.overhead_ns += perf_counter_ns() - tracer.chain_start_ns
