"""The probe protocol and the probe registry.

A probe measures one kind of fact. The tracer (``core/tracer.py``) delivers events to
it; the probe writes its own fields into the :class:`~hookscope.core.records.Call` it
is handed, and never calls another probe. Events, in the order they happen:

- ``install(tracer) -> list[Removable]`` once, when the tracer starts: register any
  extra instrumentation (a dispatch mode, saved-tensor hooks) and return handles
  that undo it. Module hooks are the tracer's job; a probe never registers them.
- ``on_enter(call, module, args, kwargs)`` before a module's ``forward`` runs.
- ``on_exit(call, module, args, kwargs, output, failed)`` after it returned or raised
  (``failed=True``, ``output=None``). ``args``/``kwargs`` are what ``forward`` was
  called with (after every forward pre-hook), as torch's forward hooks receive them:
  a probe that only reads the inputs' shapes or values needs no ``on_enter``. (A
  probe written with the earlier signature, ``on_exit(call, module, output,
  failed)``, still works: the tracer adapts it.)
- ``finalize(trace)`` once, after every handle was removed: move device values to the
  host in one transfer, derive totals.

Enter callbacks run in probe order and exit callbacks in reverse order, so the probe
listed last (timing) is closest to the module's own work. A probe that does not
override ``on_enter``/``on_exit`` costs nothing per call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from torch import nn

if TYPE_CHECKING:
    from hookscope.core.handles import Removable
    from hookscope.core.records import Call, Trace
    from hookscope.core.tracer import Tracer


class Probe:
    """Base class of probes: override only the events you need."""

    #: Registry key and the name of the tracer option that turns the probe on.
    name: ClassVar[str] = ""
    #: Position among probes: lower enters first and exits last.
    order: ClassVar[int] = 50
    #: True for a probe that reads ``tracer.chain_start_ns``/``overhead_ns`` (timing):
    #: only then does the tracer time its own hooks.
    uses_overhead_clock: ClassVar[bool] = False
    #: True for a probe that observes dispatched aten ops (ops): only then does the
    #: tracer raise ``tracer.internal`` around the other probes' callbacks.
    watches_ops: ClassVar[bool] = False

    def install(self, tracer: Tracer) -> list[Removable]:
        return []

    def on_enter(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        return None

    def on_exit(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
        output: Any, failed: bool,
    ) -> None:
        return None

    def finalize(self, trace: Trace) -> None:
        return None


P = TypeVar("P", bound=type[Probe])

PROBES: dict[str, type[Probe]] = {}


def register_probe(cls: P) -> P:
    """Class decorator adding a probe to the registry under ``cls.name``.

    Raises:
        ValueError: when the name is empty or already registered.
    """
    if not cls.name:
        raise ValueError(f"probe class {cls.__name__} must set a non-empty `name`")
    if cls.name in PROBES:
        raise ValueError(
            f"a probe named {cls.name!r} is already registered ({PROBES[cls.name].__name__})"
        )
    PROBES[cls.name] = cls
    return cls


def overrides(probe: Probe, method: str) -> bool:
    """Whether ``probe`` overrides ``Probe.<method>`` (else the tracer skips it)."""
    return getattr(type(probe), method) is not getattr(Probe, method)
