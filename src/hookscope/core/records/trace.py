"""Plain records that a trace is made of.

The engine (``core/engine/tracer.py``) creates one :class:`Call` per module execution and
hands it to the probes, which record their own facts in it (``Call.facts``: shapes,
time, statistics, memory, FLOPs; declared by each probe, see ``core/records/facts.py``). When
the tracer finishes, the records form a :class:`Trace`: plain data that renderers read
and that round-trips through JSON (``core/records/serialize.py``).

Records never hold live tensors or modules, and never format themselves: strings are
made by the renderers in ``hookscope.render``. The value records probes store as facts
(:class:`TensorMeta`, :class:`TensorStats`, :class:`FlopCount`, :class:`OpRecord`...)
are ``core/records/values.py``'s, and the records of the model's tree (:class:`ModuleInfo`,
:class:`ModelSummary`) ``core/records/module_records.py``'s.

:class:`Call` is mutable because probes fill it while the model runs; treat it as
read-only once the trace is returned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from typing import Any

from hookscope.core.records.facts import RawValue, decode_raw, reserve
from hookscope.core.records.module_records import ModelSummary, ModuleInfo
from hookscope.core.records.values import TensorMeta

__all__ = [
    "PRESENTERS",
    "SCHEMA_VERSION",
    "Call",
    "FailureRecord",
    "StopRecord",
    "Trace",
]

SCHEMA_VERSION = 3
"""The JSON schema version this hookscope writes and reads (and newer ones, warning)."""


@dataclass(slots=True)
class Call:
    """One execution of one module.

    A module called three times gives three calls (``call_index`` 0, 1, 2); calls form
    a tree by the runtime call stack (``parent``/``children`` are indices into
    ``Trace.calls``).

    The engine fills the fields below. What probes record is in ``facts``, by name
    (``core/records/facts.py``), and reads as an attribute too: ``call.time_ns`` is
    ``call.facts["time_ns"]``, or the fact's default (``None``, ``[]`` for shapes) when
    its probe did not run. The built-in probes' facts: ``inputs``/``outputs``
    (shapes), ``time_ns``/``self_time_ns`` (time, inclusive and exclusive of
    children), ``stats``/``input_stats`` (statistics; input statistics only for a call
    that raised), ``memory``, ``flops``/``self_flops`` (ops).

    Attributes:
        start_ns: when the call started, in nanoseconds since the trace started (read
            before any probe's work for the call).
        error: ``"TypeName: message"`` when the call raised.
    """

    index: int
    path: str
    module_class: str
    call_index: int
    depth: int
    parent: int | None
    children: list[int] = field(default_factory=list)
    start_ns: int | None = None
    error: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        # only reached for names that are not fields: the facts of probes
        if name.startswith("__") or name == "facts":
            raise AttributeError(name)
        return _read_fact(self.facts, name, "call")

    @property
    def name(self) -> str:
        """``path`` with the call index when the module ran more than once (``fc#1``)."""
        return f"{self.path}#{self.call_index}" if self.call_index else self.path


def _read_fact(facts: dict[str, Any], name: str, kind: str) -> Any:
    try:
        value = facts[name]
    except KeyError:
        pass
    else:
        if type(value) is not RawValue:
            return value
        # read before its probe was defined: decoded once it is
        return decode_raw(facts, name, kind)
    from hookscope.core.records.facts import REGISTRY

    spec = (REGISTRY.call_facts if kind == "call" else REGISTRY.trace_facts).get(name)
    if spec is None:
        raise AttributeError(
            f"a {kind} record has no field or fact {name!r}; facts recorded here: "
            f"{sorted(facts) or 'none'}"
        )
    return spec.default_value()


@dataclass(frozen=True, slots=True)
class FailureRecord:
    """Where the observed model raised (``Trace.error``).

    Attributes:
        call: index of the innermost call where the exception started (``None``:
            outside any module call).
        path: that call's module path; without a call, the path of the module of the
            model it raised in, a module not recorded (outside ``select=``), or ``None``.
        exception_type: the exception's class name.
        message: its message.
        before_forward: the path of a module whose call raised before its forward ran
            (a forward pre-hook registered before hookscope's, so its call had not
            started: the failure is the caller's, ``call``), else ``None``.
    """

    call: int | None
    path: str | None
    exception_type: str
    message: str
    before_forward: str | None = None


@dataclass(frozen=True, slots=True)
class StopRecord:
    """Why and where a probe stopped the run early (``Trace.stop``).

    Attributes:
        probe: the name of the probe that stopped it.
        reason: its one-line reason.
        call: index of the call running when it stopped (``None``: outside any call).
        path: that call's module path.
    """

    probe: str
    reason: str
    call: int | None
    path: str | None


@dataclass(slots=True)
class Trace:
    """Everything recorded while a model ran under a :class:`~hookscope.Tracer`.

    Iterating a trace yields its calls in the order they started. What probes record
    per trace is in ``facts`` and reads as an attribute (``trace.ops``,
    ``trace.totals_flops``, ``trace.uncounted_ops`` of the ops probe), like a call's.

    Attributes:
        model: model-level counts.
        modules: the module tree, by path.
        calls: every call, in the order they started.
        inputs, outputs: the tensors the model was called with and returned
            (``hookscope.trace`` only).
        error: where the model raised, if it did.
        stop: why a probe stopped the run early, if one did.
        probes: the names of the probes that ran.
        meta: facts about the run: ``torch_version``, ``hookscope_version``, ``device``,
            ``rank``/``world_size`` (when ``torch.distributed`` is initialised),
            ``started_at_ns`` (wall clock, for merging traces), ...
        facts: what probes recorded per trace.
        unknown: top-level fields of a document this hookscope does not know (a newer
            version's), kept as their JSON values and written back as they were.
    """

    model: ModelSummary
    modules: dict[str, ModuleInfo]
    calls: list[Call] = field(default_factory=list)
    inputs: list[TensorMeta] = field(default_factory=list)
    outputs: list[TensorMeta] = field(default_factory=list)
    error: FailureRecord | None = None
    stop: StopRecord | None = None
    probes: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    unknown: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("facts", "unknown"):
            raise AttributeError(name)
        return _read_fact(self.facts, name, "trace")

    def __iter__(self) -> Iterator[Call]:
        return iter(self.calls)

    def __len__(self) -> int:
        return len(self.calls)

    def calls_of(self, path: str) -> list[Call]:
        """Every call of the module at ``path``, in call order."""
        return [c for c in self.calls if c.path == path]

    def find(self, path: str, call_index: int = 0) -> Call:
        """The ``call_index``-th call of the module at ``path``.

        Raises:
            KeyError: when the module did not run that often (the message lists the
                recorded paths closest to ``path``).
        """
        for c in self.calls:
            if c.path == path and c.call_index == call_index:
                return c
        import difflib

        close = difflib.get_close_matches(path, sorted({c.path for c in self.calls}), n=3)
        hint = f"; close matches: {close}" if close else ""
        raise KeyError(f"no call {call_index} of module {path!r} in this trace{hint}")

    def __getitem__(self, key: str | tuple[str, int]) -> Call:
        if isinstance(key, tuple):
            return self.find(*key)
        return self.find(key)

    def children(self, call: Call) -> list[Call]:
        """The calls made directly inside ``call``, in the order they started."""
        return [self.calls[i] for i in call.children]

    @property
    def roots(self) -> list[Call]:
        """Calls without a parent (normally one: the root module)."""
        return [c for c in self.calls if c.parent is None]

    @property
    def total_time_ns(self) -> int | None:
        """The root calls' summed time in nanoseconds (``None`` when the run was not timed)."""
        times: list[int | None] = [c.facts.get("time_ns") for c in self.roots]
        if not times or any(t is None for t in times):
            return None
        return sum(t for t in times if t is not None)

    # The JSON codec (core/records/serialize.py) builds these records, so it is not
    # imported here: the records package sets it (``JSON_CODEC``) when it is imported,
    # before any of its modules can be used. Tables and flat exports are registered
    # the same way by ``hookscope.render`` (``PRESENTERS``): core does not import it.
    def to_json(self, *, indent: int | None = 2) -> str:
        """The trace as a versioned JSON document that :meth:`from_json` reads back."""
        return JSON_CODEC["to_json"](self, indent=indent)  # type: ignore[no-any-return]

    @classmethod
    def from_json(cls, text: str) -> Trace:
        """The trace a :meth:`to_json` document holds (refuses an earlier schema version)."""
        return JSON_CODEC["from_json"](text)  # type: ignore[no-any-return]

    def to_csv(self, *, columns: Sequence[str] | None = None) -> str:
        """One CSV row per call (see :func:`hookscope.render.export.trace_to_csv`)."""
        return str(_presenter("csv")(self, columns=columns))

    def to_dataframe(self, *, columns: Sequence[str] | None = None) -> Any:
        """A pandas ``DataFrame``, one row per call (needs ``hookscope[pandas]``)."""
        return _presenter("dataframe")(self, columns=columns)

    def to_chrome_trace(self, path: str | PathLike[str]) -> None:
        """Write the trace as a timeline that Perfetto and ``chrome://tracing`` open
        (see :func:`hookscope.render.timeline.write_chrome_trace`)."""
        _presenter("chrome_trace")(self, path)

    def to_html(self, path: str | PathLike[str] | None = None, *, title: str | None = None,
                findings: Iterable[Any] = (), feature_maps: Mapping[str, Any] | None = None,
                ) -> str:
        """The report: one self-contained HTML page of this trace (the call tree, every
        probe's columns, charts), written to ``path`` when one is given.

        See ``docs/guides/report.md``; the page is ``hookscope.render.report``'s.

        Args:
            path: the file to write (replaced in one step); ``None``: only return it.
            title: the page's title.
            findings: lint findings to show too (``hookscope.lint(model, x)``).
            feature_maps: captured activations to show as thumbnails
                (``hookscope.capture(model, x, select=...)``).

        Raises:
            SpecError: ``path``'s folder does not exist, or ``path`` is a folder.
        """
        html = str(_presenter("report")(self, title=title, findings=list(findings),
                                        feature_maps=feature_maps))
        if path is not None:
            _presenter("write_html")(html, path)
        return html

    def gather(self, *, dst: int = 0, group: Any = None) -> Any:
        """Every rank's trace on rank ``dst``, under ``torchrun`` (a collective: every
        rank calls it): a :class:`~hookscope.distributed.GatheredTrace` on ``dst``,
        ``None`` elsewhere (``hookscope/distributed/gather.py``)."""
        return _presenter("gather")(self, dst=dst, group=group)

    def __str__(self) -> str:
        return str(_presenter("text")(self))

    def _repr_html_(self) -> str:
        """The report's call tree and charts, for Jupyter."""
        return str(_presenter("notebook")(self))

    def __repr__(self) -> str:
        stopped = f", stopped by {self.stop.probe}" if self.stop is not None else ""
        failed = f", failed in {self.error.path!r}" if self.error is not None else ""
        return (
            f"<hookscope.Trace of {self.model.class_name}: {len(self.calls)} calls, "
            f"probes {self.probes}{failed}{stopped}>"
        )


PRESENTERS: dict[str, Callable[..., Any]] = {}

JSON_CODEC: dict[str, Callable[..., Any]] = {}
"""``to_json``/``from_json``: ``core/records/serialize.py``'s, set by ``records/__init__``."""
"""How a trace shows itself (``text``, ``csv``, ``dataframe``), registered by
``hookscope.render`` when it is imported (``import hookscope`` does, lazily)."""


def _presenter(kind: str) -> Callable[..., Any]:
    found = PRESENTERS.get(kind)
    if found is None:
        raise RuntimeError(
            f"no {kind} renderer is registered: import hookscope.render (importing "
            "hookscope.trace, hookscope.Tracer or hookscope.Trace from hookscope does)"
        )
    return found


def _reserve_attributes() -> None:
    """A probe's fact is read as an attribute (``call.time_ns``): one named like an
    attribute of the record (``trace.unknown``, ``call.name``) would be hidden by it."""
    reserve("facts", (n for n in dir(Call) if not n.startswith("_")), "the call record")
    reserve("trace_facts", (n for n in dir(Trace) if not n.startswith("_")), "the trace record")


_reserve_attributes()
