"""Work a probe does on tensors itself, told apart from the model's, on every thread.

Every tracer of a thread must see it, so that nested tracers (two tracers on one
model, or one on a submodule) do not record each other's work as the model's: the ops
probe skips the ops run inside it, and the backward clock
(``Tracer.backward_overhead_now``) knows which backward event runs. The engine marks
every probe callback (``core/engine/tracer.py``); :func:`internal_work` marks work outside
one (a saved-tensor hook).
"""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class _SharedState(threading.local):
    """What every tracer in this thread must see, so that nested tracers (two tracers on
    one model, or one on a submodule) do not record each other's work as the model's.

    ``internal`` > 0 while any probe works on tensors itself (the engine sets it around
    every probe callback, on whichever thread the event arrives); ``watchers[0]``
    counts the active tracers with a probe that watches dispatched ops.
    """

    internal = 0
    #: (tracer, perf_counter_ns at its start) of the backward event running, or None
    backward_event: tuple[Any, int] | None = None

    def __init__(self) -> None:
        super().__init__()
        # a one-item list, which the fast path holds for its thread and reads on
        # every module call: a ``threading.local`` attribute costs several µs to read
        # with cold caches
        self.watchers = [0]


shared = _SharedState()
"""The one instance (per thread: a ``threading.local``)."""


@contextmanager
def internal_work() -> Iterator[None]:
    """Mark tensor work a probe does outside an engine event (a saved-tensor hook, say)
    as hookscope's: the ops probe does not record it, on this thread."""
    shared.internal += 1
    try:
        yield
    finally:
        shared.internal -= 1


def is_internal() -> bool:
    """Whether probe work is running on this thread (see :func:`internal_work`)."""
    return shared.internal > 0


def outside_hookscope() -> int:
    """The ``stacklevel`` for a warning raised by the caller of this function that
    points at the user's call of hookscope (``summary``, ``capture``, ``lint``, the end
    of a ``Tracer`` block), however deep inside hookscope it is raised."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    here = inspect.currentframe()  # our own frames, not torch's
    frame, level = (here.f_back if here is not None else None), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level
