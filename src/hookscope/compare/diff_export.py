"""A trace diff as data: a dict and its JSON, and flat rows for CSV and pandas.

The dict keeps each row whole (its structural changes as ``[a, b]``, each fact as
``a``, ``b``, ``delta``, ``relative``); non-finite floats are written as a trace writes
them (``{"$float": "inf"}``), so the document stays JSON. The flat rows have one
column per fact and side: ``time_ns_a``, ``time_ns_b``, ``time_ns_delta``,
``time_ns_rel``, raw numbers in base units.
"""

from __future__ import annotations

import csv
import io
import json
from typing import TYPE_CHECKING, Any

from hookscope.compare.diff_calls import CallDiff
from hookscope.core.records.value_json import finite_json
from hookscope.errors import MissingDependencyError

if TYPE_CHECKING:
    from hookscope.compare.diff_result import TraceDiff

__all__ = ["diff_rows", "diff_to_csv", "diff_to_dataframe", "diff_to_dict", "diff_to_json"]

_OWN = ("path_a", "path_b", "call_index", "class_a", "class_b", "status")


def _plain(value: Any) -> Any:
    """A value JSON can hold: numbers, strings, lists of them; anything else as text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def _row_dict(row: CallDiff) -> dict[str, Any]:
    out: dict[str, Any] = {k: getattr(row, k) for k in _OWN}
    out["changes"] = {k: [_plain(a), _plain(b)] for k, (a, b) in row.changes.items()}
    out["facts"] = {k: {"a": f.a, "b": f.b, "delta": f.delta, "relative": f.relative}
                    for k, f in row.facts.items()}
    return out


def _side(result: TraceDiff, side: str) -> dict[str, Any]:
    trace = result.a if side == "a" else result.b
    only = result.matching.only_a if side == "a" else result.matching.only_b
    return {"model": trace.model.class_name, "params": trace.model.params_total,
            "calls": len(trace.calls), "probes": list(trace.probes),
            "unmatched": [c.name for c in only]}


def diff_to_dict(result: TraceDiff) -> dict[str, Any]:
    """``answer``, ``a``/``b`` (model, parameters, calls, probes, unmatched calls),
    ``sort``, ``facts`` (name -> unit) and ``rows`` in rank order."""
    return {
        "answer": result.answer,
        "a": _side(result, "a"),
        "b": _side(result, "b"),
        "unwrapped": list(result.matching.unwrapped),
        "sort": result.sort,
        "facts": {f.name: f.unit.value for f in result.facts if f.numeric},
        "rows": [_row_dict(r) for r in result.rows],
    }


def diff_to_json(result: TraceDiff, *, indent: int | None = 2) -> str:
    """:func:`diff_to_dict` as JSON (non-finite floats as ``{"$float": ...}``)."""
    return json.dumps(finite_json(diff_to_dict(result)), indent=indent, allow_nan=False)


def diff_rows(result: TraceDiff) -> list[dict[str, Any]]:
    """One flat dict per row: the row's own fields, ``changes`` as text, then per
    fact ``NAME_a``, ``NAME_b``, ``NAME_delta``, ``NAME_rel`` (``None``: no value;
    a non-numeric fact, as the shapes, has only ``NAME_a`` and ``NAME_b``, where they
    differ)."""
    rows = []
    for r in result.rows:
        out: dict[str, Any] = {k: getattr(r, k) for k in _OWN}
        out["changes"] = "; ".join(f"{k}: {_plain(a)} -> {_plain(b)}"
                                   for k, (a, b) in r.changes.items())
        for spec in result.facts:
            if not spec.numeric:
                a, b = r.changes.get(spec.name, (None, None))
                out[f"{spec.name}_a"], out[f"{spec.name}_b"] = _plain(a), _plain(b)
                continue
            f = r.facts.get(spec.name)
            out[f"{spec.name}_a"] = None if f is None else f.a
            out[f"{spec.name}_b"] = None if f is None else f.b
            out[f"{spec.name}_delta"] = None if f is None else f.delta
            out[f"{spec.name}_rel"] = None if f is None else f.relative
        rows.append(out)
    return rows


def _header(result: TraceDiff) -> list[str]:
    return [*_OWN, "changes", *(f"{s.name}_{k}" for s in result.facts
                                for k in (("a", "b", "delta", "rel") if s.numeric else ("a", "b")))]


def diff_to_csv(result: TraceDiff) -> str:
    """:func:`diff_rows` as CSV text (empty where there is no value)."""
    names = _header(result)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(names)
    for row in diff_rows(result):
        writer.writerow(["" if row[n] is None else row[n] for n in names])
    return buf.getvalue()


def diff_to_dataframe(result: TraceDiff) -> Any:
    """:func:`diff_rows` as a ``pandas.DataFrame``.

    Raises:
        MissingDependencyError: pandas is not installed.
    """
    try:
        import pandas as pd
    except ImportError as e:
        raise MissingDependencyError("pandas", "pandas", needed_for="to_dataframe") from e
    return pd.DataFrame.from_records(diff_rows(result), columns=_header(result))
