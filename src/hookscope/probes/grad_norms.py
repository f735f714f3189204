"""How the gradients probe measures a gradient (``probes/grads.py``): on the CPU fast, and
exact to better than 1e-6 relative, mostly without a float64 copy of the gradient.

A float64 copy (``vector_norm(g, dtype=torch.float64)``) is exact, but on the CPU it
costs about 20 times one pass over a float32 gradient and allocates twice its size:
on ResNet-50 at batch 8 it doubled the time of ``trace(backward=True)``. A plain float32
``vector_norm`` of a large CPU tensor is fast but loses about 1e-4 relative (1e-2 on a
gradient of equal values). So the gradient's elements, as one flat view
(:func:`_flat`), are cut into rows of :data:`_ROW`: each row's norm in float32 (lower
precisions accumulate in float32), the rows' norms combined in float64. That is under
4e-7 relative on adversarial values (all equal, a float32 sum's worst case; or one
large element per 1024 among small ones, an outlier feature's weight gradient) and
1e-9 on random ones, about as fast as one float32 ``vector_norm``. (CPU reductions add
in SIMD lanes one after another: rows of 1024 reached 4e-6 on the outlier case.)
Max-abs is exact. The mean is torch's float32 mean, what ``grad.mean()`` gives: its
absolute error is about 1e-7 of the mean magnitude, so a mean near zero from values
that cancel is only that exact.

Where float32 is not exact enough the float64 copy is made after all, on the CPU, where
reading the norm back costs no synchronisation: a norm below :data:`_TINY` (squares of
tiny elements are subnormal in float32), or one that is not finite (an overflow:
elements beyond about 2e18; or a NaN or Inf, which the exact path then counts). On
an accelerator, where reading a value back would wait for the device, every value is
computed from a float64 copy, as before.

A complex gradient is measured by its elements' magnitudes ``abs(z)``: its norm and
max-abs are the complex tensor's own, its NaN/Inf counts those of elements with a
non-finite part, and its mean the mean magnitude (the convention of the statistics
probe, ``probes/moments.py``).
"""

from __future__ import annotations

import math

import torch

_ROW = 128
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


def _stored(g: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The values ``g`` stores, in a dtype torch reduces (float8 as float32; a complex
    tensor's magnitudes), and the number of elements ``g`` has: a sparse tensor's
    implicit zeros add nothing to a norm, a maximum magnitude or a count, and only their
    number to a mean."""
    if g.layout is torch.sparse_coo:
        values = g.coalesce().values()
    elif g.layout is not torch.strided:  # CSR, CSC, BSR, BSC
        values = g.values()
    else:
        values = g
    if values.is_complex():  # the magnitudes: the same norm, max-abs and NaN/Inf counts
        values = values.to(torch.complex128).abs()  # in float64: |3e38 + 3e38j| is finite
    if values.dtype not in _REDUCIBLE:
        values = values.float()
    return values, g.numel()


_REDUCIBLE = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _exact_stats(flat: torch.Tensor, repeat: int, numel: int) -> torch.Tensor:
    """The statistics of ``numel`` elements: ``flat``'s, each ``repeat`` times, and zeros
    for the rest (a sparse tensor's), from a float64 copy."""
    norm = torch.linalg.vector_norm(flat, dtype=_F64)
    mean = flat.sum(dtype=_F64) * (repeat / numel)
    return torch.stack([
        norm * math.sqrt(repeat) if repeat != 1 else norm,
        torch.linalg.vector_norm(flat, ord=math.inf, dtype=_F64),
        mean,
        torch.isnan(flat).sum().to(_F64) * repeat,
        torch.isinf(flat).sum().to(_F64) * repeat,
    ])


def _fast_norm(flat: torch.Tensor, repeat: int) -> torch.Tensor | None:
    """The norm of a CPU tensor's ``flat`` view of stored values (each standing for
    ``repeat`` elements) from float32 rows; ``None`` where float32 is not exact enough
    (see :data:`_TINY`) or it is not finite."""
    norm = _rows_norm(flat)
    if not _TINY <= norm.item() < math.inf:  # of the stored values; a NaN fails it too
        return None
    return norm * math.sqrt(repeat) if repeat != 1 else norm


#: Below this norm a float32 sum of squares may have lost more than 1e-7 relative:
#: squares of elements under about 1e-19 are subnormal in float32 (under 4e-23, zero),
#: each rounded by up to 7e-46, which is 1e-7 of the norm's square only above
#: 7e-39 times the element count: about 3e-14 for 1e11 elements.
_TINY = 1e-13


def l2_norm(g: torch.Tensor) -> torch.Tensor:
    """The L2 norm of a floating (or complex) tensor, as a float64 0-d tensor on its device."""
    values, _ = _stored(g)
    flat, repeat = _flat(values)
    norm = _fast_norm(flat, repeat) if g.device.type == "cpu" else None
    if norm is None:
        norm = torch.linalg.vector_norm(flat, dtype=_F64)
        if repeat != 1:
            norm = norm * math.sqrt(repeat)
    return norm


def joint_norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of ``tensors`` together (at least one), float64, 0-d, on the first
    accelerator among their devices (else the CPU)."""
    norms = [l2_norm(t) for t in tensors]
    if len(norms) == 1:
        return norms[0]
    devices = {n.device for n in norms}
    if len(devices) > 1:  # a call with outputs on several devices: no host sync
        target = next((n.device for n in norms if n.device.type != "cpu"), norms[0].device)
        norms = [n.to(target, non_blocking=True) for n in norms]
    joint: torch.Tensor = torch.linalg.vector_norm(torch.stack(norms))
    return joint


def grad_stats(g: torch.Tensor) -> torch.Tensor:
    """``[norm, max_abs, mean, nan_count, inf_count]`` of a floating (or complex) tensor
    ``g`` with elements, float64, on its device."""
    values, numel = _stored(g)
    flat, repeat = _flat(values)
    if flat.numel() == 0:  # a sparse tensor without stored values: all zeros
        return torch.zeros(5, dtype=_F64, device=g.device)
    norm = _fast_norm(flat, repeat) if g.device.type == "cpu" else None
    if norm is None:  # an accelerator, a tiny norm, or a NaN or Inf somewhere
        return _exact_stats(flat, repeat, numel)
    lo, hi = torch.aminmax(flat)
    max_abs = torch.maximum(hi, -lo).to(_F64)
    # every stored value stands for ``repeat`` elements; a sparse tensor's zeros count
    mean = flat.mean(dtype=None if flat.dtype in (_F32, _F64) else _F32).to(_F64)
    if flat.numel() * repeat != numel:
        mean = mean * (flat.numel() * repeat / numel)
    zero = torch.zeros((), dtype=_F64)
    return torch.stack([norm, max_abs, mean, zero, zero])  # finite: no NaN, no Inf
