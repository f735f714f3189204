"""The named columns of the trace table, and which are shown by default.

Every column but three is declared by the probe that fills it (``Probe.columns``,
``core/records/facts.py``): its name, header, raw value, unit, sort key and footer. This module
only formats them, by unit (``render/units.py``), and adds the columns that come from
the trace itself: ``layer`` (module name and class, an indented tree, or the path when
rows are sorted), ``class`` and ``params`` (the module subtree's parameters, on its
first call). :func:`columns` lists them all, so a probe defined anywhere, in a test
file or a notebook, shows up in ``columns=`` and ``sort=`` with no file here edited.

Without ``columns=`` the table shows :func:`default_columns`: ``layer`` and the default
columns of every probe that ran (``Column.default``; ``when_present`` ones only when
some call has a value other than ``None`` and 0), probes ordered by ``column_rank``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hookscope.core.records.facts import REGISTRY, Column, Unit, probe_columns, reserve
from hookscope.core.records.serialize import settle_raw_facts
from hookscope.core.records.trace import Call, Trace
from hookscope.core.records.values import TensorMeta
from hookscope.errors import RenderError
from hookscope.render.export import fields, probe_rank
from hookscope.render.labels import shapes_cell
from hookscope.render.units import (
    format_bytes,
    format_count,
    format_percent,
    format_stat,
    format_time,
)

__all__ = [
    "PRIORITY",
    "Column",
    "View",
    "cell_style",
    "column",
    "columns",
    "default_columns",
    "fold_cell",
    "priority",
    "render_cell",
    "render_footer",
    "sort_key",
]


@dataclass(frozen=True)
class View:
    """What a cell renderer may read: the trace and the rendering options."""

    trace: Trace
    ascii: bool = False
    flat: bool = False  # rows are sorted: show full paths instead of the tree

    def __post_init__(self) -> None:
        settle_raw_facts(self.trace)  # facts read before their probe was defined


def format_value(value: Any, unit: Unit, *, ascii: bool = False) -> str:
    """A raw value as its unit shows it; ``None`` is empty, a ``str`` is shown as is."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if unit is Unit.COUNT:
        return format_count(int(value))
    if unit is Unit.TIME_NS:
        return format_time(int(value), ascii=ascii)
    if unit is Unit.BYTES:
        return format_bytes(int(value))
    if unit is Unit.STAT:
        return format_stat(value, digits=3)
    if unit is Unit.PERCENT:
        return format_percent(value)
    if unit is Unit.SHAPES:
        metas: Sequence[TensorMeta] = value
        return shapes_cell(metas)
    return str(value)


def render_cell(col: Column, view: View, call: Call) -> str:
    """The cell of ``call`` in column ``col``.

    Raises:
        RenderError: the column's own function raised (a probe's bug, named).
    """
    try:
        if col.text is not None:
            return col.text(call, view.trace)
        return format_value(col.value(call, view.trace), col.unit, ascii=view.ascii)
    except RenderError:
        raise
    except Exception as e:
        raise RenderError(
            f"column {col.name!r}" + (f" of probe {col.probe!r}" if col.probe else "")
            + f" raised {type(e).__name__} for call {call.name or '<root>'!r}: {e}"
        ) from e


def cell_style(col: Column, view: View, call: Call) -> str:
    """The terminal style of a cell: bold red for a non-zero alert value (NaN counts)."""
    if col.alert and not view.ascii and col.value(call, view.trace):
        return "bold red"
    return ""


_SUMMED = (Unit.COUNT, Unit.TIME_NS, Unit.BYTES, Unit.PERCENT)


def fold_cell(col: Column, view: View, calls: Sequence[Call]) -> str:
    """The cell of a folded run of identical blocks (``render/fold.py``): counts, times,
    bytes and shares summed (a ``+`` kept when a part is a lower bound); the shapes of
    the first block (they are the same in all); statistics left empty."""
    if col.unit is Unit.SHAPES:
        return str(render_cell(col, view, calls[0]))
    if not (col.unit in _SUMMED if col.summed is None else col.summed):
        return ""
    total: float = 0
    found = False
    for c in calls:
        v = col.value(c, view.trace)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            total += v
            found = True
    if not found:
        return ""
    text = format_value(total if col.unit is Unit.PERCENT else int(total), col.unit,
                        ascii=view.ascii)
    if col.text is not None and any(col.text(c, view.trace).endswith("+") for c in calls):
        text += "+"
    return text


PRIORITY: dict[str, int] = {
    "layer": 1000, "time": 90, "output": 85, "params": 80, "flops_fwd": 78, "nan": 72,
    "inf": 71, "grad_out": 70, "grad_in": 68, "bwd_time": 66, "flops_bwd": 65,
    "self_time": 55, "saved_bytes": 52, "out_bytes": 50, "peak": 45, "mean": 45,
    "std": 40, "alloc_delta": 35, "time_pct": 35, "bwd_self_time": 34, "zeros": 30,
    "absmax": 28, "min": 25, "max": 25, "class": 20, "input": 10,
}
"""Which columns stay when the table is too wide: the lowest are left out first (a
column not named here: 50). The layer column is never left out; the names first, the
probes' headline facts next, the input shapes (the previous row's output, mostly) last.
"""


def priority(col: Column) -> int:
    return PRIORITY.get(col.name, 50)


def render_footer(col: Column, view: View) -> str:
    if col.footer is None:
        return ""
    return format_value(col.footer(view.trace), col.unit, ascii=view.ascii)


def sort_key(col: Column, view: View, call: Call) -> float | str | None:
    """What rows are sorted by: the column's key, else its value when that is a number."""
    if col.key is not None:
        key: float | str | None = col.key(call, view.trace)
        return key
    value = col.value(call, view.trace)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    return value


# -- the columns that come from the trace, not from a probe ----------------------------


def _layer_text(call: Call, trace: Trace) -> str:
    return call.name or trace.model.class_name


def _params(call: Call, trace: Trace) -> int | None:
    info = trace.modules.get(call.path)
    return None if info is None or call.call_index else info.total_params


def _params_total(trace: Trace) -> int:
    """The Total row's parameters: the model's, or with ``select=`` those of the
    top-level rows, each module and each tensor once (a weight tied between two of
    them, GPT-2's ``lm_head`` and ``transformer``, counts once: ``meta["tied"]``)."""
    top = {c.path for c in trace.calls if c.parent is None}
    if "" in top or not top:
        return trace.model.params_total
    total = sum(info.total_params for p in top if (info := trace.modules.get(p)) is not None)
    tied, sizes = trace.meta.get("tied") or {}, trace.meta.get("tied_numel") or {}
    holders: dict[str, set[str]] = {}  # a tied tensor (its first path) -> tops holding it
    for later, first in tied.items():
        for path in (later, first):
            owner = _top_of(path, top)
            if owner is not None:
                holders.setdefault(first, set()).add(owner)
    total -= sum((len(t) - 1) * int(sizes.get(f, 0)) for f, t in holders.items())
    # a module registered at several paths (one Linear in every block): counted in each
    # top-level row that holds it, once in the total (not again for one inside it)
    shared = [(p, info) for p, info in trace.modules.items() if info.aliases]
    for path, info in shared:
        if any(path.startswith(f"{outer}.") for outer, _ in shared):
            continue
        tops = {_top_of(f"{p}.x", top) for p in (path, *info.aliases)} - {None}
        total -= max(len(tops) - 1, 0) * info.total_params
    return total


def _top_of(tensor_path: str, top: set[str]) -> str | None:
    """The top-level row whose module holds the tensor at ``tensor_path``."""
    parts = tensor_path.split(".")[:-1]
    for i in range(len(parts), 0, -1):
        if (prefix := ".".join(parts[:i])) in top:
            return prefix
    return None


def _params_text(call: Call, trace: Trace) -> str:
    if call.call_index and call.path in trace.modules:
        return "(reused)"
    return format_count(_params(call, trace))


TRACE_COLUMNS: tuple[Column, ...] = (
    Column("layer", "Layer (type)", _layer_text, Unit.TEXT, key=lambda c, t: c.path,
           footer=lambda t: "Total", numeric=False),
    Column("class", "Class", lambda c, t: c.module_class, Unit.TEXT, numeric=False),
    Column("params", "Params", _params, Unit.COUNT, text=_params_text,
           footer=_params_total),
)
_TRACE_COLUMNS = {c.name: c for c in TRACE_COLUMNS}
reserve("columns", _TRACE_COLUMNS, "the trace table's own columns")


def columns() -> dict[str, Column]:
    """Every column, by name: the trace's own and those of every probe defined so far."""
    return {**_TRACE_COLUMNS, **REGISTRY.columns}


def column(name: str) -> Column:
    """The column called ``name``.

    Raises:
        RenderError: no such column (the message lists the valid names).
    """
    found = columns().get(name) if isinstance(name, str) else None
    if found is None and isinstance(name, str):  # an export field's name: its column
        field = fields().get(name)  # the trace's own (``path``) and the probes'
        found = columns().get(field.column) if field and field.column else None
    if found is None:
        close = difflib.get_close_matches(str(name), list(columns()), n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise RenderError(
            f"unknown trace column {name!r}{hint}; valid columns: {', '.join(columns())}"
        )
    return found


# Without ``columns=``, the parameters column only fits beside this many probe columns.
_PARAMS_FIT = 3


def default_columns(trace: Trace) -> list[str]:
    """The columns shown without ``columns=`` (see the module docstring); ``params``
    too when the probes' columns leave room for it (a trace of shapes only)."""
    ranked = sorted(trace.probes, key=probe_rank)
    names = ["layer"]
    for probe in ranked:
        names.extend(
            c.name for c in probe_columns(probe)
            if c.default and (not c.when_present or _any_value(trace, c))
        )
    if len(names) - 1 <= _PARAMS_FIT - 1:
        names.append("params")
    return names


def _any_value(trace: Trace, col: Column) -> bool:
    """Whether some call has a value other than ``None`` and 0 in ``col``."""
    if col.key is not None:
        view = View(trace)
        return any(sort_key(col, view, c) not in (None, 0) for c in trace.calls)
    value = col.value
    return any(v is not None and v != 0 for v in (value(c, trace) for c in trace.calls))


Cell = Callable[[View, Call], str]
