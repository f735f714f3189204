"""Tensor internals: version counters, storage identity, a sparse tensor's parts, and
the multi-tensor (``_foreach``) kernels.

Private: ``Tensor._version``, ``UntypedStorage._cdata``, ``Tensor._indices()`` and
``Tensor._values()`` (the public ``indices()``/``values()`` refuse an uncoalesced
tensor), ``torch._foreach_norm`` and ``torch._foreach_mul_``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from hookscope.core.torch_private._warnings import _warn_once


def version_counter(t: torch.Tensor) -> int | None:
    """``t``'s version counter, which each in-place write bumps; ``None`` for an
    inference tensor (``torch.inference_mode``), which keeps none: what it holds must
    then be read, never assumed unchanged."""
    return None if t.is_inference() else t._version


def storage_key(storage: torch.UntypedStorage) -> int:
    """What identifies ``storage``: equal for every tensor viewing it, also on meta."""
    key: int = storage._cdata
    return key


def sparse_coo_parts(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The indices and values a sparse COO tensor holds, coalesced or not."""
    return t._indices(), t._values()


_foreach_norm: Callable[..., Sequence[torch.Tensor]] | None = getattr(torch, "_foreach_norm", None)
_foreach_mul_: Callable[..., Any] | None = getattr(torch, "_foreach_mul_", None)


def foreach_norm(tensors: list[torch.Tensor], ord: float, **kwargs: Any) -> list[torch.Tensor]:
    """``torch._foreach_norm(tensors, ord, **kwargs)``: the ``ord``-norm of each tensor,
    in one kernel per device and dtype. Raises what torch raises (``TypeError`` for a
    ``dtype=`` this torch does not take)."""
    if _foreach_norm is None:
        _warn_once("the speed of gradient norms", "has no _foreach_norm")
        return [torch.linalg.vector_norm(t, ord, **kwargs) for t in tensors]
    return list(_foreach_norm(tensors, ord, **kwargs))


def foreach_mul_(tensors: list[torch.Tensor], scalars: list[torch.Tensor]) -> None:
    """``torch._foreach_mul_(tensors, scalars)``: multiply each tensor in place."""
    if _foreach_mul_ is None:
        _warn_once("the speed of gradient clipping", "has no _foreach_mul_")
        for t, s in zip(tensors, scalars, strict=True):
            t.mul_(s)
        return
    _foreach_mul_(tensors, scalars)
