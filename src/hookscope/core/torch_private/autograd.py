"""autograd: node sequence numbers, the current node and graph task, the end-of-backward
queue, saved-tensor hooks, and what a tensor hook reads during a backward pass.

Private: ``torch._C._autograd._get_sequence_nr``, ``torch._C._current_autograd_node``,
``torch._C._current_graph_task_id``, the execution engine's ``queue_callback``,
``_top_saved_tensors_default_hooks``, a tensor's hook dict behind its handle
(:func:`hooks_first`), ``torch._C._will_engine_execute_node``
(:func:`accumulates_now`, :func:`node_runs_function`), a ``GradScaler``'s per-optimizer state
(:func:`scaler_found_inf`, :func:`scaler_scale`), the forward stack anomaly mode keeps on a node
(:func:`node_forward_stack`), a custom function's class behind its node
(:func:`custom_function_class`) and whether a hook handle's table still exists
(:func:`hook_table_alive`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from hookscope.core.torch_private._warnings import _warn_once

# -- autograd: sequence numbers, current node, graph tasks -----------------------------

_get_sequence_nr: Callable[[], int] | None = getattr(torch._C._autograd, "_get_sequence_nr", None)
_current_node: Callable[[], Any] | None = getattr(torch._C, "_current_autograd_node", None)
_graph_task_id: Callable[[], int] | None = getattr(torch._C, "_current_graph_task_id", None)

#: ``AccumulateGrad`` nodes carry this sequence number: they belong to no call.
NO_SEQUENCE_NR = 2**63


def next_sequence_nr() -> int | None:
    """The sequence number the next autograd node made on this thread will get."""
    if _get_sequence_nr is None:
        _warn_once("attributing backward work to module calls", "has no _get_sequence_nr")
        return None
    return _get_sequence_nr()


def current_autograd_node() -> Any:
    """The autograd node running now on this thread (``None`` outside a backward)."""
    if _current_node is None:
        _warn_once("attributing backward work to module calls", "has no _current_autograd_node")
        return None
    return _current_node()


def node_sequence_nr(node: Any) -> int | None:
    """``node._sequence_nr()``, ``None`` for a node without one (``AccumulateGrad``)."""
    seq = getattr(node, "_sequence_nr", None)
    if seq is None:
        return None
    value: int = seq()
    return None if value >= NO_SEQUENCE_NR else value


def current_graph_task_id() -> int | None:
    """The id of the autograd graph task (backward pass) running on this thread."""
    if _graph_task_id is None:
        _warn_once("telling backward passes apart", "has no _current_graph_task_id")
        return None
    task = _graph_task_id()
    return None if task == -1 else task


def graph_task_id_function() -> Callable[[], int]:
    """A function giving the id of the graph task (backward pass) running on this thread,
    ``-1`` for none: for the hooks, which ask on every module call."""
    if _graph_task_id is None:
        _warn_once("telling backward ops from forward ops", "has no _current_graph_task_id")
        return lambda: -1
    return _graph_task_id


def graph_task_running() -> bool:
    """Whether an autograd graph task (a backward pass) runs on this thread."""
    if _graph_task_id is None:
        _warn_once("telling backward ops from forward ops", "has no _current_graph_task_id")
        return False
    return _graph_task_id() != -1


def queue_end_of_backward(fn: Callable[[], None]) -> bool:
    """Run ``fn`` when the running backward pass ends (call from inside a backward).

    Returns False (and warns once) where the execution engine has no callback queue.
    """
    engine = getattr(torch.autograd.Variable, "_execution_engine", None)
    queue = getattr(engine, "queue_callback", None)
    if queue is None:
        _warn_once("end-of-backward events", "has no _execution_engine.queue_callback")
        return False
    queue(fn)
    return True


# -- saved tensors ----------------------------------------------------------------------

_top_hooks: Callable[[bool], Any] | None = getattr(
    torch._C._autograd, "_top_saved_tensors_default_hooks", None
)


def saved_tensor_default_hooks() -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """The saved-tensor hooks the user has active now (``save_on_cpu``), if any."""
    if _top_hooks is None:
        _warn_once(
            "wrapping the user's saved-tensor hooks", "has no _top_saved_tensors_default_hooks"
        )
        return None
    hooks = _top_hooks(False)
    return None if hooks is None else (hooks[0], hooks[1])


# -- a tensor's hooks, gradient accumulation, a GradScaler's overflow flags -------------


def hooks_first(handle: Any) -> bool:
    """Make the tensor hooks behind ``handle`` (``Tensor.register_hook``'s, or
    ``register_multi_grad_hook``'s: ``_MultiHandle.handles``) run before the hooks their
    tensors had: an input hook of a call (registered when the call starts) then runs
    before the output hook of the call that made the tensor (registered when that one
    ended), in the order autograd's work happens: the consumer's backward made the
    gradient, the producer's backward receives it.

    Private: a tensor's hooks are the ``OrderedDict`` the handle's ``hooks_dict_ref``
    points to, which autograd iterates in its insertion order (``move_to_end`` does not
    change that order: the dict is rebuilt). ``False``, with a warning, where that does
    not hold: the hooks then run in registration order."""
    for h in getattr(handle, "handles", None) or (handle,):
        ref, key = getattr(h, "hooks_dict_ref", None), getattr(h, "id", None)
        hooks = ref() if callable(ref) else None
        if not isinstance(hooks, dict) or key not in hooks:
            _warn_once("the order of backward events on one tensor",
                       "keeps a tensor's hooks where hookscope cannot reorder them")
            return False
        if next(iter(hooks)) == key:
            continue
        items = list(hooks.items())
        hooks.clear()
        hooks[key] = dict(items)[key]
        hooks.update((k, v) for k, v in items if k != key)
    return True


def scaler_found_inf(scaler: Any, optimizer: Any) -> list[torch.Tensor] | None:
    """After ``scaler.unscale_(optimizer)``: the scaler's per-device flags of an
    Inf/NaN among *all* the optimizer's gradients (device tensors, not read here), which
    decide whether ``scaler.step`` skips the step. ``None``, with a warning, where
    torch keeps them elsewhere (``GradScaler._per_optimizer_states``, private)."""
    try:
        found = scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
        flags = list(found.values())
    except (AttributeError, KeyError, TypeError):
        flags = None
    if flags is None or not all(isinstance(f, torch.Tensor) for f in flags):
        _warn_once("whether a GradScaler skipped a step (GradientMonitor(scaler=...))",
                   "keeps a GradScaler's overflow flags where hookscope cannot read them")
        return None
    return flags


def scaler_update_marker(scaler: Any) -> object | None:
    """An object that a ``GradScaler`` replaces each time its ``update()`` runs (its
    per-optimizer state table, ``_per_optimizer_states``, private), compared by
    identity; ``None`` where this torch keeps none."""
    return getattr(scaler, "_per_optimizer_states", None)


_NO_SCALE = object()


def scaler_scale(scaler: Any) -> torch.Tensor | None:
    """A ``GradScaler``'s current loss scale as its device tensor (``scaler._scale``,
    private; ``get_scale()`` reads it to the host); ``None`` before its first
    ``scale()``. Where torch keeps the scale elsewhere: ``get_scale()`` read to the
    host, with a warning (it gives the initial scale before the first ``scale()``)."""
    scale = getattr(scaler, "_scale", _NO_SCALE)
    if scale is _NO_SCALE:
        _warn_once("the speed of a GradScaler's loss scale (GradientMonitor(scaler=...))",
                   "keeps a GradScaler's loss scale where hookscope cannot read it")
        get_scale = getattr(scaler, "get_scale", None)
        return torch.tensor(float(get_scale())) if callable(get_scale) else None
    return scale if isinstance(scale, torch.Tensor) else None


_will_run: Callable[[Any], bool] | None = getattr(torch._C, "_will_engine_execute_node", None)


def node_runs_function() -> Callable[[Any], bool] | None:
    """``runs(node)``, read in a tensor hook during a backward pass: whether this pass
    runs ``node`` (a non-leaf tensor's ``grad_fn``). It is False for the node a pass
    starts from when nothing else reaches it (``out.backward(g)``: torch's own
    ``register_multi_grad_hook`` then waits for a gradient that never comes); ``None``
    where this torch cannot tell (the caller falls back on torch's multi-grad hook)."""
    if _will_run is None:
        _warn_once("backward events of calls with several outputs",
                   "has no _will_engine_execute_node")
    return _will_run


def accumulates_now(p: torch.Tensor) -> bool | None:
    """Read in a tensor hook on the leaf ``p`` during a backward pass: whether this pass
    accumulates into ``p.grad`` (its ``AccumulateGrad`` node runs: ``.backward()``),
    False when it does not (``torch.autograd.grad``, ``backward(inputs=...)`` without
    ``p``); ``None`` when this torch cannot tell (the caller keeps the gradient, which
    costs autograd a copy of it, and warns once). Uses
    ``torch._C._will_engine_execute_node``, which refuses a leaf's node inside
    ``autograd.grad`` (that refusal is the answer: it never accumulates)."""
    try:
        from torch.autograd.graph import get_gradient_edge

        node = get_gradient_edge(p).node
        will_run = torch._C._will_engine_execute_node
    except (ImportError, AttributeError, RuntimeError) as e:
        _warn_once("the memory of gradient recording (grads=True, on_param_grad)",
                   f"cannot tell whether a backward accumulates a gradient ({e})")
        return None
    try:
        return bool(will_run(node))
    except RuntimeError as e:
        if "autograd.grad" in str(e):
            return False
        _warn_once("the memory of gradient recording (grads=True, on_param_grad)",
                   f"cannot tell whether a backward accumulates a gradient ({e})")
        return None


def node_forward_stack(node: Any) -> list[str] | None:
    """The forward stack anomaly mode recorded when autograd ``node`` was made
    (``torch.autograd.set_detect_anomaly(True)`` on at the time): formatted frames,
    outermost first, each ``'  File "f.py", line 5, in forward\\n    code\\n'``.
    ``None`` when none was recorded; with a warning where torch keeps it elsewhere
    (``node.metadata["traceback_"]``, private)."""
    metadata = getattr(node, "metadata", None)
    if not isinstance(metadata, dict):
        _warn_once("the forward line of a backward node", "keeps no node.metadata dict")
        return None
    stack = metadata.get("traceback_")
    if stack is None:
        return None
    if not isinstance(stack, list) or not all(isinstance(f, str) for f in stack):
        _warn_once("the forward line of a backward node",
                   "keeps anomaly mode's forward stack in another form")
        return None
    return stack


def custom_function_class(node: Any) -> type | None:
    """The ``torch.autograd.Function`` subclass whose ``apply`` made ``node`` (its
    ``MyFnBackward`` node), ``None`` for a built-in op's node. Private: the class is
    the node class's ``_forward_cls``."""
    cls = getattr(node, "_forward_cls", None)
    return cls if isinstance(cls, type) else None


def hook_table_alive(handle: Any) -> bool:
    """Whether the hooks behind ``handle`` (a ``RemovableHandle``) still exist: the
    table of an autograd node that was freed is gone, and its handle need not be kept.
    Private: the handle's weak ``hooks_dict_ref``; ``True`` (keep it) where it has none."""
    ref = getattr(handle, "hooks_dict_ref", None)
    return not callable(ref) or ref() is not None
