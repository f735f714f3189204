"""What the gradients probe (``probes/grads.py``) reads from a gradient, on its device.

The norm of all the gradients of a backward event together (:func:`_joint_norm`) and
the statistics of a parameter's gradient (:func:`_grad_stats`), both computed by
``probes/grad_norms.py`` and kept on the device as tensors; none inside
``torch.func.vmap`` or for batched gradients, said once per process
(:func:`_under_vmap`, :func:`_skipped_batched`). ``finalize`` moves them all to the
host with :func:`_to_host`, one transfer per device.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch

from hookscope.core import torch_private
from hookscope.probes.grad_norms import grad_stats, joint_norm


def _joint_norm(grads: tuple[Any, ...]) -> torch.Tensor | None:
    """The L2 norm of all the tensors in ``grads`` together (``None``: no tensor, or a
    backward inside ``torch.func.vmap``, whose gradients are batches: see
    :func:`_under_vmap`)."""
    if _under_vmap():
        return None
    found = [
        g for g in grads
        if isinstance(g, torch.Tensor) and (g.is_floating_point() or g.is_complex())
        and not g.is_meta
    ]
    if any(map(torch_private.batched, found)):  # before detach, which they refuse
        _skipped_batched()
        return None
    if not found:
        return None
    tensors = [g.detach() for g in found]
    with torch.no_grad():
        return joint_norm(tensors)


def _under_vmap() -> bool:
    """Whether a backward runs inside ``torch.func.vmap`` (``jacrev``, per-sample
    gradients): its gradients are batches of gradients, each norm a batch of norms, so
    the probe records none there, and says so once per process. (The older vmap of
    ``torch.autograd.functional.jacobian(vectorize=True)`` is not on functorch's stack:
    its batched gradients are left out one by one, ``torch_private.batched``.)"""
    if not torch_private.vmap_running():
        return False
    if not _VMAP_WARNED:
        _VMAP_WARNED.append(True)
        warnings.warn(
            "hookscope: gradient norms are not recorded for a backward inside "
            "torch.func.vmap (jacrev, per-sample gradients): each gradient there is a "
            "batch; run the backward outside vmap to measure it",
            UserWarning, stacklevel=2,
        )
    return True


_VMAP_WARNED: list[bool] = []


def _skipped_batched() -> None:
    """Say once per process that batched gradients (the older vmap of
    ``torch.autograd.functional.jacobian(vectorize=True)``, ``torch.autograd.grad(...,
    is_grads_batched=True)``) were left out."""
    if _BATCHED_WARNED:
        return
    _BATCHED_WARNED.append(True)
    warnings.warn(
        "hookscope: gradient norms are not recorded for batched gradients "
        "(torch.autograd.functional.jacobian(vectorize=True), torch.autograd.grad(..., "
        "is_grads_batched=True)): each is a batch; use vectorize=False to measure them",
        UserWarning, stacklevel=3,
    )


_BATCHED_WARNED: list[bool] = []


def _grad_stats(grad: torch.Tensor) -> torch.Tensor:
    """``[norm, max_abs, mean, nan_count, inf_count]`` of ``grad``, float64, on its device."""
    with torch.no_grad():
        g = grad.detach()
        if g.numel() == 0 or not (g.is_floating_point() or g.is_complex()):
            zero = torch.zeros((), dtype=torch.float64, device=g.device)
            return torch.stack([zero, zero, zero, zero, zero])
        return grad_stats(g)


def _to_host(values: list[torch.Tensor]) -> list[list[float]]:
    """Each value as a list of floats (NaN as the one ``math.nan``), one transfer per
    device."""
    out: list[list[float]] = [[] for _ in values]
    by_device: dict[torch.device, list[int]] = {}
    for i, v in enumerate(values):
        by_device.setdefault(v.device, []).append(i)
    for indices in by_device.values():
        flat = torch.cat([values[i].reshape(-1) for i in indices]).cpu().tolist()
        offset = 0
        for i in indices:
            n = values[i].numel()
            out[i] = [math.nan if x != x else x for x in flat[offset:offset + n]]
            offset += n
    return out
