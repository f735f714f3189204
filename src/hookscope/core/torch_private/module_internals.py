"""``torch.nn`` internals outside a module instance: the process-wide hook registries
and the batch-norm base class.

Private: ``torch.nn.modules.module._global_*`` (the dicts ``register_module_*_hook``
fill, and ``_global_is_full_backward_hook``) and
``torch.nn.modules.batchnorm._BatchNorm``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch.nn.modules import batchnorm as _torch_batchnorm
from torch.nn.modules import module as _torch_module

BatchNormBase: type[Any] = _torch_batchnorm._BatchNorm
"""The base class of ``BatchNorm1d``/``2d``/``3d``, their lazy versions and
``SyncBatchNorm``: a module that normalises with batch statistics in training."""


def global_hooks(name: str) -> Mapping[int, Any]:
    """The process-wide hook dict ``torch.nn.modules.module._global_<name>``
    (``forward_hooks``, ``module_registration_hooks``, ``forward_hooks_with_kwargs``,
    ...), by handle id; empty when this torch has no such registry."""
    found: Mapping[int, Any] | None = getattr(_torch_module, f"_global_{name}", None)
    return found or {}


def global_backward_hooks_are_legacy() -> bool:
    """Whether the global backward hooks are ``register_module_backward_hook``'s
    (non-full, deprecated) rather than ``register_module_full_backward_hook``'s."""
    return getattr(_torch_module, "_global_is_full_backward_hook", None) is False
