"""``check_divergence``: are the data-parallel replicas of a model still the same?

Every rank takes a checksum of each parameter and buffer (its element count, sum, sum
of squares and a position-weighted sum, in float64 on the tensor's device), the ranks
exchange them (``all_gather_object``: one small list per rank), and a tensor whose
checksums differ is compared in full: the copy of the majority (the reference rank) is
broadcast, and each rank measures its largest absolute difference from it. The classic
desync bugs show up here: a rank that skipped an optimizer step, a buffer updated on
one rank only, a seed that differed at initialisation. A sharded FSDP2 parameter is
not a replica (each rank holds another shard): it is listed as skipped.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from hookscope.core.model.wrappers import unwrap
from hookscope.distributed.divergence_records import Divergence, DivergenceReport
from hookscope.distributed.process_group import check_initialized
from hookscope.errors import SpecError

__all__ = ["Divergence", "DivergenceReport", "check_divergence"]

Checksum = tuple[float, ...]


def check_divergence(model: nn.Module, *, group: Any = None) -> DivergenceReport:
    """Compare every parameter and buffer of ``model`` across the ranks of ``group``.

    A collective: every rank of the group calls it, with the same model. A
    ``DistributedDataParallel`` wrapper is looked through (paths without ``module.``).

    Args:
        model: this rank's replica.
        group: the data-parallel process group (``None``: the default group).

    Returns:
        The same :class:`DivergenceReport` on every rank: each tensor that differs,
        with the ranks whose copy differs from the majority's and by how much.

    Raises:
        SpecError: ``model`` is not a module, or no process group is initialised.

    Example:
        >>> report = hookscope.check_divergence(model)
        >>> if report.diverged:
        ...     print(report)
    """
    if not isinstance(model, nn.Module):
        raise SpecError(f"check_divergence expects an nn.Module, got {type(model).__name__}")
    check_initialized("check_divergence()")
    tensors, skipped = _replicated(unwrap(model))
    with torch.no_grad():
        mine = [_checksum(t) for _, _, t in tensors]
    size = dist.get_world_size(group)
    everyone: list[Any] = [None] * size
    dist.all_gather_object(everyone, mine, group=group)
    diverged = []
    for i, (path, kind, t) in enumerate(tensors):
        sums = [everyone[r][i] for r in range(size)]
        reference = _majority(sums)
        differ = tuple(r for r in range(size) if not _same(sums[r], sums[reference]))
        if differ:
            gaps = _differences(t, reference, differ, group)
            diverged.append(Divergence(path, kind, reference, differ, gaps))
    return DivergenceReport(size, len(tensors), diverged, skipped)


def _replicated(model: nn.Module) -> tuple[list[tuple[str, str, torch.Tensor]], list[str]]:
    """``(path, kind, local tensor)`` of each replicated tensor, and the sharded ones."""
    found: list[tuple[str, str, torch.Tensor]] = []
    skipped: list[str] = []
    for path, kind, t in _named_tensors(model):
        local = _local_replica(t)
        if local is None:
            skipped.append(path)
        else:
            found.append((path, kind, local))
    return found, skipped


def _named_tensors(model: nn.Module) -> Iterator[tuple[str, str, torch.Tensor]]:
    for path, p in model.named_parameters():
        yield path, "parameter", p
    for path, b in model.named_buffers():
        yield path, "buffer", b


def _local_replica(t: torch.Tensor) -> torch.Tensor | None:
    """The tensor itself; a ``DTensor``'s local tensor when it is replicated on every
    rank of its mesh; ``None`` for a sharded one."""
    placements = getattr(t, "placements", None)
    if placements is None:
        return t
    if all(p.is_replicate() for p in placements):
        return t.to_local()  # type: ignore[attr-defined, no-any-return]
    return None


def _checksum(t: torch.Tensor) -> Checksum:
    """Element count, sum, sum of squares and a position-weighted sum, in float64.

    NB: costs a float64 copy of the tensor and of its weights on its device, one
    tensor at a time: a check, not a per-step cost (``check_divergence_every``).
    """
    x = t.detach()
    if x.is_complex():
        x = torch.view_as_real(x)
    x = x.reshape(-1).to(torch.float64)
    if x.numel() == 0:
        return (0.0, 0.0, 0.0, 0.0)
    # NB: weights 1..1021 repeating: a swap of two elements changes the weighted sum
    weights = torch.arange(x.numel(), device=x.device, dtype=torch.float64) % 1021 + 1
    values = torch.stack([x.sum(), (x * x).sum(), (x * weights).sum()]).cpu().tolist()
    return (float(x.numel()), *values)


def _same(a: Checksum, b: Checksum) -> bool:
    return all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b, strict=True))


def _majority(sums: list[Checksum]) -> int:
    """The lowest rank of the largest group of ranks with equal checksums."""
    best, best_count = 0, 0
    for r, s in enumerate(sums):
        count = sum(_same(s, other) for other in sums)
        if count > best_count:
            best, best_count = r, count
    return best


def _differences(
    t: torch.Tensor, reference: int, differ: tuple[int, ...], group: Any,
) -> tuple[float, ...]:
    """Each differing rank's largest absolute difference from the reference rank's copy
    (NaN where the shapes differ)."""
    copy = t.detach().clone()
    src = reference if group is None else dist.get_global_rank(group, reference)
    shapes: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(shapes, tuple(copy.shape), group=group)
    if len(set(shapes)) > 1:
        return tuple(math.nan for _ in differ)
    dist.broadcast(copy, src=src, group=group)
    with torch.no_grad():
        own = t.detach()
        gap = (own.to(torch.float64) - copy.to(torch.float64)).abs().max().item() \
            if own.numel() else 0.0
    gaps: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gaps, gap, group=group)
    return tuple(float(gaps[r]) for r in differ)
