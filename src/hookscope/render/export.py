"""Flat exports of a trace: CSV text and a pandas ``DataFrame``, one row per call.

Both use the same fields, raw numbers in base units (nanoseconds, bytes), empty/``None``
where a probe did not record a value. The trace's own fields come first: ``index``,
``path``, ``class``, ``call_index``, ``depth``, ``parent``; then the fields every probe
that ran declared (``Probe.fields``, ``core/records/facts.py``), probes in ``column_rank``
order; then ``params`` (the module subtree's parameters, on its first call only),
``start_ns`` and ``error``. The
built-in probes' fields: ``inputs``, ``outputs`` (shapes: ``[1, 3, 32, 32]``, or
``path: [...]`` joined by ``"; "``), ``time_ns``, ``self_time_ns`` (time),
``output_bytes``, ``saved_bytes``, ``allocated_delta``, ``peak_bytes`` (memory),
``mean``, ``std``, ``min``, ``max``, ``absmax``, ``zero_fraction`` of the first output
tensor and ``nan_count``, ``inf_count`` over all of them (stats), ``flops_forward``,
``flops_backward``, ``flops_partial`` (ops).

The JSON form (``Trace.to_json``) is the lossless one; these are for spreadsheets.
In a DataFrame, integer fields that may be missing are pandas' nullable ``Int64``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from hookscope.core.engine.probe import PROBES
from hookscope.core.records.facts import REGISTRY, Field, probe_fields, reserve
from hookscope.core.records.serialize import settle_raw_facts
from hookscope.core.records.trace import Call, Trace
from hookscope.errors import MissingDependencyError, RenderError


def _params(call: Call, trace: Trace) -> int | None:
    info = trace.modules.get(call.path)
    return None if info is None or call.call_index else info.total_params


#: The trace's own fields, before the probes'.
TRACE_FIELDS: tuple[Field, ...] = (
    Field("index", lambda c, t: c.index, "int64"),
    Field("path", lambda c, t: c.path, column="layer"),
    Field("class", lambda c, t: c.module_class),
    Field("call_index", lambda c, t: c.call_index, "int64"),
    Field("depth", lambda c, t: c.depth, "int64"),
    Field("parent", lambda c, t: c.parent, "Int64"),
    Field("params", _params, "Int64"),
    Field("start_ns", lambda c, t: c.start_ns, "Int64"),
    Field("error", lambda c, t: c.error),
)
_AFTER_PROBES = ("params", "start_ns", "error")
reserve("fields", (f.name for f in TRACE_FIELDS), "the exports' own fields")


def fields() -> dict[str, Field]:
    """Every export field, by name: the trace's own and every probe's."""
    return {f.name: f for f in TRACE_FIELDS} | dict(REGISTRY.fields)


class _LiveFields(Mapping[str, Field]):
    """:func:`fields` as a mapping that stays current as probe classes are defined."""

    def __getitem__(self, name: str) -> Field:
        return fields()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(fields())

    def __len__(self) -> int:
        return len(fields())


FIELDS: Mapping[str, Field] = _LiveFields()
"""Every export field by name, as :func:`fields`."""


def probe_rank(probe: str) -> int:
    """Where a probe's columns and fields go, left to right (``Probe.column_rank``; a
    probe not defined in this process goes in the middle)."""
    cls = PROBES.get(probe)
    return cls.column_rank if cls is not None else 50


def export_fields(trace: Trace, columns: Sequence[str] | None = None) -> list[str]:
    """The fields of an export: ``columns`` checked, or those of the probes that ran.

    Raises:
        RenderError: an unknown field name (the message lists the valid ones).
    """
    if columns is None:
        own = [f.name for f in TRACE_FIELDS if f.name not in _AFTER_PROBES]
        probes = [f.name for p in sorted(trace.probes, key=probe_rank) for f in probe_fields(p)
                  if f.default]
        return own + probes + list(_AFTER_PROBES)
    if isinstance(columns, str):
        raise RenderError(f"columns= needs a list of field names, got the string {columns!r}")
    known = fields()
    # a table column's name selects the field of the same fact (``time`` -> ``time_ns``)
    by_column = {f.column: f.name for f in known.values() if f.column and f.column not in known}
    columns = [c if c in known else by_column.get(c, c) for c in columns]
    unknown = [c for c in columns if c not in known]
    if unknown or not columns:
        raise RenderError(
            f"unknown export column(s) {unknown or columns!r}; valid columns: "
            f"{', '.join(known)}"
        )
    return list(columns)


def trace_rows(trace: Trace, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """One dict per call, keyed by the export's fields (values ``None`` when missing)."""
    settle_raw_facts(trace)  # facts read before their probe was defined
    names = export_fields(trace, columns)
    known = fields()
    getters = [known[n].value for n in names]
    try:
        return [{n: get(c, trace) for n, get in zip(names, getters, strict=True)}
                for c in trace.calls]
    except Exception as e:  # a field's own function raised: find and name it
        for c in trace.calls:
            for n in names:
                try:
                    known[n].value(c, trace)
                except Exception as inner:
                    probe = known[n].probe
                    raise RenderError(
                        f"export field {n!r}" + (f" of probe {probe!r}" if probe else "")
                        + f" raised {type(inner).__name__} for call "
                        f"{c.name or '<root>'!r}: {inner}"
                    ) from inner
        raise RenderError(f"an export field raised {type(e).__name__}: {e}") from e


def trace_to_csv(trace: Trace, *, columns: Sequence[str] | None = None) -> str:
    """The trace as CSV text: a header line, then one line per call.

    Args:
        trace: the trace.
        columns: field names (see :data:`FIELDS`), in order; default: the fields of
            the probes that ran.

    Raises:
        RenderError: an unknown field name.

    Example:
        >>> pathlib.Path("trace.csv").write_text(trace_to_csv(trace))
    """
    names = export_fields(trace, columns)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(names)
    for row in trace_rows(trace, names):
        writer.writerow(["" if row[n] is None else row[n] for n in names])
    return buf.getvalue()


def trace_to_dataframe(trace: Trace, *, columns: Sequence[str] | None = None) -> Any:
    """The trace as a ``pandas.DataFrame``, one row per call (fields as for CSV).

    Raises:
        MissingDependencyError: pandas is not installed (an ``ImportError``).
        RenderError: an unknown field name.
    """
    try:
        import pandas as pd
    except ImportError as e:
        raise MissingDependencyError("pandas", "pandas", needed_for="to_dataframe") from e
    names = export_fields(trace, columns)
    frame = pd.DataFrame.from_records(trace_rows(trace, names), columns=names)
    known = fields()
    dtypes = {n: known[n].dtype for n in names if known[n].dtype is not None}
    return frame.astype(dtypes) if dtypes else frame
