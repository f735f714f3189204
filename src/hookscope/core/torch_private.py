"""Every use of a private torch API, in one module.

hookscope relies on a few things torch does not promise: the frame layout of
``Module._call_impl`` (always-call hooks run in its ``except`` block, with ``kwargs`` a
local), the registries of global module hooks, autograd's node sequence numbers and
current node, the saved-tensor hooks currently active, the execution engine's
end-of-backward callback queue, functorch's wrapper check, the dispatcher's kernel
table and the guard that turns Python dispatch off. Each is wrapped here with a
fallback for a torch release that changed it: the fallback **warns once**
(``HookscopeTorchWarning``) and degrades that one feature, never silently.
``tests/core/test_torch_private.py`` checks every assumption against the installed
torch, so a release that breaks one fails a test by name.

Nothing outside this module touches these APIs; ``torch.utils._pytree`` (the
documented way to walk nested values) is imported here too.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from types import FrameType
from typing import Any

import torch
from torch.nn.modules import module as _torch_module
from torch.utils import _pytree as pytree

__all__ = [
    "HookscopeTorchWarning",
    "caller_frame",
    "current_autograd_node",
    "current_graph_task_id",
    "dispatch_has_composite_kernel",
    "dispatch_off",
    "frame_kwargs",
    "global_module_hooks_present",
    "graph_task_running",
    "is_functorch_wrapped",
    "next_sequence_nr",
    "node_sequence_nr",
    "pytree",
    "queue_end_of_backward",
    "remove_global_forward_hook_kwargs_entry",
    "saved_tensor_default_hooks",
]


class HookscopeTorchWarning(UserWarning):
    """This torch release changed a private API hookscope uses; one feature degrades."""


_warned: set[str] = set()


def _warn_once(feature: str, what: str) -> None:
    if feature in _warned:
        return
    _warned.add(feature)
    warnings.warn(
        f"hookscope: torch {torch.__version__} {what}; {feature} is degraded "
        "(please report this to hookscope)",
        HookscopeTorchWarning,
        stacklevel=3,
    )


# -- frames of Module._call_impl -----------------------------------------------------

caller_frame: Callable[[int], FrameType] = sys._getframe
"""``sys._getframe``: the leaf fast path compares the frame that runs a hook with the
frame an exception was caught in (see ``core/fast_path.py``)."""


def frame_kwargs(frame: FrameType) -> dict[str, Any]:
    """The ``kwargs`` local of ``Module._call_impl``'s frame: torch calls global
    always-call hooks without kwargs when ``forward`` raised."""
    found = frame.f_locals.get("kwargs")
    if isinstance(found, dict):
        return found
    _warn_once("keyword inputs of a failing leaf call", "has no 'kwargs' in _call_impl")
    return {}


# -- global module hooks ---------------------------------------------------------------


def global_module_hooks_present() -> bool:
    """Whether forward (pre-)hooks registered for every module exist."""
    return bool(
        getattr(_torch_module, "_global_forward_pre_hooks", None)
        or getattr(_torch_module, "_global_forward_hooks", None)
    )


def remove_global_forward_hook_kwargs_entry(handle_id: int) -> None:
    """Drop ``handle_id`` from ``_global_forward_hooks_with_kwargs``.

    NB: torch's handle of a global forward hook registered ``with_kwargs=True`` leaves
    its id there (the handle's extra dicts omit it, torch 2.14).
    """
    registry = getattr(_torch_module, "_global_forward_hooks_with_kwargs", None)
    if isinstance(registry, dict):
        registry.pop(handle_id, None)


# -- autograd: sequence numbers, current node, graph tasks -----------------------------

_get_sequence_nr: Callable[[], int] | None = getattr(torch._C._autograd, "_get_sequence_nr", None)
_current_node: Callable[[], Any] | None = getattr(torch._C, "_current_autograd_node", None)
_graph_task_id: Callable[[], int] | None = getattr(torch._C, "_current_graph_task_id", None)

#: ``AccumulateGrad`` nodes carry this sequence number: they belong to no call.
NO_SEQUENCE_NR = 2**63


def next_sequence_nr() -> int | None:
    """The sequence number the next autograd node made on this thread will get."""
    if _get_sequence_nr is None:
        _warn_once("attributing backward work to module calls", "has no _get_sequence_nr")
        return None
    return _get_sequence_nr()


def current_autograd_node() -> Any:
    """The autograd node running now on this thread (``None`` outside a backward)."""
    if _current_node is None:
        _warn_once("attributing backward work to module calls", "has no _current_autograd_node")
        return None
    return _current_node()


def node_sequence_nr(node: Any) -> int | None:
    """``node._sequence_nr()``, ``None`` for a node without one (``AccumulateGrad``)."""
    seq = getattr(node, "_sequence_nr", None)
    if seq is None:
        return None
    value: int = seq()
    return None if value >= NO_SEQUENCE_NR else value


def current_graph_task_id() -> int | None:
    """The id of the autograd graph task (backward pass) running on this thread."""
    if _graph_task_id is None:
        _warn_once("telling backward passes apart", "has no _current_graph_task_id")
        return None
    task = _graph_task_id()
    return None if task == -1 else task


def graph_task_running() -> bool:
    """Whether an autograd graph task (a backward pass) runs on this thread."""
    if _graph_task_id is None:
        _warn_once("telling backward ops from forward ops", "has no _current_graph_task_id")
        return False
    return _graph_task_id() != -1


def queue_end_of_backward(fn: Callable[[], None]) -> bool:
    """Run ``fn`` when the running backward pass ends (call from inside a backward).

    Returns False (and warns once) where the execution engine has no callback queue.
    """
    engine = getattr(torch.autograd.Variable, "_execution_engine", None)
    queue = getattr(engine, "queue_callback", None)
    if queue is None:
        _warn_once("end-of-backward events", "has no _execution_engine.queue_callback")
        return False
    queue(fn)
    return True


# -- saved tensors ----------------------------------------------------------------------

_top_hooks: Callable[[bool], Any] | None = getattr(
    torch._C._autograd, "_top_saved_tensors_default_hooks", None
)


def saved_tensor_default_hooks() -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """The saved-tensor hooks the user has active now (``save_on_cpu``), if any."""
    if _top_hooks is None:
        _warn_once(
            "wrapping the user's saved-tensor hooks", "has no _top_saved_tensors_default_hooks"
        )
        return None
    hooks = _top_hooks(False)
    return None if hooks is None else (hooks[0], hooks[1])


# -- tensors and the dispatcher ---------------------------------------------------------

_functorch_wrapped: Callable[[torch.Tensor], bool] | None = getattr(
    getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor", None
)


def is_functorch_wrapped(t: torch.Tensor) -> bool:
    """Whether ``t`` is a functorch wrapper (``vmap``/``grad`` level): no local data."""
    if _functorch_wrapped is None:
        _warn_once("statistics inside torch.func transforms", "has no is_functorch_wrapped_tensor")
        return False
    return _functorch_wrapped(t)


def dispatch_has_composite_kernel(func: Any) -> bool:
    """Whether op ``func`` has a ``CompositeImplicitAutograd`` decomposition."""
    key = torch._C.DispatchKey.CompositeImplicitAutograd
    if key in getattr(func, "py_kernels", {}):
        return True
    has_kernel = getattr(torch._C, "_dispatch_has_kernel_for_dispatch_key", None)
    if has_kernel is None:
        _warn_once("decomposing ops without a FLOP formula", "has no dispatcher kernel query")
        return False
    return bool(has_kernel(func._name, key))


# -- Python dispatch -------------------------------------------------------------------

_disable_dispatch: Callable[[], AbstractContextManager[None]] | None = getattr(
    torch._C, "_DisableTorchDispatch", None)


def dispatch_off() -> AbstractContextManager[None]:
    """A guard under which ops skip every ``__torch_dispatch__`` (modes and subclasses).

    For a probe's own check of a plain ``torch.Tensor`` while a dispatch mode is
    active: without it each of the check's ops comes back through the mode's Python
    ``__torch_dispatch__``, only to be recognised as hookscope's work and skipped.
    NB: never around work on tensor subclasses, whose ops need their dispatch.
    """
    if _disable_dispatch is None:
        _warn_once("the speed of finiteness checks", "has no _DisableTorchDispatch")
        return nullcontext()
    return _disable_dispatch()
