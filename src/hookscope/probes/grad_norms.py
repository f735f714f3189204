"""How the gradients probe measures a gradient (``probes/grads.py``): fast, and exact to
better than 1e-6 relative, without a float64 copy of the gradient.

A float64 copy (``vector_norm(g, dtype=torch.float64)``) is exact, but on the CPU it
costs about 20 times one pass over a float32 gradient and allocates twice its size:
on ResNet-50 at batch 8 it doubled the time of ``trace(backward=True)``. A plain float32
``vector_norm`` of a large CPU tensor is fast but loses about 1e-4 relative (1e-2 on a
gradient of equal values). So the gradient's elements, as one flat view
(:func:`_flat`), are cut into rows of :data:`_ROW`: each row's norm in float32 (lower
precisions accumulate in float32), the rows' norms combined in float64. That is 4e-7
relative on a gradient of equal values (a float32 sum's worst case) and 1e-9 on random
ones, as fast as one float32 ``vector_norm``. The mean is torch's float32 mean
(pairwise: about 1e-7); max-abs is exact.

Overflow: a float32 row overflows for elements beyond about 6e17 (one element beyond
about 2e19). On the CPU, where reading a value costs no synchronisation, such a norm is
computed again from a float64 copy; on an accelerator it stays ``inf``, as
``torch.nn.utils.clip_grad_norm_`` reports it. Likewise the NaN and Inf counts of a
parameter's gradient are counted on the CPU only when its norm is not finite (else
both are 0); on an accelerator always, so that nothing waits for the device.
"""

from __future__ import annotations

import math

import torch

_ROW = 1024
_F64 = torch.float64
_F32 = torch.float32


def _flat(g: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``g``'s elements as a contiguous 1-D tensor, and how often each stands for one of
    ``g``'s: a view where the memory allows it (any order of dimensions: a transposed
    or ``channels_last`` gradient; a broadcast dimension, stride 0, counted instead of
    read, as the gradient of a ``sum`` hands it on), else a copy in ``g``'s dtype."""
    repeat = 1
    for dim in range(g.dim()):
        if g.stride(dim) == 0 and g.size(dim) > 1:
            repeat *= g.size(dim)
            g = g.narrow(dim, 0, 1)
    if not g.is_contiguous():
        order = sorted(range(g.dim()), key=lambda d: g.stride(d), reverse=True)
        g = g.permute(order)
        if not g.is_contiguous():
            g = g.contiguous()  # overlapping or gapped memory
    return g.reshape(-1), repeat


def _rows_norm(flat: torch.Tensor) -> torch.Tensor:
    """The L2 norm of a contiguous 1-D floating tensor, float64, 0-d (see the module
    docstring)."""
    norm: torch.Tensor
    if flat.dtype is _F64:
        norm = torch.linalg.vector_norm(flat)
        return norm
    acc = None if flat.dtype is _F32 else _F32
    n = flat.numel()
    if n <= _ROW:
        norm = torch.linalg.vector_norm(flat, dtype=acc).to(_F64)
        return norm
    rows = n // _ROW
    parts = [torch.linalg.vector_norm(flat[: rows * _ROW].view(rows, _ROW), dim=1, dtype=acc)]
    if n % _ROW:
        parts.append(torch.linalg.vector_norm(flat[rows * _ROW :], dtype=acc).reshape(1))
    norm = torch.linalg.vector_norm(torch.cat(parts).to(_F64))
    return norm


def _norm(g: torch.Tensor, flat: torch.Tensor, repeat: int) -> torch.Tensor:
    norm = _rows_norm(flat)
    if repeat != 1:
        norm = norm * math.sqrt(repeat)
    if g.device.type == "cpu" and math.isinf(norm.item()):
        norm = torch.linalg.vector_norm(g, dtype=_F64)  # overflow, or a true Inf
    return norm


def l2_norm(g: torch.Tensor) -> torch.Tensor:
    """The L2 norm of a floating tensor, as a float64 0-d tensor on its device."""
    flat, repeat = _flat(g)
    return _norm(g, flat, repeat)


def joint_norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of ``tensors`` together (at least one), float64, 0-d, on the first
    accelerator among their devices (else the CPU)."""
    norms = [l2_norm(t) for t in tensors]
    if len(norms) == 1:
        return norms[0]
    devices = {n.device for n in norms}
    if len(devices) > 1:  # a call with outputs on several devices: no host sync
        target = next((d for d in devices if d.type != "cpu"), norms[0].device)
        norms = [n.to(target, non_blocking=True) for n in norms]
    joint: torch.Tensor = torch.linalg.vector_norm(torch.stack(norms))
    return joint


def grad_stats(g: torch.Tensor) -> torch.Tensor:
    """``[norm, max_abs, mean, nan_count, inf_count]`` of a floating tensor ``g`` with
    elements, float64, on its device."""
    flat, repeat = _flat(g)
    norm = _norm(g, flat, repeat)
    lo, hi = torch.aminmax(flat)  # NB: a NaN makes both NaN, as max-abs is then
    max_abs = torch.maximum(hi, -lo).to(_F64)
    # every element stands for ``repeat`` of g's: the mean is the same
    mean = flat.mean(dtype=None if flat.dtype in (_F32, _F64) else _F32).to(_F64)
    if g.device.type == "cpu" and math.isfinite(norm.item()):
        nan = inf = torch.zeros((), dtype=_F64)
    else:
        nan = torch.count_nonzero(torch.isnan(flat)).to(_F64) * repeat
        inf = torch.count_nonzero(torch.isinf(flat)).to(_F64) * repeat
    return torch.stack([norm, max_abs, mean, nan, inf])
