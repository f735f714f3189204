"""Find every tensor in nested inputs and outputs, with its path.

Nested containers are walked with ``torch.utils._pytree`` (tuples, lists, dicts,
namedtuples and anything registered with it, such as transformers' ``ModelOutput``);
dataclass instances that pytree does not know are walked field by field. Paths are
written the way a user would index the value: ``out[0]``, ``out["logits"]``,
``out.hidden``.

This runs in every hook call, so a bare tensor (the common case) takes a fast path.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from hookscope.core.records import TensorMeta

_DTYPE_NAMES: dict[torch.dtype, str] = {}


def dtype_str(dtype: torch.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


_DEVICE_NAMES: dict[torch.device, str] = {}


def device_str(device: torch.device) -> str:
    name = _DEVICE_NAMES.get(device)
    if name is None:
        name = _DEVICE_NAMES[device] = str(device)
    return name


def tensor_meta(path: str, t: torch.Tensor) -> TensorMeta:
    """Shape, dtype, device and layout of ``t`` (no data is read).

    A nested tensor's ragged dimensions are recorded as ``-1``.
    """
    shape = _nested_shape(t) if t.is_nested else t.shape
    return meta_from_fields(path, shape, t.dtype, t.device, t.requires_grad, t.layout)


def meta_from_fields(
    path: str,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device,
    requires_grad: bool,
    layout: torch.layout,
) -> TensorMeta:
    """The :class:`TensorMeta` of a tensor's fields, as the tensor returns them."""
    name = "strided" if layout is torch.strided else str(layout).removeprefix("torch.")
    return TensorMeta(
        path, tuple(shape), dtype_str(dtype), device_str(device), requires_grad, name
    )


def _nested_shape(t: torch.Tensor) -> tuple[int, ...]:
    """``t.shape`` with ``-1`` for ragged dimensions: a strided nested tensor has no
    ``shape``, a jagged one has symbolic sizes, and records keep plain ints only."""
    shape = []
    for dim in range(t.dim()):
        try:
            size = t.size(dim)
        except RuntimeError:  # strided layout: a ragged dimension has no size
            size = -1
        shape.append(size if isinstance(size, int) else -1)
    return tuple(shape)


def iter_tensors(value: Any, root: str) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(path, tensor)`` for every tensor inside ``value``, in pytree order."""
    if isinstance(value, torch.Tensor):
        yield root, value
        return
    if value is None or isinstance(value, (int, float, str, bool)):
        return
    leaves, _ = pytree.tree_flatten_with_path(value)
    for key_path, leaf in leaves:
        path = root + "".join(_key_str(k) for k in key_path)
        if isinstance(leaf, torch.Tensor):
            yield path, leaf
        elif dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
            for f in dataclasses.fields(leaf):
                yield from iter_tensors(getattr(leaf, f.name), f"{path}.{f.name}")


def _key_str(key: Any) -> str:
    if isinstance(key, pytree.MappingKey) and isinstance(key.key, str):
        return f"[{_quote(key.key)}]"
    return str(key)


def _quote(name: str) -> str:
    """``name`` as a double-quoted Python string literal (``"logits"``)."""
    if '"' in name or "\\" in name or not name.isprintable():
        return json.dumps(name, ensure_ascii=False)
    return f'"{name}"'


def metas(value: Any, root: str) -> list[TensorMeta]:
    """:func:`tensor_meta` of every tensor inside ``value``."""
    if isinstance(value, torch.Tensor):
        return [tensor_meta(root, value)]
    return [tensor_meta(p, t) for p, t in iter_tensors(value, root)]


def iter_call_inputs(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Iterator[tuple[str, torch.Tensor]]:
    """``(path, tensor)`` of every tensor a call received: ``args[i]...``, ``kwargs["k"]...``."""
    for i, a in enumerate(args):
        yield from iter_tensors(a, f"args[{i}]")
    for k, v in kwargs.items():
        yield from iter_tensors(v, f"kwargs[{_quote(k)}]")


def call_input_metas(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[TensorMeta]:
    """Metas of a call's positional (``args[i]``) and keyword (``kwargs["k"]``) inputs."""
    out: list[TensorMeta] = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            out.append(tensor_meta(f"args[{i}]", a))
        else:
            out.extend(metas(a, f"args[{i}]"))
    for k, v in kwargs.items():
        out.extend(metas(v, f"kwargs[{_quote(k)}]"))
    return out


#: Paths shown without their name: the one positional input, the one output.
BARE_PATHS = frozenset({"args[0]", "out"})


def shape_text(m: TensorMeta) -> str:
    """``[1, 3, 224, 224]``, with the dtype when it is not float32: ``[1, 128] int64``."""
    text = "[" + ", ".join(str(d) for d in m.shape) + "]"
    return text if m.dtype == "float32" else f"{text} {m.dtype}"


def shapes_text(metas: Sequence[TensorMeta], *, sep: str = "\n") -> str:
    """One shape per tensor, its path first unless it is a bare root (``args[0]``,
    ``out``): ``[1, 10]``, ``out["logits"]: [1, 128, 50257]``."""
    return sep.join(
        shape_text(m) if m.path in BARE_PATHS else f"{m.path}: {shape_text(m)}" for m in metas
    )
