"""Data-parallel wrappers: the module a wrapper runs is the model hookscope observes.

``DistributedDataParallel`` and ``DataParallel`` hold the user's model as ``.module``
and add nothing to its tree but that one level; observed as they are, every path would
start with ``module.``. :func:`unwrap` gives the wrapped model, which a
:class:`~hookscope.Tracer` (and everything built on it), ``summary``/``trace`` and the
gradient monitor observe, so paths and parameter counts are the unwrapped model's.
FSDP2 (``fully_shard``) wraps nothing: it changes the class of the modules in place,
and their parameters are ``DTensor``\\ s whose shape and ``numel`` are the full
parameter's.
"""

from __future__ import annotations

from torch import nn

__all__ = ["has_sharded_params", "is_ddp", "unwrap", "wrapper_names"]

_WRAPPERS: tuple[type[nn.Module], ...] = (
    nn.DataParallel,
    nn.parallel.DistributedDataParallel,
)


def unwrap(model: nn.Module) -> nn.Module:
    """The model a data-parallel wrapper runs (``model`` itself when not wrapped)."""
    while isinstance(model, _WRAPPERS) and isinstance(model.module, nn.Module):
        model = model.module
    return model


def wrapper_names(model: nn.Module) -> list[str]:
    """The classes of the wrappers around the model, outermost first (``[]``: none)."""
    names = []
    while isinstance(model, _WRAPPERS) and isinstance(model.module, nn.Module):
        names.append(type(model).__name__)
        model = model.module
    return names


def is_ddp(model: nn.Module) -> bool:
    """Whether ``model`` is wrapped in ``DistributedDataParallel`` (at any level)."""
    while isinstance(model, _WRAPPERS) and isinstance(model.module, nn.Module):
        if isinstance(model, nn.parallel.DistributedDataParallel):
            return True
        model = model.module
    return False


def has_sharded_params(model: nn.Module) -> bool:
    """Whether a parameter of ``model`` is a ``DTensor`` (FSDP2's ``fully_shard``)."""
    return any(hasattr(p, "placements") and hasattr(p, "to_local")
               for p in model.parameters())
