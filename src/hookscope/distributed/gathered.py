"""A gathered trace: every rank's :class:`~hookscope.Trace` of the same model, side by side.

:class:`GatheredTrace` keeps the ranks' traces as they were recorded (``traces``, in
rank order: what a timeline with a process per rank draws) and lines up their calls by
module path and call index (:class:`CallAcrossRanks`): the time of each call on each
rank, the slowest rank, and how far it is above the median (stragglers). The
gradient norm of each parameter on each rank comes from the ranks' ``param_grads``
(a trace recorded with ``backward=True``). Printed, it is a table
(``distributed/gathered_table.py``); ``to_json`` writes one document that keeps every
rank's calls.
"""

from __future__ import annotations

import html
import json
import statistics
from dataclasses import dataclass
from typing import Any

from hookscope.core.records.trace import Trace
from hookscope.distributed.gathered_table import (
    gathered_table,
    gathered_text,
    straggler_line,
)
from hookscope.errors import SpecError
from hookscope.render.table import terminal_width

__all__ = ["SCHEMA", "CallAcrossRanks", "GatheredTrace"]

SCHEMA = "hookscope.gathered_trace/1"
"""The ``schema`` of a gathered trace's JSON document."""


@dataclass(frozen=True, slots=True)
class CallAcrossRanks:
    """One module call (by path and call index) on every rank.

    Attributes:
        path: the module's path.
        module_class: its class name.
        call_index: which call of the module (0: the first).
        times_ns: inclusive time on each rank, by rank (``None``: not timed there, or
            the rank made no such call).
        self_times_ns: the same, without the time of the calls made inside it.
    """

    path: str
    module_class: str
    call_index: int
    times_ns: tuple[int | None, ...]
    self_times_ns: tuple[int | None, ...]

    @property
    def slowest_rank(self) -> int | None:
        """The rank where the call took longest (``None``: timed nowhere)."""
        return _argmax(self.times_ns)

    @property
    def ratio(self) -> float | None:
        """The slowest rank's time over the median of the ranks' times."""
        return _ratio(self.times_ns)

    @property
    def excess_ns(self) -> int | None:
        """How much longer the call's own code (self time) ran on its slowest rank than
        on the median rank: what the other ranks wait for at the next collective."""
        known = [t for t in self.self_times_ns if t is not None]
        if not known:
            return None
        return int(max(known) - statistics.median(known))

    @property
    def straggler_rank(self) -> int | None:
        """The rank where the call's own code (self time) took longest."""
        return _argmax(self.self_times_ns)


def _argmax(values: tuple[int | None, ...]) -> int | None:
    known = [(t, r) for r, t in enumerate(values) if t is not None]
    return max(known)[1] if known else None


def _ratio(values: tuple[int | None, ...]) -> float | None:
    known = [t for t in values if t is not None]
    if not known:
        return None
    median = statistics.median(known)
    return max(known) / median if median > 0 else None


class GatheredTrace:
    """Every rank's trace of one run, collected on one rank by ``trace.gather()``.

    Args:
        traces: one trace per rank, in rank order.

    Attributes:
        traces: the ranks' traces, as recorded.
    """

    def __init__(self, traces: list[Trace]) -> None:
        if not traces:
            raise SpecError("a gathered trace needs the trace of at least one rank")
        bad = next((t for t in traces if not isinstance(t, Trace)), None)
        if bad is not None:
            raise SpecError(f"GatheredTrace takes one hookscope.Trace per rank, got "
                            f"{type(bad).__name__}")
        self.traces = list(traces)

    @property
    def world_size(self) -> int:
        """How many ranks sent a trace."""
        return len(self.traces)

    @property
    def calls(self) -> list[CallAcrossRanks]:
        """Every module call, by (path, call index), in the order of the first rank that
        made it (rank 0's order, then any call only a later rank made)."""
        order: dict[tuple[str, int], str] = {}
        for t in self.traces:
            for c in t.calls:
                order.setdefault((c.path, c.call_index), c.module_class)
        by_rank = [{(c.path, c.call_index): c for c in t.calls} for t in self.traces]
        out = []
        for key, cls in order.items():
            found = [calls.get(key) for calls in by_rank]
            out.append(CallAcrossRanks(
                key[0], cls, key[1],
                tuple(None if c is None else c.facts.get("time_ns") for c in found),
                tuple(None if c is None else c.facts.get("self_time_ns") for c in found),
            ))
        return out

    def stragglers(self) -> list[CallAcrossRanks]:
        """The calls by how much longer their own code ran on their slowest rank than on
        the median rank (:attr:`CallAcrossRanks.excess_ns`), largest first."""
        timed = [c for c in self.calls if c.excess_ns is not None]
        return sorted(timed, key=lambda c: -(c.excess_ns or 0))

    @property
    def param_grads(self) -> dict[str, tuple[float | None, ...]]:
        """Per parameter path, its gradient norm on each rank (``None``: no gradient
        there); empty when the traces recorded no gradients."""
        out: dict[str, list[float | None]] = {}
        for rank, t in enumerate(self.traces):
            for g in t.facts.get("param_grads") or []:
                row = out.setdefault(g.path, [None] * self.world_size)
                row[rank] = g.norm
        return {k: tuple(v) for k, v in out.items()}

    def to_json(self, *, indent: int | None = 2) -> str:
        """One JSON document holding every rank's trace document (``from_json`` reads
        it back)."""
        ranks = [json.loads(t.to_json(indent=None)) for t in self.traces]
        doc = {"schema": SCHEMA, "world_size": self.world_size, "ranks": ranks}
        return json.dumps(doc, indent=indent, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> GatheredTrace:
        """The gathered trace a :meth:`to_json` document holds.

        Raises:
            SpecError: the document is not a gathered trace.
        """
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
            raise SpecError(f"not a gathered hookscope trace (schema {found!r}, expected "
                            f"{SCHEMA!r}); a single rank's trace reads with Trace.from_json")
        return cls([Trace.from_json(json.dumps(r)) for r in doc["ranks"]])

    def table(self, *, ascii: bool = False) -> Any:
        """The table of calls across ranks (a ``GridTable``: prints, or shows in rich
        and Jupyter)."""
        return gathered_table(self, ascii=ascii)

    def __str__(self) -> str:
        return gathered_text(self, width=terminal_width())

    def _repr_html_(self) -> str:
        """The straggler line and the table of calls, for Jupyter."""
        answer = f"<p>{html.escape(straggler_line(self, ascii=False))}</p>"
        return answer + str(self.table()._repr_html_())

    def __repr__(self) -> str:
        return (f"<hookscope.GatheredTrace of {self.traces[0].model.class_name}: "
                f"{self.world_size} ranks>")
