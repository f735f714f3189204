"""Two runs side by side: which call of one is which call of the other
(``matching``), how the facts of two finished traces differ (:func:`diff`, ``diff*``),
and where two live runs' values start to differ (:func:`compare`).

:func:`compare` (``run.py``) runs two models, or one model under two settings, on the
same inputs: side A, and side B (``sides.py``: autocast, a cast or moved copy, other
weights, ``torch.compile``); it matches their calls (``matching``), measures each
matched call's outputs (``numerics.py``) and the error each call introduced
(``replay.py``), and returns a :class:`CompareResult` (``result.py``) that prints as a
folded table (``table.py``).

``hookscope.compare`` is this package, and the package is callable, as
``hookscope.lint`` is (its ``__init__`` says why: a function and a subpackage cannot
share a name): ``hookscope.compare(model_a, model_b, x)`` runs
:func:`hookscope.compare.run.compare`.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from hookscope.compare.diff_calls import CallDiff
from hookscope.compare.diff_facts import FactChange
from hookscope.compare.diff_result import TraceDiff, diff
from hookscope.compare.matching import CallMatching, match_calls
from hookscope.compare.result import CallError, CompareResult, MemoryUse
from hookscope.compare.run import compare as _compare

__all__ = ["CallDiff", "CallError", "CallMatching", "CompareResult", "FactChange", "MemoryUse",
           "TraceDiff", "compare", "diff", "match_calls"]


class _CallableModule(types.ModuleType):
    """``hookscope.compare`` is this package or the function, both callable alike."""

    def __call__(self, model_a: Any, model_b: Any = None, *inputs: Any,
                 **options: Any) -> CompareResult:
        return _compare(model_a, model_b, *inputs, **options)

    __call__.__doc__ = _compare.__doc__


sys.modules[__name__].__class__ = _CallableModule
if TYPE_CHECKING:
    from hookscope.compare.run import compare
else:
    compare = sys.modules[__name__]  # ``hookscope.compare`` resolves through this name
