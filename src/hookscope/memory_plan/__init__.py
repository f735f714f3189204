"""Memory plans: the peak memory of a training step, per module, planned on fake tensors.

``hookscope.memory_plan(model, *inputs)`` runs :func:`hookscope.memory_plan.api.memory_plan`:
the model is copied onto fake tensors (``fake_copy.py``), one step runs under a storage
tracker (``tracking.py``, ``step.py``), the tracker's log becomes the peak, the
per-module columns and the timeline (``accounting.py``), and a :class:`MemoryPlan`
(``result.py``) holds them, printed by ``table.py`` and drawn by ``plot.py``;
``options.py`` checks the options and ``search.py`` finds the largest batch that fits.

As ``hookscope.lint``, this package is callable (a function and a subpackage cannot
share the name ``hookscope.memory_plan``: importing a submodule binds the package to
it), so ``hookscope.memory_plan(model, x)`` calls the function.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from hookscope.memory_plan.api import memory_plan as _memory_plan
from hookscope.memory_plan.result import MemoryPlan, MemoryPoint, ModuleMemory

__all__ = ["MemoryPlan", "MemoryPoint", "ModuleMemory", "memory_plan"]


class _CallableModule(types.ModuleType):
    """``hookscope.memory_plan`` is this package or the function, both callable alike."""

    def __call__(self, model: Any, *inputs: Any, **options: Any) -> MemoryPlan:
        return _memory_plan(model, *inputs, **options)

    __call__.__doc__ = _memory_plan.__doc__


sys.modules[__name__].__class__ = _CallableModule
if TYPE_CHECKING:
    from hookscope.memory_plan.api import memory_plan
else:
    memory_plan = sys.modules[__name__]
