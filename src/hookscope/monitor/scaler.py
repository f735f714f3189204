"""A :class:`~hookscope.GradientMonitor` step with a ``torch.amp.GradScaler`` (``scaler=``).

``mon.step()`` unscales the optimizer's gradients first (:func:`unscale`), so the
monitor's norms are unscaled, and keeps the scaler's overflow flags with the step's
rows; at the host transfer :func:`step_skipped` says whether the scaler skipped the
step (its flags, or, where they cannot be read, the monitored norms).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from hookscope.core import torch_private

__all__ = ["Scaled", "loss_scale", "step_skipped", "unscale"]

Scaled = bool | list[torch.Tensor]
"""Whether a scaler unscaled the step: its overflow flags, or ``True`` where they
cannot be read, ``False`` without a scaler."""


def unscale(scaler: Any, optimizer: Any) -> Scaled:
    """With a scaler: unscale the optimizer's gradients (once per step); the
    scaler's overflow flags, which decide whether it skips the step (``True``
    where they cannot be read: judged from the monitored norms then); ``False``
    without a scaler."""
    if scaler is None or not scaler.is_enabled():
        return False
    try:
        scaler.unscale_(optimizer)
    except RuntimeError as e:
        if "already been called" not in str(e):
            raise
    flags = torch_private.scaler_found_inf(scaler, optimizer)
    return True if flags is None else flags


def step_skipped(scaled: Scaled, norms: list[float], present: list[bool]) -> bool:
    """Whether the scaler skipped the step whose host norms are ``norms``."""
    if isinstance(scaled, list):  # the scaler's own flags: every gradient
        return any(bool(flag.item()) for flag in scaled)
    # judged from the monitored gradients
    return scaled and any(
        p and not math.isfinite(v) for v, p in zip(norms, present, strict=True)
    )


def loss_scale(scaler: Any) -> torch.Tensor | None:
    """The loss scale the backward gradients carry (a device tensor), ``None`` without
    an enabled scaler (or before its first ``scale()``)."""
    if scaler is None or not scaler.is_enabled():
        return None
    return torch_private.scaler_scale(scaler)
