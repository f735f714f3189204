"""The named columns of the trace table, and which are shown by default.

The trace table's columns come from :data:`COLUMNS`, a registry of named
columns, each filled by one probe; without ``columns=`` the table shows
:func:`default_columns`, those of every probe that ran:

=============  ==========  =====================================================
name           probe       shows
=============  ==========  =====================================================
layer          (always)    module name and class (indented tree; path if sorted)
class          (always)    module class
input          shapes      input shapes (dtype when not float32)
output         shapes      output shapes
params         (always)    parameters of the module's subtree (first call only)
time           time        inclusive time of the call
self_time      time        time minus the children's time
time_pct       time        inclusive time as a share of the whole run
mean, std      stats       of the first output tensor
min, max       stats       of the first output tensor
absmax         stats       largest magnitude of the first output tensor
zeros          stats       share of exact zeros in the first output tensor
nan, inf       stats       NaN / Inf count over all output tensors
out_bytes      memory      bytes of the outputs
saved_bytes    memory      bytes saved for backward by the call itself
alloc_delta    memory      CUDA allocated-memory change
peak           memory      CUDA peak allocated memory during the call
flops_fwd      ops         forward FLOPs of the call's subtree (``+``: lower bound)
flops_bwd      ops         backward FLOPs attributed to the call's subtree
=============  ==========  =====================================================

Each column knows its sort key and its cell; renderers (the trace table, the
annotated model print) only pick columns by name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from hookscope.core.records import Call, TensorStats, Trace
from hookscope.errors import RenderError
from hookscope.render.table import format_count, format_shapes, tree_label
from hookscope.render.units import format_bytes, format_percent, format_stat, format_time


@dataclass(frozen=True)
class View:
    """What a cell renderer may read: the trace and the rendering options."""

    trace: Trace
    ascii: bool = False
    flat: bool = False  # rows are sorted: show full paths instead of the tree


Cell = Callable[[View, Call], "str | Text"]
Key = Callable[[View, Call], "float | str | None"]


@dataclass(frozen=True)
class Column:
    """One named column of the trace table.

    Attributes:
        name: the name ``columns=``/``sort=`` select it by.
        header: the column title.
        probe: the probe whose records fill it (``None``: always available).
        key: the value a call is sorted by (``None``: no value, sorts last).
        cell: the cell a call shows.
        numeric: numbers (right-justified, sorted descending) or names.
        footer: the footer cell (a total), if any.
    """

    name: str
    header: str
    probe: str | None
    key: Key
    cell: Cell
    numeric: bool = True
    footer: Callable[[View], str] | None = None


def _first(call: Call) -> TensorStats | None:
    return call.stats[0] if call.stats else None


def _stat_column(name: str, header: str, attr: str) -> Column:
    def key(view: View, call: Call) -> float | None:
        s = _first(call)
        return None if s is None else getattr(s, attr)

    def cell(view: View, call: Call) -> str:
        value = key(view, call)
        if attr == "zero_fraction":
            return format_percent(value)
        return format_stat(value, digits=3)

    return Column(name, header, "stats", key, cell)


def _count_column(name: str, header: str, attr: str) -> Column:
    def key(view: View, call: Call) -> float | None:
        counts = [getattr(s, attr) for s in call.stats or ()]
        known = [c for c in counts if c is not None]
        return float(sum(known)) if known else None

    def cell(view: View, call: Call) -> str | Text:
        value = key(view, call)
        if value is None:
            return ""
        text = format_count(int(value))
        return Text(text, style="bold red") if value and not view.ascii else text

    return Column(name, header, "stats", key, cell)


def _memory_column(name: str, header: str, attr: str) -> Column:
    def key(view: View, call: Call) -> float | None:
        return None if call.memory is None else getattr(call.memory, attr)

    def cell(view: View, call: Call) -> str:
        value = key(view, call)
        return format_bytes(None if value is None else int(value))

    return Column(name, header, "memory", key, cell)


def _layer_cell(view: View, call: Call) -> str | Text:
    if not view.flat:
        return tree_label(view.trace, call, ascii=view.ascii)
    label = Text(call.name or view.trace.model.class_name)
    if call.path:
        label.append(f" ({call.module_class})", style="cyan")
    return label


def _params(view: View, call: Call) -> float | None:
    info = view.trace.modules.get(call.path)
    return None if info is None or call.call_index else info.total_params


def _params_cell(view: View, call: Call) -> str:
    if call.call_index and call.path in view.trace.modules:
        return "(reused)"
    value = _params(view, call)
    return format_count(None if value is None else int(value))


def _time_pct(view: View, call: Call) -> float | None:
    total = view.trace.total_time_ns
    return None if not total or call.time_ns is None else call.time_ns / total


def _numel(metas: Sequence[Any]) -> float | None:
    counts = [m.numel for m in metas]
    return float(sum(counts)) if counts and min(counts) >= 0 else None


def _flops(view: View, call: Call, backward: bool) -> float | None:
    f = call.flops
    return None if f is None else float(f.backward if backward else f.forward)


def _flops_cell(view: View, call: Call, backward: bool) -> str:
    value = _flops(view, call, backward)
    if value is None:
        return ""
    partial = call.flops is not None and call.flops.partial
    return format_count(int(value)) + ("+" if partial else "")


def _totals_flops(view: View, backward: bool) -> str:
    f = view.trace.totals_flops
    if f is None:
        return ""
    return format_count(f.backward if backward else f.forward) + ("+" if f.partial else "")


_BUILTIN: tuple[Column, ...] = (
    Column("layer", "Layer (type)", None, lambda v, c: c.path, _layer_cell, numeric=False,
           footer=lambda v: "Total"),
    Column("class", "Class", None, lambda v, c: c.module_class, lambda v, c: c.module_class,
           numeric=False),
    Column("input", "Input shape", "shapes", lambda v, c: _numel(c.inputs),
           lambda v, c: format_shapes(c.inputs, root="args[0]"), numeric=False),
    Column("output", "Output shape", "shapes", lambda v, c: _numel(c.outputs),
           lambda v, c: format_shapes(c.outputs, root="out"), numeric=False),
    Column("params", "Params", None, _params, _params_cell,
           footer=lambda v: format_count(v.trace.model.params_total)),
    Column("time", "Time", "time", lambda v, c: c.time_ns,
           lambda v, c: format_time(c.time_ns, ascii=v.ascii),
           footer=lambda v: format_time(v.trace.total_time_ns, ascii=v.ascii)),
    Column("self_time", "Self time", "time", lambda v, c: c.self_time_ns,
           lambda v, c: format_time(c.self_time_ns, ascii=v.ascii)),
    Column("time_pct", "Time %", "time", _time_pct,
           lambda v, c: format_percent(_time_pct(v, c))),
    _stat_column("mean", "Mean", "mean"),
    _stat_column("std", "Std", "std"),
    _stat_column("min", "Min", "min"),
    _stat_column("max", "Max", "max"),
    _stat_column("absmax", "Max |x|", "absmax"),
    _stat_column("zeros", "Zeros", "zero_fraction"),
    _count_column("nan", "NaN", "nan_count"),
    _count_column("inf", "Inf", "inf_count"),
    _memory_column("out_bytes", "Out bytes", "output_bytes"),
    _memory_column("saved_bytes", "Saved", "saved_bytes"),
    _memory_column("alloc_delta", "Alloc Δ", "allocated_delta"),
    _memory_column("peak", "Peak", "peak_bytes"),
    Column("flops_fwd", "FLOPs", "ops", lambda v, c: _flops(v, c, False),
           lambda v, c: _flops_cell(v, c, False), footer=lambda v: _totals_flops(v, False)),
    Column("flops_bwd", "FLOPs bwd", "ops", lambda v, c: _flops(v, c, True),
           lambda v, c: _flops_cell(v, c, True), footer=lambda v: _totals_flops(v, True)),
)

#: Every column of the trace table, by name (see the module docstring).
COLUMNS: dict[str, Column] = {c.name: c for c in _BUILTIN}

_DEFAULTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("shapes", ("input", "output")),
    ("time", ("time", "self_time")),
    ("stats", ("mean", "std", "zeros", "nan", "inf")),
    ("memory", ("out_bytes", "saved_bytes", "alloc_delta", "peak")),
    ("ops", ("flops_fwd", "flops_bwd")),
)
# Shown by default only when some call has a value other than None and 0.
_WHEN_PRESENT = frozenset({"nan", "inf", "saved_bytes", "alloc_delta", "peak", "flops_bwd"})


def default_columns(trace: Trace) -> list[str]:
    """The columns shown without ``columns=``: ``layer`` and the columns of each probe
    that ran. ``params`` only when no measuring probe ran (it is the model's structure,
    which :func:`hookscope.summary` shows), to keep the table within 120 characters.
    Columns no call has a value for are left out (``nan``/``inf`` when there are none,
    ``saved_bytes`` without grad mode, CUDA memory on the CPU, backward FLOPs without a
    backward)."""
    names = ["layer"]
    for probe, extra in _DEFAULTS:
        if probe in trace.probes:
            names.extend(n for n in extra if n not in _WHEN_PRESENT or _any_value(trace, n))
    if not set(trace.probes) & {probe for probe, _ in _DEFAULTS[1:]}:
        names.append("params")
    return names


def _any_value(trace: Trace, name: str) -> bool:
    col, view = COLUMNS[name], View(trace)
    return any(col.key(view, c) not in (None, 0) for c in trace.calls)


def column(name: str) -> Column:
    """The column called ``name``.

    Raises:
        RenderError: no such column (the message lists the valid names).
    """
    found = COLUMNS.get(name) if isinstance(name, str) else None
    if found is None:
        raise RenderError(
            f"unknown trace column {name!r}; valid columns: {', '.join(COLUMNS)}"
        )
    return found
