"""Test helpers shared by every test module: hook counting, model-state snapshots and exact
output comparison.

They are the oracles of the safety tests (no hook may be left behind): whatever hookscope
does to a model while it observes it, afterwards the model must have exactly the hooks, flags,
parameter values, ``.grad`` tensors, ``requires_grad`` flags and buffers it had before,
and its outputs must be bit-identical to an unobserved run.

Nothing here imports hookscope: the helpers look at the model through torch's own
attributes only.
"""

from __future__ import annotations

import dataclasses
import textwrap
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.modules.module as torch_module
from torch import nn

from hookscope.core import torch_private

#: Every per-module hook dict ``nn.Module.__init__`` creates (torch 2.x).
MODULE_HOOK_DICTS: tuple[str, ...] = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks_with_kwargs",
    "_state_dict_hooks",
    "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
)

#: Per-tensor hook dicts of parameters and buffers.
TENSOR_HOOK_ATTRS: tuple[str, ...] = ("_backward_hooks", "_post_accumulate_grad_hooks")

#: Module-level hook registries of ``torch.nn.modules.module`` (global hooks).
GLOBAL_HOOK_DICTS: tuple[str, ...] = tuple(
    name
    for name in (
        "_global_backward_hooks",
        "_global_backward_pre_hooks",
        "_global_buffer_registration_hooks",
        "_global_forward_hooks",
        "_global_forward_hooks_always_called",
        "_global_forward_hooks_with_kwargs",
        "_global_forward_pre_hooks",
        "_global_module_registration_hooks",
        "_global_parameter_registration_hooks",
    )
    if hasattr(torch_module, name)
)


# -- hooks ---------------------------------------------------------------------------


def _named_tensors(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    out: list[tuple[str, torch.Tensor]] = []
    for mod_path, module in _every_path(model):
        prefix = f"{mod_path}." if mod_path else ""
        for table in (module._parameters, module._buffers):
            for name, t in table.items():
                if t is not None:
                    out.append((prefix + name, t))
    return out


def count_hooks(model: nn.Module) -> dict[str, int]:
    """Number of entries in every hook dict of every module, parameter and buffer.

    Keys are the attribute names (``_forward_hooks``, ...) for module hooks and
    ``tensor._backward_hooks``/``tensor._post_accumulate_grad_hooks`` for tensor hooks,
    plus ``global.<name>`` for torch's global module hooks. Shared modules and tied
    tensors are counted once.
    """
    counts = dict.fromkeys(MODULE_HOOK_DICTS, 0)
    counts.update(dict.fromkeys((f"tensor.{a}" for a in TENSOR_HOOK_ATTRS), 0))
    for module in model.modules():
        for name in MODULE_HOOK_DICTS:
            counts[name] += len(getattr(module, name, None) or ())
    seen: set[int] = set()
    for _, t in _named_tensors(model):
        if id(t) in seen:
            continue
        seen.add(id(t))
        for attr in TENSOR_HOOK_ATTRS:
            counts[f"tensor.{attr}"] += len(getattr(t, attr, None) or ())
    for name in GLOBAL_HOOK_DICTS:
        counts[f"global.{name}"] = len(getattr(torch_module, name))
    # the exclusive fast path stands in for Module._call_impl (of the model's classes, or
    # of nn.Module itself) while a run lasts
    counts["global.Module._call_impl replaced"] = int(
        nn.Module.__dict__["_call_impl"] is not torch_private.torch_call_impl())
    classes = {k for m in model.modules() for k in type(m).__mro__}
    counts["classes with a stand-in for _call_impl"] = sum(
        is_stand_in(k.__dict__.get("_call_impl")) for k in classes)
    return counts


def is_stand_in(fn: Any) -> bool:
    """Whether ``fn`` is hookscope's stand-in for ``Module._call_impl``."""
    return getattr(fn, "__qualname__", "").endswith("traced_call_impl")


def call_rows(trace: Any) -> list[tuple[Any, ...]]:
    """What a trace records of each call, the engine's fields and shapes: to compare
    two paths of the engine call for call."""
    return [
        (c.index, c.path, c.module_class, c.call_index, c.depth, c.parent, c.children,
         c.inputs, c.outputs, c.error)
        for c in trace.calls
    ]


def total_hooks(model: nn.Module) -> int:
    return sum(count_hooks(model).values())


def _fn_key(fn: Any) -> Any:
    """Identity of a hook function; a bound method is its function plus its instance."""
    if isinstance(fn, types.MethodType):
        return ("method", id(fn.__func__), id(fn.__self__))
    return ("fn", id(fn))


def _hook_items(table: Mapping[Any, Any] | None) -> tuple[tuple[Any, Any], ...]:
    if not table:
        return ()
    return tuple((k, _fn_key(v) if callable(v) else v) for k, v in table.items())


# -- state snapshots -----------------------------------------------------------------


@dataclasses.dataclass
class StateSnapshot:
    """Everything about a model that observing it must not change.

    ``hooks`` and ``objects`` are about identity (the same hook functions under the same
    handle ids, the same Parameter/buffer/module objects); the other fields are values.
    """

    hooks: dict[str, tuple[tuple[Any, Any], ...]]
    global_hooks: dict[str, tuple[tuple[Any, Any], ...]]
    objects: dict[str, int]
    module_attrs: dict[str, tuple[str, ...]]
    training: dict[str, bool]
    params: dict[str, torch.Tensor | str]
    grads: dict[str, torch.Tensor | None]
    requires_grad: dict[str, bool]
    buffers: dict[str, torch.Tensor | str]
    grad_enabled: bool


def _clone_value(t: torch.Tensor) -> torch.Tensor | str:
    if isinstance(t, nn.parameter.UninitializedTensorMixin):
        return "<uninitialized>"
    return t.detach().clone()


def _every_path(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Every path of every module; each module once for a model that contains itself
    (where torch's walk with every path never ends)."""
    try:
        return list(model.named_modules(remove_duplicate=False))
    except RecursionError:
        return list(model.named_modules())


def snapshot_state(model: nn.Module) -> StateSnapshot:
    """Capture hooks (ids and functions), flags, parameter/grad/buffer values of ``model``."""
    hooks: dict[str, tuple[tuple[Any, Any], ...]] = {}
    objects: dict[str, int] = {}
    module_attrs: dict[str, tuple[str, ...]] = {}
    training: dict[str, bool] = {}
    for path, module in _every_path(model):
        key = path or "<root>"
        for name in MODULE_HOOK_DICTS:
            hooks[f"{key}:{name}"] = _hook_items(getattr(module, name, None))
        hooks[f"{key}:_is_full_backward_hook"] = (
            (None, getattr(module, "_is_full_backward_hook", None)),
        )
        objects[f"module {key}"] = id(module)
        module_attrs[key] = tuple(sorted(vars(module)))
        training[key] = module.training
    params: dict[str, torch.Tensor | str] = {}
    grads: dict[str, torch.Tensor | None] = {}
    requires_grad: dict[str, bool] = {}
    buffers: dict[str, torch.Tensor | str] = {}
    for mod_path, module in _every_path(model):
        prefix = f"{mod_path}." if mod_path else ""
        for name, p in module._parameters.items():
            path = prefix + name
            objects[f"param {path}"] = id(p)
            if p is None:
                continue
            params[path] = _clone_value(p)
            grads[path] = None if p.grad is None else p.grad.detach().clone()
            requires_grad[path] = p.requires_grad
            for attr in TENSOR_HOOK_ATTRS:
                hooks[f"param {path}:{attr}"] = _hook_items(getattr(p, attr, None))
        for name, b in module._buffers.items():
            path = prefix + name
            objects[f"buffer {path}"] = id(b)
            if b is None:
                continue
            buffers[path] = _clone_value(b)
            for attr in TENSOR_HOOK_ATTRS:
                hooks[f"buffer {path}:{attr}"] = _hook_items(getattr(b, attr, None))
    global_hooks = {
        name: _hook_items(getattr(torch_module, name)) for name in GLOBAL_HOOK_DICTS
    }
    global_hooks["Module._call_impl"] = (("fn", _fn_key(nn.Module.__dict__["_call_impl"])),)
    return StateSnapshot(
        hooks=hooks,
        global_hooks=global_hooks,
        objects=objects,
        module_attrs=module_attrs,
        training=training,
        params=params,
        grads=grads,
        requires_grad=requires_grad,
        buffers=buffers,
        grad_enabled=torch.is_grad_enabled(),
    )


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of ``t`` (so NaN == NaN and -0.0 != 0.0), as a flat uint8 tensor."""
    t = t.detach()
    if t.is_sparse:
        t = t.to_dense()
    if t.dtype == torch.bool:
        return t.reshape(-1).to(torch.uint8)
    return t.reshape(-1).contiguous().view(torch.uint8)


def tensors_identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same type, dtype, shape, device, layout and the very same bits."""
    if type(a) is not type(b) or a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.device != b.device or a.layout != b.layout:
        return False
    if a.device.type == "meta":
        return True
    return bool(torch.equal(_bits(a).cpu(), _bits(b).cpu()))


def _diff_values(
    label: str,
    a: Mapping[str, torch.Tensor | str | None],
    b: Mapping[str, torch.Tensor | str | None],
) -> list[str]:
    problems: list[str] = []
    if list(a) != list(b):
        problems.append(f"{label}: names differ: {sorted(set(a) ^ set(b))}")
        return problems
    for key, va in a.items():
        vb = b[key]
        if isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor):
            if not tensors_identical(va, vb):
                problems.append(f"{label} {key!r}: values changed")
        elif (va is None) != (vb is None) or isinstance(va, str) != isinstance(vb, str):
            problems.append(f"{label} {key!r}: {_short(va)} -> {_short(vb)}")
        elif isinstance(va, str) and va != vb:
            problems.append(f"{label} {key!r}: {va} -> {vb}")
    return problems


def _short(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        return f"tensor{list(v.shape)}"
    return repr(v)


def _diff_plain(label: str, a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    keys = list(dict.fromkeys([*a, *b]))
    return [
        f"{label} {k!r}: {a.get(k, '<missing>')!r} -> {b.get(k, '<missing>')!r}"
        for k in keys
        if a.get(k, "<missing>") != b.get(k, "<missing>")
    ]


def state_differences(
    before: StateSnapshot, after: StateSnapshot, *, expected: StateSnapshot | None = None
) -> list[str]:
    """Human-readable differences; identities against ``before``, values against
    ``expected`` (default ``before``)."""
    values = expected if expected is not None else before
    problems = _diff_plain("hooks", before.hooks, after.hooks)
    problems += _diff_plain("global hooks", before.global_hooks, after.global_hooks)
    problems += _diff_plain("object", before.objects, after.objects)
    problems += _diff_plain("module attributes", before.module_attrs, after.module_attrs)
    problems += _diff_plain("training", values.training, after.training)
    problems += _diff_plain("requires_grad", values.requires_grad, after.requires_grad)
    problems += _diff_values("parameter", values.params, after.params)
    problems += _diff_values("grad", values.grads, after.grads)
    problems += _diff_values("buffer", values.buffers, after.buffers)
    if before.grad_enabled != after.grad_enabled:
        problems.append(f"grad mode: {before.grad_enabled} -> {after.grad_enabled}")
    return problems


def assert_state_unchanged(
    before: StateSnapshot, model: nn.Module, *, expected: StateSnapshot | None = None
) -> None:
    """Assert ``model`` still has the hooks, objects, flags and values of ``before``.

    Args:
        before: snapshot of ``model`` taken before hookscope touched it.
        model: the model now.
        expected: where the model's own forward legitimately changes values (BatchNorm
            running stats, lazy materialisation, a user's backward filling ``.grad``),
            the snapshot of an identical twin after the same code ran without
            hookscope; values and flags are compared against it instead of ``before``.
    """
    problems = state_differences(before, snapshot_state(model), expected=expected)
    assert not problems, "model state changed:\n  " + "\n  ".join(problems)


# -- outputs -------------------------------------------------------------------------


def outputs_differences(
    a: Any, b: Any, path: str = "out", *, requires_grad: bool = True
) -> list[str]:
    """Exact nested comparison of two model outputs; tensors compared bit for bit.

    ``requires_grad=False`` ignores whether autograd tracks the tensors (for runs made
    under different grad modes)."""
    if type(a) is not type(b):
        return [f"{path}: type {type(a).__name__} != {type(b).__name__}"]
    if isinstance(a, torch.Tensor):
        if not tensors_identical(a, b):
            return [f"{path}: tensors differ ({a.dtype}{list(a.shape)} vs {b.dtype}"
                    f"{list(b.shape)})"]
        if requires_grad and a.requires_grad != b.requires_grad:
            return [f"{path}: requires_grad {a.requires_grad} != {b.requires_grad}"]
        return []
    if isinstance(a, Mapping):
        if list(a.keys()) != list(b.keys()):
            return [f"{path}: keys {list(a.keys())} != {list(b.keys())}"]
        out: list[str] = []
        for k in a:
            out += outputs_differences(a[k], b[k], f"{path}[{k!r}]", requires_grad=requires_grad)
        return out
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        out = []
        for f in dataclasses.fields(a):
            out += outputs_differences(
                getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}",
                requires_grad=requires_grad,
            )
        return out
    if isinstance(a, Sequence) and not isinstance(a, (str, bytes)):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} != {len(b)}"]
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out += outputs_differences(x, y, f"{path}[{i}]", requires_grad=requires_grad)
        return out
    opaque = hasattr(a, "__dict__") and not isinstance(a, (type, types.FunctionType))
    if opaque and a is not b and path.count(".__dict__") < 4:
        # an opaque object (a transformers Cache, say): compare its attributes
        return outputs_differences(vars(a), vars(b), f"{path}.__dict__",
                                   requires_grad=requires_grad)
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def assert_outputs_identical(a: Any, b: Any, *, requires_grad: bool = True) -> None:
    problems = outputs_differences(a, b, requires_grad=requires_grad)
    assert not problems, "outputs differ:\n  " + "\n  ".join(problems)


# -- user hooks ----------------------------------------------------------------------


@dataclasses.dataclass
class UserHooks:
    """A user's own hooks on every module and parameter, counting how often they run."""

    pre: dict[str, int] = dataclasses.field(default_factory=dict)
    post: dict[str, int] = dataclasses.field(default_factory=dict)
    grad: dict[str, int] = dataclasses.field(default_factory=dict)
    handles: list[Any] = dataclasses.field(default_factory=list)

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def reset(self) -> None:
        for table in (self.pre, self.post, self.grad):
            for k in table:
                table[k] = 0


def install_user_hooks(model: nn.Module, *, tensor_hooks: bool = True) -> UserHooks:
    """Register a counting forward pre-hook and forward hook on every module, and a
    counting tensor hook on every parameter that requires grad."""
    user = UserHooks()
    for path, module in model.named_modules():
        user.pre[path] = 0
        user.post[path] = 0
        user.handles.append(module.register_forward_pre_hook(_counter(user.pre, path)))
        user.handles.append(module.register_forward_hook(_counter(user.post, path)))
    if tensor_hooks:
        for path, p in model.named_parameters():
            if p.requires_grad:
                user.grad[path] = 0
                user.handles.append(p.register_hook(_counter(user.grad, path)))
    return user


def _counter(table: dict[str, int], key: str) -> Callable[..., None]:
    def hook(*_: Any) -> None:
        table[key] += 1

    return hook


def call_counts(model: nn.Module, run: Callable[[], Any]) -> dict[str, int]:
    """How many times each module (by canonical path) runs ``forward`` during ``run()``,
    counted by monkeypatch-free means: a temporary pre-hook per module."""
    counts = {path: 0 for path, _ in model.named_modules()}
    handles = [
        m.register_forward_pre_hook(_counter(counts, path)) for path, m in model.named_modules()
    ]
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    return counts


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``hookscope.cli.app(argv)`` in-process -> (exit status, stdout, stderr)."""
    from hookscope.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def model_spec(folder: Path, source: str, name: str) -> str:
    """``FILE:NAME`` of a model file written in ``folder`` from ``source`` (dedented)."""
    path = folder / f"{name.lower()}_model.py"
    path.write_text(textwrap.dedent(source))
    return f"{path}:{name}"


def assert_one_error_line(code: int, err: str, *fragments: str) -> str:
    """Exit status 2 and exactly one ``error: ...`` line containing every fragment."""
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def tensors_in(value: Any) -> list[torch.Tensor]:
    """Every tensor in a nested output, walked independently of hookscope."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    if hasattr(value, "__dataclass_fields__"):
        return [t for f in value.__dataclass_fields__ for t in tensors_in(getattr(value, f))]
    return []


class FailsInBackward(torch.autograd.Function):
    """The identity, whose backward raises ``RuntimeError("boom in backward")``: a model
    that fails in its backward pass only."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 1

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("boom in backward")
