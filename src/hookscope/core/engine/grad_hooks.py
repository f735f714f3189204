"""The hooks on tensors' gradients that backward events come from
(:class:`~hookscope.core.engine.backward.BackwardWatch`): which tensors of a call to watch
(:func:`needing_grad`, :func:`leaves_of`), hooks for when the gradients of all of them
are known (:func:`on_gradients`), and the hooks on leaves (:func:`hook_leaves`).

Leaves get hooks of their own: ``torch.autograd.graph.register_multi_grad_hook``
cannot watch a leaf while ``torch.autograd.grad`` runs (torch raises). A call whose inputs
needing grad are all leaves (the model's own input with ``requires_grad=True``) ends its
backward when the last of their gradients arrives; a call that returns a leaf as it is
(``nn.Identity`` on that input, a module returning its parameter) starts it then.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.autograd.graph import register_multi_grad_hook

from hookscope.core import torch_private
from hookscope.core.engine.handles import HandleGroup


def needing_grad(tensors: Iterable[tuple[str, torch.Tensor]]) -> list[torch.Tensor]:
    """Tensors that require grad and were computed (have a ``grad_fn``).

    Leaves are left out: ``register_multi_grad_hook`` cannot watch a leaf while
    ``torch.autograd.grad`` runs (torch raises). A call whose inputs needing grad are all
    leaves (the model's own input with ``requires_grad=True``) is watched by a tensor
    hook on each instead (:func:`hook_leaves`).

    Each tensor once: one passed or returned several times (``mha(x, x, x)``) gets the
    whole gradient in each of its hooks: counted k times, the norm of them all would
    be sqrt(k) too large.
    """
    return once([t for _, t in tensors if t.requires_grad and t.grad_fn is not None])


def leaves_of(tensors: Iterable[tuple[str, torch.Tensor]]) -> list[torch.Tensor]:
    return once([t for _, t in tensors if t.requires_grad and t.grad_fn is None])


def once(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """``tensors`` without repeats (by identity, in order)."""
    return list({id(t): t for t in tensors}.values())  # a dict keeps the first order


def on_gradients(
    tensors: list[torch.Tensor], fn: Callable[[tuple[Any, ...]], None]
) -> list[Any]:
    """Hooks calling ``fn(grads)`` once per backward pass, when the gradients of all of
    the non-leaf ``tensors`` this pass computes are known (``None`` for the others);
    their handles.

    Not ``register_multi_grad_hook``, which never fires for the tensor a backward
    starts from (``out.backward(g)``, a model that returns its loss): it counts the
    gradients to wait for with ``torch._C._will_engine_execute_node``, False for the
    node a pass starts from; with the loss and the logits (a transformers model's
    output) it fires twice, once for each. Here the tensor whose hook fires first
    counts as computed, and a pass delivers once. One tensor gets a plain hook."""
    if len(tensors) == 1:
        return [tensors[0].register_hook(  # type: ignore[no-untyped-call]
            lambda grad: fn((grad,)))]  # returns None: the gradient is unchanged
    runs = torch_private.node_runs_function()
    if runs is None:  # this torch cannot tell: its own hook (roots unseen)
        return [register_multi_grad_hook(tensors, lambda grads: fn(tuple(grads)))]
    nodes = [t.grad_fn for t in tensors]
    lock = threading.Lock()  # hooks run on autograd's device threads
    waiting: dict[int | None, tuple[list[Any], list[int]]] = {}  # pass -> grads, expected
    delivered: set[int | None] = set()

    def arrived(i: int, grad: torch.Tensor) -> None:
        task = torch_private.current_graph_task_id()
        with lock:
            if task in delivered:
                return
            if task not in waiting:  # the first of this pass: this one's node runs
                expected = sum(j == i or runs(n) for j, n in enumerate(nodes))
                waiting[task] = ([None] * len(nodes), [expected])
            grads, left = waiting[task]
            grads[i] = grad
            left[0] -= 1
            if left[0] > 0:
                return
            del waiting[task]
            delivered.add(task)
        fn(tuple(grads))

    return [t.register_hook(lambda g, i=i: arrived(i, g))  # type: ignore[no-untyped-call]
            for i, t in enumerate(tensors)]


def hook_leaves(
    leaves: list[torch.Tensor], deliver: Callable[[tuple[Any, ...]], None],
    spend: Callable[[list[Any]], None], handles: HandleGroup,
) -> Callable[[], None]:
    """A hook on each of ``leaves``; when the last gradient arrives, ``deliver(grads)``
    (in the order of ``leaves``) and ``spend(hooks)``: hooks to remove once the backward
    pass ends (a leaf is the user's tensor: its hooks must not pile up over the steps of
    a long ``Tracer`` block). Every hook is in ``handles`` too (removed when the tracer
    ends). Hooked now; the function returned hooks them again (a later pass over a
    retained graph: ``backward(retain_graph=True)`` twice), unless they are hooked
    already or one of the leaves is gone: they are held weakly meanwhile.

    Hook a call's leaves when the call ends: an inner call's hooks on the same leaf
    (registered earlier) then run first, and the inner call ends first, as it should.
    NB: hooked again as each call is entered, the outer call's hook comes first in that
    pass, and it ends a moment before the inner one."""
    # a parameter (the model's own, alive as long as it) is held as it is: a weak
    # reference would make torch.utils.swap_tensors refuse it (``Module._apply``)
    refs = [t if isinstance(t, torch.nn.Parameter) else weakref.ref(t) for t in leaves]
    count = len(leaves)
    armed = [False]

    def arm() -> None:
        found = [r if isinstance(r, torch.Tensor) else r() for r in refs]
        tensors = [t for t in found if t is not None]
        if armed[0] or len(tensors) < count:
            return
        armed[0] = True
        grads: dict[int, torch.Tensor] = {}
        hooks: list[Any] = []

        def arrived(i: int, grad: torch.Tensor) -> None:
            if not armed[0]:
                return  # ended already: removed at the end of the pass
            grads[i] = grad
            if len(grads) == count:
                armed[0] = False
                deliver(tuple(grads[j] for j in range(count)))
                spend(hooks)

        for i, leaf in enumerate(tensors):
            handle = leaf.register_hook(  # type: ignore[no-untyped-call]
                lambda g, i=i: arrived(i, g))  # returns None: the gradient is unchanged
            hooks.append(handle)
            handles.add(handle)

    arm()
    return arm
