"""From the tracker's log to numbers: the peak, what is alive at it, the timeline and
the per-module columns, per rank when parameters, gradients and optimizer states are
sharded.

Every figure is read from one log (:class:`~hookscope.memory_plan.tracking.StorageTracker`):
the timeline is the bytes after each change, the peak is its largest value, and the
storages alive at the peak are the log replayed up to it, each put in one category by
what it turned out to be (:data:`CATEGORIES`, first match wins).

Sharding (``shards=N``, FSDP2-style): a rank holds ``1/N`` of each parameter, gradient
and optimizer state, and steps the optimizer on its shards (so the optimizer's scratch
tensors are ``1/N`` too); activations and the forward's and backward's temporaries are
whole.

A rank also holds, while it computes, whole copies of one unit's parameters (the
unit being computed, and the next one all-gathered ahead: FSDP2's prefetch) and, in
backward, that unit's unsharded gradients before their reduce-scatter: ``gathered``,
two units' parameters in forward and three in backward, a unit being a repeated
block (what ``fully_shard`` is applied to), else the whole model.
NB: the copy-out from the all-gather buffer and the reduce-scatter's input are
transient and counted as part of these. NB: the parameters a rank
all-gathers for the block it computes, and the unsharded gradients before their
reduce-scatter, are not counted (one block's worth at a time).
"""

from __future__ import annotations

from dataclasses import dataclass

from hookscope.memory_plan.step import StepFacts
from hookscope.memory_plan.tracking import StorageTracker

CATEGORIES = ("parameters", "buffers", "inputs", "gradients", "optimizer_states",
              "saved_activations", "temporaries", "gathered")
_GATHERED_UNITS = {"forward": 2, "backward": 3}
SHARDED = frozenset({"parameters", "gradients", "optimizer_states"})


@dataclass(frozen=True)
class Accounts:
    """The plan's numbers for one sharding.

    Attributes:
        timeline: bytes allocated after each change of the log (per rank).
        places: ``(phase, module)`` of each change.
        peak_index: where in the log the peak is.
        at_peak: bytes alive at the peak per category (per rank).
        category: the category of each storage id.
    """

    timeline: list[int]
    places: list[tuple[str, str]]
    peak_index: int
    at_peak: dict[str, int]
    category: dict[int, str]


def categorize(tracker: StorageTracker, facts: StepFacts) -> dict[int, str]:
    """The category of every storage the tracker saw."""
    named = (("parameters", facts.parameters), ("buffers", facts.buffers),
             ("inputs", facts.inputs), ("gradients", facts.gradients),
             ("optimizer_states", facts.states))
    out: dict[int, str] = {}
    for sid in tracker.nbytes:
        kind = next((name for name, ids in named if sid in ids), None)
        if kind is None:
            kind = "saved_activations" if sid in tracker.saved else "temporaries"
        out[sid] = kind
    return out


def _rank_bytes(nbytes: int, kind: str, shards: int) -> int:
    return -(-nbytes // shards) if kind in SHARDED else nbytes


def _sharded_kinds(tracker: StorageTracker, category: dict[int, str]) -> dict[int, str]:
    """``category``, with the optimizer step's temporaries counted as sharded."""
    return {sid: "optimizer_states" if kind == "temporaries"
            and tracker.places[tracker.born[sid]][0] == "optimizer" else kind
            for sid, kind in category.items()}


def account(tracker: StorageTracker, facts: StepFacts, *, shards: int = 1,
            unit_bytes: int = 0) -> Accounts:
    """The timeline, the peak and what is alive at it, per rank of ``shards``
    (``unit_bytes``: the parameters of the largest unit sharding gathers whole)."""
    category = categorize(tracker, facts)
    kinds = _sharded_kinds(tracker, category)
    timeline: list[int] = []
    total = 0
    gathered = [_GATHERED_UNITS.get(phase, 0) * unit_bytes if shards > 1 else 0
                for phase, _ in tracker.places]
    for change, place in zip(tracker.changes, tracker.at, strict=True):
        sid = abs(change)
        size = _rank_bytes(tracker.nbytes[sid], kinds[sid], shards)
        total += size if change > 0 else -size
        timeline.append(total + gathered[place])
    peak_index = max(range(len(timeline)), key=timeline.__getitem__) if timeline else 0
    alive: set[int] = set()
    for change in tracker.changes[:peak_index + 1]:
        if change > 0:
            alive.add(change)
        else:
            alive.discard(-change)
    at_peak = dict.fromkeys(CATEGORIES, 0)
    for sid in alive:
        at_peak[category[sid]] += _rank_bytes(tracker.nbytes[sid], kinds[sid], shards)
    places = [tracker.places[i] for i in tracker.at]
    if timeline:
        at_peak["gathered"] = gathered[tracker.at[peak_index]]
    return Accounts(timeline, places, peak_index, at_peak, category)


@dataclass
class ModuleBytes:
    """One module's bytes (its submodules' included), per rank.

    Attributes:
        parameters, gradients, optimizer_states: of the parameters it holds.
        saved_activations: allocated in its forward and saved for backward.
        peak: the most allocated while it ran (forward, backward or recompute).
        peak_phase: the phase of that moment.
    """

    parameters: int = 0
    gradients: int = 0
    optimizer_states: int = 0
    saved_activations: int = 0
    peak: int = 0
    peak_phase: str = ""


def _ancestors(path: str) -> list[str]:
    """``"a.b.c"`` -> ``["a.b.c", "a.b", "a", ""]``."""
    out = [path]
    while path:
        path = path.rpartition(".")[0]
        out.append(path)
    return out


def per_module(tracker: StorageTracker, facts: StepFacts, accounts: Accounts,
               held: dict[str, set[int]], *, shards: int = 1) -> dict[str, ModuleBytes]:
    """:class:`ModuleBytes` for every module of ``held`` (path -> the storage ids of the
    parameters it holds, its submodules' included: a tied parameter counts in each
    module that holds it, once in each)."""
    rows = {path: ModuleBytes() for path in held}

    def add(path: str, field: str, nbytes: int) -> None:
        for up in _ancestors(path):
            if up in rows:
                setattr(rows[up], field, getattr(rows[up], field) + nbytes)

    for path, params in held.items():
        own = rows[path]
        for sid in params:
            own.parameters += _rank_bytes(tracker.nbytes[sid], "parameters", shards)
            for part in facts.of_parameter.get(sid, ()):
                kind = accounts.category[part]
                size = _rank_bytes(tracker.nbytes[part], kind, shards)
                if kind == "gradients":
                    own.gradients += size
                elif kind == "optimizer_states":
                    own.optimizer_states += size
    for sid, kind in accounts.category.items():
        if kind == "saved_activations":
            add(tracker.places[tracker.born[sid]][1], kind, tracker.nbytes[sid])
    seen: dict[str, tuple[int, str]] = {}
    for total, (phase, module) in zip(accounts.timeline, accounts.places, strict=True):
        if phase != "start" and total > seen.get(module, (-1, ""))[0]:
            seen[module] = (total, phase)
    for module, (total, phase) in seen.items():
        for up in _ancestors(module):
            row = rows.get(up)
            if row is not None and total > row.peak:
                row.peak, row.peak_phase = total, phase
    return rows
