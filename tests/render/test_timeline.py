"""The timeline (``Trace.to_chrome_trace``, ``write_chrome_trace``), read back as a consumer.

Each test writes the file, loads it with ``json.load`` and checks it with
``timeline_checks`` (fields per phase, nesting per track); the oracles are the
models' own structure (``named_modules``, which module runs which aten op) and the
trace's recorded times, which the file must show unchanged.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from hookscope import Call, Trace
from hookscope.core.records.module_records import ModelSummary
from hookscope.errors import SpecError
from timeline_checks import check_all, innermost, tracks

FORWARD, BACKWARD = "forward", "backward"


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(),
                         nn.Sequential(nn.Linear(8, 8), nn.Tanh()), nn.Linear(8, 2))


def write(trace: Trace, tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "timeline.json"
    trace.to_chrome_trace(path)
    return check_all(path)


def tid_of(events: list[dict[str, Any]], track: str, pid: int = 0) -> int | None:
    """The thread id of process ``pid``'s track named ``track ...``, by its metadata."""
    found = [e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"
             and e["pid"] == pid and e["args"]["name"].startswith(track)]
    assert len(found) <= 1
    return found[0] if found else None


def slices_of(events: list[dict[str, Any]], track: str, pid: int = 0) -> list[dict[str, Any]]:
    """The call slices of a track (not the op slices)."""
    tid = tid_of(events, track, pid)
    found = [] if tid is None else tracks(events).get((pid, tid), [])
    return [e for e in found if e.get("cat") != "op"]


def ops_of(events: list[dict[str, Any]], track: str) -> list[dict[str, Any]]:
    """The op events of a track: slices (ops with times) or instants (without)."""
    tid = tid_of(events, track)
    return [e for e in events if e.get("cat") == "op" and e["tid"] == tid]


def by_call(slices: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(e["args"]["path"], e["args"]["call_index"]): e for e in slices}


def check_tree(trace: Trace, slices: list[dict[str, Any]]) -> None:
    """Every call's slice lies inside its parent call's slice, on the same track."""
    found = by_call(slices)
    for call in trace.calls:
        if call.parent is None or (call.path, call.call_index) not in found:
            continue
        parent = trace.calls[call.parent]
        outer, inner = found[parent.path, parent.call_index], found[call.path, call.call_index]
        assert outer["ts"] - 1e-6 <= inner["ts"], (outer, inner)
        assert inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 1e-6, (outer, inner)


def check_ops(events: list[dict[str, Any]], track: str) -> int:
    """Each op on track ``track`` lies in its call's slice and in none of that slice's
    children (an op on a child's edge is the call's: its own time may be 0); the
    number of ops."""
    slices = slices_of(events, track)
    ops = ops_of(events, track)
    for op in ops:
        start, end = op["ts"], op["ts"] + op.get("dur", 0)
        named = [e for e in slices if e["name"] == op["args"]["call"]
                 and e["ts"] - 1e-6 <= start and end <= e["ts"] + e["dur"] + 1e-6]
        assert named, op  # a call of that name (a module run twice: either) holds it
        call = named[0]
        inside = [e for e in slices if e is not call and call["ts"] <= e["ts"]
                  and e["ts"] + e["dur"] <= call["ts"] + call["dur"]
                  and e["ts"] + 1e-6 < end and start < e["ts"] + e["dur"] - 1e-6]
        assert not inside, (op, inside)
    return len(ops)


def holding(slices: list[dict[str, Any]], ts: float) -> set[tuple[str, int]]:
    """The (path, call index) of every slice of a track that holds the moment ``ts``."""
    return {(e["args"]["path"], e["args"]["call_index"]) for e in slices
            if e["ts"] - 1e-6 <= ts <= e["ts"] + e["dur"] + 1e-6}


def check_flows(events: list[dict[str, Any]], pid: int = 0) -> int:
    """Each backward slice has a flow that starts in a forward slice of the same module
    call and ends in the backward slice; the number of flows. (The innermost slice at
    the start is the call's own unless its own time is 0: then no moment is its alone.)"""
    fwd, bwd = slices_of(events, FORWARD, pid), slices_of(events, BACKWARD, pid)
    starts = {e["id"]: e for e in events if e["ph"] == "s" and e["pid"] == pid}
    ends = {e["id"]: e for e in events if e["ph"] == "f" and e["pid"] == pid}
    assert set(starts) == set(ends)
    linked: set[tuple[str, int]] = set()
    for flow, start in starts.items():
        end = ends[flow]
        assert (start["tid"], end["tid"]) == (tid_of(events, FORWARD, pid),
                                              tid_of(events, BACKWARD, pid))
        both = holding(bwd, end["ts"]) & holding(fwd, start["ts"])
        assert both, (start, end)  # the two ends lie in slices of one module call
        linked |= both
    assert len(starts) == len(bwd)  # one arrow per backward slice
    assert linked == {(e["args"]["path"], e["args"]["call_index"]) for e in bwd}
    return len(starts)


def test_forward_backward_and_ops_of_a_small_model(tmp_path: Path) -> None:
    model = mlp()
    trace = hookscope.trace(model, torch.randn(3, 4), backward=True, ops=True)
    events = write(trace, tmp_path)
    forward = slices_of(events, FORWARD)
    # one slice per module call: the model's modules, each run once
    assert sorted(e["args"]["path"] for e in forward) == sorted(n for n, _ in
                                                                model.named_modules())
    check_tree(trace, forward)
    check_tree(trace, slices_of(events, BACKWARD))
    roots = [e for e in forward if e["args"]["path"] == ""]
    assert trace.total_time_ns is not None
    assert sum(e["dur"] for e in roots) == pytest.approx(trace.total_time_ns / 1000, abs=1e-3)
    # every module's measured time is the slice's length (nothing here is widened)
    for e in forward:
        call = trace.find(e["args"]["path"], e["args"]["call_index"])
        assert e["dur"] == pytest.approx(call.time_ns / 1000, abs=1e-3)
    assert check_flows(events) == len(list(model.modules()))


def test_each_op_lies_in_the_call_that_ran_it(tmp_path: Path) -> None:
    model = mlp()
    trace = hookscope.trace(model, torch.randn(3, 4), backward=True, ops=True)
    events = write(trace, tmp_path)
    classes = dict(model.named_modules())
    for track in (FORWARD, BACKWARD):
        slices = slices_of(events, track)
        ops = ops_of(events, track)
        assert {e["ph"] for e in ops} == {"X"}  # the ops carry times: slices
        assert check_ops(events, track) == len(ops) > 0
        if track == FORWARD:  # the oracle: what a Linear, a ReLU and a Tanh compute
            paths = {e["name"]: e["args"]["path"] for e in slices}
            for op in ops:
                module = classes[paths[op["args"]["call"]]]
                expected = {nn.Linear: {"aten.t.default", "aten.addmm.default"},
                            nn.ReLU: {"aten.relu.default"}, nn.Tanh: {"aten.tanh.default"}}
                assert op["name"] in expected[type(module)], (op, module)
            assert sum(op["name"] == "aten.addmm.default" for op in ops) == 3  # 3 Linears


def test_no_ops_no_instants_and_no_backward_no_second_track(tmp_path: Path) -> None:
    events = write(hookscope.trace(mlp(), torch.randn(3, 4)), tmp_path)
    assert not [e for e in events if e["ph"] in ("i", "s", "f")]
    assert {e["tid"] for e in events if e["ph"] == "X"} == {tid_of(events, FORWARD)}
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names == {"forward (host times)"}


def test_memory_counters_only_when_the_memory_probe_ran(tmp_path: Path) -> None:
    model, x = mlp(), torch.randn(3, 4)
    without = write(hookscope.trace(model, x, memory=False), tmp_path)
    assert not [e for e in without if e["ph"] == "C"]
    trace = hookscope.trace(model, x, memory=True, backward=True)
    events = write(trace, tmp_path)
    saved = [e for e in events if e["ph"] == "C" and e["name"].startswith("saved")]
    values = [e["args"]["bytes"] for e in sorted(saved, key=lambda e: e["ts"])]
    assert values == sorted(values)  # bytes saved for backward only grow in a forward
    # the oracle: what autograd hands a saved-tensor hook in the same forward (no call
    # of this model saves one tensor twice, so every pack counts)
    packed: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        packed.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    assert values[-1] == sum(packed) > 0
    outputs = [e for e in events if e["ph"] == "C" and e["name"].startswith("call output")]
    assert len(outputs) == len(trace.calls)


def test_two_ranks_merge_into_two_processes(tmp_path: Path) -> None:
    trace = hookscope.trace(mlp(), torch.randn(3, 4), backward=True)
    other = Trace.from_json(trace.to_json())
    other.meta["rank"] = 1
    other.meta["started_at_ns"] += 5_000_000  # that process started 5 ms later
    trace.meta["rank"] = 0
    path = tmp_path / "ranks.json"
    hookscope.write_chrome_trace([trace, other], path)
    events = check_all(path)
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {0: "Sequential (rank 0)", 1: "Sequential (rank 1)"}
    assert {e["pid"] for e in events} == {0, 1}
    threads = [e["tid"] for e in events if e["name"] == "thread_name"]
    assert len(threads) == len(set(threads)) == 4  # no thread id shared by two processes
    roots = [by_call(slices_of(events, FORWARD, pid))["", 0] for pid in (0, 1)]
    assert roots[1]["ts"] - roots[0]["ts"] == pytest.approx(5_000, abs=1e-3)  # one clock
    for pid, source in ((0, trace), (1, other)):
        check_tree(source, slices_of(events, FORWARD, pid))
        assert check_flows(events, pid) == len(source.calls)


def test_two_traces_of_one_rank_are_refused(tmp_path: Path) -> None:
    trace = hookscope.trace(mlp(), torch.randn(3, 4))
    trace.meta["rank"] = 0
    copy = Trace.from_json(trace.to_json())
    with pytest.raises(SpecError, match="both have rank 0"):
        hookscope.write_chrome_trace([trace, copy], tmp_path / "x.json")
    assert not list(tmp_path.iterdir())


def test_what_is_not_a_trace_is_refused(tmp_path: Path) -> None:
    trace = hookscope.trace(mlp(), torch.randn(3, 4))
    with pytest.raises(SpecError, match=r"traces\[1\] is a str.*Trace.from_json"):
        hookscope.write_chrome_trace([trace, trace.to_json()], tmp_path / "x.json")  # type: ignore[list-item]
    with pytest.raises(SpecError, match="at least one"):
        hookscope.write_chrome_trace([], tmp_path / "x.json")
    assert not list(tmp_path.iterdir())


def test_an_untimed_trace_and_a_bad_path_are_one_line_errors(tmp_path: Path) -> None:
    untimed = hookscope.trace(mlp(), torch.randn(3, 4), time=False)
    with pytest.raises(SpecError, match="no times"):
        untimed.to_chrome_trace(tmp_path / "x.json")
    timed = hookscope.trace(mlp(), torch.randn(3, 4))
    with pytest.raises(SpecError, match="does not exist"):
        timed.to_chrome_trace(tmp_path / "missing" / "x.json")
    with pytest.raises(SpecError, match="is a folder"):
        timed.to_chrome_trace(tmp_path)
    assert not list(tmp_path.iterdir())  # no file, no temporary file


def test_a_failed_write_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "timeline.json"
    path.write_text("old")

    def fail(*args: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(SpecError, match="No space left"):
        hookscope.trace(mlp(), torch.randn(3, 4)).to_chrome_trace(path)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["timeline.json"]


# A hand-made trace: the fault planted is the one a layout must survive: children that
# take longer than their parent was measured (a clamped self time), and on CUDA a
# call whose device time runs past the next call's host start.

def hand_trace(times: dict[int, int], starts: dict[int, int], *, device: str) -> Trace:
    """Two top-level calls of ``net`` (``a``, ``b`` inside), times and host starts by index."""
    tree = {0: (None, "", "Net", 0), 1: (0, "a", "Linear", 0), 2: (0, "b", "ReLU", 0),
            3: (None, "", "Net", 1), 4: (3, "a", "Linear", 1), 5: (3, "b", "ReLU", 1)}
    calls = [Call(i, path, cls, index, 0 if parent is None else 1, parent,
                  [j for j, v in tree.items() if v[0] == i], starts[i],
                  facts={"time_ns": times[i]})
             for i, (parent, path, cls, index) in tree.items()]
    model = ModelSummary("Net", 0, 0, 0, 0, 0)
    return Trace(model, {}, calls, probes=["time"], meta={"device": device})


def test_cuda_times_queue_on_the_device(tmp_path: Path) -> None:
    # device times longer than the host took to launch them: the second forward's
    # host start (1 µs) comes before the first forward's device work ends (100 µs)
    trace = hand_trace({0: 100_000, 1: 60_000, 2: 20_000, 3: 50_000, 4: 10_000, 5: 10_000},
                       {0: 0, 1: 100, 2: 200, 3: 1_000, 4: 1_100, 5: 1_200}, device="cuda:0")
    events = write(trace, tmp_path)
    forward = slices_of(events, FORWARD)
    first, second = (e for e in forward if e["args"]["path"] == "")
    assert (first["ts"], first["dur"]) == (0, 100)
    assert (second["ts"], second["dur"]) == (100, 50)  # queued after the first
    check_tree(trace, forward)
    # own time 20 µs, split evenly between the three gaps (host gaps are launch times)
    a, b = by_call(forward)["a", 0], by_call(forward)["b", 0]
    assert a["ts"] == pytest.approx(20 / 3, abs=1e-3)
    assert b["ts"] - (a["ts"] + a["dur"]) == pytest.approx(20 / 3, abs=1e-3)
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names == {"forward (CUDA event times)"}


def test_children_longer_than_their_parent_widen_it(tmp_path: Path) -> None:
    trace = hand_trace({0: 10_000, 1: 8_000, 2: 7_000, 3: 5_000, 4: 1_000, 5: 1_000},
                       {0: 0, 1: 100, 2: 9_000, 3: 30_000, 4: 30_100, 5: 30_200}, device="cpu")
    events = write(trace, tmp_path)
    forward = slices_of(events, FORWARD)
    check_tree(trace, forward)
    root = by_call(forward)["", 0]
    assert root["dur"] == 15  # 8 + 7 µs: the children's, not the 10 measured
    assert root["args"]["widened"] is True and root["args"]["measured_ns"] == 10_000
    # on the host clock: the second forward keeps its start, its gaps follow the host's
    second = by_call(forward)["", 1]
    assert second["ts"] == 30
    a = by_call(forward)["a", 1]
    assert a["ts"] - second["ts"] == pytest.approx(0.1, abs=1e-3)


def count_calls(model: nn.Module, x: torch.Tensor) -> int:
    """The oracle: module calls counted by hand-written forward hooks."""
    seen: list[str] = []
    handles = [m.register_forward_hook(lambda *a, n=n: seen.append(n))
               for n, m in model.named_modules()]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return len(seen)


def test_resnet18_forward_with_ops(tmp_path: Path) -> None:
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.resnet18(weights=None).eval()
    x = torch.randn(1, 3, 64, 64)
    trace = hookscope.trace(model, x, ops=True)
    events = write(trace, tmp_path)
    forward = slices_of(events, FORWARD)
    assert len(forward) == count_calls(model, x)  # a block's ReLU runs twice
    check_tree(trace, forward)
    assert trace.total_time_ns is not None
    root = by_call(forward)["", 0]
    assert root["dur"] == pytest.approx(trace.total_time_ns / 1000, abs=1e-3)
    convs = [e for e in ops_of(events, FORWARD) if e["name"] == "aten.convolution.default"]
    assert len(convs) == sum(isinstance(m, nn.Conv2d) for m in model.modules())
    modules = dict(model.named_modules())
    for op in convs:
        holder = innermost(forward, op["ts"])
        assert holder is not None and isinstance(modules[holder["args"]["path"]], nn.Conv2d)


def test_small_gpt2_with_backward(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128,
                                     n_positions=32, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 128, (1, 16))
    trace = hookscope.trace(model, ids, backward=True, ops=True)
    events = write(trace, tmp_path)
    forward, backward = slices_of(events, FORWARD), slices_of(events, BACKWARD)
    assert check_ops(events, FORWARD) > 0
    assert check_ops(events, BACKWARD) > 0
    check_tree(trace, forward)
    check_tree(trace, backward)
    assert check_flows(events) == len(backward) > 0
    timed_backward = [c for c in trace.calls if c.facts.get("backward_ns") is not None]
    assert len(backward) == len(timed_backward)
    blocks = [e for e in backward if e["args"]["class"] == "GPT2Block"]
    assert len(blocks) == 2
    # autograd runs the second block's backward before the first's
    first, second = sorted(blocks, key=lambda e: e["args"]["path"])
    assert second["ts"] + second["dur"] <= first["ts"] + 1e-6


def test_microseconds_survive_perfettos_truncation() -> None:
    from hookscope.render.timeline import microseconds

    # 1001 ns / 1000 * 1000 is 1000.99...: truncated, a nanosecond is lost
    assert int(1001 / 1000 * 1000) == 1000
    for ns in [*range(0, 60_000), *range(10**12, 10**12 + 20_000), 10**15 + 3]:
        value = microseconds(ns)
        assert int(value * 1000) == ns
        assert value == pytest.approx(ns / 1000, rel=1e-15, abs=1e-12)


def test_golden_hand_made_trace(golden) -> None:  # type: ignore[no-untyped-def]
    import json

    from hookscope.core.records.values import MemoryRecord
    from hookscope.render.timeline import chrome_trace

    trace = hand_trace({0: 10_000, 1: 4_000, 2: 3_000, 3: 5_000, 4: 1_000, 5: 1_000},
                       {0: 0, 1: 1_000, 2: 6_000, 3: 30_000, 4: 30_100, 5: 30_200},
                       device="cpu")
    for call, (backward, saved) in zip(trace.calls, [(9_000, 0), (5_000, 64), (2_000, 32),
                                                     (4_000, 0), (1_500, 64), (500, 32)],
                                       strict=True):
        call.facts["backward_ns"] = backward
        call.facts["memory"] = MemoryRecord(output_bytes=32, saved_bytes=saved)
    trace.probes += ["memory", "grads"]
    text = json.dumps(chrome_trace([trace]), indent=1, sort_keys=True) + "\n"
    golden("timeline", text, "json")


def test_a_model_nested_deeper_than_the_recursion_limit(tmp_path: Path) -> None:
    import sys

    # made by hand: running so deep a model needs more C stack than Python 3.12+ allows
    depth = sys.getrecursionlimit() + 200
    paths = [".".join(["0"] * i) for i in range(depth + 1)]
    calls = [Call(i, paths[i], "Sequential" if i < depth else "Identity", 0, i,
                  None if i == 0 else i - 1, [] if i == depth else [i + 1], 10 * i,
                  facts={"time_ns": 10 * (depth - i) + 5})
             for i in range(depth + 1)]
    trace = Trace(ModelSummary("Sequential", 0, 0, 0, 0, 0), {}, calls, probes=["time"],
                  meta={"device": "cpu"})
    events = write(trace, tmp_path)  # the file is made and checked under the usual limit
    assert len(slices_of(events, FORWARD)) == depth + 1
    check_tree(trace, slices_of(events, FORWARD))


def _op(index: int, call: int, start: int, time: int) -> Any:
    from hookscope.core.records.values import OpRecord, Phase

    return OpRecord(index, f"aten.op{index}.default", call, Phase.FORWARD, (), (), 0,
                    start_ns=start, time_ns=time)


def test_op_slices_keep_measured_times_and_squeeze_only_into_a_narrow_gap(
    tmp_path: Path,
) -> None:
    # call 0 measured 5 µs holds children of 4 + 3 µs: widened to 7 µs, no own time left
    trace = hand_trace({0: 5_000, 1: 4_000, 2: 3_000, 3: 5_000, 4: 1_000, 5: 1_000},
                       {0: 0, 1: 1_000, 2: 6_000, 3: 30_000, 4: 30_100, 5: 30_200},
                       device="cpu")
    trace.facts["ops"] = [_op(0, 0, 100, 300), _op(1, 0, 500, 200),  # before child a
                          _op(2, 1, 1_200, 1_000), _op(3, 1, 2_500, 1_500)]  # in leaf a
    trace.probes.append("ops")
    events = write(trace, tmp_path)
    ops = {e["name"]: e for e in ops_of(events, FORWARD)}
    assert check_ops(events, FORWARD) == 4
    a = by_call(slices_of(events, FORWARD))["a", 0]
    # the leaf's own gap is 4 µs, the ops' span 2.8 µs: measured offsets and durations
    first, second = ops["aten.op2.default"], ops["aten.op3.default"]
    assert (first["ts"], first["dur"]) == (pytest.approx(a["ts"]), pytest.approx(1.0))
    assert second["ts"] == pytest.approx(a["ts"] + 1.3)
    assert second["dur"] == pytest.approx(1.5)
    assert "scaled" not in first["args"] and first["args"]["measured_ns"] == 1_000
    # the widened call's ops have no room before child a: squeezed there, marked
    for name in ("aten.op0.default", "aten.op1.default"):
        assert ops[name]["args"]["scaled"] is True
        assert ops[name]["ts"] + ops[name]["dur"] <= a["ts"] + 1e-6


def test_a_trace_without_op_times_keeps_instant_ops(tmp_path: Path) -> None:
    import dataclasses

    trace = hookscope.trace(mlp(), torch.randn(3, 4), ops=True)
    trace.facts["ops"] = [dataclasses.replace(o, start_ns=None, time_ns=None)
                          for o in trace.facts["ops"]]
    events = write(trace, tmp_path)
    ops = ops_of(events, FORWARD)
    assert ops and {e["ph"] for e in ops} == {"i"}
    assert check_ops(events, FORWARD) == len(ops)


def test_op_slices_of_a_real_run_show_the_recorded_times(tmp_path: Path) -> None:
    trace = hookscope.trace(mlp(), torch.randn(3, 4), ops=True)
    events = write(trace, tmp_path)
    recorded = {o.index: o.time_ns for o in trace.facts["ops"]}
    shown = ops_of(events, FORWARD)
    assert len(shown) == len(recorded)
    for e in shown:
        assert e["args"]["measured_ns"] == recorded[e["args"]["index"]]
        if not e["args"].get("scaled"):
            assert e["dur"] == pytest.approx(recorded[e["args"]["index"]] / 1000, abs=1e-3)
