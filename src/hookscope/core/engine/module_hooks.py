"""Per-module forward hooks: what the tracer registers on a module that cannot go
through the exclusive fast path of ``core/engine/fast_path.py`` (a module with hooks of its
own, any module inside a ``Tracer`` block, or a run whose probes replace values or
take a call's backward events).

The pre-hook pushes a :class:`~hookscope.core.records.trace.Call` on the run's stack
(``core/engine/run.py``) and keeps the post-hook last in the module's hook dict (a forward hook
the user adds inside the block, which may replace the output, then runs before it: the
trace records what the caller receives); the post-hook pops it and hands it to
``Run.dispatch_exit`` (``Run.record_failure`` when the call raised). A
tracer whose probes only replace values (``hookscope.patch``, ``patch_inputs``) instead
places its hooks, pre-hook and post-hook, just before the first recording tracer's,
whichever was entered first: every recording tracer sees the replaced inputs and
output.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

from torch import nn

from hookscope.core import torch_private
from hookscope.core.engine.run import CONTROL

if TYPE_CHECKING:
    from hookscope.core.engine.run import Run


def make_module_pre_hook(run: Run, path: str, cls: str, post_id: int) -> Callable[..., Any]:
    """The forward pre-hook of one module: push a new call, hand it to the probes."""
    stack, clocked, exc_info = run.stack, run.clocked, sys.exc_info
    owners, origin, start_call = run.owners, run.origin_ns, run.start_call
    dispatch = run.dispatch_enter if (
        run.enters or run.enter_replacers or run.watches_calls
    ) else None
    count = 0  # calls of this module so far (a module is registered once)
    # a tracer that only replaces values (a patch) runs before every recording
    # tracer's hooks; one that replaces and records, after every other hook (a user's
    # may replace the output) but before other recording tracers': they all record
    # what the caller receives
    replaces_only = run.replaces_only
    replaces = bool(run.enter_replacers or run.exit_replacers)
    recomputes = run.recomputes  # what replaces values or watches the backward
    keep = recomputes.keeps_calls()  # does so again in a recompute (``core/engine/recompute.py``)
    get_ident, thread = threading.get_ident, run.thread
    graph_task = torch_private.graph_task_id_function()
    jit = _jit_scopes(run)

    def pre_hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        nonlocal count
        # a forward run again by a backward pass (activation checkpointing recomputes):
        # not a call of this run, but what replaces values replaces them again
        if graph_task() != -1:
            return recomputes.started(module, path, args, kwargs) if keep else None
        if get_ident() != thread:  # the model run by another thread meanwhile
            return None
        start = perf_counter_ns()
        if clocked:
            run.chain_start_ns = start
        hooks = module._forward_hooks
        if replaces_only:
            before_recorders(hooks, post_id)
        elif replaces:
            after_hooks_before_recorders(hooks, post_id)
        elif next(reversed(hooks), post_id) != post_id and post_id in hooks:
            # A forward hook registered after ours (inside the ``with`` block) may
            # replace the output: run ours last, to record what the caller receives.
            # The order of the user's own hooks is unchanged.
            hooks[post_id] = hooks.pop(post_id)
        call = start_call(path, cls, count, start - origin)
        if clocked:
            run.overhead_at_start[call.index] = run.overhead_ns
        count += 1
        if keep:  # what a recompute of this call repeats
            recomputes.remember(module, call)
        stack.append((call, module, exc_info()[1]))
        if owners is not None:
            owners.mark(call.index)
        if dispatch is None:
            result = None
        elif jit._trace_module_map is not None:  # inside torch.jit.trace: not its ops
            with torch_private.jit_tracing_paused():
                result = dispatch(call, module, args, kwargs)
        else:
            result = dispatch(call, module, args, kwargs)
        if clocked:
            run.overhead_ns += perf_counter_ns() - start
        return result

    return pre_hook


def _jit_scopes(run: Run) -> Any:
    """What tells whether ``torch.jit.trace`` is recording: the probes' work is paused
    out of its graph, unless a probe replaces values (a patch): what it returns must be
    traced as the model's."""
    if run.enter_replacers or run.exit_replacers:
        return _NEVER_TRACING
    return torch_private.jit_trace_scopes()


class _NeverTracing:
    _trace_module_map = None


_NEVER_TRACING = _NeverTracing()


RECORDING_HOOKS: set[int] = set()
"""Handle ids of the post-hooks of active tracers that record (not only replace)."""

RECORDING_PRE_HOOKS: set[int] = set()
"""Handle ids of the pre-hooks of active tracers that record (not only replace)."""


def before_recorders(
    hooks: dict[int, Any], post_id: int, recorders: set[int] = RECORDING_HOOKS
) -> None:
    """Put a replacing tracer's hook just before the first recording tracer's (its
    own, when it records too, may be that one), so that every tracer that records,
    entered before or after it, sees the replaced output (the trace records what the
    caller receives); with ``RECORDING_PRE_HOOKS``, its pre-hook before theirs: they see
    the replaced inputs."""
    if not recorders:
        return
    keys = list(hooks)
    first = next((i for i, k in enumerate(keys) if k in recorders), None)
    if first is None or post_id not in hooks or keys.index(post_id) < first:
        return
    items = [(k, hooks[k]) for k in keys if k != post_id]
    items.insert(first, (post_id, hooks[post_id]))
    hooks.clear()
    hooks.update(items)


def after_hooks_before_recorders(hooks: dict[int, Any], post_id: int) -> None:
    """Put the hook of a tracer that replaces values and records after every hook
    that is not a recording tracer's (a user's, a patch's: they may replace the output)
    and before the other recording tracers' that follow them."""
    if post_id not in hooks:
        return
    keys = [k for k in hooks if k != post_id]
    last_plain = max((i for i, k in enumerate(keys) if k not in RECORDING_HOOKS), default=-1)
    at = next((i for i, k in enumerate(keys) if i > last_plain and k in RECORDING_HOOKS),
              len(keys))
    order = [*keys[:at], post_id, *keys[at:]]
    if order != list(hooks):
        items = [(k, hooks[k]) for k in order]
        hooks.clear()
        hooks.update(items)


def make_module_post_hook(run: Run) -> Callable[..., Any]:
    """The forward hook of every module with per-module hooks: it finds its call on the
    stack, and hands it to the run's one exit dispatch."""
    stack, clocked, exc_info = run.stack, run.clocked, sys.exc_info
    dispatch, record_failure = run.dispatch_exit, run.record_failure
    get_ident, thread = threading.get_ident, run.thread
    graph_task = torch_private.graph_task_id_function()
    jit = _jit_scopes(run)
    recomputes = run.recomputes
    on_recompute = bool(run.exit_replacers) or (run.backward is not None and run.watches_calls)

    def post_hook(
        module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
    ) -> Any:
        if graph_task() != -1:  # as in the pre-hook
            return recomputes.ended(module, args, kwargs, output) if on_recompute else None
        if get_ident() != thread:
            return None
        if clocked:
            start = run.chain_start_ns = perf_counter_ns()
        if stack and stack[-1][1] is module:
            call, _, outer_exc = stack.pop()
        else:
            frame = run.unwind(module)
            if frame is None:
                return None
            call, _, outer_exc = frame
        raised = exc_info()[1]
        if raised is outer_exc:  # none, or the one handled already when the call started
            raised = None
        if isinstance(raised, CONTROL):  # hookscope's own stop or error passing through
            record_failure(call, module, args, kwargs, raised)
            return None
        owners = run.owners
        if owners is not None:
            owners.mark(call.parent)
        if raised is not None:
            record_failure(call, module, args, kwargs, raised)
            result = None
        elif jit._trace_module_map is not None:  # inside torch.jit.trace: not its ops
            with torch_private.jit_tracing_paused():
                result = dispatch(call, module, args, kwargs, output, False)
        else:
            result = dispatch(call, module, args, kwargs, output, False)
        if clocked:
            run.overhead_ns += perf_counter_ns() - start
        return result

    return post_hook
