"""Buffers a forward changes (BatchNorm's running statistics, quantization observers'
min/max), copied before a run for the caller and put back after it
(``core/model/state.py``; ``lint``'s forward too)."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import TypeGuard

import torch
from torch import nn

from hookscope.core import torch_private
from hookscope.core.internal import outside_hookscope

_RECORDS: dict[type, bool] = {}


def records_statistics(cls: type) -> bool:
    """Whether ``cls`` records statistics in eval mode too: quantization observers and
    fake-quantize modules (``torch.ao.quantization``)."""
    found = _RECORDS.get(cls)
    if found is None:
        found = _RECORDS[cls] = issubclass(cls, _STATISTICS_RECORDERS)
    return found


def _recorders() -> tuple[type, ...]:
    try:
        from torch.ao.quantization import FakeQuantizeBase, ObserverBase
    except ImportError:  # a torch without torch.ao.quantization: none to save
        return ()
    return (ObserverBase, FakeQuantizeBase)


_STATISTICS_RECORDERS = _recorders()


SavedBuffer = tuple[nn.Module, str, torch.Tensor, torch.Tensor, int]
"""A module, a buffer's name, the buffer, a copy of its values, its version."""


def saved_buffers(modules: Iterable[nn.Module]) -> list[SavedBuffer]:
    """A copy of every buffer of ``modules`` that has values, for :func:`restore_buffers`."""
    return [
        (m, name, b, b.detach().clone(), tensor_version(b))
        for m in modules for name, b in m._buffers.items() if has_values(b)
    ]


def restore_buffers(saved: list[SavedBuffer]) -> None:
    """Put back every buffer object and value of :func:`saved_buffers` (see
    :class:`ModelState`): the version too where the forward did not move it; never
    raises (a warning names what could not be put back)."""
    back: list[torch.Tensor] = []
    versions: list[int] = []
    failed: list[str] = []
    with torch.no_grad():
        for module, name, buffer, value, version in saved:
            module._buffers[name] = buffer  # also one the forward replaced
            unchanged = version >= 0 and tensor_version(buffer) == version
            try:
                if (buffer.shape, buffer.dtype, buffer.device) == (
                        value.shape, value.dtype, value.device):
                    buffer.copy_(value)
                else:  # resized or converted in the forward
                    buffer.data = value
            except RuntimeError as e:  # an inference tensor, overlapping memory:
                if not _same(buffer, value):  # which the forward cannot have written
                    failed.append(f"{type(module).__name__}.{name} "
                                  f"({(str(e).splitlines() or [''])[0]})")
                continue
            if unchanged:
                back.append(buffer)
                versions.append(version)
    if back:
        torch_private.set_versions(back, versions)
    if failed:
        warnings.warn(
            f"hookscope: could not put back {len(failed)} buffer(s) the forward changed: "
            f"{', '.join(failed[:3])}", UserWarning, stacklevel=outside_hookscope(),
        )


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a.shape == b.shape and bool(torch.equal(a, b))
    except RuntimeError:
        return False


def tensor_version(b: torch.Tensor) -> int:
    """``b``'s version counter (-1: an inference tensor, which has none)."""
    version = torch_private.version_counter(b)
    return -1 if version is None else version


def has_values(b: torch.Tensor | None) -> TypeGuard[torch.Tensor]:
    """A buffer whose values can be copied: not a lazy module's, not on meta."""
    return (
        b is not None and not isinstance(b, nn.parameter.UninitializedBuffer)
        and b.device.type != "meta"
    )
