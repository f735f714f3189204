"""What a consumer of a Chrome trace-event file relies on, checked on the loaded JSON.

The checks read the file as Perfetto or ``chrome://tracing`` would (``json.load``,
then the events' fields), never hookscope's layout code: the required fields of each
phase, complete events properly nested on each track, and flow events that start
and finish inside slices.
"""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

EPS = 1e-6  # microseconds: the float error of ns / 1000, far below one nanosecond

REQUIRED = {
    "X": {"name", "ph", "ts", "dur", "pid", "tid"},
    "i": {"name", "ph", "ts", "pid", "tid", "s"},
    "C": {"name", "ph", "ts", "pid", "args"},
    "M": {"name", "ph", "pid", "args"},
    "s": {"name", "ph", "ts", "pid", "tid", "id", "cat"},
    "f": {"name", "ph", "ts", "pid", "tid", "id", "cat"},
}


def load(path: Path) -> list[dict[str, Any]]:
    """The events of a trace-event file, after checking the document's shape."""
    document = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    events = document["traceEvents"]
    assert isinstance(events, list) and events
    return events


def check_fields(events: list[dict[str, Any]]) -> None:
    """Every event has its phase's required fields, with numbers where numbers go."""
    for event in events:
        phase = event["ph"]
        assert phase in REQUIRED, event
        missing = REQUIRED[phase] - set(event)
        assert not missing, (missing, event)
        if "ts" in event:
            assert isinstance(event["ts"], int | float) and event["ts"] >= 0, event
        if phase == "X":
            assert isinstance(event["dur"], int | float) and event["dur"] >= 0, event
        if phase == "C":
            assert event["args"] and all(isinstance(v, int | float)
                                         for v in event["args"].values()), event
        if phase == "M":
            assert event["name"] in {"process_name", "process_sort_index", "thread_name",
                                     "thread_sort_index"}, event
        if phase == "f":
            assert event.get("bp") == "e", event  # binds to the enclosing slice


def tracks(events: list[dict[str, Any]]) -> dict[tuple[int, int], list[dict[str, Any]]]:
    """The complete events of each (pid, tid), sorted by start, longest first."""
    found: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        if event["ph"] == "X":
            found[event["pid"], event["tid"]].append(event)
    for slices in found.values():
        slices.sort(key=lambda e: (e["ts"], -e["dur"]))
    return found


def check_nesting(events: list[dict[str, Any]]) -> None:
    """On every track two slices are disjoint or one holds the other: what a
    flame-chart track can draw."""
    for slices in tracks(events).values():
        stack: list[dict[str, Any]] = []
        for event in slices:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= event["ts"] + EPS:
                stack.pop()
            if stack:
                top = stack[-1]
                assert event["ts"] + event["dur"] <= top["ts"] + top["dur"] + EPS, (top, event)
            stack.append(event)


def check_truncated_nesting(events: list[dict[str, Any]]) -> None:
    """The same nesting in whole nanoseconds, converted as Perfetto's JSON importer
    does (``int(ts * 1000)``, truncated), where a value a hair below its decimal would
    put a child's end one nanosecond past its parent's."""
    for slices in tracks(events).values():
        stack: list[tuple[int, int]] = []
        for event in slices:
            start = int(event["ts"] * 1000)
            end = start + int(event["dur"] * 1000)
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack:
                assert end <= stack[-1][1], (stack[-1], event)
            stack.append((start, end))


def innermost(slices: list[dict[str, Any]], ts: float) -> dict[str, Any] | None:
    """The shortest slice of a track that holds the moment ``ts``."""
    holding = [e for e in slices if e["ts"] - EPS <= ts <= e["ts"] + e["dur"] + EPS]
    return min(holding, key=lambda e: e["dur"], default=None)


def check_op_slices(events: list[dict[str, Any]]) -> int:
    """Each op slice (``cat: "op"``) lies inside the call slice its ``args["call"]`` names,
    on the same track, and overlaps none of that call's other slices (its children);
    the op slices of one call are disjoint and in the order they ran (``args["index"]``).
    The number of op slices."""
    count = 0
    for slices in tracks(events).values():
        calls = [e for e in slices if e.get("cat") != "op"]
        mine: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for op in (e for e in slices if e.get("cat") == "op"):
            start, end = op["ts"], op["ts"] + op["dur"]
            named = [e for e in calls if e["name"] == op["args"]["call"]
                     and e["ts"] - EPS <= start and end <= e["ts"] + e["dur"] + EPS]
            assert named, op  # a call of that name (a module run twice: either) holds it
            call = named[0]
            inside = [e for e in calls if e is not call and call["ts"] <= e["ts"]
                      and e["ts"] + e["dur"] <= call["ts"] + call["dur"]
                      and e["ts"] + EPS < end and start < e["ts"] + e["dur"] - EPS]
            assert not inside, (op, inside)
            mine[id(call)].append(op)
            count += 1
        for ops in mine.values():
            ops.sort(key=lambda e: e["args"]["index"])
            for a, b in pairwise(ops):
                assert a["ts"] + a["dur"] <= b["ts"] + EPS, (a, b)
    return count


def check_all(path: Path) -> list[dict[str, Any]]:
    """Load, check fields, nesting and op slices; the events."""
    events = load(path)
    check_fields(events)
    check_nesting(events)
    check_truncated_nesting(events)
    check_op_slices(events)
    return events
