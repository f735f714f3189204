"""Norms of sharded tensors (FSDP2's ``DTensor`` parameters and gradients) as the full
tensor's.

A ``DTensor`` sharded over a mesh holds one shard per rank: a norm of the local tensor
is the shard's. :func:`full_norms` takes each shard's norm on its device and reduces it
over the mesh dimensions the tensor is sharded on (one ``all_reduce`` each: the sum of
squares for the 2-norm, the sum for the 1-norm, the maximum for the inf-norm); over a
replicated dimension every rank holds the same values already. A collective: every
rank of the mesh calls it with the same tensors, as every rank steps its optimizer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.distributed as dist

__all__ = ["full_norms", "is_dtensor", "local_numel"]


def is_dtensor(t: object) -> bool:
    """Whether ``t`` is a ``torch.distributed.tensor.DTensor``."""
    return hasattr(t, "device_mesh") and hasattr(t, "placements") and hasattr(t, "to_local")


def local_numel(t: torch.Tensor) -> int:
    """The elements of this rank's shard (all of them for a plain tensor)."""
    return int(t.to_local().numel()) if is_dtensor(t) else t.numel()  # type: ignore[attr-defined]


def full_norms(tensors: Sequence[torch.Tensor], ord: float, *,
               dtype: torch.dtype | None = None) -> list[torch.Tensor]:
    """The ``ord``-norm (2, 1 or inf) of each full ``DTensor`` of ``tensors``, 0-d, on
    the local shard's device, accumulated in ``dtype`` (``None``: the tensor's)."""
    out = []
    for t in tensors:
        local = t.to_local()  # type: ignore[attr-defined]
        wide = local if dtype is None else local.to(dtype)
        norm = torch.linalg.vector_norm(wide, ord) if local.numel() else \
            torch.zeros((), dtype=wide.dtype, device=wide.device)
        out.append(_reduce(norm, t, ord))
    return out


def _reduce(norm: torch.Tensor, t: torch.Tensor, ord: float) -> torch.Tensor:
    mesh = t.device_mesh  # type: ignore[attr-defined]
    sharded = [i for i, p in enumerate(t.placements)  # type: ignore[attr-defined]
               if not p.is_replicate()]
    if not sharded:
        return norm
    value = norm * norm if ord == 2 else norm.clone()
    op = dist.ReduceOp.MAX if math.isinf(ord) else dist.ReduceOp.SUM
    for dim in sharded:
        dist.all_reduce(value, op=op, group=mesh.get_group(dim))
    return value.sqrt() if ord == 2 else value
