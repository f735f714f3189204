"""The leaf fast path: one global forward hook records every plain ``torch.nn`` leaf call.

In ``trace()``/``summary()`` nothing but the model runs inside the tracer, so no hook
can be added between two calls. When no probe needs a call's start (none overrides
``on_enter``, replaces values or receives backward events), the leaf modules of
``torch.nn`` itself (no submodules, no hooks of their own, no ``forward`` patched on
the instance, not a user subclass; none at all when global module hooks exist) get no
pre-hook: one global forward hook (``register_module_forward_hook``,
``always_call=True``) records each of their calls whole when it ends, looking the module
up in a table of the model's leaves.

This is exact: such a ``forward`` calls no other module, so no call starts between its
start and its end, and the index, parent and depth a call gets at the end are those it
would have got at the start. A failure is recognised without a pre-hook: the call
raised exactly when the exception was caught by the frame that runs the always-call
hook (torch calls them from the ``except`` of ``_call_impl``). That assumption about
torch's frames is checked once per process by :func:`failure_detection_works`; where it
does not hold, the fast path is off (with a warning) and every module gets both hooks.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import warnings
from collections.abc import Callable
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_hook

from hookscope.core import torch_private
from hookscope.core.handles import CallbackHandle
from hookscope.core.records import started_call

if TYPE_CHECKING:
    from hookscope.core.tracer import Tracer

Leaves = dict[int, list[Any]]
"""``id(module) -> [path, class name, calls so far]`` of the leaves on the fast path."""


def is_fast_leaf(module: nn.Module, torch_nn_class: bool) -> bool:
    """Whether a module of a ``torch.nn`` class can be recorded by the leaf hook."""
    return (
        torch_nn_class and not module._modules and not module._forward_hooks
        and not module._forward_pre_hooks
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


def install_leaf_hook(tracer: Tracer, leaves: Leaves) -> CallbackHandle:
    """Register the one global leaf hook of ``tracer``; the handle removes it fully."""
    hook = make_leaf_hook(tracer, leaves)
    handle = register_module_forward_hook(hook, with_kwargs=True, always_call=True)

    def remove() -> None:
        handle.remove()
        torch_private.remove_global_forward_hook_kwargs_entry(handle.id)

    return CallbackHandle(remove)


def make_leaf_hook(tracer: Tracer, leaves: Leaves) -> Callable[..., None]:
    """The hook of the leaf modules on the fast path (see the module docstring).

    One function for every leaf, not a closure each: it is registered once, globally,
    and stays in the cache. It does the pre-hook's call bookkeeping inline (one more
    Python call per module call is measurable at batch 1, ``benchmarks/README.md``)
    and hands the call to the tracer's one exit dispatch.
    """
    stack, dispatch_exit, failures = tracer._stack, tracer._dispatch_exit, tracer._failures
    exc_info, caller, clock = sys.exc_info, torch_private.caller_frame, tracer._clock
    assert tracer.trace is not None
    calls = tracer.trace.calls
    origin = tracer._t0
    control = tracer._control_types

    def leaf_hook(module: nn.Module, args: tuple[Any, ...], *rest: Any) -> None:
        leaf = leaves.get(id(module))
        if leaf is None:  # not one of this model's leaves
            return
        if len(rest) == 2:
            kwargs, output = rest
        else:  # forward raised: torch calls global always-call hooks without kwargs
            output = rest[0]
            kwargs = torch_private.frame_kwargs(caller(1))
        path, cls, count = leaf
        leaf[2] = count + 1
        index = len(calls)
        start = clock[0]
        if stack:
            parent = stack[-1][0]
            parent.children.append(index)
            call = started_call(index, path, cls, count, len(stack), parent.index, start)
        else:
            call = started_call(index, path, cls, count, 0, None, start)
        calls.append(call)
        exc = exc_info()[1]
        # With no pre-hook there is no record of an exception already being handled
        # when the call started (the model calling it in an ``except`` block). The
        # call raised exactly when the exception was caught by the frame that runs
        # this hook: torch runs always-call hooks in the ``except`` of its call.
        tb = None if exc is None else exc.__traceback__
        failed = tb is not None and tb.tb_frame is caller(1)
        if failed:
            assert exc is not None
            if isinstance(exc, control):
                return
            failures.record(call, exc)
        dispatch_exit(call, module, args, kwargs, output, failed)
        clock[0] = perf_counter_ns() - origin

    return leaf_hook
