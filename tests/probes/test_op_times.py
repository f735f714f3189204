"""The ops probe's per-op host times, against hand-written hooks and ``torch.profiler``."""

from __future__ import annotations

from itertools import pairwise
from time import perf_counter_ns
from typing import Any

import torch
from torch import nn

import hookscope
from hookscope.core.records.value_json import ops_in, ops_out


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.LayerNorm(4))


def _traced_with_hook_windows(model: nn.Module, x: torch.Tensor) -> tuple[Any, dict[str, Any]]:
    """The trace, and each leaf's window measured by hooks of the test's own (on the
    trace's clock), which hold the module's forward whatever order hooks run in."""
    windows: dict[str, list[int]] = {}
    handles = []
    leaves = [(n, m) for n, m in model.named_modules() if n and not list(m.children())]
    with hookscope.Tracer(model, ops=True, time=True) as tracer:
        for name, m in leaves:
            handles.append(m.register_forward_pre_hook(
                lambda *_, n=name: windows.setdefault(n, []).append(perf_counter_ns()),
                prepend=True))
            handles.append(m.register_forward_hook(
                lambda *_, n=name: windows[n].append(perf_counter_ns())))
        model(x)
        for h in handles:
            h.remove()
    run = tracer.run
    assert run is not None
    shifted = {n: [t - run.origin_ns for t in w] for n, w in windows.items()}
    return tracer.trace, shifted


def test_each_op_lies_in_its_leaf_call_in_order_and_within_its_time() -> None:
    trace, windows = _traced_with_hook_windows(_mlp(), torch.randn(3, 8))
    ops = trace.facts["ops"]
    assert ops and all(o.start_ns is not None and o.time_ns is not None for o in ops)
    for call in trace.calls:
        if call.path not in windows:
            continue
        mine = [o for o in ops if o.call == call.index]
        assert mine, call.path
        before, after = windows[call.path]
        assert call.start_ns is not None and call.start_ns <= mine[0].start_ns
        for o in mine:
            assert before <= o.start_ns and o.start_ns + o.time_ns <= after, (call.path, o.name)
        for a, b in pairwise(mine):  # in order, not overlapping
            assert a.start_ns + a.time_ns <= b.start_ns
        assert sum(o.time_ns for o in mine) <= call.facts["time_ns"]


def _profiled_names(module: nn.Module, x: torch.Tensor) -> list[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        module(x)
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    return [e.name for e in events if e.name.startswith("aten::")]


def _is_subsequence(names: list[str], within: list[str]) -> bool:
    rest = iter(within)
    return all(any(n == w for w in rest) for n in names)


def test_the_timed_ops_are_the_ones_the_profiler_lists_in_order() -> None:
    model, x = _mlp(), torch.randn(3, 8)
    with torch.no_grad():
        trace = hookscope.trace(model, x, ops=True)
        for name in ("0", "3"):  # a Linear (decomposed) and a LayerNorm
            call = next(c for c in trace.calls if c.path == name)
            timed = [o.name for o in trace.facts["ops"] if o.call == call.index]
            module = model.get_submodule(name)
            inner = x if name == "0" else model[:3](x)
            listed = _profiled_names(module, inner)
            recorded = ["aten::" + n.split(".")[1] for n in timed]
            assert recorded and _is_subsequence(recorded, listed), (recorded, listed)


def test_op_times_survive_json_and_old_documents_load_without_them() -> None:
    trace = hookscope.trace(_mlp(), torch.randn(3, 8), ops=True)
    ops = trace.facts["ops"]
    assert ops_in(ops_out(ops)) == ops
    old = [{k: v for k, v in d.items() if k not in ("start_ns", "time_ns")}
           for d in ops_out(ops)]
    assert all(o.start_ns is None and o.time_ns is None for o in ops_in(old))
    again = hookscope.Trace.from_json(trace.to_json())
    assert [o.time_ns for o in again.facts["ops"]] == [o.time_ns for o in ops]
