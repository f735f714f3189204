"""``Module._call_impl``: torch's own, the exclusive fast path's stand-in for it, and
what the fast path checks before it takes over a module call.

Private: that every module call looks ``Module._call_impl`` up when it runs
(:func:`call_impl_replaceable`), the source of torch's ``_call_impl`` with its
hook-free path (:func:`call_impl_shortcut`), its frames in a traceback
(:func:`raised_in_call_of`), ``_wrapped_call_impl``'s frames on the stack
(:func:`inside_another_module_call`), ``torch._dynamo.utils``' copy of it, and the
registries of global module hooks (``torch.nn.modules.module._global_*_hooks``).
``torch.jit.trace``'s side of the call path is in ``jit.py``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from contextlib import suppress
from types import CodeType, TracebackType
from typing import Any

from torch import nn
from torch.nn.modules import module as _torch_module

from hookscope.core.torch_private._source import source_body
from hookscope.core.torch_private._warnings import _warn_once

# -- Module._call_impl -------------------------------------------------------------------

_TORCH_CALL_IMPL: Callable[..., Any] = nn.Module._call_impl
_call_impl_lock = threading.Lock()
_CALL_IMPL_CODE = getattr(_TORCH_CALL_IMPL, "__code__", None)
_CALL_IMPL_FILE = getattr(_CALL_IMPL_CODE, "co_filename", None)


def torch_call_impl() -> Callable[..., Any]:
    """torch's own ``Module._call_impl``, as it was when hookscope was imported."""
    return _TORCH_CALL_IMPL


def raised_in_call_of(tb: TracebackType | None) -> tuple[nn.Module, CodeType | None] | None:
    """The module of the innermost ``Module._call_impl`` frame of the traceback ``tb``,
    and the code of the frame it called that the exception left (``None``: it was
    raised there); ``None`` when no module call is on it.

    It reads torch's frames: ``_call_impl``'s code (as torch defines it; a stand-in
    calls it too) and its ``self``."""
    found: tuple[nn.Module, CodeType | None] | None = None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code is _CALL_IMPL_CODE:
            module = frame.f_locals.get("self")
            following = tb.tb_next  # past torch's own (``_call_impl``'s ``inner``)
            while following is not None and \
                    following.tb_frame.f_code.co_filename == _CALL_IMPL_FILE:
                following = following.tb_next
            if isinstance(module, nn.Module):
                found = (module, None if following is None else following.tb_frame.f_code)
        tb = tb.tb_next
    return found


def replace_call_impl(expected: Callable[..., Any], new: Callable[..., Any]) -> bool:
    """Set ``Module._call_impl`` to ``new`` if it is ``expected`` now (atomically);
    whether it was. ``nn.Module.__call__`` (``_wrapped_call_impl``) looks it up on the
    module for every call that is not compiled.

    ``torch._dynamo.utils`` keeps the ``_call_impl`` it finds when first imported
    (``unpatched_nn_module_call_impl``); an import during a run (transformers imports
    dynamo lazily) would keep the stand-in for good, so it is put back here too."""
    with _call_impl_lock:
        if nn.Module.__dict__.get("_call_impl") is not expected:
            return False
        nn.Module._call_impl = new  # type: ignore[method-assign]
        dynamo_utils: Any = sys.modules.get("torch._dynamo.utils")
        if getattr(dynamo_utils, "unpatched_nn_module_call_impl", None) is expected and (
            new is _TORCH_CALL_IMPL
        ):
            dynamo_utils.unpatched_nn_module_call_impl = new
        return True


def stand_in_call_impl(
    classes: Iterable[type], new: Callable[..., Any]
) -> Callable[[], None] | None:
    """Make ``new`` the ``_call_impl`` of the module ``classes``, set on each class, so
    only their modules' calls reach it (setting a class attribute invalidates the type
    caches of every subclass, and ``nn.Module`` has hundreds); a function that puts
    torch's back. Atomically, while ``Module._call_impl`` is torch's and no class has a
    ``_call_impl`` of its own or of a base below ``nn.Module`` (another stand-in, or a
    class's own: :func:`overrides_call_impl`): else ``None``, and nothing is set. So is
    a class whose metaclass does not store the function as given. With ``nn.Module``
    itself among them (a model holding a plain ``nn.Module``) it is set there alone:
    every other class finds it there."""
    classes = list(classes)
    targets = [nn.Module] if nn.Module in classes else classes
    done: list[type] = []

    def put_back() -> None:
        with _call_impl_lock:
            for cls in reversed(done):
                if cls is nn.Module:
                    if nn.Module.__dict__.get("_call_impl") is new:
                        nn.Module._call_impl = _TORCH_CALL_IMPL  # type: ignore[method-assign]
                        _unpatch_dynamo(new)
                elif "_call_impl" in cls.__dict__:  # ours, or what a metaclass made of it
                    with suppress(Exception):  # a metaclass may refuse: leave it then
                        delattr(cls, "_call_impl")

    with _call_impl_lock:
        if nn.Module.__dict__.get("_call_impl") is not _TORCH_CALL_IMPL or any(
            overrides_call_impl(cls) for cls in classes if cls is not nn.Module
        ):
            return None
        try:
            for cls in targets:
                done.append(cls)
                setattr(cls, "_call_impl", new)  # noqa: B010  (mypy: a type has no such attribute)
                if cls.__dict__.get("_call_impl") is not new:  # a metaclass changed it
                    raise _Refused
        except Exception:  # _Refused, or a metaclass that refuses outright
            pass
        else:
            return put_back
    put_back()
    return None


class _Refused(Exception):
    """A class that cannot take the stand-in."""


def _unpatch_dynamo(stand_in: Callable[..., Any]) -> None:
    """``torch._dynamo.utils`` keeps the ``_call_impl`` it finds when first imported
    (``unpatched_nn_module_call_impl``): an import while ``stand_in`` stood in for
    ``nn.Module``'s would keep it for good."""
    dynamo_utils: Any = sys.modules.get("torch._dynamo.utils")
    if getattr(dynamo_utils, "unpatched_nn_module_call_impl", None) is stand_in:
        dynamo_utils.unpatched_nn_module_call_impl = _TORCH_CALL_IMPL


def inside_another_module_call() -> bool:
    """Whether the module call now ending (its ``Module.__call__`` frame is on the stack)
    was made inside another module's call: a second ``_wrapped_call_impl`` frame further
    up. (An error leaving a tracer's root is then in that module's hands, not the
    caller's.) ``False`` where torch's ``__call__`` is not ``_wrapped_call_impl``."""
    code = _WRAPPED_CALL_CODE
    if code is None:
        return False
    seen, frame = 0, sys._getframe(1)
    while frame:
        if frame.f_code is code:
            seen += 1
            if seen > 1:
                return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


_WRAPPED_CALL_CODE = getattr(getattr(nn.Module, "_wrapped_call_impl", None), "__code__", None)


def overrides_call_impl(cls: type) -> bool:
    """Whether a module class has a ``_call_impl`` of its own (``torch.compiler.disable``
    on the class puts one there: its calls never reach the stand-in), or a
    ``_slow_forward`` of its own (which torch's ``_call_impl`` calls under
    ``torch.jit.trace``, recording scopes or not: :func:`jit_trace_scopes`)."""
    return any(
        "_call_impl" in k.__dict__ or "_slow_forward" in k.__dict__
        for k in cls.__mro__ if k is not nn.Module
    )


_replaceable: bool | None = None


def call_impl_replaceable() -> bool:
    """Whether a module call goes through ``Module._call_impl`` looked up at call
    time, with the module and its arguments. Checked once per process (not while
    another stand-in is there: then ``False``, asked again next time); without it the
    exclusive fast path is off (per-module hooks, with a warning)."""
    global _replaceable
    if _replaceable is not None:
        return _replaceable
    seen: list[Any] = []
    # the marker is no tensor: this runs inside the first run, where the ops probe's
    # dispatch mode would record making one as an op of the model
    probe, marker, thread = nn.Identity(), object(), threading.get_ident()

    def standin(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        if module is probe and threading.get_ident() == thread:  # not another thread's
            seen.append((args, kwargs))
        return _TORCH_CALL_IMPL(module, *args, **kwargs)

    if not replace_call_impl(_TORCH_CALL_IMPL, standin):
        return False  # someone's stand-in is there now: not an answer about torch
    try:
        out = probe(input=marker)
    finally:
        replace_call_impl(standin, _TORCH_CALL_IMPL)
    _replaceable = out is marker and len(seen) == 1 and seen[0][1].get("input") is marker
    if not _replaceable:
        _warn_once("the speed of trace() and summary()",
                   "does not call modules through Module._call_impl")
    return _replaceable


HookDicts = tuple[dict[int, Any], dict[int, Any], dict[int, Any], dict[int, Any]]
_GLOBAL_HOOK_NAMES = ("_global_forward_pre_hooks", "_global_forward_hooks",
                      "_global_backward_pre_hooks", "_global_backward_hooks")
# the start of torch's ``_call_impl``, whitespace removed: with no hook anywhere it
# calls ``forward`` (``_slow_forward`` under ``torch.jit.trace``) and does nothing else
_CALL_IMPL_SHORTCUT = (
    "forward_call=(self._slow_forwardiftorch._C._get_tracing_state()elseself.forward)"
    "ifnot(self._backward_hooksorself._backward_pre_hooksorself._forward_hooks"
    "orself._forward_pre_hooksor_global_backward_pre_hooksor_global_backward_hooks"
    "or_global_forward_hooksor_global_forward_pre_hooks):"
    "returnforward_call(*args,**kwargs)"
)
_shortcut: list[HookDicts | None] = []


def call_impl_shortcut() -> HookDicts | None:
    """The process-wide forward pre-hook, forward hook, backward pre-hook and backward
    hook dicts, when torch's ``_call_impl`` is known to call ``module.forward(*args,
    **kwargs)`` and nothing else for a module without hooks while all four are empty
    and ``torch.jit.trace`` records no module scopes (:func:`jit_trace_scopes`). The fast
    path then calls ``forward`` itself: one interpreter frame less per module call. ``None``
    (with a warning) when this torch's ``_call_impl`` reads differently. Checked once
    per process, from its source."""
    if not _shortcut:
        body = source_body(_TORCH_CALL_IMPL)
        dicts = tuple(getattr(_torch_module, name, None) for name in _GLOBAL_HOOK_NAMES)
        if body.startswith(_CALL_IMPL_SHORTCUT) and all(isinstance(d, dict) for d in dicts):
            _shortcut.append(dicts)  # type: ignore[arg-type]
        else:
            _shortcut.append(None)
            _warn_once("the speed of trace() and summary()",
                       "changed the hook-free path of Module._call_impl")
    return _shortcut[0]


# -- global module hooks ---------------------------------------------------------------


def global_module_hooks_present() -> bool:
    """Whether forward (pre-)hooks registered for every module exist."""
    return bool(
        getattr(_torch_module, "_global_forward_pre_hooks", None)
        or getattr(_torch_module, "_global_forward_hooks", None)
    )
