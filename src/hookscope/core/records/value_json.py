"""The JSON form of the value records probes store as facts (``core/records/values.py``).

Probes name these encoders in their fact declarations (``Fact(..., metas_out,
metas_in)``, ``core/records/facts.py``); the trace document
(``core/records/serialize.py``) uses them for the trace's own inputs and outputs.

A non-finite float is written as ``{"$float": "nan"}`` (``"inf"``, ``"-inf"``), in
these records and in the facts of probes without an encoder alike: the document stays
standard JSON, and a NaN cannot be mistaken for the string ``"nan"``.
"""

from __future__ import annotations

import math
from typing import Any

from hookscope.core.records.values import (
    FlopCount,
    FlopRule,
    MemoryRecord,
    OpRecord,
    Phase,
    TensorMeta,
    TensorStats,
)

_FLOAT = "$float"  # a key no Python identifier (a fact's own dict keys) looks like
# NaN is read back as the one ``math.nan`` object, which a probe whose fact is a
# plain float, list or dict writes too (``probes/grad_values.py``): ``Call.facts`` and
# lists compare identical objects as equal, so such a fact equals its JSON round trip.
# A record's float fields need no such care: ``values.NanEqualRecord`` compares any NaN
# equal to any NaN.
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}

JsonFloat = float | dict[str, str] | None
"""A float as the document holds it: itself, or ``{"$float": "nan"}`` when not finite."""


def float_out(x: float | None) -> JsonFloat:
    """``x`` for JSON: a non-finite float as ``{"$float": "nan"}``, ``"inf"``, ``"-inf"``."""
    if x is None or math.isfinite(x):
        return x
    return {_FLOAT: "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}


def float_in(x: JsonFloat) -> float | None:
    """The float :func:`float_out` wrote.

    Raises:
        KeyError: ``x`` is a dict that is not a ``{"$float": ...}`` of a non-finite float.
    """
    return _NON_FINITE[x[_FLOAT]] if isinstance(x, dict) else x


def finite_json(value: Any) -> Any:
    """``value`` (numbers, strings, lists, tuples, dicts) with each non-finite float as
    :func:`float_out` writes it."""
    if isinstance(value, float):
        return float_out(value)
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def floats_back(value: Any) -> Any:
    """:func:`finite_json`'s ``value`` with each ``{"$float": ...}`` a float again."""
    if isinstance(value, dict):
        if len(value) == 1 and value.get(_FLOAT) in _NON_FINITE:
            return _NON_FINITE[value[_FLOAT]]
        return {k: floats_back(v) for k, v in value.items()}
    if isinstance(value, list):
        return [floats_back(v) for v in value]
    return value


def meta_out(m: TensorMeta) -> dict[str, Any]:
    return {
        "path": m.path, "shape": list(m.shape), "dtype": m.dtype, "device": m.device,
        "requires_grad": m.requires_grad, "layout": m.layout,
    }


def meta_in(d: dict[str, Any]) -> TensorMeta:
    return TensorMeta(
        d["path"], tuple(d["shape"]), d["dtype"], d["device"], d["requires_grad"], d["layout"]
    )


def metas_out(ms: list[TensorMeta]) -> list[dict[str, Any]]:
    return [meta_out(m) for m in ms]


def metas_in(ds: list[dict[str, Any]]) -> list[TensorMeta]:
    return [meta_in(d) for d in ds]


_STAT_FLOATS = ("mean", "std", "min", "max", "absmax", "zero_fraction")


def stats_out(stats: list[TensorStats]) -> list[dict[str, Any]]:
    out = []
    for s in stats:
        d: dict[str, Any] = {"path": s.path, "numel": s.numel}
        d.update({k: float_out(getattr(s, k)) for k in _STAT_FLOATS})
        d.update(nan_count=s.nan_count, inf_count=s.inf_count)
        out.append(d)
    return out


def stats_in(ds: list[dict[str, Any]]) -> list[TensorStats]:
    return [
        TensorStats(
            path=d["path"], numel=d["numel"], nan_count=d["nan_count"],
            inf_count=d["inf_count"], **{k: float_in(d[k]) for k in _STAT_FLOATS},
        )
        for d in ds
    ]


def flops_out(f: FlopCount) -> dict[str, Any]:
    return {
        "forward": f.forward, "backward": f.backward, "partial": f.partial,
        "macs_forward": f.macs_forward, "macs_backward": f.macs_backward,
    }


def flops_in(d: dict[str, Any]) -> FlopCount:
    return FlopCount(d["forward"], d["backward"], d["partial"])


def memory_out(m: MemoryRecord) -> dict[str, Any]:
    return {
        "output_bytes": m.output_bytes, "saved_bytes": m.saved_bytes,
        "allocated_delta": m.allocated_delta, "peak_bytes": m.peak_bytes,
    }


def memory_in(d: dict[str, Any]) -> MemoryRecord:
    return MemoryRecord(**d)


def ops_out(ops: list[OpRecord]) -> list[dict[str, Any]]:
    return [_op_out(o) for o in ops]


def _op_out(o: OpRecord) -> dict[str, Any]:
    d: dict[str, Any] = {
        "index": o.index, "name": o.name, "call": o.call, "phase": o.phase.value,
        "inputs": metas_out(list(o.inputs)), "outputs": metas_out(list(o.outputs)),
        "flops": o.flops, "counted": o.counted, "rule": o.rule.value,
    }
    if o.time_ns is not None:  # traces recorded without op times keep their old form
        d["start_ns"], d["time_ns"] = o.start_ns, o.time_ns
    return d


def ops_in(ds: list[dict[str, Any]]) -> list[OpRecord]:
    return [
        OpRecord(
            index=d["index"], name=d["name"], call=d["call"], phase=Phase(d["phase"]),
            inputs=tuple(metas_in(d["inputs"])), outputs=tuple(metas_in(d["outputs"])),
            flops=d["flops"], counted=d["counted"], rule=FlopRule(d["rule"]),
            start_ns=d.get("start_ns"), time_ns=d.get("time_ns"),
        )
        for d in ds
    ]
