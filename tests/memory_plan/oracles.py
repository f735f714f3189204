"""Independent measurements a memory plan is checked against: a real training step on
the CPU whose live storages a dispatch mode written here counts.

The measured step follows the loop the plan describes: one full step first (so the
optimizer's states exist), then, measured: forward, the loss, backward and the
optimizer step, the outputs alive until the step ends.
"""

from __future__ import annotations

import copy
import functools
import weakref
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.checkpoint import checkpoint


class LiveStorages(TorchDispatchMode):
    """Counts the bytes of every storage alive; the highest count is the peak."""

    def __init__(self) -> None:
        super().__init__()
        self.alive: dict[int, int] = {}
        self.refs: dict[int, Any] = {}
        self.now = 0
        self.peak = 0

    def add(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        key = storage.data_ptr() or id(storage)
        if key in self.alive:
            return
        self.alive[key] = storage.nbytes()
        self.now += storage.nbytes()
        self.peak = max(self.peak, self.now)
        self.refs[key] = weakref.ref(storage, lambda _r, key=key: self.drop(key))

    def drop(self, key: int) -> None:
        self.now -= self.alive.pop(key)
        del self.refs[key]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.add(t)
        return out


def no_cache(model: nn.Module) -> None:
    """No key-value cache in a training step (as the plan, and as transformers does
    under gradient checkpointing)."""
    if getattr(getattr(model, "config", None), "use_cache", None):
        model.config.use_cache = False


def loss_of(output: Any) -> torch.Tensor:
    leaves = [t for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.requires_grad]
    total = leaves[0].sum()
    for t in leaves[1:]:
        total = total + t.sum()
    return total


def measured_peak(model: nn.Module, inputs: tuple[Any, ...], optimizer: type[torch.optim.Optimizer],
                  *, checkpointed: tuple[str, ...] = ()) -> int:
    """The peak bytes of a real steady-state training step of a copy of ``model``."""
    model = copy.deepcopy(model).train()
    no_cache(model)
    for path, module in model.named_modules():
        if path in checkpointed:
            module.forward = functools.partial(checkpoint, module.forward, use_reentrant=False)
    opt = optimizer(model.parameters(), lr=1e-3)
    loss_of(model(*inputs)).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    live = LiveStorages()
    with live:
        states = [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
        for t in [*model.parameters(), *model.buffers(), *tree_leaves(inputs), *states]:
            if isinstance(t, torch.Tensor):
                live.add(t)
        out = model(*inputs)
        loss = loss_of(out)
        loss.backward()
        del loss
        opt.step()
        del out
    return live.peak
