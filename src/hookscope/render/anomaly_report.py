"""An anomaly report as a short text and as JSON.

Reads only the records of ``hookscope.debug.anomaly_records`` (never a model or a tensor):
:func:`render_anomaly_text` for ``print(report)``, :func:`anomaly_line` for the one
line an exception carries, :func:`anomaly_to_dict`/:func:`anomaly_to_json` for the
JSON document (keys sorted, non-finite floats as ``{"$float": "nan"}``, the trace
document's encoding: ``core/records/value_json.py``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from enum import Enum
from typing import TYPE_CHECKING, Any

from hookscope.core.records.value_json import float_out
from hookscope.render.units import format_stat

if TYPE_CHECKING:
    from hookscope.core.records.values import TensorStats
    from hookscope.debug.anomaly_records import (
        Anomaly,
        AnomalyReport,
        BackwardNode,
        InputCheck,
        OpFinding,
        TensorCheck,
    )

#: The JSON document's version: bump when a key changes meaning.
ANOMALY_SCHEMA_VERSION = 2


def _where(a: Anomaly) -> str:
    name = repr(a.path) if a.path else "<root>"
    cls = f"{a.module_class}, " if a.module_class else ""
    call = f"call {a.call_index}" if a.call_index is not None else ""
    inside = f" ({cls}{call})".replace(", )", ")") if (cls or call) else ""
    return f"module {name}{inside}"


def _counts(nan: int | None, inf: int | None) -> str:
    parts = [f"{n:,} {label}" for n, label in ((nan, "NaN"), (inf, "Inf")) if n]
    return ", ".join(parts) or "finite"


def anomaly_line(a: Anomaly) -> str:
    """One line: what went non-finite, where, and the op that produced it."""
    if a.node is not None:
        return _node_line(a, a.node)
    what = {
        "output": "output", "grad_output": "gradient of the output",
        "grad_input": "gradient of the input", "param_grad": "gradient of parameter",
    }[a.kind.value]
    text = (
        f"{a.phase} {what} {a.tensor} of {_where(a)} holds "
        f"{_counts(a.nan_count, a.inf_count)} of {a.numel:,} elements"
    )
    if a.op is not None:
        text += f"; first non-finite op: {a.op.name}"
    if a.origin is not None:
        text += f"; made before the call by {a.origin.name} in {_path(a.origin)}"
    return text


def _node_line(a: Anomaly, node: BackwardNode) -> str:
    where = _where(a) if a.call is not None else "no module (the loss)"
    return (
        f"backward node {node.name} (the gradient of {node.forward_op} in {where}) made "
        f"{a.tensor} with {_counts(a.nan_count, a.inf_count)} of {a.numel:,} elements "
        "from finite gradients"
    )


def _node_lines(node: BackwardNode) -> list[str]:
    lines = []
    if node.source is not None:
        src = node.source
        lines += [f"  forward line: {src.file}:{src.line} in {src.function}",
                  f"    {src.code}"]
    lines.append("  gradients it received (of the forward op's outputs):")
    lines += [_stats_line(s) for s in node.grad_outputs]
    lines.append("  gradients it computed (of the forward op's inputs):")
    lines += [_stats_line(s) for s in node.grad_inputs]
    return lines


def _path(op: OpFinding) -> str:
    return repr(op.path) if op.path else "<root>" if op.path == "" else "no module"


def _tensor(c: TensorCheck) -> str:
    shape = "[" + ", ".join(str(d) for d in c.shape) + "]"
    return f"{c.path} {shape} {c.dtype} {_counts(c.nan_count, c.inf_count)}"


def _op_lines(op: OpFinding, head: str | None = None) -> list[str]:
    where = f" in {op.path!r}" if op.path else ""
    lines = [f"  {head or f'first op that produced it: {op.name}{where}'}"
             + (" (in place)" if op.inplace else "")]
    lines += [f"    in:  {_tensor(t)}" for t in op.inputs]
    lines += [f"    out: {_tensor(t)}" for t in op.outputs]
    return lines


def _stat(x: float | None) -> str:
    return "-" if x is None else format_stat(x)


def _input_line(i: InputCheck) -> str:
    moved = "  (written in place by the call: values after it)" if i.changed_in_place else ""
    return _stats_line(i.stats) + moved


def _stats_line(s: TensorStats) -> str:
    finite = None if s.nan_count is None or s.inf_count is None else not (
        s.nan_count or s.inf_count)
    verdict = {True: "finite", False: "NOT finite", None: "unreadable"}[finite]
    counts = "" if finite is not False else f" ({_counts(s.nan_count, s.inf_count)})"
    return (
        f"    {s.path}: {verdict}{counts}  mean {_stat(s.mean)}  min {_stat(s.min)}  "
        f"max {_stat(s.max)}  n={s.numel:,}"
    )


def render_anomaly_text(report: AnomalyReport) -> str:
    """The report as a few plain lines (no colour; the same on a terminal and a pipe)."""
    lines: list[str] = []
    for n, a in enumerate(report.anomalies):
        head = "First non-finite value" if n == 0 else f"Anomaly {n + 1}"
        lines.append(f"{head}: {anomaly_line(a)}")
        if a.inputs:
            lines.append("  inputs of the call:")
            lines += [_input_line(i) for i in a.inputs]
        if a.node is not None:
            lines += _node_lines(a.node)
        if a.op is not None:
            lines += _op_lines(a.op)
        elif a.kind.value == "output":
            lines.append("  no op inside the call produced it: it came in with the inputs")
        if a.origin is not None:
            lines += _op_lines(a.origin, f"it came in: made before the call by {a.origin.name} "
                                         f"in {_path(a.origin)}")
    if report.stopped and report.anomalies:
        rest = "backward" if report.first.phase == "backward" else "model"
        lines.append(f"The run stopped there: the rest of the {rest} did not run.")
    return "\n".join(lines)


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, float) and not math.isfinite(value):
        return float_out(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def anomaly_to_dict(report: AnomalyReport) -> dict[str, Any]:
    """The report as JSON-ready data: ``schema_version``, ``stopped``, ``anomalies``."""
    return {
        "schema_version": ANOMALY_SCHEMA_VERSION,
        "stopped": report.stopped,
        "anomalies": [_plain(a) for a in report.anomalies],
        "calls_run": None if report.trace is None else len(report.trace.calls),
    }


def anomaly_to_json(report: AnomalyReport, *, indent: int | None = 2) -> str:
    """:func:`anomaly_to_dict` as standard JSON (keys sorted)."""
    return json.dumps(anomaly_to_dict(report), indent=indent, sort_keys=True, allow_nan=False)
