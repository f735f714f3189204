"""Interpreter and compiler settings hookscope changes while any tracer is active.

Used by the tracer (``core/engine/tracer.py``): ``PROCESS.acquire(depth)`` when a tracer
starts returns a handle that puts the settings back when the last tracer ends.
"""

from __future__ import annotations

import sys
import threading
from contextlib import suppress
from typing import Any

import torch

from hookscope.core.engine.handles import CallbackHandle


class ProcessSettings:
    """Interpreter and compiler settings hookscope changes while any tracer is active.

    They are process-wide, so they are set when the first tracer starts and put back
    when the last one ends, whatever order tracers end in:

    - the recursion limit: torch runs a module that has hooks through one more inner
      function, so a model nested ``n`` deep needs ``n`` more frames when observed;
      the limit is raised by the depth of the deepest model observed (and room for the
      probes' own frames), so a deep model that runs unobserved runs observed;
    - ``torch.compile``'s stance, ``force_eager``: compiled code skips the hooks of the
      modules it inlined (and, when it compiles, traces hookscope's own hooks), so
      compiled models and submodules run eagerly and every module call is seen. Only
      when dynamo was imported (nothing can have been compiled otherwise), and not
      inside a compiled region.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._limit_before = 0
        self._limit_set = 0
        self._stance: Any = None

    def acquire(self, depth: int) -> CallbackHandle:
        with self._lock:
            if self._active == 0:
                self._limit_before = sys.getrecursionlimit()
            self._active += 1
            needed = self._limit_before + depth + 64
            if sys.getrecursionlimit() < needed:
                sys.setrecursionlimit(needed)
                self._limit_set = needed
            if self._stance is None and "torch._dynamo" in sys.modules:
                with suppress(RuntimeError):  # inside a compiled region: leave it alone
                    self._stance = torch.compiler.set_stance("force_eager")
        return CallbackHandle(self._release)

    def _release(self) -> None:
        with self._lock:
            self._active -= 1
            if self._active:
                return
            stance, self._stance = self._stance, None
            if stance is not None:
                stance.__exit__(None, None, None)
            if self._limit_set and sys.getrecursionlimit() == self._limit_set:
                sys.setrecursionlimit(self._limit_before)  # unless someone changed it since
            self._limit_set = 0


PROCESS = ProcessSettings()
"""The one instance: the settings are process-wide."""
