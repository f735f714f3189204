"""Tensors and the dispatcher: functorch's wrappers and batches, version counters, the
dispatcher's kernel table, and Python dispatch (``__torch_dispatch__``).

Private: ``torch._C._functorch`` (wrapper and batch checks, the interpreter stack),
``torch._C._autograd._unsafe_set_version_counter``,
``torch._C._dispatch_has_kernel_for_dispatch_key``, ``torch._C._DisableTorchDispatch``
and how ``TorchDispatchMode`` wraps a subclass's ``__torch_dispatch__``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from hookscope.core.torch_private._warnings import _warn_once

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


_functorch_stack: Callable[[], Any] | None = getattr(
    getattr(torch._C, "_functorch", None), "get_interpreter_stack", None
)
_VMAP = getattr(getattr(getattr(torch._C, "_functorch", None), "TransformType", None), "Vmap", None)


def vmap_running() -> bool:
    """Whether a ``torch.func.vmap`` transform runs on this thread (``jacrev`` and
    per-sample gradients use one): each of its tensors holds a batch of values, so a
    norm of one is a batch too, and reading it as a number raises."""
    if _functorch_stack is None or _VMAP is None:
        _warn_once("gradient norms inside torch.func.vmap", "has no get_interpreter_stack")
        return False
    stack = _functorch_stack()
    return bool(stack) and any(level.key() == _VMAP for level in stack)


_set_versions: Callable[..., None] | None = getattr(
    getattr(torch._C, "_autograd", None), "_unsafe_set_version_counter", None
)


def set_versions(tensors: list[torch.Tensor], versions: list[int]) -> bool:
    """Set the version counters of ``tensors`` (a buffer written back to the values it
    had, with the version it had: a graph that saved it before still runs its
    backward). False (and a warning once) where torch has no such function."""
    if _set_versions is None:
        _warn_once("putting buffers back under a saved graph",
                   "has no _autograd._unsafe_set_version_counter")
        return False
    _set_versions(tuple(tensors), tuple(versions))
    return True


def batched(t: torch.Tensor) -> bool:
    """Whether ``t`` is a batch of tensors of a vmap, functorch's or the older one that
    ``torch.autograd.functional.jacobian(vectorize=True)`` and ``is_grads_batched`` use."""
    return any(check is not None and check(t) for check in _BATCHED)


_BATCHED = tuple(
    getattr(getattr(torch._C, "_functorch", None), name, None)
    for name in ("is_batchedtensor", "is_legacy_batchedtensor")
)


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
    Never around work on tensor subclasses, whose ops need their dispatch.
    """
    if _disable_dispatch is None:
        _warn_once("the speed of finiteness checks", "has no _DisableTorchDispatch")
        return nullcontext()
    return _disable_dispatch()


def unwrapped_dispatch_mode(cls: type[Any]) -> type[Any]:
    """Class decorator for a ``TorchDispatchMode`` subclass: keep its
    ``__torch_dispatch__`` as written (two Python frames fewer per op).

    torch wraps a mode's ``__torch_dispatch__`` in ``torch._disable_dynamo`` when the
    class's ``_should_skip_dynamo()`` is true (the default), so that a compiled region
    never traces it. hookscope's modes run only while a tracer is active, and then
    ``torch.compile`` runs eagerly (``core/engine/process.py``): nothing compiles to keep out.
    """
    raw = cls.__dict__.get("__torch_dispatch__")
    wrapped_by_torch = getattr(raw, "__wrapped__", None)
    if wrapped_by_torch is None:
        _warn_once("the speed of the op log", "no longer wraps __torch_dispatch__")
        return cls
    cls.__torch_dispatch__ = wrapped_by_torch
    cls._should_skip_dynamo = classmethod(lambda c: False)
    return cls
