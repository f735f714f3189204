"""Where each call of a trace goes on a timeline: the slices the Chrome trace is made of.

Where it sits: ``render/timeline.py`` turns a :class:`~hookscope.core.records.trace.Trace`
into Chrome trace events; this module decides the intervals, in integer nanoseconds on
the trace's clock (``Call.start_ns``: since the run started). It reads records only.

A call's *duration* is what the probes measured (``time_ns``; ``backward_ns`` for its
backward). Its *position* inside its parent is laid out, because the times exclude
hookscope's own hook work while the host clock's start times include it:

- forward: a top-level call starts at its ``start_ns`` (or where the previous one
  ended, if later: with CUDA event times, the GPU's queue); its children follow in
  call order, and the call's own time (``self_time_ns``) fills the gaps between them
  in proportion to the host clock's gaps, hookscope's work taken out. With CUDA event
  times the host gaps say when work was queued, not when it ran: the own time is
  split evenly between the gaps.
- backward: a top-level call's backward starts where its forward ended (or where the
  previous backward ended, if later); its children's backwards follow in reverse call
  order (autograd's order for a chain of calls), the own time split evenly between
  the gaps. Only the durations are measured.

A call whose children's durations add up to more than its own (a clamped self time,
backwards of parallel branches whose windows overlap) is widened to hold them and
marked ``widened``, so every child lies inside its parent on the same track.

A call's own ops go in its own time. A forward op goes in the gap between the children
it ran between (a backward op in the call's widest gap). With op times (the ops probe
measures each op's host time), :func:`op_slices` starts each gap's ops at the gap's start
and keeps their measured durations and offsets from the first of them; where the gap
is shorter than their measured span (the gaps are laid out, not measured), offsets and
durations are scaled down to fit. Without op times (older traces), :func:`op_positions`
spreads the ops evenly along the own time, in the order they ran: their position is
their order, not a measurement.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from hookscope.core.records.trace import Call, Trace

__all__ = [
    "Slice", "backward_slices", "first_ops", "forward_slices", "op_positions", "op_slices",
]


@dataclass(slots=True)
class Slice:
    """One call's interval on a track, in nanoseconds on the trace's clock.

    Attributes:
        call: the call.
        start: where it starts.
        dur: its length (the measured time, unless ``widened``).
        measured: the measured time (``None``: not measured, laid out from children).
        gaps: the intervals of the call's own time, between its children's slices, in
            time order (one more than the children).
        children: the children's slices, in time order.
    """

    call: Call
    start: int
    dur: int
    measured: int | None
    gaps: list[tuple[int, int]] = field(default_factory=list)
    children: list[Slice] = field(default_factory=list)

    @property
    def end(self) -> int:
        """Where it ends."""
        return self.start + self.dur

    @property
    def widened(self) -> bool:
        """Longer than measured, to hold its children."""
        return self.measured is None or self.dur > self.measured


def forward_slices(trace: Trace, *, cuda: bool) -> list[Slice]:
    """The top-level calls' slices (each holding its subtree), on the forward track.

    Args:
        trace: a trace with ``time_ns`` per call.
        cuda: the times are CUDA event times: host gaps are not the device's.
    """
    durations = _durations(trace, "time_ns")
    slices: list[Slice] = []
    after = 0
    for root in trace.roots:
        if root.index not in durations:
            continue
        start = max(root.start_ns or 0, after)
        made = _place(trace, root, start, durations, "time_ns", wall=not cuda, reverse=False)
        slices.append(made)
        after = made.end
    return slices


def backward_slices(trace: Trace, forward: list[Slice]) -> list[Slice]:
    """The top-level calls' backward slices, on the backward track.

    Args:
        trace: a trace with ``backward_ns`` per call (``--backward``).
        forward: the forward slices, after which each backward starts.
    """
    durations = _durations(trace, "backward_ns")
    forward_end = {s.call.index: s.end for s in forward}
    slices: list[Slice] = []
    after = 0
    for root in trace.roots:
        if root.index not in durations:
            continue
        start = max(forward_end.get(root.index, after), after)
        made = _place(trace, root, start, durations, "backward_ns", wall=False, reverse=True)
        slices.append(made)
        after = made.end
    return slices


def _durations(trace: Trace, fact: str) -> dict[int, int]:
    """Each call's slice length: its measured ``fact``, at least its children's sum
    (calls without the fact and without measured children get none)."""
    found: dict[int, int] = {}
    for call in reversed(trace.calls):  # children start after their parent: done first
        measured = call.facts.get(fact)
        inner = sum(found.get(i, 0) for i in call.children)
        if measured is not None:
            found[call.index] = max(int(measured), inner)
        elif inner:
            found[call.index] = inner
    return found


def _place(
    trace: Trace, root: Call, start: int, durations: dict[int, int], fact: str, *,
    wall: bool, reverse: bool,
) -> Slice:
    """``root``'s slice at ``start``, its subtree's inside it (a loop, not recursion: a
    model may be nested deeper than Python's recursion limit)."""
    top = _slice(root, start, durations, fact)
    pending = [top]
    while pending:
        made = pending.pop()
        kids = [trace.calls[i] for i in made.call.children if i in durations]
        if reverse:
            kids.reverse()
        own = made.dur - sum(durations[k.index] for k in kids)
        gaps = _wall_gaps(made.call, kids, durations, own) if wall else None
        if gaps is None:
            gaps = _even(own, len(kids) + 1)
        at = made.start
        for kid, gap in zip(kids, gaps, strict=False):
            made.gaps.append((at, at + gap))
            child = _slice(kid, at + gap, durations, fact)
            made.children.append(child)
            pending.append(child)
            at = child.end
        made.gaps.append((at, made.end))
    return top


def _slice(call: Call, start: int, durations: dict[int, int], fact: str) -> Slice:
    measured = call.facts.get(fact)
    return Slice(call, start, durations[call.index], None if measured is None else int(measured))


def _wall_gaps(
    call: Call, kids: list[Call], durations: dict[int, int], own: int
) -> list[int] | None:
    """The own time split between the gaps before each child (and the rest after the
    last) in proportion to the host clock's gaps; ``None`` when start times are missing."""
    if call.start_ns is None or any(k.start_ns is None for k in kids):
        return None
    gaps: list[int] = []
    previous_end = call.start_ns
    for kid in kids:
        assert kid.start_ns is not None
        gaps.append(max(0, kid.start_ns - previous_end))
        previous_end = kid.start_ns + durations[kid.index]
    total = sum(gaps)
    if total > own:  # hookscope's hook work is in the host gaps: scale them down
        gaps = [g * own // total for g in gaps]
    return [*gaps, own - sum(gaps)]


def _even(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` integers that differ by at most one."""
    share, rest = divmod(total, parts)
    return [share + (1 if i < rest else 0) for i in range(parts)]


def op_positions(s: Slice, ops: list[Any], firsts: dict[int, int] | None) -> list[int]:
    """Where each of a call's own ops goes: evenly along the call's own time, in the
    order the ops ran. A forward op goes in the gap between the children it ran between
    (``firsts``: each call's first forward op, its subtree's); a backward op anywhere
    along the gaps laid end to end."""
    if not ops:
        return []
    if firsts is None:
        return _along(s.gaps, len(ops))
    at: list[int] = [0] * len(ops)
    for (a, b), members in zip(s.gaps, _gap_groups(s, ops, firsts), strict=True):
        for k, i in enumerate(members):
            at[i] = a + (b - a) * (k + 1) // (len(members) + 1)
    return at


def op_slices(
    s: Slice, ops: list[Any], firsts: dict[int, int] | None
) -> list[tuple[int, int, bool]]:
    """``(start, dur, scaled)`` of each of a call's own ops that carry times
    (``OpRecord.start_ns``/``time_ns``), in the order given: each gap's ops start at the
    gap's start, at their measured offsets from the first of them and with their measured
    durations, scaled down (``scaled``) where the gap is shorter than their span.
    Forward ops (``firsts`` given) go in the gap between the children they ran between,
    backward ops in the widest gap."""
    if not ops:
        return []
    if firsts is None:
        widest = max(range(len(s.gaps)), key=lambda k: s.gaps[k][1] - s.gaps[k][0])
        groups: list[list[int]] = [[] for _ in s.gaps]
        groups[widest] = list(range(len(ops)))
    else:
        groups = _gap_groups(s, ops, firsts)
    placed: list[tuple[int, int, bool]] = [(0, 0, False)] * len(ops)
    for (a, b), members in zip(s.gaps, groups, strict=True):
        if not members:
            continue
        first = ops[members[0]].start_ns
        last = ops[members[-1]]
        span, room = last.start_ns + last.time_ns - first, b - a
        for i in members:
            begin, end = ops[i].start_ns - first, ops[i].start_ns + ops[i].time_ns - first
            if span > room:  # keeps order and non-overlap: the map is monotone
                begin, end = begin * room // span, end * room // span
            placed[i] = (a + begin, end - begin, span > room)
    return placed


def _gap_groups(s: Slice, ops: list[Any], firsts: dict[int, int]) -> list[list[int]]:
    """The indices into ``ops`` of the forward ops in each gap of ``s``: an op goes in
    the gap after the last child that started before it (``firsts``: each call's first
    forward op, its subtree's)."""
    starts = [(firsts[c.call.index], k) for k, c in enumerate(s.children)
              if c.call.index in firsts]
    keys = [first for first, _ in starts]
    groups: list[list[int]] = [[] for _ in s.gaps]
    for i, op in enumerate(ops):
        before = bisect.bisect_left(keys, op.index)  # children that started before it
        groups[starts[before - 1][1] + 1 if before else 0].append(i)
    return groups


def first_ops(trace: Trace, ops: dict[tuple[str, int], list[Any]]) -> dict[int, int]:
    """Each call's first forward op, its children's included (ops run in index order)."""
    firsts = {call: found[0].index for (phase, call), found in ops.items()
              if phase == "forward"}
    for call in reversed(trace.calls):  # children start after their parent: done first
        mine, parent = firsts.get(call.index), call.parent
        if mine is not None and parent is not None:
            firsts[parent] = min(firsts.get(parent, mine), mine)
    return firsts


def _along(gaps: list[tuple[int, int]], count: int) -> list[int]:
    """``count`` points spread evenly along ``gaps`` laid end to end."""
    total = sum(b - a for a, b in gaps)
    at: list[int] = []
    for k in range(count):
        offset = total * (k + 1) // (count + 1)
        for a, b in gaps:
            if offset <= b - a:
                at.append(a + offset)
                break
            offset -= b - a
        else:
            at.append(gaps[-1][1])
    return at
