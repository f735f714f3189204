"""The probe protocol and the probe registry.

A probe measures one kind of fact. The tracer (``core/engine/tracer.py``) delivers events to
it; the probe writes its own facts into the :class:`~hookscope.core.records.trace.Call` it
is handed (``call.facts[name] = value``) and never calls another probe. Events, in
the order they happen:

- ``install(tracer) -> list[Removable]`` once, when the tracer starts: register any
  extra instrumentation (a dispatch mode, saved-tensor hooks) and return handles
  that undo it. Module and tensor hooks are the tracer's job; a probe never
  registers them.
- ``on_enter(call, module, args, kwargs)`` before a module's ``forward`` runs. A probe
  with ``replaces = True`` may return ``(args, kwargs)`` to replace what ``forward``
  receives.
- ``on_exit(call, module, args, kwargs, output, failed)`` after it returned or raised
  (``failed=True``, ``output=None``). ``args``/``kwargs`` are what ``forward`` was
  called with (after every forward pre-hook). A probe with ``replaces = True`` may
  return a replacement output. Replacing probes run first, in probe order; then the
  recording probes see the final output: **the trace records what the caller
  received.**
- ``on_backward_enter(call, grad_outputs)`` when autograd has computed the gradient of
  the call's outputs (a tuple, ``None`` where an output got none), and
  ``on_backward_exit(call, grad_inputs)`` when it has computed the gradient of the
  call's inputs that require grad (``()`` when none does: then at the end of the
  backward pass). A probe that times a call's backward declares
  ``uses_backward_end`` and reads ``tracer.backward_end(call)`` there: when the last
  autograd node the call's forward made finished (a branch ends before its input's
  gradient is complete).
- ``on_param_grad(grad)`` with a :class:`~hookscope.core.records.values.ParamGrad` when a
  parameter's gradient is ready: after accumulation into ``.grad`` for
  ``.backward()``, the computed gradient for ``torch.autograd.grad``.
- ``finalize(trace)`` once, after every handle was removed: move device values to the
  host in one transfer, derive totals.

A probe declares what it records (``facts``, ``trace_facts``, ``columns``,
``fields``: see ``core/records/facts.py``) and what it needs; the tracer installs only what
the probes need (no pre-hook when no probe has ``on_enter``, no backward hooks when
none has a backward event). A probe that does not override an event costs nothing
for it. A probe's exception is reported as :class:`~hookscope.errors.ProbeError`;
a probe stops the run early with ``tracer.stop(reason)``.

Enter callbacks run in probe order and exit callbacks in reverse order, so the probe
listed last (timing) is closest to the module's own work.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from torch import nn

from hookscope.core.records.facts import Column, Fact, Field, register_declarations
from hookscope.errors import SpecError

if TYPE_CHECKING:
    from hookscope.core.engine.handles import Removable
    from hookscope.core.engine.tracer import Tracer
    from hookscope.core.records.trace import Call, Trace
    from hookscope.core.records.values import ParamGrad

BACKWARD_EVENTS = ("on_backward_enter", "on_backward_exit", "on_param_grad")


class Probe:
    """Base class of probes: override only the events you need.

    Class attributes declare the probe; defining a subclass registers its facts,
    columns and fields (``core/records/facts.py``).
    """

    #: Registry key and the name of the tracer option that turns the probe on
    #: (``Tracer(model, time=True)``); also the name ``Trace.probes`` lists. A subclass
    #: that sets none is named after its class.
    name: ClassVar[str] = ""
    #: Position among probes: lower enters first and exits last.
    order: ClassVar[int] = 50
    #: Position of the probe's columns in the default table (lower: further left).
    column_rank: ClassVar[int] = 50
    #: Facts recorded per call (``call.facts``) and per trace (``trace.facts``).
    facts: ClassVar[tuple[Fact, ...]] = ()
    trace_facts: ClassVar[tuple[Fact, ...]] = ()
    #: Table columns and export fields of those facts.
    columns: ClassVar[tuple[Column, ...]] = ()
    fields: ClassVar[tuple[Field, ...]] = ()
    #: ``on_enter``/``on_exit`` may return replacement inputs/outputs.
    replaces: ClassVar[bool] = False
    #: ``on_enter`` reads ``args``/``kwargs``. A probe that only notes a call started
    #: (timing, memory) sets False. Every path of the engine hands the call's real
    #: inputs today (``core/engine/fast_path.py``); the declaration keeps paths that cannot
    #: (a global pre-hook gets no kwargs) open to the engine.
    reads_inputs_on_enter: ClassVar[bool] = True
    #: True for a probe that reads ``tracer.chain_start_ns``/``overhead_ns`` (timing):
    #: only then does the tracer time its own hooks.
    uses_overhead_clock: ClassVar[bool] = False
    #: True for a probe that observes dispatched aten ops (ops): only then does the
    #: tracer mark the other probes' callbacks as internal work, and note which call
    #: owns each autograd node (``Tracer.node_owner``).
    watches_ops: ClassVar[bool] = False
    #: True for a probe that observes tensor work by its own means without needing the
    #: ops (memory: saved-tensor hooks): the tracer marks the other probes' callbacks as
    #: internal work (``core.internal.is_internal``) so that it can leave them out
    #: (not in a ``trace()`` under ``torch.no_grad()``, where autograd saves nothing).
    watches_tensor_work: ClassVar[bool] = False
    #: True for a probe that reads ``tracer.backward_end(call)`` (the gradient probe's
    #: backward times): only then does the tracer hook the autograd nodes of each call.
    uses_backward_end: ClassVar[bool] = False
    #: Whether ``install`` may change the model's modules (add a hook, patch a
    #: ``forward``; module hooks are the tracer's job, but nothing stops a probe). The
    #: tracer then plans which modules it observes from the modules as every probe's
    #: ``install`` left them, never from what it read of them before (a model traced
    #: again: ``core/model/table_reuse.py``). A probe that keeps ``Probe.install`` needs
    #: nothing; one whose ``install`` leaves the modules alone sets False (the
    #: built-in probes do). A class that defines ``install`` and does not set it is
    #: True again, also when it subclasses a probe that set False.
    install_touches_modules: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "install" in cls.__dict__ and "install_touches_modules" not in cls.__dict__:
            # a new install (a subclass of a built-in probe's too): unknown until said
            cls.install_touches_modules = True
        if "name" not in cls.__dict__ and not cls.name:
            cls.name = cls.__name__
        declared = any(k in cls.__dict__ for k in ("facts", "trace_facts", "columns", "fields"))
        if declared:
            owner = f"{cls.__module__}.{cls.__qualname__}"
            named = register_declarations(
                cls.name, owner, facts=cls.facts, trace_facts=cls.trace_facts,
                columns=cls.columns, fields=cls.fields,
            )
            cls.facts, cls.trace_facts = tuple(named["facts"]), tuple(named["trace_facts"])
            cls.columns, cls.fields = tuple(named["columns"]), tuple(named["fields"])

    # -- what the probe needs, derived from what it overrides -------------------

    def needs_start(self) -> bool:
        """Whether the probe must see calls start (it overrides ``on_enter``, replaces
        values or watches ops). Asked once the probe is installed. A probe that neither
        replaces values nor watches ops and answers ``False`` gets no ``on_enter``;
        when no probe needs starts, ``trace()``/``summary()`` keep the calls of the
        leaves of ``torch.nn`` off the call stack (``core/engine/fast_path.py``)."""
        cls = type(self)
        return cls.on_enter is not Probe.on_enter or cls.replaces or cls.watches_ops

    @classmethod
    def needs_backward(cls) -> bool:
        """Whether the probe receives backward events."""
        return any(getattr(cls, e) is not getattr(Probe, e) for e in BACKWARD_EVENTS)

    # -- events -------------------------------------------------------------------

    def install(self, tracer: Tracer) -> list[Removable]:
        """Once per run, before the forward: the handles of whatever the probe registered."""
        return []

    def on_enter(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """A module call starts; a replacing probe may return new ``(args, kwargs)``."""
        return None

    def on_exit(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
        output: Any, failed: bool,
    ) -> Any:
        """A module call ended (``failed``: it raised); a replacing probe may return its output."""
        return None

    def on_backward_enter(self, call: Call, grad_outputs: tuple[Any, ...]) -> None:
        """The gradients with respect to a call's outputs are known."""
        return None

    def on_backward_exit(self, call: Call, grad_inputs: tuple[Any, ...]) -> None:
        """The gradients with respect to a call's inputs are known."""
        return None

    def on_param_grad(self, grad: ParamGrad) -> None:
        """A parameter's gradient is ready (accumulated, or computed by ``autograd.grad``)."""
        return None

    def finalize(self, trace: Trace) -> None:
        """Once per run, after the last event: per-trace facts go into ``trace.facts``."""
        return None


P = TypeVar("P", bound=type[Probe])

PROBES: dict[str, type[Probe]] = {}
"""Probes that can be switched on by name (``Tracer(model, time=True)``)."""


def register_probe(cls: P) -> P:
    """Class decorator adding a probe to the registry under ``cls.name``, so that
    ``Tracer(model, NAME=True)``, ``hookscope.trace(model, x, probes=["NAME"])`` and
    the command line can switch it on.

    Raises:
        ValueError: when the name is already registered by another class.
    """
    previous = PROBES.get(cls.name)
    if previous is not None and previous.__qualname__ != cls.__qualname__:
        raise ValueError(
            f"a probe named {cls.name!r} is already registered ({previous.__name__})"
        )
    PROBES[cls.name] = cls
    return cls


def overrides(probe: Probe, method: str) -> bool:
    """Whether ``probe`` overrides ``Probe.<method>`` (else the tracer skips it)."""
    return getattr(type(probe), method) is not getattr(Probe, method)


ProbeSpec = Probe | type[Probe] | str
"""What ``probes=`` takes: a probe instance, a probe class, or a registered name."""


def probe_flags(builtin: dict[str, bool], options: dict[str, Any]) -> dict[str, bool]:
    """The probes a tracer switches on by name: the built-in ones' flags (``builtin``),
    and ``NAME=True`` options naming registered probes.

    The built-in probes register themselves when ``hookscope.probes`` is imported,
    which ``hookscope.api.tracing`` (behind ``hookscope.Tracer`` and ``hookscope.trace``) does:
    the engine never imports the layer above it.

    Raises:
        SpecError: an option names no registered probe, or a flag is not a bool.
    """
    flags = dict(builtin)
    for key, value in options.items():
        if key not in PROBES:
            known = ", ".join(sorted({*PROBES, *flags}))
            raise SpecError(f"unknown probe option {key!r}; known options: {known}")
        flags[key] = value
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise SpecError(
                f"probe option {key}= must be True or False, got {value!r}; "
                f"write {key}=True to record it or {key}=False to skip it"
            )
    return flags


def build_probes(flags: dict[str, bool], extra: Iterable[ProbeSpec]) -> list[Probe]:
    """The probes of a tracer: those switched on by name, then ``extra``, by ``order``.

    Raises:
        SpecError: an unknown probe name, something that is not a probe, or two probes
            of one name (both would write the same facts).
    """
    probes: list[Probe] = [PROBES[name]() for name, on in flags.items() if on and name in PROBES]
    missing = [name for name, on in flags.items() if on and name not in PROBES]
    if missing:
        raise SpecError(f"probe(s) {missing} are not available in this version of hookscope")
    if isinstance(extra, (str, Probe)) or (isinstance(extra, type) and issubclass(extra, Probe)):
        extra = [extra]
    for spec in extra:
        p = _make_probe(spec)
        if any(q.name == p.name for q in probes):
            raise SpecError(
                f"two {p.name} probes in one tracer (a {p.name}=True option and a probe "
                f"in probes=, or two in probes=); pass only one of them"
            )
        probes.append(p)
    return sorted(probes, key=lambda p: p.order)


def _make_probe(spec: Any) -> Probe:
    if isinstance(spec, Probe):
        return spec
    if isinstance(spec, type) and issubclass(spec, Probe):
        return spec()
    if isinstance(spec, str):
        cls = PROBES.get(spec)
        if cls is None:
            raise SpecError(
                f"probes= names an unknown probe {spec!r}; registered probes: "
                f"{', '.join(sorted(PROBES))} (register one with @hookscope.register_probe)"
            )
        return cls()
    raise SpecError(
        f"probes= expects hookscope.Probe instances, Probe classes or registered probe "
        f"names, got {spec!r}"
    )
