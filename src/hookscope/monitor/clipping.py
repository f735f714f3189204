"""Gradient clipping of a :class:`~hookscope.GradientMonitor` (``clip=``, ``clip_mode=``).

The monitor (``monitor/monitor.py``) clips after a step's norms are taken and before the
optimizer step, in place, from the norms already computed: ``"norm"`` scales each
chosen gradient to norm ≤ its limit, as ``torch.nn.utils.clip_grad_norm_`` does per
tensor; ``"value"`` clamps each element to ``[-limit, limit]``. Which parameter gets
which limit is decided once, from the ``clip=`` patterns (``thresholds.clip_limits``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hookscope.core import torch_private
from hookscope.errors import SpecError

__all__ = ["check_value_clip", "clip_grads"]

_EPS = 1e-6  # as torch.nn.utils.clip_grad_norm_: limit / (norm + eps)


def check_value_clip(limits: dict[int, float], names: list[str],
                     params: Sequence[torch.Tensor]) -> None:
    """Refuse ``clip_mode="value"`` for a complex parameter (``limits``: by index)."""
    complex_ = [names[i] for i in limits if params[i].is_complex()]
    if complex_:
        raise SpecError(
            f"clip_mode='value' clamps real values, but {complex_[0]!r} is complex; "
            f"use clip_mode='norm' for it, or leave it out of clip="
        )


def clip_grads(limits: dict[int, float], index: list[int], grads: list[torch.Tensor],
               norms: list[torch.Tensor], *, mode: str, names: list[str]) -> None:
    """Clip, in place, those of ``grads`` (of the monitored parameters ``index``, whose
    norms are ``norms``) that have a limit in ``limits`` (by parameter index)."""
    if not limits:
        return
    chosen = [(j, limits[i]) for j, i in enumerate(index) if i in limits]
    if not chosen:
        return
    targets = [grads[j] for j, _ in chosen]
    if mode == "value":
        # every one checked before any is clamped: a refusal changes no .grad
        for g, (j, _) in zip(targets, chosen, strict=True):
            if g.layout != torch.strided:  # torch has no clamp_ of a sparse tensor
                raise SpecError(
                    f"clip_mode='value' cannot clamp the sparse gradient of "
                    f"{names[index[j]]!r} (an nn.Embedding(sparse=True)?); use "
                    "clip_mode='norm' for it, or leave it out of clip="
                )
        for g, (_, limit) in zip(targets, chosen, strict=True):
            g.clamp_(-limit, limit)
        return
    coefs = [(limit / (norms[j] + _EPS)).clamp(max=1.0) for j, limit in chosen]
    scales = [c.to(g.dtype) for c, g in zip(coefs, targets, strict=True)]
    torch_private.foreach_mul_(targets, scales)
