"""How the statistics probe computes a tensor's statistics (``probes/stats.py``).

Semantics, per dtype:

- floating: over all values, as torch computes them: a NaN makes the mean, std, min,
  max and max-abs NaN (an Inf makes them Inf or NaN); ``nan_count``/``inf_count`` say
  how many. ``std`` is torch's default, the unbiased estimate (``correction=1``).
- integer: mean and std in float64, min and max exact (as floats: exact up to 2**53).
- bool: as 0/1 integers; ``std`` is ``None`` (a spread of truth values says nothing).
- complex: statistics of the magnitude ``abs(x)``.
- one element: ``std`` is ``None`` (torch returns NaN: no degrees of freedom).
- no elements: ``numel == 0``, every statistic ``None``, counts 0.
- no readable data (meta and fake tensors, sparse, quantized and nested tensors,
  wrapper subclasses): ``numel`` only; every statistic and both counts ``None``.

Cost: everything is computed on the tensor's own device under ``torch.no_grad()``.
On an accelerator, each tensor gets one fixed sequence of reductions (``aminmax``,
``std_mean``, three ``count_nonzero``) whose results stay on the device as one
float64 vector; ``finalize`` moves all of them to the host in one transfer per
device. On the CPU, where reading a value costs no synchronisation, a float tensor
takes four passes when it has no negative value (``aminmax`` over the integer view of
its bits, which is then its range, ``count_nonzero``, ``sum``, ``dot``) and five
otherwise (plus a float ``amin``); a large tensor is swept in L2-sized blocks, all
passes over one block before the next (``_BLOCK``), so only the first pass reads it
from memory: on ResNet-50 at batch 8 that takes the probe from 132 ms to 104 ms. The
NaN/Inf counts are only computed when the sum is not finite.

NB: on the CPU the std comes from the sum and the sum of squares (computed in float64
from float32 accumulators); when the mean is large against the spread (more than about
4 standard deviations) that would lose precision, and ``torch.std`` is used instead.
"""

from __future__ import annotations

import math
import struct

import torch

from hookscope.core import torch_private
from hookscope.core.records.values import TensorStats

#: mean, std, min, max, zero count, NaN count, Inf count
Moments = list[float] | torch.Tensor

_FIELDS = 7
_INT_VIEW = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}
_EXACT_INTS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
_NATIVE_FLOATS = (torch.float32, torch.float64)
_PLAIN_DISPATCH = torch.Tensor.__torch_dispatch__


def make_stats(path: str, numel: int, kind: str, moments: list[float] | None) -> TensorStats:
    """A :class:`TensorStats` from host moments ``[mean, std, min, max, zeros, nan, inf]``.

    ``moments`` is ``None`` when the tensor has no elements or no readable data.
    """
    if moments is None:
        count = 0 if numel == 0 and kind != "opaque" else None
        return TensorStats(path, numel, None, None, None, None, None, None, count, count)
    mean, std, lo, hi, zeros, nans, infs = moments
    absmax = math.nan if math.isnan(lo) or math.isnan(hi) else max(abs(lo), abs(hi))
    return TensorStats(
        path=path,
        numel=numel,
        mean=mean,
        std=None if kind == "bool" or numel < 2 else std,
        min=lo,
        max=hi,
        absmax=absmax,
        zero_fraction=zeros / numel,
        nan_count=int(nans),
        inf_count=int(infs),
    )


def tensor_moments(t: torch.Tensor) -> tuple[str, Moments | None]:
    """``(kind, moments)`` of ``t``: kind is ``bool``/``int``/``float``/``opaque``.

    Call under ``torch.no_grad()``. ``moments`` is ``None`` for an empty or opaque tensor.
    """
    if not readable(t):
        return "opaque", None
    if type(t) is not torch.Tensor:
        t = t.as_subclass(torch.Tensor)  # e.g. Parameter: skip __torch_function__
    if t.is_complex():
        t = t.abs()
    kind = "bool" if t.dtype == torch.bool else ("float" if t.is_floating_point() else "int")
    if t.numel() == 0:
        return kind, None
    on_cpu = t.device.type == "cpu"
    if kind == "float":
        return kind, _cpu_float(t) if on_cpu else _device_float(t)
    if kind == "bool":
        return kind, _bool_moments(t, on_cpu)
    return kind, _int_moments(t, on_cpu)


def readable(t: torch.Tensor) -> bool:
    if t.layout != torch.strided or t.is_meta or t.is_quantized or t.is_nested:
        return False
    if type(t) is not torch.Tensor and type(t).__torch_dispatch__ is not _PLAIN_DISPATCH:
        return False  # a wrapper subclass (fake, functional, distributed): no local data
    return not torch_private.is_functorch_wrapped(t)


# Elements per block of the CPU sweep over a large tensor: each reduction of the sweep
# reads a block (1 MiB of float32, half of it per core) while it is still in the cores'
# L2 caches, so only the first one reads it from memory. Tensors under four blocks are
# read whole: below that, the extra calls cost more than the cache misses they save.
_BLOCK = 1 << 18


def _cpu_float(x: torch.Tensor) -> list[float]:
    if x.dtype not in _NATIVE_FLOATS:
        x = x.float()  # float16/bfloat16/float8: one conversion, then exact reductions
    flat = _flat(x)
    n = flat.numel()
    lo, hi, zeros, total, squares = _cpu_sweep(flat)
    if not math.isfinite(total) and math.isfinite(lo) and math.isfinite(hi):
        # every value is finite but a float32 sum overflowed: sum in float64
        flat = flat.double()
        total = flat.sum().item()
        squares = torch.dot(flat, flat).item()
    elif not (math.isfinite(total) and math.isfinite(lo) and math.isfinite(hi)):
        nans = int(torch.count_nonzero(torch.isnan(flat)))
        infs = int(torch.count_nonzero(torch.isinf(flat)))
        std = flat.std().item() if n > 1 else math.nan
        return [total / n, std, lo, hi, zeros, nans, infs]
    return [total / n, _cpu_std(flat, total, squares, lo, hi), lo, hi, zeros, 0, 0]


def _cpu_sweep(flat: torch.Tensor) -> tuple[float, float, int, float, float]:
    """``(min, max, exact zeros, sum, sum of squares)`` of a 1-D float32/float64 tensor.

    Block by block (see ``_BLOCK``); the sums of the blocks add up in float64.
    """
    n = flat.numel()
    bits = flat.view(_INT_VIEW[flat.element_size()])
    step = _BLOCK if n >= 4 * _BLOCK else n
    lo, hi, zeros = math.inf, -math.inf, 0
    total = squares = 0.0
    nan = False
    for i in range(0, n, step):
        block = flat[i : i + step]
        b_lo, b_hi, b_zeros = _cpu_range_and_zeros(block, bits[i : i + step])
        nan = nan or b_lo != b_lo
        lo, hi, zeros = min(lo, b_lo), max(hi, b_hi), zeros + b_zeros
        total += block.sum().item()
        squares += torch.dot(block, block).item()
    if nan:
        lo = hi = math.nan  # as torch.aminmax: a NaN makes both NaN
    return lo, hi, zeros, total, squares


def _cpu_range_and_zeros(x: torch.Tensor, bits: torch.Tensor) -> tuple[float, float, int]:
    """``(min, max, exact zeros)`` of a 1-D float32/float64 tensor ``x`` whose integer
    view is ``bits``, in two or three passes.

    The first pass is ``aminmax`` over the integer view of the bits. Read as signed
    integers, non-negative floats (+0.0 included) are ordered like their values, every
    float with the sign bit set (-0.0 included) is negative, and among those a larger
    magnitude is a larger integer, -0.0 being the smallest integer of all. So:

    - smallest integer >= 0 (no negative value, no -0.0; the ReLU outputs of a
      network): the integer range *is* the float range, and zeros are the all-zero bit
      patterns, counted only when the smallest value is +0.0;
    - largest integer < 0 (every value has the sign bit): the range is read from the
      integers too, largest integer first;
    - otherwise the largest integer is the maximum, and one float ``amin`` (cheaper than
      ``aminmax``) gives the minimum.

    -0.0 is present exactly when the smallest integer is the sign bit alone; then the
    zeros are counted on ``abs``. A NaN makes both ends NaN (``torch.aminmax`` does).
    """
    ilo_t, ihi_t = torch.aminmax(bits)
    ilo, ihi = int(ilo_t), int(ihi_t)
    n = x.numel()
    as_int, as_float, int_min = _BITS[x.dtype]
    if ilo >= 0:
        lo = as_float.unpack(as_int.pack(ilo))[0]
        hi = as_float.unpack(as_int.pack(ihi))[0]
        zeros = n - int(torch.count_nonzero(bits)) if ilo == 0 else 0
    elif ihi < 0:
        lo = as_float.unpack(as_int.pack(ihi))[0]
        hi = as_float.unpack(as_int.pack(ilo))[0]
        zeros = n - int(torch.count_nonzero(x.abs().view(bits.dtype))) if ilo == int_min else 0
    else:
        lo, hi = x.amin().item(), as_float.unpack(as_int.pack(ihi))[0]
        if ilo == int_min:  # -0.0 is present
            zeros = n - int(torch.count_nonzero(x.abs().view(bits.dtype)))
        else:
            zeros = n - int(torch.count_nonzero(bits))  # +0.0 only: its bits are all 0
    if lo != lo or hi != hi:  # NaN
        lo = hi = math.nan
    return lo, hi, zeros


# float dtype -> (its bits as a signed integer, the float, the smallest such integer)
_BITS = {
    torch.float32: (struct.Struct("<i"), struct.Struct("<f"), -(2**31)),
    torch.float64: (struct.Struct("<q"), struct.Struct("<d"), -(2**63)),
}


def _cpu_std(x: torch.Tensor, total: float, squares: float, lo: float, hi: float) -> float:
    n = x.numel()
    if n < 2:
        return math.nan
    if lo == hi:
        return 0.0
    spread = squares - total * total / n  # (n - 1) * variance
    if not math.isfinite(squares) or total * total / n > 16.0 * spread:
        return x.std().item()  # ill-conditioned for the one-pass formula
    return math.sqrt(max(spread, 0.0) / (n - 1))


def _flat(x: torch.Tensor) -> torch.Tensor:
    """``x`` as one dimension in memory order: no copy for dense layouts (channels-last)."""
    if x.is_contiguous():
        return x.view(-1)
    strides = x.stride()
    dense = x.permute(sorted(range(x.dim()), key=lambda d: -strides[d]))
    return dense.view(-1) if dense.is_contiguous() else x.reshape(-1)


def _device_float(x: torch.Tensor) -> torch.Tensor:
    if x.dtype not in _NATIVE_FLOATS:
        x = x.float()
    n = x.numel()
    lo, hi = torch.aminmax(x)
    if n > 1:
        std, mean = torch.std_mean(x)
    else:
        mean = x.mean()
        std = mean  # replaced by None on the host
    counts = torch.stack((
        n - torch.count_nonzero(x),
        torch.count_nonzero(torch.isnan(x)),
        torch.count_nonzero(torch.isinf(x)),
    ))
    head = torch.stack((mean, std, lo, hi)).to(torch.float64)
    return torch.cat((head, counts.to(torch.float64)))


def _int_moments(x: torch.Tensor, on_cpu: bool) -> Moments:
    n = x.numel()
    xd = x.to(torch.float64)
    lo, hi = torch.aminmax(x if x.dtype in _EXACT_INTS else xd)
    if n > 1:
        std, mean = torch.std_mean(xd)
    else:
        mean = std = xd.mean()
    # count_nonzero has no kernel for uint16/32/64; their float64 copy has the zeros
    zeros = n - torch.count_nonzero(x if x.dtype in _EXACT_INTS else xd)
    if on_cpu:
        return [mean.item(), std.item(), lo.item(), hi.item(), zeros.item(), 0, 0]
    head = torch.stack((mean, std, lo.to(torch.float64), hi.to(torch.float64)))
    tail = torch.stack((zeros, zeros * 0, zeros * 0)).to(torch.float64)
    return torch.cat((head, tail))


def _bool_moments(x: torch.Tensor, on_cpu: bool) -> Moments:
    n = x.numel()
    ones = torch.count_nonzero(x)
    if on_cpu:
        k = int(ones)
        return [k / n, math.nan, float(k == n), float(k > 0), n - k, 0, 0]
    trues = ones.to(torch.float64)
    lo, hi = (trues == n).to(torch.float64), (trues > 0).to(torch.float64)
    zero = trues * 0
    return torch.stack((trues / n, zero, lo, hi, n - trues, zero, zero))


def to_host(all_moments: list[Moments | None]) -> list[list[float] | None]:
    """Host lists of every entry: device vectors move in one transfer per device."""
    out: list[list[float] | None] = [m if isinstance(m, list) else None for m in all_moments]
    by_device: dict[torch.device, list[int]] = {}
    for i, m in enumerate(all_moments):
        if isinstance(m, torch.Tensor):
            by_device.setdefault(m.device, []).append(i)
    for indices in by_device.values():
        flat = torch.cat([all_moments[i] for i in indices]).tolist()  # type: ignore[misc]
        for j, i in enumerate(indices):
            out[i] = flat[j * _FIELDS : (j + 1) * _FIELDS]
    return out
