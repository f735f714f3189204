"""The versioned JSON form of a :class:`~hookscope.core.records.trace.Trace`.

``trace_to_dict``/``trace_from_dict`` convert between records and plain dicts;
``trace_to_json``/``trace_from_json`` add the text layer. The form round-trips
exactly: ``trace_from_json(trace_to_json(t)) == t``. Non-finite floats (a NaN mean,
an infinite max) are written as ``{"$float": "nan"}`` (``"inf"``, ``"-inf"``), so the
document stays standard JSON and a NaN is never read back as the string ``"nan"``.

Top-level keys: ``schema_version``, ``hookscope_version``, ``model`` (``class``,
``params.total``, ``params.trainable``, ``buffers.total``, bytes), ``modules[]``,
``calls[]``, ``inputs[]``, ``outputs[]``, ``error``, ``stop``, ``probes``, ``meta``,
``facts`` (what probes recorded per trace), and ``totals``. A call has the engine's keys
(``index``, ``path``, ``class``, ``call_index``, ``depth``, ``parent``, ``children``,
``start_ns``, ``error``) and one key per fact its probes recorded (``inputs``,
``time_ns``, ``stats``, ...), encoded as the probe declared (``core/records/facts.py``): the
serializer knows no probe.

Evolution: a document of an earlier schema version is refused with one clear error. A
key this hookscope does not know (a newer version's, or the fact of a probe not defined
in this process) is kept as the raw JSON value, with one warning, and written back as
it was: top-level keys in ``Trace.unknown``, facts as a ``RawValue`` (decoded when the
probe is defined later: :func:`settle_raw_facts`). Unknown keys of ``modules[]`` and
``model`` are ignored, and the warning says so.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

from hookscope.core.records.facts import REGISTRY, Fact, RawValue
from hookscope.core.records.module_records import ModelSummary, ModuleInfo
from hookscope.core.records.trace import SCHEMA_VERSION, Call, FailureRecord, StopRecord, Trace
from hookscope.core.records.value_json import metas_in, metas_out
from hookscope.core.version import package_version
from hookscope.errors import RenderError

_CALL_KEYS = ("index", "path", "class", "call_index", "depth", "parent", "children",
              "start_ns", "error")


class UnknownFieldsWarning(UserWarning):
    """A trace document has fields this hookscope does not know; they were kept as is."""


# -- facts -----------------------------------------------------------------------------


def _facts_out(facts: dict[str, Any], table: dict[str, Fact]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in facts.items():
        spec = table.get(name)
        out[name] = value.raw if isinstance(value, RawValue) else (
            value if spec is None else spec.to_json(value)
        )
    return out


def settle_raw_facts(trace: Trace) -> None:
    """Decode the facts of ``trace`` read before their probe was defined (a
    ``RawValue``), now that it is: its module imported after the document was read, as
    in a notebook. One pass of type checks over the calls' facts (tens of µs for a
    few hundred calls), when a table or an export is made."""
    raw = RawValue
    for facts, table in [*((c.facts, REGISTRY.call_facts) for c in trace.calls),
                         (trace.facts, REGISTRY.trace_facts)]:
        for name, value in facts.items():
            if type(value) is raw:
                spec = table.get(name)
                if spec is not None:
                    facts[name] = spec.from_json(value.raw)


def _facts_in(doc: dict[str, Any], table: dict[str, Fact], unknown: set[str]) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    for name, value in doc.items():
        spec = table.get(name)
        if spec is None:
            unknown.add(name)
            facts[name] = RawValue(value)
        else:
            facts[name] = spec.from_json(value)
    return facts


# -- records -----------------------------------------------------------------------------


def _call_out(c: Call) -> dict[str, Any]:
    out = _facts_out(c.facts, REGISTRY.call_facts)
    out.update({
        "index": c.index, "path": c.path, "class": c.module_class,
        "call_index": c.call_index, "depth": c.depth, "parent": c.parent,
        "children": list(c.children), "start_ns": c.start_ns, "error": c.error,
    })
    return out


def _call_in(d: dict[str, Any], unknown: set[str]) -> Call:
    facts = {k: v for k, v in d.items() if k not in _CALL_KEYS}
    return Call(
        index=d["index"], path=d["path"], module_class=d["class"],
        call_index=d["call_index"], depth=d["depth"], parent=d["parent"],
        children=list(d["children"]), start_ns=d.get("start_ns"), error=d["error"],
        facts=_facts_in(facts, REGISTRY.call_facts, unknown),
    )


def _module_out(m: ModuleInfo) -> dict[str, Any]:
    return {
        "path": m.path, "class": m.class_name, "depth": m.depth, "parent": m.parent,
        "children": list(m.children), "aliases": list(m.aliases),
        "params": m.total_params, "own_params": m.own_params,
        "trainable_params": m.trainable_params, "own_buffers": m.own_buffers,
        "extra_repr": m.extra_repr,
    }


_MODULE_KEYS = frozenset({"path", "class", "depth", "parent", "children", "aliases", "params",
                          "own_params", "trainable_params", "own_buffers", "extra_repr"})
_MODEL_KEYS = frozenset({"class", "params", "buffers"})


def _module_in(d: dict[str, Any], unknown: set[str]) -> ModuleInfo:
    unknown.update(f"module {k!r} (ignored)" for k in d if k not in _MODULE_KEYS)
    return ModuleInfo(
        path=d["path"], class_name=d["class"], depth=d["depth"], parent=d["parent"],
        children=tuple(d["children"]), aliases=tuple(d["aliases"]),
        own_params=d["own_params"], total_params=d["params"],
        trainable_params=d["trainable_params"], own_buffers=d["own_buffers"],
        extra_repr=d["extra_repr"],
    )


def _model_out(m: ModelSummary) -> dict[str, Any]:
    return {
        "class": m.class_name,
        "params": {"total": m.params_total, "trainable": m.params_trainable,
                   "bytes": m.param_bytes},
        "buffers": {"total": m.buffers_total, "bytes": m.buffer_bytes},
    }


def _model_in(d: dict[str, Any], unknown: set[str]) -> ModelSummary:
    unknown.update(f"model {k!r} (ignored)" for k in d if k not in _MODEL_KEYS)
    return ModelSummary(
        class_name=d["class"], params_total=d["params"]["total"],
        params_trainable=d["params"]["trainable"], buffers_total=d["buffers"]["total"],
        param_bytes=d["params"]["bytes"], buffer_bytes=d["buffers"]["bytes"],
    )


def _totals_out(t: Trace) -> dict[str, Any]:
    """Derived totals, for readers of the JSON (never read back)."""
    flops = t.facts.get("totals_flops")
    return {
        "time_ns": t.total_time_ns,
        "calls": len(t.calls),
        "flops_forward": None if flops is None else flops.forward,
        "flops_backward": None if flops is None else flops.backward,
        "flops_partial": None if flops is None else flops.partial,
    }


def trace_to_dict(trace: Trace) -> dict[str, Any]:
    """The JSON-ready dict of ``trace`` (see the module docstring for the schema)."""
    err, stop = trace.error, trace.stop
    return {
        "schema_version": SCHEMA_VERSION,
        "hookscope_version": package_version(),
        "model": _model_out(trace.model),
        "modules": [_module_out(m) for m in trace.modules.values()],
        "calls": [_call_out(c) for c in trace.calls],
        "inputs": metas_out(trace.inputs),
        "outputs": metas_out(trace.outputs),
        "error": None if err is None else {
            "call": err.call, "path": err.path, "type": err.exception_type,
            "message": err.message, "before_forward": err.before_forward,
        },
        "stop": None if stop is None else {
            "probe": stop.probe, "reason": stop.reason, "call": stop.call, "path": stop.path,
        },
        "probes": list(trace.probes),
        "meta": dict(trace.meta),
        "facts": _facts_out(trace.facts, REGISTRY.trace_facts),
        "totals": _totals_out(trace),
        **{k: v for k, v in trace.unknown.items() if k not in _TOP_KEYS},
    }


_TOP_KEYS = frozenset({
    "schema_version", "hookscope_version", "model", "modules", "calls", "inputs",
    "outputs", "error", "stop", "probes", "meta", "facts", "totals",
})


def trace_from_dict(doc: dict[str, Any]) -> Trace:
    """Rebuild a :class:`Trace` from :func:`trace_to_dict`'s output (this schema
    version or a newer one).

    Raises:
        RenderError: when the document is not a hookscope trace, or is malformed.
    """
    version = doc.get("schema_version") if isinstance(doc, dict) else None
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RenderError(
            f"expected a hookscope trace document with a schema_version, got "
            f"schema_version {version!r}; is this a file written by Trace.to_json()?"
        )
    if version < SCHEMA_VERSION:
        raise RenderError(
            f"the trace document has schema_version {version}, older than any this "
            f"hookscope reads (schema version {SCHEMA_VERSION}); write it again with "
            "Trace.to_json() of this hookscope"
        )
    unknown: set[str] = {f"top-level {k!r}" for k in doc if k not in _TOP_KEYS}
    try:
        trace = _trace_in(doc, unknown)
    except (KeyError, TypeError, ValueError) as e:
        raise RenderError(f"malformed hookscope trace document: missing or bad field {e}") from e
    if unknown:
        newer = f" (written by schema version {version}, this is {SCHEMA_VERSION})" if (
            version > SCHEMA_VERSION) else ""
        warnings.warn(
            f"hookscope: the trace document has fields this hookscope does not know{newer}: "
            f"{', '.join(sorted(unknown))}; they are kept as they are (those marked "
            "ignored are not)",
            UnknownFieldsWarning,
            stacklevel=3,
        )
    elif version > SCHEMA_VERSION:  # nothing unknown, but its meaning may have moved on
        warnings.warn(
            f"hookscope: the trace document was written by a newer hookscope (schema "
            f"version {version}, this one reads up to {SCHEMA_VERSION}); it was read with "
            "this version's fields: upgrade hookscope to read what is new in it",
            UnknownFieldsWarning,
            stacklevel=3,
        )
    return trace


def _trace_in(doc: dict[str, Any], unknown: set[str]) -> Trace:
    err, stop = doc["error"], doc.get("stop")
    modules = [_module_in(m, unknown) for m in doc["modules"]]
    return Trace(
        model=_model_in(doc["model"], unknown),
        modules={m.path: m for m in modules},
        calls=[_call_in(c, unknown) for c in doc["calls"]],
        inputs=metas_in(doc["inputs"]),
        outputs=metas_in(doc["outputs"]),
        error=None if err is None else FailureRecord(
            err["call"], err["path"], err["type"], err["message"], err.get("before_forward")
        ),
        stop=None if stop is None else StopRecord(
            stop["probe"], stop["reason"], stop["call"], stop["path"]
        ),
        probes=list(doc["probes"]),
        meta=dict(doc["meta"]),
        facts=_facts_in(doc.get("facts") or {}, REGISTRY.trace_facts, unknown),
        unknown={k: v for k, v in doc.items() if k not in _TOP_KEYS},
    )


def trace_to_json(trace: Trace, *, indent: int | None = 2) -> str:
    """Raises:
        RenderError: a fact holds a value JSON cannot hold (it names the fact)."""
    doc = trace_to_dict(trace)
    try:
        return json.dumps(doc, indent=indent, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise RenderError(f"cannot write the trace as JSON: {_unwritable(doc, trace) or e}") from e


def _unwritable(doc: dict[str, Any], trace: Trace) -> str | None:
    """Which fact of ``doc`` JSON cannot hold, said with its probe and call."""
    places = [("the trace", doc.get("facts") or {})]
    places += [(f"call {c.get('path') or '<root>'!r}", c)  # its facts are its keys
               for c in doc.get("calls") or []]
    for where, facts in places:
        for name, value in facts.items():
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError) as e:
                spec = REGISTRY.call_facts.get(name) or REGISTRY.trace_facts.get(name)
                owner = f" of probe {spec.probe!r}" if spec is not None and spec.probe else ""
                return (f"fact {name!r}{owner} of {where} holds {type(value).__name__} "
                        f"({e}); store a plain value (float, int, str, list, dict), or give "
                        "the Fact an encode= that makes one")
    return None


def trace_from_json(text: str) -> Trace:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise RenderError(f"not a JSON document: {e}") from e
    return trace_from_dict(doc)
