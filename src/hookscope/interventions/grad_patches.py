"""Ready-made patch functions on the backward path (``hookscope.patches``, gathered in
``functions.py``): :func:`scale_grad` and :func:`clip_grad` leave the forward values
bit-identical and change only the gradient that flows back through the output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from hookscope.errors import SpecError
from hookscope.interventions.patch import PatchFn
from hookscope.interventions.value_patches import _check_number, _on_floats


class _GradTransform(torch.autograd.Function):
    """Identity forward (a copy with the same values); ``fn(grad)`` backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
        ctx.fn = fn
        # a copy, not ``x`` itself: autograd forbids modifying a custom Function's
        # view output in place, and the next module may (``ReLU(inplace=True)``).
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        return ctx.fn(grad), None


def _on_grad(fn: Callable[[torch.Tensor], torch.Tensor]) -> PatchFn:
    return _on_floats(lambda t: _GradTransform.apply(t, fn) if t.requires_grad else t)


def scale_grad(factor: float) -> PatchFn:
    """Multiply the gradient flowing back through the output by ``factor``; the
    forward values are unchanged."""
    _check_number(factor, "scale_grad: factor")
    return _on_grad(lambda g: g * factor)


def clip_grad(limit: float | torch.Tensor, *, norm: bool = False) -> PatchFn:
    """Clip the gradient flowing back through the output: each element to
    ``[-limit, limit]``, or with ``norm=True`` the whole tensor's L2 norm to ``limit``
    (a number > 0, or a tensor of one). The forward values are unchanged."""
    if isinstance(limit, torch.Tensor):
        if limit.numel() != 1:
            raise SpecError(f"patches.clip_grad: limit must be one number, got a tensor "
                            f"of shape {list(limit.shape)}")
        limit = limit.item()
    _check_number(limit, "clip_grad: limit", positive=True)
    value = float(limit)
    if norm:
        return _on_grad(lambda g: g * torch.clamp(value / (g.norm() + 1e-12), max=1.0))
    return _on_grad(lambda g: g.clamp(-value, value))

