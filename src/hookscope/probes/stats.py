"""Statistics probe: mean, std, min, max, max-abs, zero fraction, NaN and Inf counts.

For every tensor a call returns (``Call.stats``, one :class:`TensorStats` per output
tensor, with its path) and, when a call raises, for every tensor it received
(``Call.input_stats``), so the failure can be reported with its inputs' statistics.

How each is computed, per dtype and device: ``probes/moments.py``.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hookscope.core import torch_private
from hookscope.core.engine.probe import Probe, register_probe
from hookscope.core.records.facts import Column, Fact, Field, Unit
from hookscope.core.records.tensor_paths import iter_call_inputs, iter_tensors
from hookscope.core.records.trace import Call, Trace
from hookscope.core.records.value_json import stats_in, stats_out
from hookscope.probes.moments import Moments, make_stats, readable, tensor_moments, to_host

if TYPE_CHECKING:
    from hookscope.core.engine.handles import Removable
    from hookscope.core.engine.tracer import Tracer

class _Entry:
    """Statistics of one tensor, waiting for ``finalize``."""

    __slots__ = ("call", "is_input", "kind", "moments", "numel", "path")

    def __init__(
        self, call: Call, path: str, numel: int, kind: str, moments: Moments | None,
        is_input: bool,
    ) -> None:
        self.call = call
        self.path = path
        self.numel = numel
        self.kind = kind
        self.moments = moments
        self.is_input = is_input


def _first(call: Call, attr: str) -> Any:
    stats = call.facts.get("stats")
    return getattr(stats[0], attr) if stats else None


def _count(call: Call, attr: str) -> int | None:
    known = [n for s in call.facts.get("stats") or () if (n := getattr(s, attr)) is not None]
    return sum(known) if known else None


def _stat_column(name: str, header: str, attr: str, *, default: bool = True) -> Column:
    unit = Unit.PERCENT if attr == "zero_fraction" else Unit.STAT
    # a fraction of one output: a fold of blocks does not add them up
    return Column(name, header, lambda c, t: _first(c, attr), unit, default=default,
                  summed=False)


def _count_column(name: str, header: str, attr: str) -> Column:
    return Column(
        name, header, lambda c, t: _count(c, attr), Unit.COUNT, when_present=True, alert=True
    )


def _stat_field(name: str) -> Field:
    column = {"zero_fraction": "zeros"}.get(name, name)
    return Field(name, lambda c, t: _first(c, name), column=column)


@register_probe
class StatsProbe(Probe):
    """Record ``stats`` for every output tensor (``input_stats`` when the call raised)."""

    name = "stats"
    install_touches_modules = False
    order = 60
    column_rank = 30
    facts = (
        Fact("stats", "statistics of every output tensor (TensorStats, with its path)",
             stats_out, stats_in),
        Fact("input_stats", "statistics of every input tensor of a call that raised",
             stats_out, stats_in),
    )
    columns = (
        _stat_column("mean", "Mean", "mean"),
        _stat_column("std", "Std", "std"),
        _stat_column("min", "Min", "min", default=False),
        _stat_column("max", "Max", "max", default=False),
        _stat_column("absmax", "Max |x|", "absmax", default=False),
        _stat_column("zeros", "Zeros", "zero_fraction"),
        _count_column("nan", "NaN", "nan_count"),
        _count_column("inf", "Inf", "inf_count"),
    )
    fields = (
        *(_stat_field(n) for n in ("mean", "std", "min", "max", "absmax", "zero_fraction")),
        Field("nan_count", lambda c, t: _count(c, "nan_count"), "Int64", column="nan"),
        Field("inf_count", lambda c, t: _count(c, "inf_count"), "Int64", column="inf"),
    )

    def __init__(self) -> None:
        self._pending: list[_Entry] = []
        # id(tensor) -> (weak reference, version, kind, moments): a tensor that a
        # container returns unchanged (Sequential, residual blocks) is measured once.
        self._seen: dict[int, tuple[weakref.ref[torch.Tensor], int, str, Moments | None]] = {}

    def install(self, tracer: Tracer) -> list[Removable]:
        self._pending.clear()
        self._seen.clear()
        return []

    def on_exit(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
        output: Any, failed: bool,
    ) -> None:
        if failed:
            call.facts["input_stats"] = []
            self._measure(call, iter_call_inputs(args, kwargs), is_input=True)
            return
        call.facts["stats"] = []
        self._measure(call, iter_tensors(output, "out"), is_input=False)

    def _measure(
        self, call: Call, tensors: Iterable[tuple[str, torch.Tensor]], *, is_input: bool
    ) -> None:
        with torch.no_grad():
            for path, t in tensors:
                kind, moments = self._moments(t)
                self._pending.append(_Entry(call, path, t.numel(), kind, moments, is_input))

    def _moments(self, t: torch.Tensor) -> tuple[str, Moments | None]:
        if not readable(t):
            return tensor_moments(t)
        version = torch_private.version_counter(t)
        if version is None:  # an inference tensor: no version counter
            return tensor_moments(t)
        seen = self._seen.get(id(t))
        if seen is not None and seen[0]() is t and seen[1] == version:
            return seen[2], seen[3]
        kind, moments = tensor_moments(t)
        self._seen[id(t)] = (weakref.ref(t), version, kind, moments)
        return kind, moments

    def finalize(self, trace: Trace) -> None:
        pending, self._pending = self._pending, []
        self._seen.clear()
        values = to_host([e.moments for e in pending])
        for entry, moments in zip(pending, values, strict=True):
            stats = make_stats(entry.path, entry.numel, entry.kind, moments)
            entry.call.facts["input_stats" if entry.is_input else "stats"].append(stats)
