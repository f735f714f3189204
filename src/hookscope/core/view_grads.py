"""The gradient of a view that was modified in place after a call saw it.

``nn.Linear`` on a 3-D input returns a view of its matmul's result; a
``ReLU(inplace=True)`` (or ``out += residual``) after it rebases the view onto a new
autograd node. torch then never runs the tensor hooks registered on the view before
the in-place op, nor its old node: the backward events of the call that returned the
view (and of the call that received it) were lost.

The gradient is still there one node further: the view's base's own node receives the
gradient with respect to the base as it was before the in-place op, and the view's
elements are a region of it. :func:`watch_through_base` registers a pre-hook there that
hands the call that region, once per backward pass, unless the view's own hook fired
first in that pass (no in-place op happened: the usual path).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from hookscope.core import torch_private
from hookscope.core.handles import HandleGroup

Fire = Callable[[Sequence[Any]], None]
"""What a backward watch hands the gradients of the tensors it watches to."""


def fired_once(fire: Fire) -> tuple[Fire, Fire]:
    """``fire`` for the view's own hook, and the same for its base's node: whichever
    comes first in a backward pass runs."""
    seen: list[int | None] = [None]

    def own(grads: Sequence[Any]) -> None:
        seen[0] = torch_private.current_graph_task_id()
        fire(grads)

    def through_base(grads: Sequence[Any]) -> None:
        task = torch_private.current_graph_task_id()
        if task is not None and seen[0] == task:
            return  # the view's own hook fired in this pass: no in-place op happened
        seen[0] = task
        fire(grads)

    return own, through_base


def watch_through_base(view: torch.Tensor, fire: Fire, handles: HandleGroup) -> bool:
    """Hand ``fire`` the gradient of ``view`` (a 1-tuple) from its base's node; whether
    it could be watched (a contiguous base made by an op, ``view`` a region of it)."""
    base = view._base
    node = None if base is None else base.grad_fn
    if base is None or node is None or not base.is_contiguous():
        return False
    size, stride = view.size(), view.stride()
    offset, index = view.storage_offset() - base.storage_offset(), base.output_nr

    def pre_hook(grad_outputs: tuple[Any, ...]) -> None:
        grad = grad_outputs[index] if index < len(grad_outputs) else None
        if isinstance(grad, torch.Tensor):
            with torch.no_grad():
                fire((grad.contiguous().as_strided(size, stride, offset),))

    handles.add(node.register_prehook(pre_hook))
    return True
