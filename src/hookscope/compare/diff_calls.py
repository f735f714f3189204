"""One row of a trace diff: how one call changed between two traces (:class:`CallDiff`).

A matched pair of calls gets the change of every numeric fact (``diff_facts.py``) and
its structural changes: the module's class, its parameter count (on its first call),
and every non-numeric fact that differs (the input and output shapes). A call of one
side only is ``added`` (side B) or ``removed`` (side A), with its facts on its side.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hookscope.compare.diff_facts import AMOUNTS, FactChange, FactSpec, is_number
from hookscope.core.records.trace import Call, Trace
from hookscope.errors import RenderError

__all__ = ["STRUCTURAL", "CallDiff", "diff_call", "one_side"]

#: Statuses that are a change of the model's structure (ranked before any number).
STRUCTURAL = ("added", "removed", "replaced")


@dataclass(frozen=True)
class CallDiff:
    """How one call differs between side A and side B.

    Attributes:
        path_a: the module's path on side A (``None``: the call is only in B).
        path_b: its path on side B (``None``: only in A).
        call_index: which call of the module it is (side A's; B's when only in B).
        class_a: the module's class on side A (``None``: only in B).
        class_b: its class on side B.
        status: ``"added"`` (only in B), ``"removed"`` (only in A), ``"replaced"``
            (another class), ``"changed"`` (a fact or a shape differs) or ``"same"``.
        facts: the numeric facts, by name (only those recorded on a side).
        changes: the structural changes, by name: ``class``, ``params``, ``inputs``,
            ``outputs`` (any non-numeric fact that differs), as ``(a, b)``.
    """

    path_a: str | None
    path_b: str | None
    call_index: int
    class_a: str | None
    class_b: str | None
    status: str
    facts: dict[str, FactChange] = field(default_factory=dict)
    changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    @property
    def path(self) -> str:
        """Side A's path, or B's for a call only in B."""
        return self.path_a if self.path_a is not None else str(self.path_b)

    @property
    def name(self) -> str:
        """``path`` with the call index when it is not the first call (``fc#1``)."""
        return f"{self.path}#{self.call_index}" if self.call_index else self.path

    @property
    def depth(self) -> int:
        """How deep the module is in its tree (0: the root), by its path."""
        return self.path.count(".") + 1 if self.path else 0

    @property
    def structural(self) -> bool:
        """Added, removed, replaced, or its parameter count changed."""
        return self.status in STRUCTURAL or "params" in self.changes

    def largest(self) -> FactChange | None:
        """The fact with the largest relative change: among amounts (time, counts,
        bytes) when one changed, else among all (``None``: no fact changed by a
        finite or infinite ratio)."""
        ranked = [f for f in self.facts.values() if f.relative not in (None, 0.0)]
        amounts = [f for f in ranked if f.unit in AMOUNTS]
        pool = amounts or ranked
        return max(pool, key=lambda f: abs(f.relative or 0.0), default=None)

    def score(self, fact: str | None = None) -> float:
        """How much the call changed: ``|relative change|`` of ``fact``, or of
        :meth:`largest` (``-1``: no value to rank by)."""
        found = self.facts.get(fact) if fact is not None else self.largest()
        rel = found.relative if found is not None else None
        return -1.0 if rel is None or math.isnan(rel) else abs(rel)


def _read(spec: FactSpec, call: Call | None, trace: Trace) -> Any:
    """``spec``'s value of ``call`` (``None``: no call).

    Raises:
        RenderError: the declaration's own function raised (a probe's bug, named).
    """
    if call is None:
        return None
    try:
        return spec.value(call, trace)
    except Exception as e:
        owner = f" of probe {spec.probe!r}" if spec.probe else ""
        raise RenderError(f"fact {spec.name!r}{owner} raised {type(e).__name__} for call "
                          f"{call.name or '<root>'!r}: {e}") from e


def _facts(specs: Sequence[FactSpec], call_a: Call | None, trace_a: Trace,
           call_b: Call | None, trace_b: Trace,
           ) -> tuple[dict[str, FactChange], dict[str, tuple[Any, Any]]]:
    numbers: dict[str, FactChange] = {}
    others: dict[str, tuple[Any, Any]] = {}
    for spec in specs:
        va, vb = _read(spec, call_a, trace_a), _read(spec, call_b, trace_b)
        if va is None and vb is None:
            continue
        if spec.numeric and (va is None or is_number(va)) and (vb is None or is_number(vb)):
            numbers[spec.name] = FactChange(spec.name, va, vb, spec.unit)
        elif call_a is not None and call_b is not None and va != vb:
            others[spec.name] = (va, vb)
    return numbers, others


def _params(call: Call, trace: Trace) -> int | None:
    info = trace.modules.get(call.path)
    return None if info is None or call.call_index else info.total_params


def diff_call(specs: Sequence[FactSpec], a: Call, trace_a: Trace, b: Call, trace_b: Trace,
              ) -> CallDiff:
    """The diff of a matched pair of calls."""
    facts, changes = _facts(specs, a, trace_a, b, trace_b)
    params = (_params(a, trace_a), _params(b, trace_b))
    if params[0] != params[1]:
        changes = {"params": params, **changes}
    if a.module_class != b.module_class:
        changes = {"class": (a.module_class, b.module_class), **changes}
    status = "replaced" if "class" in changes else "changed" if changes or any(
        f.changed for f in facts.values()) else "same"
    return CallDiff(a.path, b.path, a.call_index, a.module_class, b.module_class, status,
                    facts, changes)


def one_side(specs: Sequence[FactSpec], call: Call, trace: Trace, *, side: str) -> CallDiff:
    """The row of a call only side ``side`` (``"a"`` or ``"b"``) has."""
    params = _params(call, trace)
    if side == "a":
        facts, _ = _facts(specs, call, trace, None, trace)
        return CallDiff(call.path, None, call.call_index, call.module_class, None, "removed",
                        facts, {} if params is None else {"params": (params, None)})
    facts, _ = _facts(specs, None, trace, call, trace)
    return CallDiff(None, call.path, call.call_index, None, call.module_class, "added",
                    facts, {} if params is None else {"params": (None, params)})
