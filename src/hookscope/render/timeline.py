"""A trace as a timeline: Chrome trace-event JSON for Perfetto and ``chrome://tracing``.

Where it sits: a renderer of records, like the tables. :func:`chrome_trace_events` reads a
:class:`~hookscope.core.records.trace.Trace` (laid out by ``render/timeline_layout.py``) and
makes the events of one process; :func:`write_chrome_trace` writes one or several
traces (one per rank) as one file. ``Trace.to_chrome_trace`` is registered by
``hookscope.render`` on import, like the trace's other presenters.

What the file holds, per trace (process id = ``meta["rank"]``, else the trace's place
in the list):

- track ``forward`` (thread id ``(pid + 1) * 1000 + 1``): every timed call a
  complete event (``ph: "X"``), nested by the call tree; the ops probe's aten ops as
  complete events inside their call's own time, with their measured host durations
  (``render/timeline_layout.py``'s :func:`op_slices` says where they go), or, in traces
  recorded without op times, as instant events (``ph: "i"``) in the order they ran;
- track ``backward`` (thread id ``+ 2``; with ``backward=True``): every call's
  backward a complete event, and a flow arrow (``ph: "s"`` to ``ph: "f"``) from each
  forward call to its backward; backward ops likewise inside their call's backward;
- counters (``ph: "C"``) when the memory probe ran: the bytes saved for backward so
  far, each call's output bytes, and on CUDA each call's peak allocated bytes;
- metadata (``ph: "M"``) naming the process (model class, rank) and the tracks.

Times are microseconds (``ts``, ``dur``) on the trace's clock; several traces are put
on one clock by their ``meta["started_at_ns"]`` (wall clock).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hookscope.core.records.trace import Call, Trace
from hookscope.errors import SpecError
from hookscope.render.files import write_text_atomically
from hookscope.render.timeline_layout import (
    Slice,
    backward_slices,
    first_ops,
    forward_slices,
    op_positions,
    op_slices,
)

__all__ = ["chrome_trace", "chrome_trace_events", "trace_to_chrome_trace", "write_chrome_trace"]

FORWARD_TRACK = 1
BACKWARD_TRACK = 2


def track_tid(pid: int, track: int) -> int:
    """The thread id of a track of process ``pid``: unique over every process of the
    file (Perfetto keys threads by their id alone, as Linux does), never a ``pid``."""
    return (pid + 1) * 1000 + track


def write_chrome_trace(traces: Trace | Sequence[Trace], path: str | os.PathLike[str]) -> None:
    """Write one or several traces as one Chrome trace-event JSON file.

    Each trace becomes one process: its ``meta["rank"]`` (set by the tracer under
    ``torch.distributed``), else its place in ``traces``. Open the file in
    ui.perfetto.dev (*Open trace file*) or ``chrome://tracing``.

    Args:
        traces: a trace, or traces of several processes (one per rank); a trace read
            back with ``Trace.from_json`` works too.
        path: the file to write; it is written to a temporary file and renamed, so a
            failure leaves no partial file.

    Raises:
        SpecError: a trace has no times (trace with the time probe), two traces have
            the same rank, or the file cannot be written.

    Example:
        >>> import torch, hookscope, tempfile, json, os
        >>> t = hookscope.trace(torch.nn.Sequential(torch.nn.Linear(4, 2)), torch.randn(1, 4))
        >>> path = os.path.join(tempfile.mkdtemp(), "timeline.json")
        >>> hookscope.write_chrome_trace(t, path)
        >>> sorted({e["ph"] for e in json.load(open(path))["traceEvents"]})
        ['C', 'M', 'X']
    """
    document = chrome_trace([traces] if isinstance(traces, Trace) else list(traces))
    write_text_atomically(Path(path), json.dumps(document, separators=(",", ":")),
                          example="timeline.json")


def trace_to_chrome_trace(trace: Trace, path: str | os.PathLike[str]) -> None:
    """``Trace.to_chrome_trace``: :func:`write_chrome_trace` of one trace."""
    write_chrome_trace(trace, path)


def chrome_trace(traces: Sequence[Trace]) -> dict[str, Any]:
    """The Chrome trace-event document (``{"traceEvents": [...], ...}``) of ``traces``."""
    if not traces:
        raise SpecError("no trace to write: give at least one trace")
    for i, trace in enumerate(traces):
        if not isinstance(trace, Trace):
            raise SpecError(
                f"traces[{i}] is a {type(trace).__name__}, not a hookscope.Trace; read a "
                "JSON document with hookscope.Trace.from_json(text) first")
    pids = _pids(traces)
    origins = [t.meta.get("started_at_ns") for t in traces]
    known = [o for o in origins if isinstance(o, int)]
    first = min(known, default=0)
    events: list[dict[str, Any]] = []
    for trace, pid, origin in zip(traces, pids, origins, strict=True):
        shift = (origin - first) if isinstance(origin, int) else 0
        events += chrome_trace_events(trace, pid=pid, shift_ns=shift)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"producer": "hookscope", "clock": "trace start, microseconds"}}


def _pids(traces: Sequence[Trace]) -> list[int]:
    pids: list[int] = []
    for i, trace in enumerate(traces):
        rank = trace.meta.get("rank")
        pid = rank if isinstance(rank, int) else i
        if pid in pids:
            raise SpecError(
                f"traces {pids.index(pid)} and {i} both have rank {pid}: give one trace per "
                "rank (set trace.meta['rank'] to tell them apart)")
        pids.append(pid)
    return pids


def chrome_trace_events(trace: Trace, *, pid: int = 0, shift_ns: int = 0) -> list[dict[str, Any]]:
    """The events of one trace, as process ``pid``, ``shift_ns`` later than its clock.

    Raises:
        SpecError: the trace has no times.
    """
    if not any("time_ns" in c.facts for c in trace.calls):
        raise SpecError(
            "this trace has no times, so it has no timeline: record them with the time "
            "probe (hookscope.trace(..., time=True), Tracer(model, time=True); on the "
            "command line, without --no-time)")
    cuda = str(trace.meta.get("device", "cpu")).startswith("cuda")
    forward = forward_slices(trace, cuda=cuda)
    backward = backward_slices(trace, forward)
    emit = _Emitter(pid, shift_ns)
    events = _metadata(trace, emit, cuda=cuda, backward=bool(backward))
    ops = _ops_by_call(trace)
    firsts = first_ops(trace, ops)
    for s in _walk(forward):
        events.append(emit.slice(s, emit.forward, "forward"))
        events += emit.ops(s, emit.forward, ops.get(("forward", s.call.index), []), firsts)
    for s in _walk(backward):
        events.append(emit.slice(s, emit.backward, "backward"))
        events += emit.ops(s, emit.backward, ops.get(("backward", s.call.index), []), None)
    events += _flows(emit, forward, backward)
    if "memory" in trace.probes:
        events += _counters(emit, forward)
    return events


class _Emitter:
    """Makes events of one process: nanoseconds on the trace's clock -> microseconds."""

    def __init__(self, pid: int, shift_ns: int) -> None:
        self.pid = pid
        self.shift = shift_ns
        self.forward = track_tid(pid, FORWARD_TRACK)
        self.backward = track_tid(pid, BACKWARD_TRACK)

    def us(self, ns: int) -> float:
        return microseconds(ns + self.shift)

    def slice(self, s: Slice, tid: int, phase: str) -> dict[str, Any]:
        call = s.call
        args: dict[str, Any] = {"path": call.path, "class": call.module_class,
                                "call_index": call.call_index, "measured_ns": s.measured}
        if s.widened:
            args["widened"] = True  # laid out longer than measured, to hold its children
        if phase == "forward":
            for name in ("self_time_ns", "flops"):
                value = call.facts.get(name)
                if value is not None:
                    args[name] = getattr(value, "forward", value)
        if call.error is not None:
            args["error"] = call.error
        return {"ph": "X", "name": _label(call), "cat": phase, "ts": self.us(s.start),
                "dur": microseconds(s.dur), "pid": self.pid, "tid": tid, "args": args}

    def ops(
        self, s: Slice, tid: int, ops: list[Any], firsts: dict[int, int] | None
    ) -> list[dict[str, Any]]:
        """Slices of the ops with times; instant events of those without (older traces)."""
        common = {"cat": "op", "pid": self.pid, "tid": tid}
        timed = [op for op in ops if getattr(op, "time_ns", None) is not None
                 and getattr(op, "start_ns", None) is not None]
        if len(timed) == len(ops):
            events = []
            for op, (at, dur, scaled) in zip(ops, op_slices(s, ops, firsts), strict=True):
                args = {**_op_args(op, s), "measured_ns": op.time_ns}
                if scaled:
                    args["scaled"] = True  # the gap is shorter than the ops' measured span
                events.append({"ph": "X", "name": op.name, "ts": self.us(at),
                               "dur": microseconds(dur), **common, "args": args})
            return events
        return [{"ph": "i", "s": "t", "name": op.name, "ts": self.us(at), **common,
                 "args": _op_args(op, s)}
                for op, at in zip(ops, op_positions(s, ops, firsts), strict=True)]


def _op_args(op: Any, s: Slice) -> dict[str, Any]:
    return {"index": op.index, "flops": op.flops, "call": _label(s.call)}


def microseconds(ns: int) -> float:
    """``ns`` in microseconds, as the float nearest above ``ns / 1000`` whose product by
    1000 is not below ``ns``: Perfetto's JSON importer truncates ``ts * 1000`` to whole
    nanoseconds, and a value a hair below (``1.001 * 1000 == 1000.99...``) would
    move a slice's end one nanosecond before its last child's."""
    value = ns / 1000
    while value * 1000 < ns:
        value = math.nextafter(value, math.inf)
    return value


def _label(call: Call) -> str:
    return call.name if call.path else f"{call.module_class} (root)"


def _walk(slices: list[Slice]) -> Iterator[Slice]:
    """Every slice, each before its children (a loop: a model may be nested deeper than
    Python's recursion limit)."""
    pending = list(reversed(slices))
    while pending:
        s = pending.pop()
        yield s
        pending += reversed(s.children)


def _metadata(
    trace: Trace, emit: _Emitter, *, cuda: bool, backward: bool
) -> list[dict[str, Any]]:
    pid, rank = emit.pid, trace.meta.get("rank")
    name = f"{trace.model.class_name} (rank {rank if rank is not None else pid})"
    clock = "CUDA event times" if cuda else "host times"
    tracks = [(emit.forward, FORWARD_TRACK, f"forward ({clock})")]
    if backward:
        tracks.append((emit.backward, BACKWARD_TRACK, "backward (host times)"))
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": pid, "args": {"name": name}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": pid,
         "args": {"sort_index": pid}},
    ]
    for tid, order, label in tracks:
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                       "args": {"name": label}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                       "args": {"sort_index": order}})
    return events


def _ops_by_call(trace: Trace) -> dict[tuple[str, int], list[Any]]:
    found: dict[tuple[str, int], list[Any]] = {}
    for op in trace.facts.get("ops") or []:
        if op.call is not None:
            phase = getattr(op.phase, "value", op.phase)
            found.setdefault((str(phase), op.call), []).append(op)
    return found


def _flows(emit: _Emitter, forward: list[Slice], backward: list[Slice]) -> list[dict[str, Any]]:
    """An arrow from each forward call to its backward, both bound to their slices."""
    fwd = {s.call.index: s for s in _walk(forward)}
    events: list[dict[str, Any]] = []
    for s in _walk(backward):
        source = fwd.get(s.call.index)
        if source is None:
            continue
        common = {"name": "backward", "cat": "backward", "id": s.call.index, "pid": emit.pid}
        events.append({**common, "ph": "s", "tid": emit.forward, "ts": emit.us(_anchor(source))})
        events.append({**common, "ph": "f", "bp": "e", "tid": emit.backward,
                       "ts": emit.us(_anchor(s))})
    return events


def _anchor(s: Slice) -> int:
    """A point of the slice's own time (the middle of its widest gap), where the slice
    itself, not a child, is the innermost one a flow event binds to."""
    a, b = max(s.gaps, key=lambda g: g[1] - g[0])
    return (a + b) // 2


def _counters(emit: _Emitter, forward: list[Slice]) -> list[dict[str, Any]]:
    """Memory counters at each call's end, in the order the calls ended."""
    ended = sorted(_walk(forward), key=lambda s: (s.end, -s.call.depth))
    events: list[dict[str, Any]] = []
    saved = 0
    base = ended[0].start if ended else 0
    events.append(_counter(emit, "saved for backward", base, 0))
    for s in ended:
        record = s.call.facts.get("memory")
        if record is None:
            continue
        saved += record.saved_bytes or 0
        events.append(_counter(emit, "saved for backward", s.end, saved))
        events.append(_counter(emit, "call output", s.end, record.output_bytes))
        if record.peak_bytes is not None:
            events.append(_counter(emit, "CUDA peak allocated", s.end, record.peak_bytes))
    return events


def _counter(emit: _Emitter, name: str, at: int, value: int) -> dict[str, Any]:
    return {"ph": "C", "name": name, "ts": emit.us(at), "pid": emit.pid, "tid": emit.pid,
            "args": {"bytes": value}}
