"""Timing probe: inclusive/self time invariants, what is and is not counted."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from hookscope.core.engine.probe import Probe
from hookscope.core.records.trace import Call, Trace
from hookscope.probes.timing import TimingProbe, set_self_times

MS = 1_000_000


class Sleep(nn.Module):
    """Spends a known wall time in its own forward."""

    def __init__(self, ms: float) -> None:
        super().__init__()
        self.ms = ms

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.ms / 1000)
        return x + 1


class SlowProbe(Probe):
    """A probe whose own work (in every exit) takes 30 ms: hookscope overhead.

    It measures its own work per call (``spent_ns``), the oracle of what the model's
    times must leave out."""

    name = ""
    order = 50

    def __init__(self) -> None:
        self.spent_ns: dict[str, int] = {}

    def on_exit(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
        output: Any, failed: bool,
    ) -> None:
        start = time.perf_counter_ns()
        time.sleep(0.030)
        self.spent_ns[call.path] = time.perf_counter_ns() - start

    def total_ns(self) -> int:
        return sum(self.spent_ns.values())


class SleepLeaf(Sleep):
    """A leaf the engine takes for one of ``torch.nn``'s (recorded whole at its end,
    ``core/engine/fast_path.py``) that spends a known wall time in its forward."""

    __module__ = "torch.nn.modules.sleep_for_tests"


class SleepThen(nn.Module):
    """Sleeps in its own forward, then calls its leaf."""

    def __init__(self, ms: float) -> None:
        super().__init__()
        self.ms = ms
        self.leaf = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.ms / 1000)
        return self.leaf(x)


def assert_time_invariants(trace: Trace) -> None:
    for call in trace:
        assert call.time_ns is not None and call.self_time_ns is not None
        children = trace.children(call)
        child_sum = sum(c.time_ns or 0 for c in children)
        assert 0 <= call.self_time_ns <= call.time_ns
        assert child_sum <= call.time_ns
        assert call.self_time_ns == call.time_ns - child_sum


def test_inclusive_and_self_time_invariants_on_resnet() -> None:
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.get_model("resnet18", weights=None).eval()
    trace = hookscope.trace(model, torch.randn(1, 3, 64, 64))
    assert len(trace) > 50
    assert_time_invariants(trace)
    assert trace.total_time_ns == trace.find("").time_ns


def test_time_counts_the_models_work() -> None:
    model = nn.Sequential(Sleep(30), nn.ReLU(), Sleep(10))
    start = time.perf_counter_ns()
    trace = hookscope.trace(model, torch.zeros(2))
    wall = time.perf_counter_ns() - start
    assert trace.find("0").time_ns >= 30 * MS
    assert trace.find("2").time_ns >= 10 * MS
    root = trace.find("")
    assert root.time_ns >= 40 * MS
    # the children's 40 ms of sleep are not Sequential's own time
    assert root.self_time_ns <= wall - 40 * MS
    assert_time_invariants(trace)


def test_time_excludes_the_work_of_other_probes() -> None:
    """Three children with 30 ms of probe work each: none of it is the model's time.

    The oracle is the probe's own measurement of its work: the root's time and that
    work are disjoint spans of the wall time around the forward."""
    model = nn.Sequential(nn.Identity(), nn.Identity(), nn.Identity())
    probe = SlowProbe()
    with hookscope.Tracer(model, time=True, probes=[probe]) as tracer:
        start = time.perf_counter_ns()
        model(torch.zeros(3))
        wall = time.perf_counter_ns() - start
    trace = tracer.trace
    assert trace is not None
    assert len(probe.spent_ns) == 4 and probe.total_ns() >= 4 * 30 * MS
    assert trace.find("").time_ns <= wall - probe.total_ns()
    assert_time_invariants(trace)


def test_leaves_recorded_whole_are_timed_without_other_probes_work() -> None:
    """On the CPU the time probe needs no start event: leaves of torch.nn take the
    engine's leaf path, timed by its own clock, and 30 ms of another probe's work
    after each of them is not their parent's time."""
    model = nn.Sequential(SleepLeaf(20), SleepLeaf(10), nn.ReLU())
    probe = SlowProbe()
    start = time.perf_counter_ns()
    trace = hookscope.trace(model, torch.zeros(2), probes=[probe], stats=False,
                            memory=False)
    wall = time.perf_counter_ns() - start
    first, second, root = trace.find("0"), trace.find("1"), trace.find("")
    assert first.time_ns >= 20 * MS and second.time_ns >= 10 * MS
    assert probe.total_ns() >= 4 * 30 * MS
    # the probe's 30 ms after each leaf are neither the leaf's nor the root's time
    assert first.time_ns + second.time_ns <= wall - probe.total_ns()
    assert 30 * MS <= root.time_ns <= wall - probe.total_ns()
    assert_time_invariants(trace)


def test_the_time_probe_lets_leaves_take_the_leaf_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A leaf recorded whole is never on the call stack: a probe looking at the tracer
    from a leaf's forward sees its parent as the current call."""
    seen: list[str] = []

    class Peek(nn.Module):
        __module__ = "torch.nn.modules.peek_for_tests"

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(tracers[-1].current_call.path)
            return x

    tracers: list[Any] = []
    real_enter = hookscope.Tracer.__enter__

    def entered(self: Any) -> Any:
        tracers.append(self)
        return real_enter(self)

    monkeypatch.setattr(hookscope.Tracer, "__enter__", entered)
    model = nn.Sequential(Peek())
    hookscope.trace(model, torch.zeros(2), stats=False, memory=False)  # time on
    hookscope.trace(model, torch.zeros(2), stats=False)  # the memory probe needs starts
    assert seen == ["", "0"]


def test_a_failing_torch_leaf_is_timed_on_the_leaf_path() -> None:
    model = nn.Sequential(nn.ReLU(), nn.Linear(2, 2))
    with pytest.raises(hookscope.ModelRunError) as info:
        hookscope.trace(model, torch.zeros(1, 3), stats=False, memory=False)
    failed = info.value.trace.find("1")
    assert failed.error is not None and failed.time_ns is not None
    assert_time_invariants(info.value.trace)


class TimingWithEnter(TimingProbe):
    """A subclass of the time probe with an ``on_enter`` of its own."""

    name = "timing_with_enter_for_tests"

    def install(self, tracer: Any) -> list[Any]:
        self.entered: list[str] = []
        return super().install(tracer)

    def on_enter(self, call: Call, module: nn.Module, args: Any, kwargs: Any) -> None:
        self.entered.append(call.path)
        super().on_enter(call, module, args, kwargs)


def test_a_subclass_of_the_time_probe_with_its_own_on_enter_gets_it() -> None:
    probe = TimingWithEnter()
    trace = hookscope.trace(nn.Sequential(nn.ReLU()), torch.zeros(2), probes=[probe],
                            time=False, stats=False, memory=False)
    assert probe.entered == ["", "0"]
    assert all(c.facts.get("time_ns") is not None for c in trace.calls)


@pytest.mark.parametrize("time_probe", [True, False])
def test_a_leaf_recorded_whole_starts_when_it_starts(time_probe: bool) -> None:
    """A leaf recorded at its end still gets its real start time, not the time of the
    last event before it (here 30 ms of its parent's own work earlier)."""
    trace = hookscope.trace(SleepThen(30), torch.zeros(2), time=time_probe, stats=False,
                            memory=False)
    root, leaf = trace.find(""), trace.find("leaf")
    assert root.start_ns is not None and leaf.start_ns is not None
    assert leaf.start_ns - root.start_ns >= 30 * MS
    if time_probe:
        # the parent's 30 ms before the leaf are the parent's, not the leaf's
        assert leaf.time_ns is not None
        assert root.time_ns >= 30 * MS + leaf.time_ns


def test_a_failing_call_is_timed_up_to_the_failure() -> None:
    class Fail(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            time.sleep(0.02)
            raise RuntimeError("bad")

    model = nn.Sequential(nn.ReLU(), Fail())
    with pytest.raises(hookscope.ModelRunError) as info:
        hookscope.trace(model, torch.zeros(2))
    trace = info.value.trace
    assert trace.find("1").time_ns >= 20 * MS
    assert trace.find("").time_ns >= trace.find("1").time_ns
    assert_time_invariants(trace)


def test_reused_module_has_one_time_per_call() -> None:
    act = Sleep(5)
    model = nn.Sequential(act, nn.Identity(), act)
    trace = hookscope.trace(model, torch.zeros(2))
    calls = trace.calls_of("0")
    assert len(calls) == 2 and all(c.time_ns >= 5 * MS for c in calls)
    assert trace.find("").time_ns >= sum(c.time_ns for c in calls)


def test_self_times_are_clamped_at_zero() -> None:
    """Clock skew between CUDA events cannot make a self time negative."""
    trace = hookscope.trace(nn.Sequential(nn.Identity()), torch.zeros(1), time=False)
    root, child = trace.calls
    root.facts["time_ns"], child.facts["time_ns"] = 100, 120
    set_self_times(trace)
    assert (root.self_time_ns, child.self_time_ns) == (0, 120)


def test_time_probe_off_records_nothing() -> None:
    trace = hookscope.trace(nn.Linear(2, 2), torch.zeros(1, 2), time=False)
    assert trace.find("").time_ns is None and "time" not in trace.probes


def test_host_clock_is_used_for_a_cpu_model() -> None:
    probe = TimingProbe()
    model = nn.Linear(2, 2)
    with hookscope.Tracer(model, probes=[probe]) as tracer:
        model(torch.zeros(1, 2))
    assert probe._cuda is False
    assert tracer.trace is not None and tracer.trace.find("").time_ns is not None


@pytest.mark.cuda
def test_cuda_events_time_a_cuda_model() -> None:
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256)).cuda()
    x = torch.randn(64, 256, device="cuda")
    probe = TimingProbe()
    with hookscope.Tracer(model, probes=[probe]) as tracer:
        model(x)
    assert probe._cuda is True
    assert tracer.trace is not None
    assert_time_invariants(tracer.trace)
    assert all(c.time_ns > 0 for c in tracer.trace)


class OwnClock(Probe):
    """A user's probe timing calls with the engine's clock."""

    name = "own_clock_for_tests"
    uses_overhead_clock = True

    def install(self, tracer: Any) -> list[Any]:
        self.tracer = tracer
        self.times: dict[str, int | None] = {}
        return []

    def on_exit(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
        output: Any, failed: bool,
    ) -> None:
        self.times[call.path] = self.tracer.model_time_ns(call)


def test_a_probe_times_calls_with_the_engines_clock() -> None:
    probe, slow = OwnClock(), SlowProbe()
    model = nn.Sequential(Sleep(20), nn.ReLU())
    start = time.perf_counter_ns()
    hookscope.trace(model, torch.zeros(2), probes=[probe, slow], time=False)
    wall = time.perf_counter_ns() - start
    # the engine's clock leaves out the other probe's work, measured by that probe
    assert probe.times["0"] is not None and probe.times[""] is not None
    assert 20 * MS <= probe.times["0"] <= probe.times[""] <= wall - slow.total_ns()


def test_the_engines_clock_is_none_without_a_probe_that_asks_for_it() -> None:
    probe = OwnClock()
    type(probe).uses_overhead_clock = False
    try:
        hookscope.trace(nn.Linear(2, 2), torch.zeros(1, 2), probes=[probe], time=False)
    finally:
        type(probe).uses_overhead_clock = True
    assert probe.times == {"": None}
