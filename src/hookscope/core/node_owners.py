"""Which module call made each autograd node: sequence numbers, by call.

The tracer marks, at every call start and end, the sequence number autograd gives its
next node (``torch_private.next_sequence_nr``); a node made later belongs to the call
marked last before it. Used by the ops probe (which call a backward op belongs to) and by
:class:`~hookscope.core.backward.BackwardWatch` (which call's own nodes end its backward).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

from hookscope.core import torch_private


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
