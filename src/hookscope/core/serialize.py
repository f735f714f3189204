"""The versioned JSON form of a :class:`~hookscope.core.records.Trace`.

``trace_to_dict``/``trace_from_dict`` convert between records and plain dicts;
``trace_to_json``/``trace_from_json`` add the text layer. The form round-trips
exactly: ``trace_from_json(trace_to_json(t)) == t``. Non-finite floats (a NaN mean,
an infinite max) are written as the strings ``"nan"``, ``"inf"``, ``"-inf"`` so the
document stays standard JSON.

Top-level keys: ``schema_version``, ``hookscope_version``, ``model`` (``class``,
``params.total``, ``params.trainable``, ``buffers.total``, bytes), ``modules[]``,
``calls[]``, ``ops[]``, ``inputs[]``, ``outputs[]``, ``error``, ``totals``, ``probes``,
``meta``. Bump ``SCHEMA_VERSION`` in ``records.py`` on any incompatible change.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hookscope.core.records import (
    SCHEMA_VERSION,
    Call,
    FlopCount,
    FlopRule,
    MemoryRecord,
    ModelSummary,
    ModuleInfo,
    OpRecord,
    Phase,
    TensorMeta,
    TensorStats,
    Trace,
    TraceError,
)
from hookscope.errors import RenderError


def _version() -> str:
    from hookscope import __version__

    return str(__version__)


def _float_out(x: float | None) -> float | str | None:
    if x is None or math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _float_in(x: float | str | None) -> float | None:
    if x == "nan":
        # NB: the one ``math.nan`` object, which the stats probe also records: containers
        # compare identical objects as equal, so a trace with NaN statistics still
        # compares equal to its JSON round trip.
        return math.nan
    return float(x) if isinstance(x, str) else x


def _meta_out(m: TensorMeta) -> dict[str, Any]:
    return {
        "path": m.path, "shape": list(m.shape), "dtype": m.dtype, "device": m.device,
        "requires_grad": m.requires_grad, "layout": m.layout,
    }


def _meta_in(d: dict[str, Any]) -> TensorMeta:
    return TensorMeta(
        d["path"], tuple(d["shape"]), d["dtype"], d["device"], d["requires_grad"], d["layout"]
    )


_STAT_FLOATS = ("mean", "std", "min", "max", "absmax", "zero_fraction")


def _stats_out(s: TensorStats) -> dict[str, Any]:
    out: dict[str, Any] = {"path": s.path, "numel": s.numel}
    out.update({k: _float_out(getattr(s, k)) for k in _STAT_FLOATS})
    out.update(nan_count=s.nan_count, inf_count=s.inf_count)
    return out


def _stats_in(d: dict[str, Any]) -> TensorStats:
    floats = {k: _float_in(d[k]) for k in _STAT_FLOATS}
    return TensorStats(
        path=d["path"], numel=d["numel"], nan_count=d["nan_count"],
        inf_count=d["inf_count"], **floats,
    )


def _flops_out(f: FlopCount | None) -> dict[str, Any] | None:
    if f is None:
        return None
    return {
        "forward": f.forward, "backward": f.backward, "partial": f.partial,
        "macs_forward": f.macs_forward, "macs_backward": f.macs_backward,
    }


def _flops_in(d: dict[str, Any] | None) -> FlopCount | None:
    return None if d is None else FlopCount(d["forward"], d["backward"], d["partial"])


def _memory_out(m: MemoryRecord | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "output_bytes": m.output_bytes, "saved_bytes": m.saved_bytes,
        "allocated_delta": m.allocated_delta, "peak_bytes": m.peak_bytes,
    }


def _memory_in(d: dict[str, Any] | None) -> MemoryRecord | None:
    return None if d is None else MemoryRecord(**d)


def _call_out(c: Call) -> dict[str, Any]:
    return {
        "index": c.index, "path": c.path, "class": c.module_class,
        "call_index": c.call_index, "depth": c.depth, "parent": c.parent,
        "children": list(c.children),
        "inputs": [_meta_out(m) for m in c.inputs],
        "outputs": [_meta_out(m) for m in c.outputs],
        "time_ns": c.time_ns, "self_time_ns": c.self_time_ns,
        "stats": None if c.stats is None else [_stats_out(s) for s in c.stats],
        "memory": _memory_out(c.memory),
        "flops": _flops_out(c.flops), "self_flops": _flops_out(c.self_flops),
        "error": c.error,
        "input_stats": (
            None if c.input_stats is None else [_stats_out(s) for s in c.input_stats]
        ),
    }


def _call_in(d: dict[str, Any]) -> Call:
    return Call(
        index=d["index"], path=d["path"], module_class=d["class"],
        call_index=d["call_index"], depth=d["depth"], parent=d["parent"],
        children=list(d["children"]),
        inputs=[_meta_in(m) for m in d["inputs"]],
        outputs=[_meta_in(m) for m in d["outputs"]],
        time_ns=d["time_ns"], self_time_ns=d["self_time_ns"],
        stats=None if d["stats"] is None else [_stats_in(s) for s in d["stats"]],
        memory=_memory_in(d["memory"]),
        flops=_flops_in(d["flops"]), self_flops=_flops_in(d["self_flops"]),
        error=d["error"],
        input_stats=(
            None if d.get("input_stats") is None
            else [_stats_in(s) for s in d["input_stats"]]
        ),
    )


def _module_out(m: ModuleInfo) -> dict[str, Any]:
    return {
        "path": m.path, "class": m.class_name, "depth": m.depth, "parent": m.parent,
        "children": list(m.children), "aliases": list(m.aliases),
        "params": m.total_params, "own_params": m.own_params,
        "trainable_params": m.trainable_params, "own_buffers": m.own_buffers,
        "extra_repr": m.extra_repr,
    }


def _module_in(d: dict[str, Any]) -> ModuleInfo:
    return ModuleInfo(
        path=d["path"], class_name=d["class"], depth=d["depth"], parent=d["parent"],
        children=tuple(d["children"]), aliases=tuple(d["aliases"]),
        own_params=d["own_params"], total_params=d["params"],
        trainable_params=d["trainable_params"], own_buffers=d["own_buffers"],
        extra_repr=d["extra_repr"],
    )


def _op_out(o: OpRecord) -> dict[str, Any]:
    return {
        "index": o.index, "name": o.name, "call": o.call, "phase": o.phase.value,
        "inputs": [_meta_out(m) for m in o.inputs],
        "outputs": [_meta_out(m) for m in o.outputs],
        "flops": o.flops, "counted": o.counted, "rule": o.rule.value,
    }


def _op_in(d: dict[str, Any]) -> OpRecord:
    return OpRecord(
        index=d["index"], name=d["name"], call=d["call"], phase=Phase(d["phase"]),
        inputs=tuple(_meta_in(m) for m in d["inputs"]),
        outputs=tuple(_meta_in(m) for m in d["outputs"]),
        flops=d["flops"], counted=d["counted"], rule=FlopRule(d["rule"]),
    )


def _model_out(m: ModelSummary) -> dict[str, Any]:
    return {
        "class": m.class_name,
        "params": {"total": m.params_total, "trainable": m.params_trainable,
                   "bytes": m.param_bytes},
        "buffers": {"total": m.buffers_total, "bytes": m.buffer_bytes},
    }


def _model_in(d: dict[str, Any]) -> ModelSummary:
    return ModelSummary(
        class_name=d["class"], params_total=d["params"]["total"],
        params_trainable=d["params"]["trainable"], buffers_total=d["buffers"]["total"],
        param_bytes=d["params"]["bytes"], buffer_bytes=d["buffers"]["bytes"],
    )


def _totals_out(t: Trace) -> dict[str, Any]:
    flops = t.totals_flops
    return {
        "time_ns": t.total_time_ns,
        "calls": len(t.calls),
        "flops_forward": None if flops is None else flops.forward,
        "flops_backward": None if flops is None else flops.backward,
        "flops_partial": None if flops is None else flops.partial,
        "uncounted_ops": dict(sorted(t.uncounted_ops.items())),
    }


def trace_to_dict(trace: Trace) -> dict[str, Any]:
    """The JSON-ready dict of ``trace`` (see the module docstring for the schema)."""
    err = trace.error
    return {
        "schema_version": SCHEMA_VERSION,
        "hookscope_version": _version(),
        "model": _model_out(trace.model),
        "modules": [_module_out(m) for m in trace.modules.values()],
        "calls": [_call_out(c) for c in trace.calls],
        "ops": [_op_out(o) for o in trace.ops],
        "inputs": [_meta_out(m) for m in trace.inputs],
        "outputs": [_meta_out(m) for m in trace.outputs],
        "error": None if err is None else {
            "call": err.call, "path": err.path, "type": err.exception_type,
            "message": err.message,
        },
        "totals": _totals_out(trace),
        "probes": list(trace.probes),
        "meta": dict(trace.meta),
    }


def trace_from_dict(doc: dict[str, Any]) -> Trace:
    """Rebuild a :class:`Trace` from :func:`trace_to_dict`'s output.

    Raises:
        RenderError: when the document is of another schema version or malformed.
    """
    version = doc.get("schema_version") if isinstance(doc, dict) else None
    if version != SCHEMA_VERSION:
        raise RenderError(
            f"expected a hookscope trace with schema_version {SCHEMA_VERSION}, "
            f"got schema_version {version!r}; re-create it with this hookscope version"
        )
    try:
        err = doc["error"]
        totals = doc["totals"]
        flops = None
        if totals.get("flops_forward") is not None:
            flops = FlopCount(
                totals["flops_forward"], totals["flops_backward"], totals["flops_partial"]
            )
        modules = [_module_in(m) for m in doc["modules"]]
        return Trace(
            model=_model_in(doc["model"]),
            modules={m.path: m for m in modules},
            calls=[_call_in(c) for c in doc["calls"]],
            ops=[_op_in(o) for o in doc["ops"]],
            inputs=[_meta_in(m) for m in doc["inputs"]],
            outputs=[_meta_in(m) for m in doc["outputs"]],
            error=None if err is None else TraceError(
                err["call"], err["path"], err["type"], err["message"]
            ),
            probes=list(doc["probes"]),
            meta=dict(doc["meta"]),
            totals_flops=flops,
            uncounted_ops=dict(totals["uncounted_ops"]),
        )
    except (KeyError, TypeError) as e:
        raise RenderError(f"malformed hookscope trace document: missing or bad field {e}") from e


def trace_to_json(trace: Trace, *, indent: int | None = 2) -> str:
    return json.dumps(trace_to_dict(trace), indent=indent, sort_keys=True, allow_nan=False)


def trace_from_json(text: str) -> Trace:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise RenderError(f"not a JSON document: {e}") from e
    return trace_from_dict(doc)
