"""What probes record, declared by the probes themselves, and how it is shown.

A probe (``core/engine/probe.py``) owns its facts. It declares them on its class:

- :class:`Fact` per call (``Call.facts[name]``) or per trace (``Trace.facts[name]``),
  with how the value is written to and read from JSON (``core/records/serialize.py``, with
  the codecs of ``core/records/value_json.py``);
- :class:`Column` for the terminal table (``render/columns.py``): header, raw value,
  unit (the renderer formats by unit), sort key, footer;
- :class:`Field` for the flat exports, CSV and DataFrame (``render/export.py``).

Declaring a probe class registers its declarations here (``Probe.__init_subclass__``),
so the serializer, the table and the exports find a new probe's facts without any
file of hookscope being edited: they only read the registries below. Registering the
same name twice from two different probes raises (a registry never lets one entry
hide another silently); re-defining the same probe class (a re-imported module, a
notebook cell run twice) replaces its own.

Reading ``call.time_ns`` returns ``call.facts["time_ns"]`` (``Call.__getattr__`` in
``core/records/trace.py``), or the fact's default when its probe did not record it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from hookscope.core.records.value_json import finite_json, floats_back

Encode = Callable[[Any], Any]
Decode = Callable[[Any], Any]


class Unit(str, Enum):
    """How a renderer formats a column's raw value."""

    TEXT = "text"  # shown as is
    COUNT = "count"  # an integer with thousands separators: 1,234,567
    TIME_NS = "time_ns"  # nanoseconds: 812 ns, 12.3 µs, 4.56 ms
    BYTES = "bytes"  # bytes in binary units: 512 B, 1.50 KiB
    STAT = "stat"  # a statistic, 3 significant digits
    PERCENT = "percent"  # a fraction shown as 51.2%
    SHAPES = "shapes"  # a list of TensorMeta, one shape per line


@dataclass(frozen=True)
class Fact:
    """One fact a probe records, per call or per trace.

    Attributes:
        name: the key in ``Call.facts``/``Trace.facts``, also the attribute name
            (``call.time_ns``) and the JSON key.
        doc: one line saying what it is, with its unit.
        encode: value -> JSON-ready value (``None``: the value is JSON-ready as is).
        decode: JSON value -> value (``None``: as is).
        default: what reading the fact returns when it was not recorded; use
            ``default_factory`` for a mutable default (a fresh list per read).
        default_factory: makes the default.
        timing: a measured time (an int or ``None``) that varies from run to run:
            :func:`hookscope.median_times` takes its median over repeated traces.
    """

    name: str
    doc: str = ""
    encode: Encode | None = None
    decode: Decode | None = None
    default: Any = None
    default_factory: Callable[[], Any] | None = None
    probe: str = ""
    timing: bool = False

    def default_value(self) -> Any:
        """What a call without this fact reads as: ``default``, or ``default_factory()``."""
        return self.default_factory() if self.default_factory is not None else self.default

    def to_json(self, value: Any) -> Any:
        """``encode(value)``; without ``encode``, the value with each non-finite float
        (a NaN norm) as ``{"$float": "nan"}`` (``"inf"``, ``"-inf"``): the document
        stays JSON, and a string ``"inf"`` stays a string."""
        if value is None:
            return None
        return finite_json(value) if self.encode is None else self.encode(value)

    def from_json(self, value: Any) -> Any:
        """``decode(value)``; without ``decode``, each ``{"$float": ...}`` is the float
        it stands for again."""
        if value is None:
            return None
        return floats_back(value) if self.decode is None else self.decode(value)


@dataclass(frozen=True)
class Column:
    """One column of the trace table, declared by the probe that fills it.

    Attributes:
        name: what ``columns=``/``sort=`` select it by.
        header: the column title.
        value: ``value(call, trace)``: the raw value of a call's cell (``None``: empty).
        unit: how the renderer formats ``value`` (and ``footer``).
        key: ``key(call, trace)``: the value rows are sorted by (default: ``value``,
            when it is a number).
        text: ``text(call, trace) -> str``: the cell's text when the unit's format
            does not fit (a FLOP count with a ``+`` for a lower bound).
        footer: ``footer(trace)``: a total for the footer row, formatted by ``unit``
            (a ``str`` is shown as is).
        default: shown without ``columns=`` when its probe ran.
        when_present: shown by default only if some call has a value other than
            ``None`` and 0 (NaN counts, CUDA memory on the CPU).
        alert: a non-zero value is highlighted (bold red on a terminal).
        wrap: the cell may wrap (shape lists); numbers and names never do.
        numeric: right-justified, sorted descending.
        summed: what a folded run of identical blocks shows: their sum (``True``), or
            nothing (``False``: a mean, a fraction of one output); ``None``: by unit
            (counts, times, bytes and shares are summed).
        probe: the probe that declared it (set when the probe class is defined).
    """

    name: str
    header: str
    value: Callable[[Any, Any], Any]
    unit: Unit = Unit.COUNT
    key: Callable[[Any, Any], Any] | None = None
    text: Callable[[Any, Any], str] | None = None
    footer: Callable[[Any], Any] | None = None
    default: bool = True
    when_present: bool = False
    alert: bool = False
    wrap: bool = False
    numeric: bool = True
    summed: bool | None = None
    probe: str = ""


@dataclass(frozen=True)
class Field:
    """One field of the flat exports (CSV, DataFrame): a raw value per call.

    Attributes:
        name: the CSV header / DataFrame column.
        value: ``value(call, trace)``: plain numbers in base units, strings, or ``None``.
        dtype: the pandas dtype of the DataFrame column (``"Int64"``: integers that
            may be missing), ``None`` to let pandas infer it.
        column: the name of the table column that shows the same fact (``time`` for
            ``time_ns``): either name selects it in ``to_csv(columns=...)``, the
            table's ``columns=``/``sort=`` and the command line.
        probe: the probe that declared it.
        default: in an export that names no columns (like a table column's
            ``default``); ``False`` for a value derived from others (``time_share``).
    """

    name: str
    value: Callable[[Any, Any], Any]
    dtype: str | None = None
    column: str | None = None
    probe: str = ""
    default: bool = True


class RawValue:
    """A fact read from a document that this process has no declaration for: kept as
    its JSON value and written back unchanged."""

    __slots__ = ("raw",)

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RawValue) and other.raw == self.raw

    def __hash__(self) -> int:  # pragma: no cover - unhashable payloads are common
        return id(self)

    def __repr__(self) -> str:
        return f"RawValue({self.raw!r})"


@dataclass
class _Registry:
    """Every registered declaration, by name, with the probe class that owns it."""

    call_facts: dict[str, Fact] = field(default_factory=dict)
    trace_facts: dict[str, Fact] = field(default_factory=dict)
    columns: dict[str, Column] = field(default_factory=dict)
    fields: dict[str, Field] = field(default_factory=dict)
    owners: dict[tuple[str, str], str] = field(default_factory=dict)  # (kind, name) -> owner
    by_probe: dict[str, dict[str, list[str]]] = field(default_factory=dict)


REGISTRY = _Registry()
"""The declarations of every probe class defined so far (see the module docstring)."""


#: Names no probe may declare, by kind, with what holds them: the engine's keys of a
#: call record (a fact of that name was overwritten in JSON), and the trace table's and
#: exports' own columns and fields (``render`` reserves them: one of that name took
#: them over in every trace of the process).
RESERVED: dict[str, dict[str, str]] = {
    "facts": dict.fromkeys(("index", "path", "class", "module_class", "call_index", "depth",
                            "parent", "children", "start_ns", "error", "facts", "name"),
                           "the engine's call record"),
    "trace_facts": {},  # the trace record's attributes: core/records/trace.py reserves them
    "columns": {},
    "fields": {},
}


def reserve(kind: str, names: Iterable[str], holder: str) -> None:
    """Keep ``names`` of ``kind`` for ``holder`` (the trace table's own columns, say);
    a name reserved before keeps its first holder."""
    table = RESERVED[kind]
    for name in names:
        table.setdefault(name, holder)


def _add(kind: str, table: dict[str, Any], item: Any, owner: str) -> None:
    key = (kind, item.name)
    holder = RESERVED[kind].get(item.name)
    if holder is None and kind == "fields":  # a field's column name selects it too
        holder = next((f"probe {f.probe!r} (the column name of its field {f.name!r})"
                       for f in REGISTRY.fields.values()
                       if f.column == item.name and REGISTRY.owners.get(
                           ("fields", f.name)) != owner), None)
    # columns= of the table and of the exports take one vocabulary: a column may not
    # be named like another probe's field, nor a field like another probe's column
    other = {"columns": "fields", "fields": "columns"}.get(kind)
    if holder is None and other is not None:
        found = REGISTRY.owners.get((other, item.name))
        if found is not None and found != owner:
            holder = f"{found} (its {other[:-1]} of that name)"
        elif item.name in RESERVED[other]:
            holder = RESERVED[other][item.name]
    if kind == "fields" and item.column is not None and \
            REGISTRY.owners.get(("columns", item.column)) != owner:
        raise ValueError(
            f"field {item.name!r} of {owner} says column={item.column!r}, which is not a "
            f"column {owner} declares; name one of its own columns, or leave column= out"
        )
    if holder is not None:
        raise ValueError(
            f"{kind[:-1].replace('_', ' ')} name {item.name!r} is taken by {holder}; give "
            f"the {kind[:-1].replace('_', ' ')} of {owner} another name"
        )
    previous = REGISTRY.owners.get(key)
    if previous is not None and previous != owner:
        raise ValueError(
            f"{kind} {item.name!r} is already declared by {previous}; give the "
            f"{kind} of {owner} another name"
        )
    REGISTRY.owners[key] = owner
    table[item.name] = item


def register_declarations(
    probe: str,
    owner: str,
    *,
    facts: Iterable[Fact] = (),
    trace_facts: Iterable[Fact] = (),
    columns: Iterable[Column] = (),
    fields: Iterable[Field] = (),
) -> dict[str, list[Any]]:
    """Register what probe ``probe`` (class ``owner``, a qualified name) declares.

    Returns the declarations with ``probe`` filled in, by kind.

    Raises:
        ValueError: a name is already declared by another probe class.
    """
    from dataclasses import replace

    out: dict[str, list[Any]] = {"facts": [], "trace_facts": [], "columns": [], "fields": []}
    tables: list[tuple[str, dict[str, Any], Iterable[Any]]] = [
        ("facts", REGISTRY.call_facts, facts),
        ("trace_facts", REGISTRY.trace_facts, trace_facts),
        ("columns", REGISTRY.columns, columns),
        ("fields", REGISTRY.fields, fields),
    ]
    for kind, table, items in tables:
        for item in items:
            named = replace(item, probe=probe)
            _add(kind, table, named, owner)
            out[kind].append(named)
    REGISTRY.by_probe[probe] = {k: [i.name for i in v] for k, v in out.items()}
    return out


def set_exclusive(calls: Sequence[Any], inclusive: str, exclusive: str) -> None:
    """``call.facts[exclusive]``: the call's ``inclusive`` fact (a time, say) minus its
    direct children's, at least 0, for every call that has the inclusive fact."""
    for call in calls:
        total = call.facts.get(inclusive)
        if total is None:
            continue
        children = sum(calls[i].facts.get(inclusive) or 0 for i in call.children)
        call.facts[exclusive] = max(0, total - children)


def probe_columns(probe: str) -> list[Column]:
    """The table columns probe ``probe`` declared, in declaration order."""
    names = REGISTRY.by_probe.get(probe, {}).get("columns", [])
    return [REGISTRY.columns[n] for n in names]


def probe_fields(probe: str) -> list[Field]:
    """The export fields probe ``probe`` declared, in declaration order."""
    names = REGISTRY.by_probe.get(probe, {}).get("fields", [])
    return [REGISTRY.fields[n] for n in names]


def timing_facts() -> list[str]:
    """The names of every per-call fact declared ``timing`` (by any probe so far)."""
    return [f.name for f in REGISTRY.call_facts.values() if f.timing]


def probe_facts(probe: str, *, per_trace: bool = False) -> list[Fact]:
    """The facts probe ``probe`` declared (per call, or per trace)."""
    kind = "trace_facts" if per_trace else "facts"
    table = REGISTRY.trace_facts if per_trace else REGISTRY.call_facts
    return [table[n] for n in REGISTRY.by_probe.get(probe, {}).get(kind, [])]


def decode_raw(facts: dict[str, Any], name: str, kind: str) -> Any:
    """``facts[name]``, a ``RawValue``, decoded (and kept so) when its fact is declared
    now; else the ``RawValue`` itself."""
    value = facts[name]
    spec = (REGISTRY.call_facts if kind == "call" else REGISTRY.trace_facts).get(name)
    if spec is not None and isinstance(value, RawValue):
        value = facts[name] = spec.from_json(value.raw)
    return value
