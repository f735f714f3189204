"""Finiteness checks of a tensor.

:func:`all_finite` is the one check every module output and every op output goes
through: one sum (a single read pass, no boolean tensor allocated); a finite sum
proves every element finite (a NaN makes the sum NaN, an Inf makes it Inf or NaN).
Only when the sum is not finite, which a large finite tensor can also give by
overflowing, does the exact element-wise test decide. So the check is exact, and on
the common path it costs one reduction.

The check of every aten op while an anomaly hunt runs is ``debug/op_check.py``'s.
"""

from __future__ import annotations

import cmath
import math

import torch

from hookscope.core import torch_private
from hookscope.core.records.tensor_paths import dtype_str
from hookscope.debug.anomaly_records import TensorCheck
from hookscope.probes.moments import readable

_REDUCED = (torch.float16, torch.bfloat16)


def checkable(t: torch.Tensor) -> bool:
    """A dense floating (or complex) tensor with readable values: a plain tensor, a
    parameter, or a subclass that keeps its own data (a tensor carrying metadata, as
    MONAI's ``MetaTensor``), not a wrapper with a ``__torch_dispatch__`` of its own
    (``FakeTensor``, ``DTensor``), whose values are not its storage's (the rule the
    statistics follow: ``probes/moments.readable``)."""
    return (
        (t.is_floating_point() or t.is_complex()) and not t.is_meta and not t.is_nested
        and (t.layout == torch.strided if type(t) is torch.Tensor else readable(t))
        and t.numel() > 0
    )


def all_finite(t: torch.Tensor) -> bool:
    """Whether every element of ``t`` is finite (``True`` for a tensor not checkable).

    Reading the result synchronises a CUDA device once per check: an anomaly hunt
    must stop at the first non-finite value, so it cannot defer the reads.
    """
    if not checkable(t):
        return True
    if type(t) is not torch.Tensor:
        t = t.as_subclass(torch.Tensor)
    # a plain tensor: no dispatch mode (the op check's, a user's) needs to see the check
    with torch_private.dispatch_off():
        if torch.is_grad_enabled():
            with torch.no_grad():
                return _finite(t)
        return _finite(t)


def _finite(t: torch.Tensor) -> bool:
    total = (t.sum(dtype=torch.float32) if t.dtype in _REDUCED else t.sum()).item()
    # in Python: ``Tensor.isfinite`` of the 0-dim sum is a chain of ops (~40 us)
    if cmath.isfinite(total) if isinstance(total, complex) else math.isfinite(total):
        return True
    return bool(torch.isfinite(t).all())


def counts(t: torch.Tensor) -> tuple[int | None, int | None]:
    """``(nan_count, inf_count)`` of ``t`` (``(None, None)`` when not checkable)."""
    if not checkable(t):
        return None, None
    if type(t) is not torch.Tensor:
        t = t.as_subclass(torch.Tensor)
    with torch_private.dispatch_off(), torch.no_grad():
        return int(torch.isnan(t).sum()), int(torch.isinf(t).sum())


def tensor_check(path: str, t: torch.Tensor) -> TensorCheck:
    nans, infs = counts(t)
    return TensorCheck(path, tuple(t.shape), dtype_str(t.dtype), t.numel(), nans, infs)
