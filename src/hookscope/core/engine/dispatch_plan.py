"""Which probe callbacks run for which event, read from what the probes declare.

A :class:`~hookscope.core.engine.tracer.Tracer` plans its dispatch once when it is made
(:func:`plan_dispatch`) and its start events once its probes are installed
(:func:`plan_starts`); its :class:`~hookscope.core.engine.run.Run` keeps the lists as
attributes, which the hot paths read (``core/engine/fast_path.py``,
``core/engine/module_hooks.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hookscope.core.engine.probe import BACKWARD_EVENTS, Probe, overrides
from hookscope.core.records.trace import Call
from hookscope.errors import ProbeError


@dataclass(slots=True)
class DispatchPlan:
    """What a tracer's probes take, by event.

    Attributes:
        enter_replacers: ``on_enter`` of probes that replace a call's inputs.
        exit_replacers: exit callbacks of probes that replace a call's output.
        exits: the recording probes' exit callbacks, in reverse probe order.
        records_starts: a recording probe overrides ``on_enter``.
        backward_probes: probes that take backward events.
        backward_handlers: each backward event's callbacks, for the probes that
            override it.
        watches_calls: some probe takes a call's backward events (hooks on the calls'
            tensors, not only on parameters).
        replaces_only: a tracer of patches alone (``patch``, ``patch_inputs``): its
            hooks go before every recording tracer's (``core/engine/module_hooks.py``).
        clocked: some probe subtracts the overhead clock (``uses_overhead_clock``).
        guarded: some probe watches the dispatched ops (``watches_ops``).
        marks_work: some probe must tell probe work from the model's (it watches ops,
            or tensors that probe work would make autograd save).
        installs_keep_modules: no probe's ``install`` changes the modules, so what the
            table's check read of them on entry holds for the plan of the stand-in
            (``core/engine/fast_path.py``).
    """

    enter_replacers: list[Callable[..., Any]]
    exit_replacers: list[Callable[..., Any]]
    exits: list[Callable[..., Any]]
    records_starts: bool
    backward_probes: list[Probe]
    backward_handlers: dict[str, list[Callable[..., Any]]]
    watches_calls: bool
    replaces_only: bool
    clocked: bool
    guarded: bool
    marks_work: bool
    installs_keep_modules: bool


def plan_dispatch(probes: Sequence[Probe]) -> DispatchPlan:
    """The dispatch of ``probes``, in one loop over the probes (a tracer is made on
    every run)."""
    enter_replacers: list[Callable[..., Any]] = []
    exit_replacers: list[Callable[..., Any]] = []
    exits: list[Callable[..., Any]] = []
    backward_probes: list[Probe] = []
    # each backward event goes to the probes that override it; hooks on the calls'
    # tensors only when one wants a call's backward, on parameters for on_param_grad
    handlers: dict[str, list[Callable[..., Any]]] = {e: [] for e in BACKWARD_EVENTS}
    records_starts = clocked = guarded = marks_work = False
    keeps_modules = True
    for p in probes:
        keeps_modules = keeps_modules and (
            type(p).install is Probe.install or not p.install_touches_modules
        )
        enters, leaves = overrides(p, "on_enter"), overrides(p, "on_exit")
        if p.replaces:
            if enters:
                enter_replacers.append(p.on_enter)
            if leaves:
                exit_replacers.append(p.on_exit)
        else:
            records_starts = records_starts or enters
            if leaves:
                exits.insert(0, p.on_exit)  # in reverse probe order
        if type(p).needs_backward():
            backward_probes.append(p)
            for event in BACKWARD_EVENTS:
                if overrides(p, event):
                    handlers[event].append(getattr(p, event))
        # Hot-path switches: keep the overhead clock only for probes that subtract it
        # (timing), and mark probe work as internal only while a probe that watches the
        # dispatched ops (ops) is active, in this tracer or in one it is nested in.
        clocked = clocked or p.uses_overhead_clock
        guarded = guarded or p.watches_ops
        marks_work = marks_work or p.watches_ops or p.watches_tensor_work
    return DispatchPlan(
        enter_replacers, exit_replacers, exits, records_starts, backward_probes, handlers,
        watches_calls=bool(handlers["on_backward_enter"] or handlers["on_backward_exit"]),
        replaces_only=bool(exit_replacers or enter_replacers) and not (
            exits or records_starts
        ),
        clocked=clocked, guarded=guarded, marks_work=marks_work,
        installs_keep_modules=keeps_modules,
    )


def plan_starts(probes: Sequence[Probe]) -> tuple[list[Callable[..., Any]], bool]:
    """Which probes see calls start, from what they need once installed (the timing
    probe needs a start event only for CUDA events): the recording probes' ``on_enter``
    callbacks, and whether any probe needs a call's start at all.

    Raises:
        ProbeError: a probe's ``needs_start`` raised."""
    starting: list[Probe] = []
    for p in probes:
        try:
            if p.needs_start() or p.replaces or p.watches_ops:
                starting.append(p)
        except Exception as e:
            raise probe_error(p, "needs_start", None, e) from e
    enters = [p.on_enter for p in starting if overrides(p, "on_enter") and not p.replaces]
    return enters, bool(starting)


def probe_error(probe: Any, event: str, call: Call | None, error: BaseException) -> ProbeError:
    """The :class:`~hookscope.errors.ProbeError` for ``probe``'s ``event`` callback,
    which raised ``error`` (in ``call``, if any)."""
    name = probe.name if isinstance(probe, Probe) else "?"
    cls = type(probe).__name__ if probe is not None else "unknown probe"
    return ProbeError(
        probe=name, probe_class=cls, event=event, path=None if call is None else call.path,
        call_index=None if call is None else call.call_index, error=error,
    )


def as_inputs(result: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``on_enter``'s result as new ``(args, kwargs)``."""
    if (
        isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], tuple)
        and isinstance(result[1], dict)
    ):
        return result[0], result[1]
    raise TypeError(
        f"on_enter must return None or (args, kwargs) with args a tuple and kwargs a dict, "
        f"got {type(result).__name__}"
    )
