"""Backward events: the gradients of each call's outputs and inputs, and of each parameter.

The tracer (``core/engine/tracer.py``) hands every module call to :class:`BackwardWatch` when a
probe receives a call's backward events (``on_backward_enter``/``on_backward_exit``),
and watches parameters when one receives ``on_param_grad``; each event goes only to
the probes that override it:

- when the call starts, its inputs that require grad get one
  ``torch.autograd.graph.register_multi_grad_hook``: it fires once autograd has the
  gradient of all of them, the end of that call's backward (``on_backward_exit``;
  only when a probe takes that event);
- when the call ends, its outputs that require grad get another: it fires once the
  gradient of all of them is known, the start of its backward (``on_backward_enter``);
  tensor hooks counted as ``grad_hooks.on_gradients`` says (torch's multi-grad hook
  never fires for the tensor a backward starts from: a model that returns its loss).

A probe gets ``on_backward_exit`` only after ``on_backward_enter`` for the same call: a
call whose outputs get no gradient (unused, or not differentiable) has no backward,
even when its inputs get one from other branches.

This is how ``torch.utils.module_tracker`` follows the backward, and unlike full
backward module hooks it works with in-place ops (torchvision's
``ReLU(inplace=True)``): the input hook is attached before the op modifies the tensor.
A call whose inputs need no gradient (the first layer, an embedding of token ids), or
are all leaves, exits when the backward pass ends.

Parameters get a gradient hook (fires for ``.backward()`` and ``torch.autograd.grad``)
and a post-accumulate-grad hook (``.backward()`` only): a parameter's event is sent
once per backward, in backward order: after accumulation when there is one
(``ParamGrad.accumulated``), else when its gradient is computed (at the end of the
backward where torch cannot tell which).

Every hook is a handle in the tracer's ``HandleGroup``: removed when the tracer ends
(the backward it watches has run by then; one run after the ``with`` block is not
observed). :class:`~hookscope.core.engine.node_owners.NodeOwners` answers which call's forward
made an autograd node, from autograd's sequence numbers: the engine's knowledge, for
every probe.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from itertools import pairwise
from typing import Any

import torch
from torch.autograd.graph import register_multi_grad_hook

from hookscope.core import torch_private
from hookscope.core.engine.grad_hooks import hook_leaves, leaves_of, needing_grad, on_gradients
from hookscope.core.engine.handles import HandleGroup
from hookscope.core.engine.node_owners import NodeOwners, OwnEnds, hook_own_nodes
from hookscope.core.records.tensor_paths import iter_call_inputs, iter_tensors
from hookscope.core.records.trace import Call
from hookscope.core.records.values import ParamGrad

Dispatch = Callable[[str, Call | None, Any], None]
"""``dispatch(event, call, payload)``: the tracer's delivery of one backward event."""


class BackwardWatch:
    """Registers the backward hooks of module calls and parameters; delivers events."""

    def __init__(
        self, dispatch: Dispatch, handles: HandleGroup, *, inputs: bool = True,
        clock: Callable[[int], int] | None = None,
    ) -> None:
        self._dispatch = dispatch
        self._handles = handles
        self._inputs = inputs  # a probe wants on_backward_exit: watch the calls' inputs
        # the backward overhead clock (Tracer.backward_overhead_now), read when a call's
        # own node finishes; without it, or without sequence numbers, no own ends
        self._clock = clock
        self._starts: dict[int, int] = {}  # call index -> its first node's sequence number
        # which call made each node (by sequence number), and each call's enclosing ones
        self._makers = NodeOwners() if clock is not None else None
        self._ancestry: dict[int, tuple[int, ...]] = {}  # call index -> it, parent, ...
        # call index -> (graph task, when its last own node finished, the clock then)
        self._own_ends: dict[int, tuple[int | None, int, int]] = {}
        self._ends_lock = threading.Lock()  # nodes finish on autograd's device threads
        # Each entry is tagged with the backward pass (graph task) it came in: a pass may
        # run inside another (a reentrant checkpoint's backward), and each one's end
        # closes only what is its own.
        # call index -> the call whose backward started and has not ended, its pass
        self._open: dict[int, tuple[Call, int | None]] = {}
        # id(param) -> its pass, its gradient not yet accumulated
        self._pending: dict[int, tuple[int | None, ParamGrad]] = {}
        self._queued: set[int | None] = set()  # passes whose end is queued and not run
        # call index -> its pass, the exit that came before its enter
        self._early: dict[int, tuple[int | None, tuple[Any, ...]]] = {}
        self._leaf_inputs: dict[int, list[torch.Tensor]] = {}  # call index -> leaf inputs
        self._without_grad: set[int] = set()  # calls whose forward ran without grad
        self._spent: list[Any] = []  # hooks on leaves whose call ended: removed at the end
        # call index -> hooks its leaf inputs again (``_watch_leaves``)
        self._rearm: dict[int, Callable[[], None]] = {}

    # -- module calls ----------------------------------------------------------------

    def watch_inputs(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not self._inputs or not torch.is_grad_enabled():
            return
        if self._makers is not None:
            start = torch_private.next_sequence_nr()
            if start is not None:
                self._starts[call.index] = start
                self._makers.mark(call.index)
                parent = () if call.parent is None else self._ancestry.get(call.parent, ())
                self._ancestry[call.index] = (call.index, *parent)
        self._hook_inputs(call, args, kwargs)

    def _hook_inputs(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        inputs = list(iter_call_inputs(args, kwargs))
        tensors = needing_grad(inputs)
        if tensors:
            handle = register_multi_grad_hook(tensors, lambda grads: self._exit(call, tuple(grads)))
            self._handles.add(handle)
            # before the output hook of the call that made an input (and an enclosing
            # call's input hook): this call's backward made the gradient it sees
            torch_private.hooks_first(handle)
        elif leaves := leaves_of(inputs):  # hooked when the call ends (watch_outputs)
            self._leaf_inputs[call.index] = leaves

    def forget(self, call: Call) -> None:
        """``call`` raised: it has no outputs to watch."""
        self._starts.pop(call.index, None)
        self._leaf_inputs.pop(call.index, None)
        if self._makers is not None:
            self._makers.mark(call.parent)

    def watch_outputs(self, call: Call, output: Any) -> None:
        if self._queued:  # a forward runs: no backward pass does, one that raised left these
            self._forget_failed_passes()
        start = self._starts.pop(call.index, None)
        if self._makers is not None:
            self._makers.mark(call.parent)  # from now on, nodes are the parent's
        leaves = self._leaf_inputs.pop(call.index, None)
        if not torch.is_grad_enabled():
            self._without_grad.add(call.index)  # a recompute may hook it (see below)
            return
        self._hook_outputs(call, output, leaves, start)

    def _hook_outputs(
        self, call: Call, output: Any, leaves: list[torch.Tensor] | None, start: int | None,
    ) -> None:
        if leaves:
            self._watch_leaves(call, leaves)
        outputs = list(iter_tensors(output, "out"))
        tensors = needing_grad(outputs)
        if tensors:
            self._handles.extend(on_gradients(tensors, lambda grads: self._enter(call, grads)))
            if start is not None and call.parent is None:  # the graph of a whole forward
                self._watch_nodes(tensors, start)
        elif out_leaves := leaves_of(outputs):  # returned a leaf as it is (its input, a parameter)
            self._watch_leaves(call, out_leaves, entering=True)

    # -- calls recomputed by a backward pass ------------------------------------------

    def watch_recomputed_inputs(
        self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """A backward pass runs ``call``'s forward again (``core/engine/recompute.py``): a
        call whose forward ran without grad (inside a ``use_reentrant=True``
        checkpoint) gets its backward hooks on the recompute's graph, the one the
        backward then runs. NB: no sequence numbers are marked (the recompute may run on
        one of autograd's device threads): such a call's backward ends when the
        gradient of its inputs is known."""
        if self._inputs and call.index in self._without_grad:
            self._hook_inputs(call, args, kwargs)

    def watch_recomputed_outputs(self, call: Call, output: Any) -> None:
        """The recompute of ``call`` ended (see :meth:`watch_recomputed_inputs`)."""
        if call.index in self._without_grad:
            self._hook_outputs(call, output, self._leaf_inputs.pop(call.index, None), None)

    def _watch_nodes(self, outputs: list[torch.Tensor], start: int) -> None:
        """Time the end of every node a top-level call's forward made, for the call that
        made it and every call enclosing it (:func:`~hookscope.core.engine.node_owners.
        hook_own_nodes`, read by :meth:`own_end`)."""
        assert self._clock is not None and self._makers is not None
        hook_own_nodes(
            outputs, start, self._makers, self._ancestry, self._handles,
            OwnEnds(self._own_ends, self._ends_lock, self._clock),
        )

    def failed_in(self, calls: list[Call]) -> Call | None:
        """Read right after a backward pass raised: the innermost call whose backward
        was running, when the calls whose backward had started and not ended are one
        chain (each inside the one before); ``None`` when they are not (parallel
        branches: which one raised is not known) or there are none."""
        chain = sorted((c for c, _ in self._open.values()), key=lambda c: c.index)
        for outer, inner in pairwise(chain):
            parent = inner.parent
            while parent is not None and parent != outer.index:
                parent = calls[parent].parent
            if parent is None:
                return None
        return chain[-1] if chain else None

    def own_end(self, call: Call) -> tuple[int, int] | None:
        """When the last autograd node made by ``call``'s forward finished in the backward
        running now (``perf_counter_ns``), and the backward overhead clock then;
        ``None`` when none has (or the engine cannot tell which nodes are its own)."""
        found = self._own_ends.get(call.index)  # every probe reads it: cleared at the end
        if found is None or found[0] != torch_private.current_graph_task_id():
            return None  # none yet, or from an earlier backward pass of the graph
        return found[1], found[2]

    def _watch_leaves(
        self, call: Call, leaves: list[torch.Tensor], *, entering: bool = False
    ) -> None:
        """Hook ``call``'s leaf inputs (``entering``: its leaf outputs) as
        :func:`~hookscope.core.leaf_hooks.hook_leaves` says."""

        def deliver(grads: tuple[Any, ...]) -> None:
            (self._enter if entering else self._exit)(call, grads)

        def spend(handles: list[Any]) -> None:
            self._spent += handles  # the attribute, not a local: _end rebinds it

        arm = hook_leaves(leaves, deliver, spend, self._handles)
        if not entering:
            self._rearm[call.index] = arm

    def _enter(self, call: Call, grads: tuple[Any, ...]) -> None:
        task = self._queue_end()
        self._open[call.index] = (call, task)
        rearm = self._rearm.get(call.index)
        if rearm is not None:  # a later pass over a retained graph: its leaves again
            rearm()
        self._dispatch("on_backward_enter", call, grads)
        early = self._early.pop(call.index, None)
        if early is not None and early[0] == task:
            # a call that returned its input: both hooks on one tensor
            self._open.pop(call.index, None)
            self._dispatch("on_backward_exit", call, early[1])

    def _exit(self, call: Call, grads: tuple[Any, ...]) -> None:
        task = self._queue_end()
        if self._open.pop(call.index, None) is None:
            # Not entered: either its outputs get no gradient (unused, not
            # differentiable: it has no backward, its inputs' gradient came from other
            # branches; dropped at the end of the pass), or it returned its input
            # (``nn.Identity``), whose input hook fires just before its output hook
            self._early[call.index] = (task, grads)
            return
        self._dispatch("on_backward_exit", call, grads)

    # -- parameters --------------------------------------------------------------------

    def watch_parameters(self, named: Iterable[tuple[str, torch.nn.Parameter]]) -> None:
        for path, p in named:
            if not p.requires_grad:
                continue
            grad_hook, accumulated_hook = self._grad_hook(path, p), self._accumulated_hook(path)
            self._handles.add(p.register_hook(grad_hook))  # type: ignore[no-untyped-call]
            self._handles.add(
                p.register_post_accumulate_grad_hook(accumulated_hook)  # type: ignore[no-untyped-call]
            )

    def _grad_hook(self, path: str, p: torch.Tensor) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            task = self._queue_end()
            # a gradient kept here costs autograd a copy when it accumulates it (it
            # steals only a gradient nobody else holds): delivered now when no
            # accumulation follows (``torch.autograd.grad``), in backward order as the
            # accumulated ones are; kept for the end of the pass when torch cannot tell
            accumulates = torch_private.accumulates_now(p)
            if accumulates is False:
                self._dispatch("on_param_grad", None, ParamGrad(path, p, grad, False))
            elif accumulates is None:
                self._pending[id(p)] = (task, ParamGrad(path, p, grad, False))

        return hook

    def watch_unsharded(self, named: Iterable[tuple[str, torch.Tensor, torch.Tensor]]) -> None:
        """A hook on each ``(path, sharded, unsharded)``'s unsharded tensor (FSDP2's
        all-gathered parameter, ``torch_private.fsdp_unsharded_params``), for a
        ``torch.autograd.grad`` with respect to it: its gradient, the full parameter's,
        is delivered as the sharded parameter's."""
        for path, param, unsharded in named:
            self._handles.add(unsharded.register_hook(  # type: ignore[no-untyped-call]
                self._unsharded_hook(path, param)))

    def _unsharded_hook(self, path: str, p: torch.Tensor) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            self._queue_end()
            self._dispatch("on_param_grad", None, ParamGrad(path, p, grad, False))

        return hook

    def _accumulated_hook(self, path: str) -> Callable[[torch.Tensor], None]:
        def hook(p: torch.Tensor) -> None:
            self._pending.pop(id(p), None)
            self._dispatch("on_param_grad", None, ParamGrad(path, p, p.grad, True))

        return hook

    # -- the end of a backward pass ---------------------------------------------------

    def _queue_end(self) -> int | None:
        """Queue :meth:`_end` once per backward pass; the pass running now.

        By the pass's id, not a flag: a pass may run inside another (the backward of
        a ``use_reentrant=True`` checkpoint runs its own), and each ends on its own.
        Autograd runs queued callbacks only when a pass succeeds: what a pass that raised
        left is dropped when the next forward runs (:meth:`_forget_failed_passes`)."""
        task = torch_private.current_graph_task_id()
        if task not in self._queued and torch_private.queue_end_of_backward(
            lambda: self._end(task)
        ):
            self._queued.add(task)
        return task

    def _end(self, task: int | None) -> None:
        """The end of the backward pass ``task``: its calls whose inputs needed no
        gradient end here, and its parameters whose gradient was computed but not
        accumulated (``torch.autograd.grad``). A pass that began inside it and raised
        (its exception caught there) is dropped."""
        self._queued.discard(task)
        dropped = {t for t in self._queued if t is not None and task is not None and t > task}
        self._queued -= dropped
        ended = dropped | {task}
        # calls whose outputs got no gradient: no backward
        self._early = {i: e for i, e in self._early.items() if e[0] not in ended}
        spent, self._spent = self._spent, []
        for handle in spent:  # after the pass: autograd no longer runs these hooks
            handle.remove()
        pending = [g for t, g in self._pending.values() if t == task]
        self._pending = {k: v for k, v in self._pending.items() if v[0] not in ended}
        for grad in pending:
            self._dispatch("on_param_grad", None, grad)
        still_open = [c for c, t in self._open.values() if t == task]
        self._open = {i: o for i, o in self._open.items() if o[1] not in ended}
        try:
            for call in sorted(still_open, key=lambda c: -c.index):
                self._dispatch("on_backward_exit", call, ())
        finally:
            ends = self._own_ends  # in place: the node hooks hold this dict
            with self._ends_lock:  # nodes that finished after their call's exit
                for i in [i for i, e in ends.items() if e[0] in ended]:
                    del ends[i]

    def _forget_failed_passes(self) -> None:
        """Drop what the backward passes that raised left (their ends never ran)."""
        if torch_private.graph_task_running():
            return
        self._queued.clear()
        self._pending.clear()
        self._open.clear()
        self._early.clear()
        with self._ends_lock:
            self._own_ends.clear()
