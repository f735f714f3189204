"""Collective operations (``torch.distributed``'s all-reduce, all-gather,
reduce-scatter, ...) as ops of the module call that issued them.

``dist.all_reduce(t)`` inside a ``forward`` dispatches ``c10d.allreduce_`` and the
functional collectives (``torch.distributed._functional_collectives``, DTensor,
FSDP2) ``_c10d_functional.all_reduce``: the ops probe sees them below autograd, like
any aten op. They move data and do no matmul-like work: 0 FLOPs (``FREE``). Their size
is :func:`collective_bytes`.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from hookscope.core.records.values import TensorMeta

__all__ = ["COLLECTIVE_NAMESPACES", "collective_bytes", "is_collective"]

COLLECTIVE_NAMESPACES = frozenset({"c10d", "_c10d_functional", "_c10d_functional_autograd"})
"""The operator namespaces of torch.distributed's collectives."""

#: ops of those namespaces that move no data: waiting for one, wrapping its result
_NOT_MOVING = ("wait_tensor", "_wrap_tensor_autograd", "barrier", "monitored_barrier")


def is_collective(name: str) -> bool:
    """Whether the op named ``name`` (``c10d.allreduce_.default``) is a collective."""
    namespace, _, rest = name.partition(".")
    return namespace in COLLECTIVE_NAMESPACES and rest.partition(".")[0] not in _NOT_MOVING


def collective_bytes(tensors: Iterable[TensorMeta]) -> int:
    """The size of a collective: the bytes of the largest tensor among its recorded
    arguments and results (an all-reduce's buffer, a reduce-scatter's input, an
    all-gather's gathered output where the op takes it as one tensor).

    NB: what each rank sends over the wire depends on the algorithm; and the list
    forms (``dist.all_gather(list, t)``) pass nested lists the ops probe does not
    flatten: their size is the input's."""
    sizes = [t.numel * _itemsize(t.dtype) for t in tensors if t.numel >= 0]
    return max(sizes, default=0)


def _itemsize(dtype: str) -> int:
    found = getattr(torch, dtype, None)
    return found.itemsize if isinstance(found, torch.dtype) else 0
