"""Flat exports of a trace: CSV text and a pandas ``DataFrame``, one row per call.

Both use the same fields (:data:`FIELDS`), raw numbers in base units (nanoseconds,
bytes), empty/``None`` where a probe did not record a value:

- always: ``index``, ``path``, ``class``, ``call_index``, ``depth``, ``parent``,
  ``params`` (the module subtree's parameters, on its first call only), ``error``;
- shapes probe: ``inputs``, ``outputs`` (``[1, 3, 32, 32]``, or ``path=[...]`` joined
  by ``"; "`` when there are several tensors; the dtype follows when not float32);
- time probe: ``time_ns``, ``self_time_ns``;
- memory probe: ``output_bytes``, ``saved_bytes``, ``allocated_delta``, ``peak_bytes``;
- stats probe: ``mean``, ``std``, ``min``, ``max``, ``absmax``, ``zero_fraction`` of the
  first output tensor; ``nan_count``, ``inf_count`` summed over all output tensors;
- FLOPs (ops probe): ``flops_forward``, ``flops_backward``, ``flops_partial``.

Without ``columns=`` an export has the fields of the probes that ran, in that order.
The JSON form (``Trace.to_json``) is the lossless one; these are for spreadsheets.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from typing import Any

from hookscope.core.records import Call, Trace
from hookscope.errors import RenderError
from hookscope.render.table import format_shapes

Getter = Callable[[Trace, Call], Any]


class MissingDependencyError(RenderError, ImportError):
    """An optional dependency an export needs is not installed."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(f"{package} is not installed: pip install 'hookscope[{extra}]'")


def _params(trace: Trace, call: Call) -> int | None:
    info = trace.modules.get(call.path)
    return None if info is None or call.call_index else info.total_params


def _shapes(root: str, attr: str) -> Getter:
    def get(trace: Trace, call: Call) -> str:
        return format_shapes(getattr(call, attr), root=root).replace("\n", "; ")

    return get


def _memory(attr: str) -> Getter:
    return lambda t, c: None if c.memory is None else getattr(c.memory, attr)


def _stat(attr: str) -> Getter:
    return lambda t, c: getattr(c.stats[0], attr) if c.stats else None


def _count(attr: str) -> Getter:
    def get(trace: Trace, call: Call) -> int | None:
        known = [getattr(s, attr) for s in call.stats or ()]
        known = [n for n in known if n is not None]
        return sum(known) if known else None

    return get


def _flops(attr: str) -> Getter:
    return lambda t, c: None if c.flops is None else getattr(c.flops, attr)


#: field name -> (the probe that records it, or None for always; its value for a call)
FIELDS: dict[str, tuple[str | None, Getter]] = {
    "index": (None, lambda t, c: c.index),
    "path": (None, lambda t, c: c.path),
    "class": (None, lambda t, c: c.module_class),
    "call_index": (None, lambda t, c: c.call_index),
    "depth": (None, lambda t, c: c.depth),
    "parent": (None, lambda t, c: c.parent),
    "inputs": ("shapes", _shapes("args[0]", "inputs")),
    "outputs": ("shapes", _shapes("out", "outputs")),
    "params": (None, _params),
    "time_ns": ("time", lambda t, c: c.time_ns),
    "self_time_ns": ("time", lambda t, c: c.self_time_ns),
    "output_bytes": ("memory", _memory("output_bytes")),
    "saved_bytes": ("memory", _memory("saved_bytes")),
    "allocated_delta": ("memory", _memory("allocated_delta")),
    "peak_bytes": ("memory", _memory("peak_bytes")),
    "mean": ("stats", _stat("mean")),
    "std": ("stats", _stat("std")),
    "min": ("stats", _stat("min")),
    "max": ("stats", _stat("max")),
    "absmax": ("stats", _stat("absmax")),
    "zero_fraction": ("stats", _stat("zero_fraction")),
    "nan_count": ("stats", _count("nan_count")),
    "inf_count": ("stats", _count("inf_count")),
    "flops_forward": ("flops", _flops("forward")),
    "flops_backward": ("flops", _flops("backward")),
    "flops_partial": ("flops", _flops("partial")),
    "error": (None, lambda t, c: c.error),
}


def export_fields(trace: Trace, columns: Sequence[str] | None = None) -> list[str]:
    """The fields of an export: ``columns`` checked, or those of the probes that ran.

    Raises:
        RenderError: an unknown field name (the message lists the valid ones).
    """
    if columns is None:
        ran = set(trace.probes)
        if trace.totals_flops is not None or any(c.flops is not None for c in trace.calls):
            ran.add("flops")
        return [name for name, (probe, _) in FIELDS.items() if probe is None or probe in ran]
    if isinstance(columns, str):
        raise RenderError(f"columns= needs a list of field names, got the string {columns!r}")
    unknown = [c for c in columns if c not in FIELDS]
    if unknown or not columns:
        raise RenderError(
            f"unknown export column(s) {unknown or columns!r}; valid columns: "
            f"{', '.join(FIELDS)}"
        )
    return list(columns)


def trace_rows(trace: Trace, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """One dict per call, keyed by the export's fields (values ``None`` when missing)."""
    names = export_fields(trace, columns)
    getters = [FIELDS[n][1] for n in names]
    return [{n: get(trace, c) for n, get in zip(names, getters, strict=True)} for c in trace.calls]


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
        raise MissingDependencyError("pandas", "pandas") from e
    names = export_fields(trace, columns)
    return pd.DataFrame.from_records(trace_rows(trace, names), columns=names)
