"""A :class:`~hookscope.GradientMonitor` step's gradient norms: taken on the device,
moved to the host.

Per step the monitor (``monitor/monitor.py``) takes each gradient's norm with
:func:`grad_norms` (one ``torch._foreach_norm`` per device and dtype, accumulated in
float32 at least) and stacks them with :func:`stack_norms` into one float64 row per
device; the rows stay there until a flush, when :func:`rows_to_host` moves every
pending row in one transfer and :func:`scatter_present` puts NaN where a parameter had
no gradient.
"""

from __future__ import annotations

import math
import warnings

import torch

from hookscope.core import torch_private
from hookscope.distributed.sharded import full_norms, is_dtensor

__all__ = ["grad_norms", "rows_to_host", "scatter_present", "stack_norms"]


def grad_norms(grads: list[torch.Tensor], ord: float) -> list[torch.Tensor]:
    """The ``ord``-norm of each gradient, 0-d, accumulated in float32 at least (float64
    for float64 gradients): in a float16 one, the norm of finite values overflows at
    65504 (``_foreach_norm`` per dtype, as ``clip_grad_norm_`` groups them)."""
    out: list[torch.Tensor | None] = [None] * len(grads)
    groups: dict[torch.dtype, list[int]] = {}
    for i, g in enumerate(grads):
        if is_dtensor(g):  # FSDP2: the full gradient's norm, reduced over the shards
            out[i] = full_norms([g], ord, dtype=_NORM_DTYPE.get(g.dtype))[0]
            continue
        groups.setdefault(g.dtype, []).append(i)
    for dtype, indices in groups.items():
        wide = _NORM_DTYPE.get(dtype, dtype)
        chosen = [grads[i] for i in indices]
        try:
            found = torch_private.foreach_norm(chosen, ord, dtype=None if wide is dtype else wide)
        except (TypeError, RuntimeError):  # no dtype= in this torch, or not a float dtype
            if wide is not dtype and not _NARROW_WARNED:
                _NARROW_WARNED.append(True)
                warnings.warn(f"hookscope: this torch cannot take {dtype} gradient norms in "
                              f"{wide}; they are taken in {dtype} (they may overflow)",
                              UserWarning, stacklevel=4)
            found = torch_private.foreach_norm(chosen, ord)
        for i, n in zip(indices, found, strict=True):
            out[i] = n
    return out  # type: ignore[return-value]


_NARROW_WARNED: list[bool] = []

#: The dtype a gradient's norm accumulates in, where it is not the gradient's own.
_NORM_DTYPE = {
    dtype: torch.float32 for dtype in (
        torch.float16, torch.bfloat16, *(
            getattr(torch, name) for name in ("float8_e4m3fn", "float8_e5m2")
            if hasattr(torch, name)
        ),
    )
}


def stack_norms(values: list[torch.Tensor]) -> torch.Tensor:
    """One float64 tensor per step (per device) from 0-d norms (float64, not
    float32: a float64 gradient's norm keeps its digits and its range)."""
    devices = {v.device for v in values}
    if len(devices) > 1:
        values = [v.to(values[0].device) for v in values]
    wide = torch.float32 if values[0].device.type == "mps" else torch.float64  # MPS: no f64
    return torch.stack([v if v.dtype == wide else v.to(wide) for v in values])


def rows_to_host(rows: list[torch.Tensor]) -> list[list[float]]:
    """The steps' rows as lists of floats, in one transfer to the host."""
    if not rows:
        return []
    flat = torch.cat(rows).to("cpu", torch.float64).tolist()
    out, offset = [], 0
    for r in rows:
        out.append(flat[offset:offset + r.numel()])
        offset += r.numel()
    return out


def scatter_present(values: list[float], present: list[bool]) -> list[float]:
    """``values`` where ``present``, NaN elsewhere (a parameter without a gradient)."""
    it = iter(values)
    return [next(it) if p else math.nan for p in present]
