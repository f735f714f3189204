"""Timing probe: inclusive and self (exclusive) time of every module call.

On the CPU a call is timed by the engine's clock (``Tracer.model_time_ns``): from
the call's start, read with ``time.perf_counter_ns`` before any probe's work for it,
to the probe's ``on_exit``, less the work hookscope did in between (the engine's
bookkeeping, the hooks, statistics and memory accounting of the call's *children*:
``Tracer.overhead_ns``), so a parent's time is the model's own time, as it would be
without hookscope. The probe has the highest ``order``, so it exits first: no other
probe's work for the call itself falls inside its window. It needs no start event on
the CPU, so with no other probe that needs one (the memory probe does) the leaves of
``torch.nn`` get no start event (``core/engine/fast_path.py``).

On CUDA (a parameter or buffer of the model lives on a CUDA device) a call is timed
with a pair of ``torch.cuda.Event(enable_timing=True)`` recorded on the current
stream; ``finalize`` synchronises once and reads every pair back. There is no
synchronisation per layer.

``self_time_ns`` is a call's inclusive time minus the inclusive times of its direct
children (clamped at 0): on the CPU in ``on_exit``, where the children's times were
just written (a pass over every call in ``finalize``, after the forward has left
the caches cold, costs more), with CUDA events in ``finalize``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hookscope.core.engine.probe import Probe, register_probe
from hookscope.core.records.facts import Column, Fact, Field, Unit, set_exclusive
from hookscope.core.records.trace import Call, Trace

if TYPE_CHECKING:
    from hookscope.core.engine.handles import Removable
    from hookscope.core.engine.tracer import Tracer


@register_probe
class TimingProbe(Probe):
    """Record ``Call.time_ns`` (inclusive) and ``Call.self_time_ns`` (exclusive).

    Args:
        cuda: time with CUDA events (``True``), with the host clock (``False``), or
            decide from where the model's parameters and buffers live (``None``).

    NB: with CUDA events, the GPU time of kernels that other probes launch for a
    child (the statistics reductions) is part of its parent's time, and so is GPU idle
    time while the host runs hookscope's hooks; time CUDA models with ``time`` alone
    for exact numbers.
    """

    name = "time"
    install_touches_modules = False
    uses_overhead_clock = True
    reads_inputs_on_enter = False
    order = 90
    column_rank = 20
    facts = (
        Fact("time_ns", "inclusive time of the call, in nanoseconds", timing=True),
        Fact("self_time_ns", "time of the call minus its children's, in nanoseconds",
             timing=True),
    )
    columns = (
        Column("time", "Time", lambda c, t: c.facts.get("time_ns"), Unit.TIME_NS,
               footer=lambda t: t.total_time_ns),
        Column("self_time", "Self time", lambda c, t: c.facts.get("self_time_ns"), Unit.TIME_NS),
        Column("time_pct", "Time %", lambda c, t: _share(c, t), Unit.PERCENT, default=False),
    )
    fields = (
        Field("time_ns", lambda c, t: c.facts.get("time_ns"), "Int64", column="time"),
        Field("self_time_ns", lambda c, t: c.facts.get("self_time_ns"), "Int64",
              column="self_time"),
        Field("time_share", lambda c, t: _share(c, t), "Float64", column="time_pct",
              default=False),  # a fraction of the trace's time (0.25: the table's 25%)
    )

    def __init__(self, *, cuda: bool | None = None) -> None:
        self._cuda_option = cuda
        self._cuda = False
        self._devices: list[torch.device] = []
        self._tracer: Tracer | None = None
        self._calls: list[Call] = []
        self._events: dict[int, tuple[Any, Any]] = {}

    def install(self, tracer: Tracer) -> list[Removable]:
        self._tracer = tracer
        self._calls = tracer.trace.calls if tracer.trace is not None else []
        self._events.clear()
        self._devices = list(tracer.cuda_devices)
        cuda = self._cuda_option
        if cuda is None:
            cuda = bool(self._devices)
        self._cuda = cuda and torch.cuda.is_available()
        return []

    def needs_start(self) -> bool:
        # a CUDA event recorded when the call starts; or a subclass's own on_enter
        return self._cuda or type(self).on_enter is not TimingProbe.on_enter

    def on_enter(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        if not self._cuda:
            return  # on the CPU the engine's clock times the call
        start = _timing_event()
        start.record()
        self._events[call.index] = (start, None)

    def on_exit(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
        output: Any, failed: bool,
    ) -> None:
        if self._cuda:
            pair = self._events.get(call.index)
            if pair is not None:
                end = _timing_event()
                end.record()
                self._events[call.index] = (pair[0], end)
            return
        tracer = self._tracer
        assert tracer is not None
        time_ns = tracer.model_time_ns(call)
        if time_ns is not None:
            facts = call.facts
            facts["time_ns"] = time_ns
            children = call.children
            if children:  # each ended before this call, its time written then
                calls = self._calls
                for i in children:
                    time_ns -= calls[i].facts.get("time_ns") or 0
                time_ns = max(0, time_ns)
            facts["self_time_ns"] = time_ns

    def finalize(self, trace: Trace) -> None:
        if self._events:
            _read_events(trace, self._events, self._devices)
            set_self_times(trace)
        self._events.clear()
        self._tracer = None
        self._calls = []


def _share(call: Call, trace: Trace) -> float | None:
    total, time = trace.total_time_ns, call.facts.get("time_ns")
    return None if not total or time is None else time / total


def set_self_times(trace: Trace) -> None:
    """``self_time_ns`` of every timed call: its time minus its children's (at least 0)."""
    set_exclusive(trace.calls, "time_ns", "self_time_ns")


def _read_events(
    trace: Trace, events: dict[int, tuple[Any, Any]], devices: list[torch.device]
) -> None:
    for device in devices or [torch.device("cuda", torch.cuda.current_device())]:
        torch.cuda.synchronize(device)  # once per device, for every event pair of the run
    for index, (start, end) in events.items():
        if end is not None:
            trace.calls[index].facts["time_ns"] = max(0, round(start.elapsed_time(end) * 1e6))


def _timing_event() -> Any:
    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
