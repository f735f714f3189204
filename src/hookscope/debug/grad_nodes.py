"""The autograd node that made the first non-finite gradient, and the forward line
that made the node.

With ``backward=True`` the anomaly hunt (``debug/grad_probe.py``'s
:class:`~hookscope.debug.grad_probe.NonFiniteGradProbe`) hooks every autograd node the
model's forward made (and the ``loss=``'s, ``debug/anomaly.py``): autograd runs a
node's post-hook with the gradients it received (``grad_outputs``) and those it
computed (``grad_inputs``). The first node whose received gradients are all finite
and whose computed ones are not is where the non-finite gradient was made: the
backward starts from a finite seed, so every non-finite gradient starts at such a
node, and its post-hook runs before any later node, or any module's backward event,
sees the value. A value already non-finite in the forward (``torch.where`` keeps the
NaN of ``sqrt(-1)`` saved for the backward) is found at the node that reads it.

Where the forward made each node: anomaly mode
(``torch.autograd.set_detect_anomaly(True, check_nan=False)``: no check of its own) is
on while the model's forward (and the ``loss=``) runs, and keeps the stack on each node
it makes (``torch_private.node_forward_stack``); the innermost frame outside torch and
hookscope is the model's line. Which module call made it is the tracer's
``node_owner`` (sequence numbers, ``core/engine/node_owners.py``).

Anomaly mode is turned off again before the backward: with it on, autograd prints
the forward stack of the node whose hook raised. A user who had it on keeps it on.

Recording a stack on every node is most of the hunt's cost (a fifth of a ResNet-50's
forward and backward), for one line of one node. Where the hunt owns the run
(:func:`~hookscope.find_anomaly` without ``pdb``), it records none
(``NodeHunt(stacks=False)``): the node found is remembered by its place in the
forward's graph (:attr:`NodeHunt.found_at`: its sequence number counted from the
forward's first), and the line is read afterwards from a second forward with stacks
on (:func:`node_lines_of_rerun`), whose node at that place is the same op.
"""

from __future__ import annotations

import linecache
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from hookscope.core import torch_private
from hookscope.debug.anomaly_records import SourceLine
from hookscope.debug.checks import all_finite

#: ``fn(node, index, grad_inputs, grad_outputs)``: ``node`` computed the non-finite
#: ``grad_inputs[index]`` from the finite ``grad_outputs``.
NodeFound = Callable[[Any, int, tuple[Any, ...], tuple[Any, ...]], None]

_LIBRARIES = tuple(
    str(Path(p).resolve().parent) + os.sep for p in (torch.__file__, Path(__file__).parent)
)
_FRAME = re.compile(
    r'\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>[^\n]+)\n'
    r"(?:\s*(?P<code>[^\n]*))?"
)


class NodeHunt:
    """Hooks the nodes of each forward's graph and reports the first node that made a
    non-finite gradient from finite ones (``found``).

    Args:
        found: called from the node's post-hook, during the backward.
    """

    def __init__(self, found: NodeFound, *, stacks: bool = True) -> None:
        self._found = found
        self._stacks = stacks
        #: ``(sequence number counted from the forward's first, node name)`` of each
        #: node found, in the order found, for a second forward to read their lines from
        self.found_at: list[tuple[int | None, str]] = []
        self._handles: list[Any] = []
        self._hooked: set[int] = set()  # sequence numbers of the nodes hooked
        self._start: int | None = None  # the first sequence number of this forward's graph
        self._user_mode: tuple[bool, bool] | None = None  # the anomaly mode found

    def forward_starts(self) -> None:
        """The model's forward starts: record the stack of every node it makes."""
        self._start = torch_private.next_sequence_nr()
        self._hooked.clear()
        self.found_at.clear()
        # the handles of graphs already freed: their hooks went with them
        self._handles = [h for h in self._handles if torch_private.hook_table_alive(h)]
        self.record_stacks()

    def record_stacks(self) -> None:
        """Turn anomaly mode on (without its NaN check), unless it is on already."""
        if self._user_mode is None:
            self._user_mode = (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())
        if self._stacks and not torch.is_anomaly_enabled():
            torch.autograd.set_detect_anomaly(True, check_nan=False)

    def forward_ends(self, outputs: Iterable[torch.Tensor]) -> None:
        """The forward (or the loss) ended: hook the graph behind ``outputs``."""
        self.restore_mode()
        self.hook(outputs)

    def restore_mode(self) -> None:
        """Put anomaly mode back as the user had it."""
        if self._user_mode is not None:
            enabled, check_nan = self._user_mode
            torch.autograd.set_detect_anomaly(enabled, check_nan=check_nan)

    def hook(self, outputs: Iterable[torch.Tensor]) -> None:
        """Hook every node behind ``outputs`` made since the forward started, once."""
        start = self._start if self._start is not None else 0
        todo = [t.grad_fn for t in outputs]
        while todo:
            node = todo.pop()
            if node is None:
                continue
            seq = torch_private.node_sequence_nr(node)
            if seq is None or seq < start or seq in self._hooked:
                continue  # a leaf's accumulator, made before the forward, or seen
            self._hooked.add(seq)
            self._handles.append(node.register_hook(self._post_hook))
            todo.extend(next_node for next_node, _ in node.next_functions)

    def remove(self) -> None:
        """Remove every hook and put anomaly mode back."""
        handles, self._handles = self._handles, []
        for h in handles:
            h.remove()
        self.restore_mode()

    def _post_hook(self, grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> None:
        bad = next((i for i, g in enumerate(grad_inputs) if _non_finite(g)), None)
        if bad is None or any(_non_finite(g) for g in grad_outputs):
            return  # finite, or it passed on a value some node before it made
        node = torch_private.current_autograd_node()
        seq = torch_private.node_sequence_nr(node)
        # one entry per node reported, in order (the report's nodes pair with them)
        place = None if seq is None or self._start is None else seq - self._start
        self.found_at.append((place, str(node.name())))
        self._found(node, bad, grad_inputs, grad_outputs)


def node_lines_of_rerun(run: Callable[[], Iterable[torch.Tensor]],
                        found_at: list[tuple[int | None, str]]) -> list[SourceLine | None]:
    """The line of each node of ``found_at`` (:attr:`NodeHunt.found_at`) in the graph of
    a second forward, ``run()`` (its output tensors), made with stacks recorded;
    ``None`` where that forward made a different node there."""
    user_mode = (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())
    start = torch_private.next_sequence_nr()
    try:
        torch.autograd.set_detect_anomaly(True, check_nan=False)
        with torch.enable_grad():
            outputs = list(run())
    finally:
        torch.autograd.set_detect_anomaly(user_mode[0], check_nan=user_mode[1])
    if start is None:
        return [None] * len(found_at)
    nodes: dict[int, Any] = {}
    todo = [t.grad_fn for t in outputs]
    while todo:
        node = todo.pop()
        seq = None if node is None else torch_private.node_sequence_nr(node)
        if node is None or seq is None or seq < start or seq - start in nodes:
            continue
        nodes[seq - start] = node
        todo.extend(next_node for next_node, _ in node.next_functions)
    found = [None if offset is None else nodes.get(offset) for offset, _ in found_at]
    return [user_line(node) if node is not None and str(node.name()) == name else None
            for node, (_, name) in zip(found, found_at, strict=True)]


def _non_finite(g: Any) -> bool:
    return isinstance(g, torch.Tensor) and not all_finite(g)


def forward_op(node: Any) -> str:
    """The forward op whose gradient ``node`` computes: ``sqrt`` for ``SqrtBackward0``,
    ``MyFn.apply`` for a custom ``autograd.Function``'s node."""
    cls = torch_private.custom_function_class(node)
    if cls is not None:
        return f"{cls.__name__}.apply"
    name = re.sub(r"Backward\d*$", "", str(node.name()))
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name).lower()


def user_line(node: Any) -> SourceLine | None:
    """The line of the model's code whose forward made ``node``: the innermost frame of
    the stack anomaly mode kept on it that is outside torch and hookscope."""
    for frame in reversed(torch_private.node_forward_stack(node) or ()):
        m = _FRAME.match(frame)
        if m is None:
            continue
        file = m["file"]
        resolved = os.path.realpath(file) if os.path.isabs(file) else file
        if resolved.startswith(_LIBRARIES):
            continue
        line = int(m["line"])
        code = (m["code"] or linecache.getline(file, line)).strip()
        return SourceLine(file, line, m["function"].strip(), code)
    return None
