"""FSDP2's (``torch.distributed.fsdp.fully_shard``) unsharded parameters.

A module's parameters are ``DTensor`` shards between passes; for its forward, FSDP2
all-gathers each into a plain tensor, ``FSDPParam._unsharded_param`` (a leaf
``nn.Parameter``, one object per parameter kept from the first all-gather on: later
all-gathers refill its storage), puts that on the module, and puts the shard back after
the forward. Autograd's graph holds the unsharded leaf, not the shard: a
``torch.autograd.grad`` with respect to it is the gradient of the full parameter,
which ``.backward()`` would accumulate into its ``.grad`` for FSDP's post-backward
reduce-scatter. Found through the private ``FSDPModule._get_fsdp_state()``,
``FSDPState._fsdp_param_groups``, ``FSDPParamGroup.fsdp_params`` and
``FSDPParam.sharded_param``/``_unsharded_param``; a torch without them warns once and
trace(backward=True) lists the sharded parameters without a gradient.
"""

from __future__ import annotations

import torch
from torch import nn

from hookscope.core.torch_private._warnings import _warn_once

__all__ = ["fsdp_unsharded_params"]


def fsdp_unsharded_params(model: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(sharded parameter, its unsharded parameter)`` for each parameter of ``model``
    that FSDP2 has all-gathered at least once (none before its first forward). Either
    may be on the module: the unsharded one from the forward until FSDP reshards
    (after the forward, or after the backward with ``reshard_after_forward=False``).
    A parameter whose unsharded form is itself a ``DTensor`` (FSDP with tensor
    parallelism) is left out: its norm would be a shard's."""
    found: list[tuple[torch.Tensor, torch.Tensor]] = []
    for module in model.modules():
        get_state = getattr(module, "_get_fsdp_state", None)
        if get_state is None:
            continue
        try:
            groups = get_state()._fsdp_param_groups
            for group in groups:
                for fsdp_param in group.fsdp_params:
                    unsharded = getattr(fsdp_param, "_unsharded_param", None)
                    if isinstance(unsharded, torch.Tensor) and \
                            not hasattr(unsharded, "device_mesh"):
                        found.append((fsdp_param.sharded_param, unsharded))
        except AttributeError:
            _warn_once("gradients of FSDP2's sharded parameters in trace(backward=True)",
                       "moved FSDP2's parameter state (FSDPParam._unsharded_param)")
            return []
    return found
