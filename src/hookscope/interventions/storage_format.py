"""The format of a capture directory (the layout: ``storage.py``): its name, version and
file names, and how one call's value is stored: its tensors by key in a safetensors
shard, the structure around them (tuples, dicts, ``None``, a dataclass's fields, a
:class:`ModuleInputs`) as JSON in the shard's metadata. :func:`encode_tree` writes that
JSON (``storage_writer.py``), :func:`decode_tree` reads it back (``storage_reader.py``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any, NamedTuple

import torch

from hookscope.errors import MissingDependencyError, SpecError

FORMAT = "hookscope-activations"
VERSION = 1
INDEX = "index.json"
_META_KEY = "hookscope"


class ModuleInputs(NamedTuple):
    """What a module's ``forward`` received: positional and keyword arguments."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def _safetensors() -> Any:
    try:
        import safetensors.torch
    except ImportError as e:  # pragma: no cover - a required dependency
        raise MissingDependencyError("safetensors", "capture") from e
    return safetensors


# -- the structure of a value, as JSON ------------------------------------------------------


def encode_tree(value: Any, key: str, tensors: dict[str, torch.Tensor]) -> Any:
    """JSON for ``value``; its tensors go into ``tensors`` under keys from ``key``.

    A step into a container (or a dataclass's field) is written ``[0]`` or
    ``["name"]``, never ``.0``: a dotted step would make the key of a tuple's element the
    key of a child module's call (``layers.0`` returning a tuple, and ``layers.0.0``),
    and one would overwrite the other. The reader takes the keys from the structure,
    not from this scheme."""
    if isinstance(value, torch.Tensor):
        if value.is_nested:  # safetensors holds dense tensors only: its components
            return {"nested": _encode_nested(value, key, tensors)}
        if value.layout != torch.strided:
            value = value.to_dense()  # sparse: safetensors holds dense tensors only
        if value.is_quantized:  # safetensors holds no quantized dtype: its float values
            value = value.dequantize()
        if key in tensors:  # distinct keys that read alike (two NaN keys of a dict)
            raise SpecError(
                f"save_to: two tensors of one call's value would be saved as {key!r} (a "
                "dict with two NaN keys?); give them distinct keys, or capture without "
                "save_to= to keep both in memory"
            )
        tensors[key] = value.contiguous()
        return {"tensor": key}
    if isinstance(value, ModuleInputs):
        return {"inputs": [encode_tree(value.args, f"{key}:args", tensors),
                           encode_tree(value.kwargs, f"{key}:kwargs", tensors)]}
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {"dict": {k: encode_tree(v, f"{key}[{json.dumps(k)}]", tensors)
                         for k, v in value.items()}}
    if isinstance(value, Mapping) and all(map(_plain_key, value)):
        # keys JSON has no object key for (``{0: head_0, 1: head_1}``): as pairs
        return {"mapping": [[encode_tree(k, key, {}), encode_tree(v, f"{key}[{_step(k)}]",
                                                                  tensors)]
                            for k, v in value.items()]}
    if isinstance(value, (tuple, list)):
        kind = "list" if isinstance(value, list) else "tuple"
        return {kind: [encode_tree(v, f"{key}[{i}]", tensors) for i, v in enumerate(value)]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # its fields, by name (read back as a namespace: the class is not imported)
        cls = type(value)
        return {"fields": {"class": f"{cls.__module__}.{cls.__qualname__}", "values": {
            f.name: encode_tree(getattr(value, f.name), f"{key}[{json.dumps(f.name)}]", tensors)
            for f in dataclasses.fields(value)
        }}}
    # NB: an object safetensors/JSON cannot hold is kept as its repr, never pickled
    return {"repr": repr(value)}


def _encode_nested(value: torch.Tensor, key: str, tensors: dict[str, torch.Tensor]) -> Any:
    """A nested tensor as its layout and components (``value.unbind()``), each saved as
    a tensor; :func:`decode_tree` builds it again with ``torch.nested.nested_tensor``
    (which finds a jagged tensor's ragged dimension, a transposed one's too, from the
    components' shapes)."""
    layout = "jagged" if value.layout == torch.jagged else "strided"
    return {"layout": layout, "components": [
        encode_tree(part, f"{key}[{i}]", tensors) for i, part in enumerate(value.unbind())]}


def decode_tree(doc: Any, tensor: Any) -> Any:
    """The value of :func:`encode_tree`'s JSON; ``tensor(key)`` reads one tensor."""
    (kind, body), = doc.items()
    if kind == "tensor":
        return tensor(body)
    if kind == "nested":
        layout = torch.jagged if body["layout"] == "jagged" else torch.strided
        return torch.nested.nested_tensor([decode_tree(part, tensor)
                                           for part in body["components"]], layout=layout)
    if kind == "inputs":
        return ModuleInputs(decode_tree(body[0], tensor), decode_tree(body[1], tensor))
    if kind == "dict":
        return {k: decode_tree(v, tensor) for k, v in body.items()}
    if kind == "mapping":
        return {decode_tree(k, tensor): decode_tree(v, tensor) for k, v in body}
    if kind in ("tuple", "list"):
        items = [decode_tree(v, tensor) for v in body]
        return tuple(items) if kind == "tuple" else items
    if kind == "value":
        return body
    if kind == "fields":
        return Fields(body["class"], **{k: decode_tree(v, tensor)
                                         for k, v in body["values"].items()})
    return _Unrestorable(body)


def _plain_key(key: Any) -> bool:
    """A dict key that reads back as itself: a scalar, or a tuple of them."""
    if isinstance(key, tuple):
        return all(map(_plain_key, key))
    return key is None or type(key) in (bool, int, float, str)


def _step(key: Any) -> str:
    """The text of a step into a dict by ``key``: JSON for a scalar, the repr of a tuple.

    A tuple's repr unquoted, so that ``(1, 2)`` and the string ``"(1, 2)"`` (JSON:
    quoted) are two steps: as one, the second value would overwrite the first on disk."""
    return repr(key) if isinstance(key, tuple) else json.dumps(key)


class Fields(SimpleNamespace):
    """A dataclass value read back from disk: its fields as attributes (``.hidden``),
    and the name of its class (``fields_of``), which is not imported."""

    def __init__(self, fields_of: str, **values: Any) -> None:
        super().__init__(**values)
        self.__dict__["fields_of"] = fields_of


class _Unrestorable(str):
    """The repr of a value that was not a tensor, container or plain scalar."""
