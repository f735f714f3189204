"""The model and its inputs as fake tensors: what a memory plan runs instead of them.

:func:`fake_model` copies the user's model (``copy.deepcopy`` with every parameter,
buffer and tensor attribute replaced by a fake tensor of the same shape, stride and
class, through :func:`hookscope.core.meta.copy_with_tensors`), so the plan steps an
optimizer on tensors that hold no data and never touches the user's parameters or
their ``.grad``. A model built on the meta device is copied the same way: its fake
copy lives on the CPU, whose kernels (and autocast) decide the shapes and saved tensors.

:func:`fake_inputs` does the same for the example inputs, with the batch dimension
(the first dimension of every tensor that shares the first tensor's) set to a chosen
size, which the batch-size search changes without building anything real.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from hookscope.core.meta import copy_with_tensors
from hookscope.core.torch_private import pytree
from hookscope.errors import SpecError

CPU = torch.device("cpu")


def _cast(dtype: torch.dtype | None, t: torch.Tensor) -> torch.dtype:
    return dtype if dtype is not None and t.is_floating_point() else t.dtype


def _fake_like(t: torch.Tensor, mode: Any, dtype: torch.dtype | None,
               size: tuple[int, ...] | None = None) -> torch.Tensor:
    """A fake CPU tensor like ``t`` (``size`` instead of its own, contiguous)."""
    with mode:
        if size is None:
            fake = torch.empty_strided(t.size(), t.stride(), dtype=_cast(dtype, t), device=CPU)
        else:
            fake = torch.empty(size, dtype=_cast(dtype, t), device=CPU)
    return fake


def fake_model(model: nn.Module, mode: Any, *, dtype: torch.dtype | None) -> nn.Module:
    """A copy of ``model`` made of fake tensors (floating ones cast to ``dtype``).

    Raises:
        SpecError: a parameter is lazy (not yet materialised), or a submodule is
            TorchScript.
    """
    for path, module in model.named_modules():
        if isinstance(module, torch.jit.ScriptModule):
            raise SpecError(f"memory_plan cannot copy the TorchScript submodule {path!r}; "
                            "plan the model before scripting it")
    for name, p in model.named_parameters():
        if is_lazy(p):
            raise SpecError(f"parameter {name!r} is lazy (not materialised yet); run the "
                            "model once on an example input before planning its memory")

    def convert(t: torch.Tensor) -> torch.Tensor:
        fake = _fake_like(t, mode, dtype)
        if isinstance(t, nn.Parameter):
            with mode:
                param = nn.Parameter(fake, requires_grad=t.requires_grad)
            param.__dict__.update(t.__dict__)
            return param
        return fake

    return copy_with_tensors(model, convert)


def batch_size_of(inputs: Any) -> int | None:
    """The first dimension of the first tensor with one in ``inputs`` (``None``: none)."""
    for leaf in pytree.tree_leaves(inputs):
        if isinstance(leaf, torch.Tensor) and leaf.dim() > 0:
            return int(leaf.shape[0])
    return None


def fake_inputs(inputs: Any, mode: Any, *, dtype: torch.dtype | None,
                batch_size: int | None = None) -> Any:
    """``inputs`` with every tensor replaced by a fake one; with ``batch_size``, tensors
    whose first dimension is the batch's get that many rows instead."""
    batch = batch_size_of(inputs)

    def convert(leaf: Any) -> Any:
        if not isinstance(leaf, torch.Tensor):
            return leaf
        size = None
        if batch_size is not None and leaf.dim() > 0 and leaf.shape[0] == batch:
            size = (batch_size, *leaf.shape[1:])
        fake = _fake_like(leaf, mode, dtype, size)
        return fake.requires_grad_(leaf.requires_grad) if fake.is_floating_point() else fake

    converted: Callable[[Any], Any] = convert
    return pytree.tree_map(converted, inputs)
