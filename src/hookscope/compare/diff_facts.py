"""Which facts of two traces are compared, and how one fact changed.

Nothing here names a probe: the facts compared are those the probes that ran declared
(``core/records/facts.py``), so a user's own probe is compared like the built-in ones.

1. Every default export :class:`~hookscope.Field` of those probes (``time_ns``,
   ``output_bytes``, ``mean``, ``flops_forward``, ``inputs`` ...): its raw value per
   call, with the unit of the table :class:`~hookscope.Column` it names.
2. Every numeric table column of theirs that no field stands for.
3. Every other fact a call holds as a plain number, declared in this process or not
   (a document read before its probe's module was imported keeps it as a raw JSON
   value).

Numbers are compared as numbers (:class:`FactChange`); any other value (shapes, as
text) only as equal or not: a structural change.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hookscope.core.records.facts import REGISTRY, RawValue, Unit, probe_columns, probe_fields
from hookscope.core.records.serialize import settle_raw_facts
from hookscope.core.records.trace import Call, Trace
from hookscope.render.export import probe_rank

__all__ = ["FactChange", "FactSpec", "fact_specs", "is_number", "read_raw"]

#: Units of amounts (time, work, memory): the rows are ranked by their relative change.
#: A statistic's relative change is not (a mean near zero doubles on noise).
AMOUNTS = (Unit.COUNT, Unit.TIME_NS, Unit.BYTES)


@dataclass(frozen=True)
class FactSpec:
    """One fact compared: its name, how it is read from a call, and its unit.

    Attributes:
        name: the field's, column's or fact's name (``time_ns``, ``out_bytes``).
        header: the table's title for it.
        value: ``value(call, trace)``: the raw value.
        unit: how its values are shown.
        probe: the probe that declared it (``""``: a fact no probe here declares).
        numeric: compared as a number; else only as equal or not (shapes, flags).
    """

    name: str
    header: str
    value: Callable[[Call, Trace], Any]
    unit: Unit
    probe: str = ""
    numeric: bool = True


def is_number(value: Any) -> bool:
    """An int or float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_raw(name: str) -> Callable[[Call, Trace], Any]:
    """A reader of fact ``name`` as the call holds it (a raw JSON value unwrapped)."""

    def value(call: Call, trace: Trace) -> Any:
        found = call.facts.get(name)
        return found.raw if isinstance(found, RawValue) else found

    return value


def _declared(probes: Sequence[str]) -> list[FactSpec]:
    specs: list[FactSpec] = []
    for probe in sorted(probes, key=probe_rank):
        columns = {c.name: c for c in probe_columns(probe)}
        for f in probe_fields(probe):
            if f.default:
                col = columns.get(f.column or "")
                unit = col.unit if col else Unit.STAT
                numeric = unit not in (Unit.SHAPES, Unit.TEXT) and f.dtype not in (
                    "boolean", "bool", "string", "object")
                specs.append(FactSpec(f.name, col.header if col else f.name, f.value,
                                      unit, probe, numeric))
        shown = {f.column for f in probe_fields(probe)}
        specs += [FactSpec(c.name, c.header, c.value, c.unit, probe)
                  for c in columns.values()
                  if c.name not in shown and c.numeric and c.unit is not Unit.SHAPES]
    return specs


def fact_specs(a: Trace, b: Trace) -> list[FactSpec]:
    """The facts compared between ``a`` and ``b`` (see the module docstring), the
    declared ones in the order of the trace table's columns."""
    settle_raw_facts(a)
    settle_raw_facts(b)
    probes = list(dict.fromkeys([*a.probes, *b.probes]))
    specs = _declared(probes)
    taken = {s.name for s in specs}
    extra: dict[str, Unit] = {}
    for call in [*a.calls, *b.calls]:
        for name in call.facts:
            if name in taken or name in extra:
                continue
            value = read_raw(name)(call, a)
            if is_number(value):
                extra[name] = Unit.COUNT if isinstance(value, int) else Unit.STAT
    for name, unit in extra.items():
        spec = REGISTRY.call_facts.get(name)
        specs.append(FactSpec(name, name, read_raw(name), unit, spec.probe if spec else ""))
    return specs


@dataclass(frozen=True)
class FactChange:
    """One numeric fact of one call, on both sides.

    Attributes:
        name: the fact (:attr:`FactSpec.name`).
        a: side A's value (``None``: not recorded there).
        b: side B's value.
        unit: how the values are shown.
    """

    name: str
    a: float | int | None
    b: float | int | None
    unit: Unit

    @property
    def delta(self) -> float | int | None:
        """``b - a`` (``None`` when a side has no value)."""
        if self.a is None or self.b is None:
            return None
        return self.b - self.a

    @property
    def relative(self) -> float | None:
        """``(b - a) / |a|``: 0.5 is 50% more; ``inf`` when ``a`` is 0 and ``b`` not;
        ``None`` when a side has no value or a value is not finite."""
        delta = self.delta
        if delta is None or self.a is None or not math.isfinite(delta):
            return None
        if self.a == 0:
            return 0.0 if delta == 0 else math.copysign(math.inf, delta)
        return delta / abs(self.a)

    @property
    def changed(self) -> bool:
        """The values differ (a value on one side only counts as a change)."""
        if self.a is None or self.b is None:
            return self.a is not self.b
        same_nan = isinstance(self.a, float) and isinstance(self.b, float) and \
            math.isnan(self.a) and math.isnan(self.b)
        return not same_nan and self.a != self.b
