"""The JSON form of :func:`hookscope.inspect`: a model's structure, without a forward pass.

Where it sits: in ``core``, beside ``core/records/serialize.py`` (the trace document), and
imports only ``core``. :meth:`ModelInfo.to_dict`/:meth:`ModelInfo.to_json` call it, and
``hookscope inspect --format json`` prints it.

Field names follow the trace document (``core/records/serialize.py``) where they overlap, so a
reader of one understands the other: ``model.class``, ``model.params.total``,
``model.buffers.total``, ``modules[]`` with ``path``/``class``/``params``. The
document says ``"kind": "structure"``; a trace document has ``calls[]`` instead.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hookscope.core.model.structure import ModelInfo
    from hookscope.core.records.module_records import ModuleInfo


def structure_to_dict(info: ModelInfo) -> dict[str, Any]:
    """The JSON-ready dict of :func:`hookscope.inspect`'s result.

    Args:
        info: the model's structure.

    Returns:
        A dict of plain values (``"kind": "structure"``), ready for :func:`json.dumps`.
    """
    from hookscope.core.records.trace import SCHEMA_VERSION
    from hookscope.core.version import package_version

    return {
        "schema_version": SCHEMA_VERSION,
        "hookscope_version": package_version(),
        "kind": "structure",
        "model": {
            "class": info.class_name,
            "params": {
                "total": info.total_params,
                "trainable": info.trainable_params,
                "frozen": info.frozen_params,
                "bytes": info.param_bytes,
                "bytes_by_dtype": info.param_bytes_by_dtype(),
            },
            "buffers": {"total": info.total_buffers, "bytes": info.buffer_bytes},
        },
        "modules": [_module(m) for m in info.modules.values()],
        "parameters": [dataclasses.asdict(p) for p in info.parameters.values()],
        "buffers": [dataclasses.asdict(b) for b in info.buffers.values()],
        "tied": dict(info.tied),
    }


def structure_to_json(info: ModelInfo, *, indent: int | None = 2) -> str:
    """:func:`structure_to_dict` as JSON text with sorted keys.

    Args:
        info: the model's structure.
        indent: spaces per level; ``None`` for one line.
    """
    return json.dumps(structure_to_dict(info), indent=indent, sort_keys=True)


def _module(m: ModuleInfo) -> dict[str, Any]:
    return {
        "path": m.path,
        "class": m.class_name,
        "depth": m.depth,
        "parent": m.parent,
        "children": list(m.children),
        "aliases": list(m.aliases),
        "params": m.total_params,
        "own_params": m.own_params,
        "trainable_params": m.trainable_params,
        "own_buffers": m.own_buffers,
        "extra_repr": m.extra_repr,
    }
