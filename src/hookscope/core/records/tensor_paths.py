"""Find every tensor in nested inputs and outputs, with its path.

Nested containers are walked with ``torch.utils._pytree`` (tuples, lists, dicts,
namedtuples and anything registered with it, such as transformers' ``ModelOutput``);
dataclass instances that pytree does not know are walked field by field, and other
objects that hold tensors in their attributes (``torch.distributions`` objects,
torchvision's ``ImageList``) attribute by attribute, one level deep. Paths are written
the way a user would index the value: ``out[0]``, ``out["logits"]``, ``out.hidden``,
``out.loc``. :func:`metas` also describes what holds no tensor: a NumPy array by its
shape and dtype (layout ``"ndarray"``), any other object by its type name (layout
``"object"``); ``None`` and plain scalars are left out.

This runs in every hook call, so a bare tensor (the common case) takes a fast path.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from hookscope.core.records.values import TensorMeta
from hookscope.core.torch_private import pytree

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


_SCALARS = (int, float, complex, str, bytes, bool, type(None), torch.dtype, torch.device)

#: Layouts of the :class:`TensorMeta` entries that describe something else than a tensor.
NDARRAY_LAYOUT = "ndarray"
OBJECT_LAYOUT = "object"


def iter_tensors(value: Any, root: str) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(path, tensor)`` for every tensor inside ``value``, in pytree order."""
    if isinstance(value, torch.Tensor):
        yield root, value
        return
    if isinstance(value, _SCALARS):
        return
    for path, leaf in _leaves(value, root):
        if isinstance(leaf, torch.Tensor):
            yield path, leaf


def map_tensors(fn: Any, value: Any) -> Any:
    """``value`` with ``fn(t)`` in place of every tensor ``t``, in containers pytree
    knows (tuples, lists, dicts, HF ``ModelOutput``) and in dataclasses it does not (a
    copy of each, its fields mapped): what ``iter_tensors`` finds, ``fn`` sees."""

    def leaf(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return fn(v)
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            new = copy.copy(v)
            for f in dataclasses.fields(v):
                object.__setattr__(new, f.name, map_tensors(fn, getattr(v, f.name)))
            return new
        return v

    return pytree.tree_map(leaf, value)


def _leaves(value: Any, root: str, *, attributes: bool = True) -> Iterator[tuple[str, Any]]:
    """``(path, leaf)`` of every tensor and every other non-container inside ``value``."""
    leaves, _ = pytree.tree_flatten_with_path(value)
    for key_path, leaf in leaves:
        path = root + "".join(_key_str(k) for k in key_path)
        if isinstance(leaf, (torch.Tensor, *_SCALARS)):
            yield path, leaf
        elif dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
            for f in dataclasses.fields(leaf):
                yield from _leaves(getattr(leaf, f.name), f"{path}.{f.name}")
        elif attributes and (held := _tensor_attributes(leaf)):
            for name, attr in held:
                yield from _leaves(attr, f"{path}.{name}", attributes=False)
        else:
            yield path, leaf


def _tensor_attributes(obj: Any) -> list[tuple[str, Any]]:
    """The public attributes of ``obj`` that are tensors or flat lists/tuples of them
    (a distribution's ``loc``/``scale``, an ``ImageList``'s ``tensors``)."""
    try:
        attrs = vars(obj)
    except TypeError:  # no __dict__ (slots, builtins)
        return []
    if isinstance(obj, (torch.nn.Module, type)):
        return []

    def holds_tensors(v: Any) -> bool:
        if isinstance(v, torch.Tensor):
            return True
        return isinstance(v, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in v)

    return [(k, v) for k, v in attrs.items() if not k.startswith("_") and holds_tensors(v)]


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
    """:func:`tensor_meta` of every tensor inside ``value``, and an entry for each NumPy
    array and each other object in it (its type name), so that nothing is dropped."""
    if isinstance(value, torch.Tensor):
        return [tensor_meta(root, value)]
    if isinstance(value, _SCALARS):
        return []
    out: list[TensorMeta] = []
    for path, leaf in _leaves(value, root):
        if isinstance(leaf, torch.Tensor):
            out.append(tensor_meta(path, leaf))
        elif not isinstance(leaf, _SCALARS):
            out.append(_object_meta(path, leaf))
    return out


def _object_meta(path: str, value: Any) -> TensorMeta:
    numpy = sys.modules.get("numpy")  # an array can only exist if numpy is imported
    if numpy is not None and isinstance(value, numpy.ndarray):
        return TensorMeta(path, tuple(value.shape), str(value.dtype), "cpu", False, NDARRAY_LAYOUT)
    return TensorMeta(path, (), type(value).__name__, "", False, OBJECT_LAYOUT)


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
    if m.layout == OBJECT_LAYOUT:
        return m.dtype
    text = "[" + ", ".join(str(d) for d in m.shape) + "]"
    if m.layout == NDARRAY_LAYOUT:
        return f"{text} {m.dtype} ndarray"
    return text if m.dtype == "float32" else f"{text} {m.dtype}"


def shapes_text(metas: Sequence[TensorMeta], *, sep: str = "\n") -> str:
    """One shape per tensor, its path first unless it is a bare root (``args[0]``,
    ``out``): ``[1, 10]``, ``out["logits"]: [1, 128, 50257]``."""
    return sep.join(
        shape_text(m) if m.path in BARE_PATHS else f"{m.path}: {shape_text(m)}" for m in metas
    )
