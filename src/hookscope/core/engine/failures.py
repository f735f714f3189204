"""Which module call a failure started in, and how a failure is described.

The tracer (``core/engine/tracer.py``) sees a failing call through torch's always-call forward
hooks: they run inside ``Module._call_impl``'s ``except`` block while the exception is
being handled. :class:`FailureTracker` keeps the innermost call an exception started
in, so that an exception re-raised by an enclosing call (``raise ... from e``) is still
attributed to where it began; the tracer turns it into ``Trace.error`` (a
:class:`~hookscope.core.records.trace.FailureRecord`) when the exception leaves the block.

A module's call starts when the tracer's forward pre-hook runs, after the pre-hooks
registered before it: one of those that raises fails the caller's call, and
:func:`raised_before_forward` names the module it belongs to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from torch import nn

from hookscope.core import torch_private
from hookscope.core.records.tensor_paths import shape_text
from hookscope.core.records.trace import Call, FailureRecord, Trace


def message(exc: BaseException) -> str:
    """``str(exc)``, also for an exception whose ``__str__`` raises (as ``traceback`` does)."""
    try:
        return str(exc)
    except Exception:
        return f"<exception str() failed: {type(exc).__name__} object>"


def caused_by(exc: BaseException, origin: BaseException) -> bool:
    """Whether ``exc`` is ``origin`` or was raised while handling it (``raise ... from``)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if cur is origin:
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def add_note(exc: BaseException, note: str) -> None:
    """Add ``note`` to the traceback Python prints for ``exc`` (``exc.add_note``)."""
    exc.add_note(note)


class FailureTracker:
    """The innermost call where the exception now propagating started."""

    __slots__ = ("_calls", "origin")

    def __init__(self, calls: list[Call]) -> None:
        self._calls = calls
        self.origin: tuple[Call, BaseException] | None = None

    def record(self, call: Call, exc: BaseException) -> None:
        """Mark ``call`` failed with ``exc``. A failure the model catches itself does
        not fail the trace: :meth:`failure_of` decides when the block ends."""
        if call.error is None:
            call.error = f"{type(exc).__name__}: {message(exc)}"
        origin = self.origin
        if origin is not None and origin[1] is exc:
            return  # the same exception propagating outwards: keep the innermost call
        if origin is not None and caused_by(exc, origin[1]) and self._encloses(call, origin[0]):
            return  # re-raised by an enclosing call (``raise ... from e``): keep the origin
        self.origin = (call, exc)

    def failure_of(
        self, exc: BaseException, model: nn.Module, watched: Callable[[str], bool] | None,
    ) -> FailureRecord:
        """The record of ``exc``, which left the traced block (``watched``: whether a
        module path is recorded; ``None``: all are)."""
        origin = self.origin
        raised_in = _raised_in(exc, model)
        if origin is not None and caused_by(exc, origin[1]):
            call = origin[0]
            found = FailureRecord(call.index, call.path, type(exc).__name__, message(exc))
        else:  # in no recorded call: in a module not selected, or outside any module
            path = None if raised_in is None or watched is None or watched(raised_in[0]) \
                else raised_in[0]
            found = FailureRecord(None, path, type(exc).__name__, message(exc))
        before = raised_before_forward(raised_in, found.path, watched)
        return found if before is None else replace(found, before_forward=before)

    def _encloses(self, outer: Call, inner: Call) -> bool:
        parent = inner.parent
        while parent is not None:
            if parent == outer.index:
                return True
            parent = self._calls[parent].parent
        return False


def _raised_in(exc: BaseException, model: nn.Module) -> tuple[str, nn.Module, Any] | None:
    """The path of the module of ``model`` whose ``_call_impl`` the exception ``exc``
    left last, the module, and the code of the frame it called then (``None``: it was
    raised there); ``None`` when it left none of the model's."""
    found = torch_private.raised_in_call_of(exc.__traceback__)
    if found is None:
        return None
    module, following = found
    path: str | None = next(
        (p for p, m in model.named_modules(remove_duplicate=False) if m is module), None)
    return None if path is None else (path, module, following)


def raised_before_forward(
    raised_in: tuple[str, nn.Module, Any] | None, failed: str | None,
    watched: Callable[[str], bool] | None,
) -> str | None:
    """The path of the recorded module whose call raised before it started (a forward
    pre-hook registered before the tracer's), inside the call ``failed`` (the path of
    the failing call; ``None``: outside any); ``None`` when there is none.
    ``raised_in``: :func:`_raised_in`."""
    if raised_in is None:
        return None
    path, module, following = raised_in
    if path == failed or (watched is not None and not watched(path)):
        return None  # the failing call's own, or not recorded: its forward may have run
    if failed and not path.startswith(f"{failed}."):
        return None  # not called by the failing call
    forward = getattr(getattr(type(module), "forward", None), "__code__", None)
    if following is not None and following is forward:
        return None  # its forward ran: a call not of the run (a checkpoint's recompute)
    return path


def describe_failure(trace: Trace) -> str:
    """One line naming the failing module call and its input shapes."""
    err = trace.error
    if err is None:
        return "no failure recorded"
    hooked = None if err.before_forward is None else err.before_forward or "<root>"
    if err.call is None and hooked is not None:
        return f"{err.exception_type} in a hook of module {hooked!r}, before its forward " \
            f"ran: {err.message}"
    if err.call is None and err.path is not None:
        return f"{err.exception_type} in module {err.path or '<root>'!r} (not recorded: " \
            f"outside select=): {err.message}"
    if err.call is None:
        return f"{err.exception_type}: {err.message} (outside any module call)"
    call = trace.calls[err.call]
    where = call.path or "<root>"
    before = "" if hooked is None else \
        f"a hook of module {hooked!r}, before its forward ran, called by "
    inputs = call.facts.get("inputs")
    if inputs is None:  # the shapes probe did not run: the inputs are not known
        received = ""
    else:
        # with the dtype when it is not float32, as the tables write it: a wrong
        # dtype (int64 images, float token ids) is as often the cause as a shape
        shapes = ", ".join(f"{m.path}={shape_text(m)}" for m in inputs) or "no tensor inputs"
        received = f" with inputs {shapes}"
    return (
        f"{err.exception_type} in {before}module {where!r} ({call.module_class}, "
        f"call {call.call_index})"
        f"{received}: {err.message}"
    )
