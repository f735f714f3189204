"""Which module call made each autograd node: sequence numbers, by call.

The tracer marks, at every call start and end, the sequence number autograd gives its
next node (``torch_private.next_sequence_nr``); a node made later belongs to the call
marked last before it. Used by the ops probe (which call a backward op belongs to) and by
:class:`~hookscope.core.engine.backward.BackwardWatch` (which call's own nodes end its backward:
:func:`hook_own_nodes`).
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any, NamedTuple

import torch

from hookscope.core import torch_private
from hookscope.core.engine.handles import HandleGroup


class NodeOwners:
    """Which call was innermost when an autograd node with a given sequence number was made.

    The tracer calls :meth:`mark` at every call start (with the call) and end (with its
    parent): nodes made from then on belong to that call. Only integers are kept, never
    graph nodes or tensors.
    """

    __slots__ = ("_cache", "_calls", "_starts")

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._calls: list[int | None] = []
        self._cache: dict[int, int | None] = {}
        self.mark(None)

    def mark(self, call: int | None) -> None:
        """From now on, new nodes belong to ``call``."""
        seq = torch_private.next_sequence_nr()
        if seq is not None:
            self._starts.append(seq)
            self._calls.append(call)

    def owner(self, node: Any) -> int | None:
        """The index of the call whose forward made ``node`` (``None``: no call)."""
        if node is None or not self._starts:
            return None
        seq = torch_private.node_sequence_nr(node)
        if seq is None:
            return None
        found = self._cache.get(seq, -1)
        if found == -1:
            i = bisect_right(self._starts, seq) - 1
            found = self._calls[i] if i >= 0 else None
            self._cache[seq] = found
        return found


class OwnEnds(NamedTuple):
    """Where :func:`hook_own_nodes` writes when each call's own nodes finished."""

    ends: dict[int, tuple[int | None, int, int]]
    """call index -> (the backward pass, when its last own node finished, the clock then)"""
    lock: threading.Lock
    """nodes finish on autograd's device threads"""
    clock: Callable[[int], int]
    """the backward overhead clock at a ``perf_counter_ns`` time"""


def hook_own_nodes(
    outputs: list[torch.Tensor], start: int, makers: NodeOwners,
    ancestry: dict[int, tuple[int, ...]], handles: HandleGroup, own: OwnEnds,
) -> None:
    """Hook every autograd node a top-level call's forward made (sequence number
    ``start`` or later, reached from its ``outputs``), once, for the call that made it
    (``makers``): when it finishes, it is the latest own node of that call and of every
    call enclosing it (``ancestry``: call index -> it, its parent, ...), written to
    ``own.ends`` (what ``BackwardWatch.own_end`` reads).

    One walk and one hook per node, when the forward is over: every node exists
    then. A node is never kept alive here (that would keep its saved tensors).
    Sequence numbers count per thread: a forward that made part of its graph on
    another thread (``torch.jit.fork``, threaded replicas) may have its nodes
    attributed to the wrong call."""
    clock, ends, lock, task = own.clock, own.ends, own.lock, torch_private.current_graph_task_id

    def finished_for(calls: tuple[int, ...]) -> Callable[[Any, Any], None]:
        def finished(grad_inputs: Any, grad_outputs: Any) -> None:
            now, current = perf_counter_ns(), task()
            overhead = clock(now)
            with lock:  # the latest time wins, not the last thread to write
                for index in calls:
                    last = ends.get(index)
                    if last is None or last[0] != current or last[1] < now:
                        ends[index] = (current, now, overhead)

        return finished

    hooks: dict[int, Callable[[Any, Any], None]] = {}  # one per making call
    seen: set[int] = set()
    todo = [t.grad_fn for t in outputs]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        seq = torch_private.node_sequence_nr(node)
        if seq is None or seq < start:  # made before the forward, or a leaf's
            continue
        maker = makers.owner(node)
        if maker is not None:
            hook = hooks.get(maker)
            if hook is None:
                hook = hooks[maker] = finished_for(ancestry.get(maker, (maker,)))
            handles.add(node.register_hook(hook))
        todo.extend(next_node for next_node, _ in node.next_functions)
