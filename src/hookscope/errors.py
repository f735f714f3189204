"""Every exception hookscope raises on purpose.

The tree::

    HookscopeError                   base of everything below; catch this to catch all
    ├── SpecError (ValueError)       a bad model spec, input spec, selector or option from
    │                                the user
    ├── ModelRunError (RuntimeError) the user's model raised while hookscope observed it;
    │                                carries the partial ``Trace`` and the failing call
    ├── ProbeError (RuntimeError)    a probe (hookscope's or the user's) raised; names the
    │                                probe and the call; carries the partial ``Trace``
    ├── RunStopped                   a probe stopped the run early on purpose (the first
    │   │                            NaN, say); carries the partial ``Trace``
    │   └── DebuggerQuit             the user quit the debugger ``hookscope.breakpoint``
    │                                opened (``q``)
    ├── RenderError (ValueError)     a trace could not be rendered or parsed (unknown
    │                                column, unknown format, JSON of another schema)
    └── MissingDependencyError (ImportError)
                                     an optional dependency (pandas, matplotlib, ...) is
                                     not installed; says which extra to install

A ``SpecError`` message is one line that names the offending value and says how to fix
it; the command line prints exactly that line and exits with code 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hookscope.core.records.trace import Trace


class HookscopeError(Exception):
    """Base class of every error hookscope raises on purpose."""


class SpecError(HookscopeError, ValueError):
    """A model spec, input spec, selector or option given by the user is wrong.

    The message says what was given, what was expected and how to fix it.
    """


class RenderError(HookscopeError, ValueError):
    """A trace could not be rendered, exported or parsed."""


class MissingDependencyError(HookscopeError, ImportError):
    """An optional dependency is not installed.

    Attributes:
        package: the missing package.
        extra: the hookscope extra that installs it.
    """

    def __init__(self, package: str, extra: str, *, needed_for: str = "") -> None:
        what = f" (needed for {needed_for})" if needed_for else ""
        super().__init__(f"{package} is not installed{what}: pip install 'hookscope[{extra}]'")
        self.package = package
        self.extra = extra


class ModelRunError(HookscopeError, RuntimeError):
    """The observed model raised an exception.

    Attributes:
        trace: the partial trace recorded up to the failure (calls that finished, and
            the failing call with its inputs); ``None`` where the run records no trace
            (a memory plan runs a fake copy of the model).
        path: fully qualified name of the innermost module whose call raised
            (``""`` for the root module, ``None`` when the failure was outside any module).
    """

    def __init__(self, message: str, *, trace: Trace | None, path: str | None) -> None:
        super().__init__(message)
        self.trace = trace
        self.path = path


class ProbeError(HookscopeError, RuntimeError):
    """A probe raised while it handled an event: a bug in the probe, not in the model.

    Attributes:
        probe: the probe's name.
        event: the event it was handling (``on_exit``, ``on_backward_enter``, ...).
        path: the module path of the call it was handling (``None``: no call).
        trace: the partial trace (set once the tracer has finished).
    """

    def __init__(
        self, *, probe: str, probe_class: str, event: str, path: str | None,
        call_index: int | None, error: BaseException,
    ) -> None:
        where = "" if path is None else f" for module {path or '<root>'!r} (call {call_index})"
        super().__init__(
            f"probe {probe!r} ({probe_class}) raised {type(error).__name__} in {event}"
            f"{where}: {error}; the model itself did not fail"
        )
        self.probe = probe
        self.event = event
        self.path = path
        self.trace: Trace | None = None


class RunStopped(HookscopeError):
    """A probe stopped the run on purpose (``Tracer.stop``); the model is left as before.

    Attributes:
        reason: why, in one line.
        probe: the name of the probe that stopped it.
        path: the module path of the call running when it stopped (``None``: none).
        trace: the partial trace up to the stop (set once the tracer has finished);
            ``trace.stop`` says the same.
    """

    def __init__(self, reason: str, *, probe: str = "", path: str | None = None) -> None:
        self.reason = reason
        self.probe = probe
        self.path = path
        self.call: int | None = None
        self.trace: Trace | None = None
        super().__init__(self._text())

    def _text(self) -> str:
        where = "" if self.path is None else f" in module {self.path or '<root>'!r}"
        by = f" by probe {self.probe!r}" if self.probe else ""
        return f"run stopped{by}{where}: {self.reason}"

    def locate(self, probe: str, call: Any) -> None:
        """Fill in the probe and the call it was raised from (the engine does)."""
        if not self.probe:
            self.probe = probe
        if call is not None and self.path is None:
            self.path, self.call = call.path, call.index
        self.args = (self._text(),)


class DebuggerQuit(RunStopped):
    """The user quit the debugger :func:`hookscope.breakpoint` opened in a module call
    (``q``): the run stops there, the model is left as before; the command line exits
    with its own status (3), not a usage error's."""
