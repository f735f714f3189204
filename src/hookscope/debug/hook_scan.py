"""Reading torch's hook registries into :class:`~hookscope.debug.hook_records.HookRecord`\\ s.

:func:`scan_hooks` is the torch-facing half of :func:`hookscope.hooks`: it reads, and
never changes, the dicts torch keeps hooks in (``module.__dict__``'s
``_forward_hooks`` & co., ``tensor._backward_hooks``,
``tensor._post_accumulate_grad_hooks``, and the process-wide registries, read through
``core/torch_private``)
and describes each hook function by name and source line.

A hook is hookscope's own when hookscope holds the handle it was registered with (an
active :class:`~hookscope.Tracer`, patch, lint run or monitor:
``core/engine/handles.py``'s ``HOOKSCOPE_HOOK_IDS``), not by where its function is defined:
``m.register_forward_hook(hookscope.patches.zero())`` is the user's hook.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn

from hookscope.core import torch_private
from hookscope.core.engine.handles import HOOKSCOPE_HOOK_IDS
from hookscope.debug.hook_records import GLOBAL, HookKind, HookRecord, Scope
from hookscope.errors import SpecError

#: Per-module hook dicts, in the order a module's life calls them.
_MODULE_DICTS: tuple[tuple[str, HookKind], ...] = (
    ("_forward_pre_hooks", HookKind.FORWARD_PRE),
    ("_forward_hooks", HookKind.FORWARD),
    ("_backward_pre_hooks", HookKind.BACKWARD_PRE),
    ("_backward_hooks", HookKind.BACKWARD),
    ("_state_dict_pre_hooks", HookKind.STATE_DICT_PRE),
    ("_state_dict_hooks", HookKind.STATE_DICT_POST),
    ("_load_state_dict_pre_hooks", HookKind.LOAD_STATE_DICT_PRE),
    ("_load_state_dict_post_hooks", HookKind.LOAD_STATE_DICT_POST),
)

#: Process-wide hook dicts of ``torch.nn.modules.module`` (``_global_<name>``).
_GLOBAL_DICTS: tuple[tuple[str, HookKind], ...] = (
    ("module_registration_hooks", HookKind.MODULE_REGISTRATION),
    ("parameter_registration_hooks", HookKind.PARAMETER_REGISTRATION),
    ("buffer_registration_hooks", HookKind.BUFFER_REGISTRATION),
    ("forward_pre_hooks", HookKind.FORWARD_PRE),
    ("forward_hooks", HookKind.FORWARD),
    ("backward_pre_hooks", HookKind.BACKWARD_PRE),
    ("backward_hooks", HookKind.BACKWARD),
)

_TENSOR_DICTS: tuple[tuple[str, HookKind], ...] = (
    ("_backward_hooks", HookKind.GRAD),
    ("_post_accumulate_grad_hooks", HookKind.POST_ACCUMULATE_GRAD),
)


def scan_hooks(model: nn.Module) -> list[HookRecord]:
    """Every hook that runs for ``model``: global ones, then per module (first path
    order) the module's own followed by those of its parameters and buffers.

    Raises:
        SpecError: ``model`` is not a ``torch.nn.Module``.
    """
    if not isinstance(model, nn.Module):
        raise SpecError(
            f"hookscope.hooks expects a torch.nn.Module, got {type(model).__name__}; "
            "pass the model (a tensor's hooks are listed with the module that holds it)"
        )
    records = list(_global_hooks())
    pairs = _all_paths(model)
    module_paths: dict[int, list[str]] = {}
    tensor_paths: dict[int, list[str]] = {}
    for path, module in pairs:
        module_paths.setdefault(id(module), []).append(path)
        for name, tensor, _ in _own_tensors(module):
            tensor_paths.setdefault(id(tensor), []).append(f"{path}.{name}" if path else name)
    seen: set[int] = set()
    for path, module in pairs:
        if id(module) in seen:
            continue
        seen.add(id(module))
        aliases = tuple(module_paths[id(module)][1:])
        records.extend(_module_hooks(module, path, aliases))
        for _, tensor, scope in _own_tensors(module):
            if id(tensor) not in seen:
                seen.add(id(tensor))
                first, *rest = tensor_paths[id(tensor)]
                records.extend(_tensor_hooks(tensor, first, scope, tuple(rest)))
    return records


def _all_paths(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(path, module) for every path of every module, preorder; a shared module once
    per path it has, a module that contains itself not again below itself."""
    out: list[tuple[str, nn.Module]] = []
    todo: list[tuple[str, nn.Module, tuple[int, ...]]] = [("", model, ())]
    while todo:
        path, module, ancestors = todo.pop()
        out.append((path, module))
        inner = (*ancestors, id(module))
        children = [
            (f"{path}.{name}" if path else name, child)
            for name, child in vars(module).get("_modules", {}).items()
            if child is not None and id(child) not in inner
        ]
        todo.extend((p, child, inner) for p, child in reversed(children))
    return out


def _own_tensors(module: nn.Module) -> Iterable[tuple[str, torch.Tensor, Scope]]:
    state = vars(module)
    for attr, scope in (("_parameters", Scope.PARAMETER), ("_buffers", Scope.BUFFER)):
        for name, tensor in state.get(attr, {}).items():
            if tensor is not None:
                yield name, tensor, scope


def _module_hooks(module: nn.Module, path: str, aliases: tuple[str, ...]) -> list[HookRecord]:
    state = vars(module)
    legacy = state.get("_is_full_backward_hook") is False
    flag_dicts = {
        HookKind.FORWARD_PRE: {"with_kwargs": state.get("_forward_pre_hooks_with_kwargs", {})},
        HookKind.FORWARD: {
            "with_kwargs": state.get("_forward_hooks_with_kwargs", {}),
            "always_call": state.get("_forward_hooks_always_called", {}),
        },
    }
    records = []
    for attr, kind in _MODULE_DICTS:
        for handle_id, fn in (state.get(attr) or {}).items():
            flags = _flags(handle_id, flag_dicts.get(kind, {}))
            if kind is HookKind.BACKWARD and legacy:
                flags = (*flags, "legacy")
            records.append(_record(
                fn, kind=kind, scope=Scope.MODULE, owner=path,
                owner_class=type(module).__name__, handle_id=handle_id, flags=flags,
                aliases=aliases,
            ))
    return records


def _tensor_hooks(
    tensor: torch.Tensor, path: str, scope: Scope, aliases: tuple[str, ...]
) -> list[HookRecord]:
    records = []
    for attr, kind in _TENSOR_DICTS:
        for handle_id, fn in (getattr(tensor, attr, None) or {}).items():
            records.append(_record(
                fn, kind=kind, scope=scope, owner=path, owner_class=type(tensor).__name__,
                handle_id=handle_id, aliases=aliases,
            ))
    return records


def _global_hooks() -> list[HookRecord]:
    forward_flags = {
        "with_kwargs": torch_private.global_hooks("forward_hooks_with_kwargs"),
        "always_call": torch_private.global_hooks("forward_hooks_always_called"),
    }
    legacy = torch_private.global_backward_hooks_are_legacy()
    records = []
    for name, kind in _GLOBAL_DICTS:
        for handle_id, fn in torch_private.global_hooks(name).items():
            flags = _flags(handle_id, forward_flags if kind is HookKind.FORWARD else {})
            if kind is HookKind.BACKWARD and legacy:
                flags = (*flags, "legacy")
            records.append(_record(
                fn, kind=kind, scope=Scope.GLOBAL, owner=GLOBAL, owner_class=None,
                handle_id=handle_id, flags=flags,
            ))
    return records


def _flags(handle_id: int, flag_dicts: Mapping[str, Mapping[int, Any]]) -> tuple[str, ...]:
    return tuple(sorted(flag for flag, ids in flag_dicts.items() if ids.get(handle_id)))


def _record(fn: Callable[..., Any], *, handle_id: int, **fields: Any) -> HookRecord:
    name, module, file, line = describe_function(fn)
    return HookRecord(
        name=name, module=module, file=file, line=line, handle_id=handle_id,
        registered_by="hookscope" if handle_id in HOOKSCOPE_HOOK_IDS else "user", **fields,
    )


def describe_function(fn: Any) -> tuple[str, str | None, str | None, int | None]:
    """(qualified name, module, source file, first line) of a hook.

    Follows ``functools.partial``, ``__wrapped__`` (``functools.wraps``, torch's
    ``_WrappedHook``) and bound methods to the function that was written; a module
    used as a hook is described by its class's ``forward``, any other callable object
    by its class's ``__call__``.
    """
    partial = False
    for _ in range(32):  # a bound: an object's __getattr__ may invent __wrapped__
        if isinstance(fn, functools.partial):
            partial, fn = True, fn.func
        elif inspect.ismethod(fn):
            fn = fn.__func__
        elif callable(getattr(fn, "__wrapped__", None)):
            fn = fn.__wrapped__
        else:
            break
    code_owner = fn
    if isinstance(fn, nn.Module) and type(fn).__call__ is nn.Module.__call__:
        code_owner = type(fn).forward  # what torch's Module.__call__ runs
    elif getattr(fn, "__code__", None) is None and not inspect.isbuiltin(fn):
        # the class's __call__ function itself (B004 is about testing callability)
        call = getattr(type(fn), "__call__", None)  # noqa: B004
        if getattr(call, "__code__", None) is not None:
            code_owner = call
    name = getattr(code_owner, "__qualname__", None) or type(fn).__qualname__
    module = getattr(code_owner, "__module__", None)
    file, line = _source(code_owner)
    return (f"functools.partial({name})" if partial else name), module, file, line


def _source(fn: Any) -> tuple[str | None, int | None]:
    code = getattr(fn, "__code__", None)
    if code is None:
        return None, None
    try:
        file = inspect.getsourcefile(fn)
    except TypeError:
        file = None
    return file or code.co_filename, code.co_firstlineno
