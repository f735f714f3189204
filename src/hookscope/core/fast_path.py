"""The fast path of exclusive runs: two global hooks instead of two per module.

In ``trace()``/``summary()`` nothing but the model runs inside the tracer, so no hook
can be added between two calls. There, every module without hooks of its own is
observed through one global forward pre-hook and one global forward hook
(``register_module_forward_pre_hook``/``register_module_forward_hook``, the latter
``always_call=True``) that look the module up in a table of the model's modules (any
other module returns at once): two registrations instead of two per module (a
MobileNetV3 has 255), which is most of what observing a small model costs to set up.
Global hooks run before a module's own, so a module with hooks of its own (which may
replace its output) keeps per-module hooks, registered last, as do all modules in a
``Tracer`` block, where user code runs between calls. It is used when no probe replaces
values and none has backward events. A global pre-hook gets no keyword arguments:
when a probe reads inputs on entry (``reads_inputs_on_enter``), they are read from the
frame of ``Module._call_impl`` that runs the hook, an assumption checked once per
process by :func:`pre_hook_kwargs_work` (without it, such probes get per-module hooks).

**Leaves.** When no probe needs a call's start at all, the leaf modules of ``torch.nn``
itself (no submodules, no ``forward`` patched on the instance, not a user subclass) are
recorded whole by the forward hook when they end, and the pre-hook returns at once for
them. This is exact: such a ``forward`` calls no other module, so no call starts between
its start and its end, and the index, parent and depth a call gets at the end are
those it would have got at the start. A failure is recognised without a pre-hook: the
call raised exactly when the exception was caught by the frame that runs the
always-call hook (torch calls them from the ``except`` of ``_call_impl``, and there
hands a global hook no kwargs: they are read from that frame). That assumption about
torch's frames is checked once per process by :func:`failure_detection_works`; where it
does not hold, the fast path is off (with a warning) and every module gets both hooks.

While such a run lasts, every module of the process takes torch's hooked call path (a
few microseconds per call for other threads' models).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import warnings
from collections.abc import Callable
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn.modules.module import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
)

from hookscope.core import torch_private
from hookscope.core.handles import CallbackHandle
from hookscope.core.records import started_call

if TYPE_CHECKING:
    from hookscope.core.tracer import Tracer

def has_own_hooks(module: nn.Module) -> bool:
    """Whether the module has forward (pre-)hooks of its own: it keeps per-module hooks."""
    return bool(module._forward_hooks or module._forward_pre_hooks)


def is_fast_leaf(module: nn.Module, torch_nn_class: bool) -> bool:
    """Whether a hook-free module of a ``torch.nn`` class can be recorded whole at its end."""
    return (
        torch_nn_class and not module._modules
        and "forward" not in module.__dict__  # NB: a forward patched on the instance
    )


@functools.cache
def failure_detection_works() -> bool:
    """Whether a global always-call hook sees a failing leaf as the fast path expects:
    called without kwargs, from the frame that caught the exception, which has a
    ``kwargs`` local. Checked once per process on a parameterless module."""
    seen: list[bool] = []

    def probe(module: nn.Module, args: tuple[Any, ...], *rest: Any) -> None:
        exc = sys.exc_info()[1]
        frame = torch_private.caller_frame(1)
        tb = None if exc is None else exc.__traceback__
        seen.append(
            len(rest) == 1 and tb is not None and tb.tb_frame is frame
            and isinstance(frame.f_locals.get("kwargs"), dict)
        )

    handle = register_module_forward_hook(probe, with_kwargs=True, always_call=True)
    try:
        with contextlib.suppress(IndexError, RuntimeError):
            nn.Flatten(start_dim=3)(torch.zeros(2))  # dimension out of range: raises
    finally:
        handle.remove()
        torch_private.remove_global_forward_hook_kwargs_entry(handle.id)
    works = seen == [True]
    if not works:
        warnings.warn(
            f"hookscope: torch {torch.__version__} calls always-call module hooks "
            "differently than expected; the leaf fast path is off (traces are exact, "
            "only slower)",
            torch_private.HookscopeTorchWarning,
            stacklevel=2,
        )
    return works


Entries = dict[int, list[Any]]
"""``id(module) -> [path, class name, calls so far, is a fast leaf]``."""

_NO_KWARGS: dict[str, Any] = {}


@functools.cache
def pre_hook_kwargs_work() -> bool:
    """Whether a global forward pre-hook finds the call's kwargs in its caller's frame
    (``Module._call_impl``'s ``kwargs`` local). Checked once per process."""
    seen: list[Any] = []

    def probe(module: nn.Module, args: tuple[Any, ...]) -> None:
        seen.append(torch_private.caller_frame(1).f_locals.get("kwargs"))

    marker = torch.zeros(1)
    handle = register_module_forward_pre_hook(probe)
    try:
        nn.Identity()(input=marker)
    finally:
        handle.remove()
    works = len(seen) == 1 and isinstance(seen[0], dict) and seen[0].get("input") is marker
    if not works:
        warnings.warn(
            f"hookscope: torch {torch.__version__} runs global module pre-hooks "
            "differently than expected; probes that read inputs on entry get per-module "
            "hooks (traces are exact, only slower)",
            torch_private.HookscopeTorchWarning,
            stacklevel=2,
        )
    return works


def install_global_hooks(tracer: Tracer, entries: Entries) -> CallbackHandle:
    """Register the two global hooks of ``tracer`` for the modules in ``entries``; the
    handle removes both fully."""
    pre = make_global_pre_hook(tracer, entries)
    post = make_global_post_hook(tracer, entries)
    pre_handle = register_module_forward_pre_hook(pre)
    post_handle = register_module_forward_hook(post, with_kwargs=True, always_call=True)

    def remove() -> None:
        pre_handle.remove()
        post_handle.remove()
        torch_private.remove_global_forward_hook_kwargs_entry(post_handle.id)

    return CallbackHandle(remove)


def make_global_pre_hook(tracer: Tracer, entries: Entries) -> Callable[..., Any]:
    """The call-start bookkeeping of :meth:`Tracer._make_pre_hook`, for every module of
    the table that is not a fast leaf. It gets no kwargs: probes that read inputs on
    enter rule this path out (see the module docstring)."""
    stack, clocked, exc_info = tracer._stack, tracer._clocked, sys.exc_info
    assert tracer.trace is not None
    calls, owners, origin, clock = tracer.trace.calls, tracer._owners, tracer._t0, tracer._clock
    dispatch = tracer._dispatch_enter if tracer._enters else None
    # NB: torch hands a global pre-hook no kwargs; a probe that reads them on entry gets
    # them from the frame of ``_call_impl`` that runs the hook (``pre_hook_kwargs_work``)
    read_kwargs, caller = tracer._enters_read_inputs, torch_private.caller_frame
    get_ident, thread = threading.get_ident, tracer._thread

    def global_pre_hook(module: nn.Module, args: tuple[Any, ...]) -> None:
        entry = entries.get(id(module))
        if entry is None or entry[3]:  # not this model's, or a leaf recorded at its end
            return
        if get_ident() != thread:  # the model run by another thread meanwhile
            return
        start = perf_counter_ns()
        if clocked:
            tracer.chain_start_ns = start
        path, cls, count = entry[0], entry[1], entry[2]
        entry[2] = count + 1
        index = len(calls)
        clock[0] = begun = start - origin
        if stack:
            parent = stack[-1][0]
            parent.children.append(index)
            call = started_call(index, path, cls, count, len(stack), parent.index, begun)
        else:
            call = started_call(index, path, cls, count, 0, None, begun)
        calls.append(call)
        stack.append((call, module, exc_info()[1]))
        if owners is not None:
            owners.mark(index)
        if dispatch is not None:
            dispatch(call, module, args,
                     torch_private.frame_kwargs(caller(1)) if read_kwargs else _NO_KWARGS)
        if clocked:
            tracer.overhead_ns += perf_counter_ns() - start

    return global_pre_hook


def make_global_post_hook(tracer: Tracer, entries: Entries) -> Callable[..., None]:
    """The one forward hook of the table's modules: a leaf's call is recorded whole
    here; any other call is popped from the stack. Both go to the tracer's one exit
    dispatch.

    NB: the leaf's call bookkeeping is inline on purpose: one more Python call per
    module call is measurable at batch 1 (``benchmarks/README.md``).
    """
    stack, dispatch_exit, failures = tracer._stack, tracer._dispatch_exit, tracer._failures
    exc_info, caller, clock, clocked = sys.exc_info, torch_private.caller_frame, tracer._clock, (
        tracer._clocked
    )
    assert tracer.trace is not None
    calls = tracer.trace.calls
    origin = tracer._t0
    control = tracer._control_types
    owners = tracer._owners
    get_ident, thread = threading.get_ident, tracer._thread

    def global_post_hook(module: nn.Module, args: tuple[Any, ...], *rest: Any) -> None:
        entry = entries.get(id(module))
        if entry is None or get_ident() != thread:  # not this model's, or another thread's
            return
        if clocked:
            start = tracer.chain_start_ns = perf_counter_ns()
        if len(rest) == 2:
            kwargs, output = rest
        else:  # forward raised: torch calls global always-call hooks without kwargs
            output = rest[0]
            kwargs = torch_private.frame_kwargs(caller(1))
        exc = exc_info()[1]
        if entry[3]:
            path, cls, count = entry[0], entry[1], entry[2]
            entry[2] = count + 1
            index = len(calls)
            begun = clock[0]
            if stack:
                parent = stack[-1][0]
                parent.children.append(index)
                call = started_call(index, path, cls, count, len(stack), parent.index, begun)
            else:
                call = started_call(index, path, cls, count, 0, None, begun)
            calls.append(call)
            # With no pre-hook there is no record of an exception already being handled
            # when the call started (the model calling it in an ``except`` block). The
            # call raised exactly when the exception was caught by the frame that runs
            # this hook: torch runs always-call hooks in the ``except`` of its call.
            tb = None if exc is None else exc.__traceback__
            failed = tb is not None and tb.tb_frame is caller(1)
        else:
            if stack and stack[-1][1] is module:
                call, _, outer_exc = stack.pop()
            else:
                frame = tracer._unwind(module)
                if frame is None:
                    return
                call, _, outer_exc = frame
            failed = exc is not None and exc is not outer_exc
            if owners is not None:
                owners.mark(call.parent)
        if failed:
            assert exc is not None
            if isinstance(exc, control):
                return  # hookscope's own stop or error passing through
            failures.record(call, exc)
        dispatch_exit(call, module, args, kwargs, output, failed)
        now = perf_counter_ns()
        clock[0] = now - origin
        if clocked:
            tracer.overhead_ns += now - start

    return global_post_hook
