"""Operators as the dispatcher hands them to Python, and the mode class that sees them.

Private: ``torch._ops`` (:class:`OpOverload`, :class:`OpOverloadPacket`,
:class:`HigherOrderOperator`), an overload's ``_schema``, the ``_opoverload`` of a
``torch.library.custom_op``, and ``torch.utils._python_dispatch.TorchDispatchMode``
(the base class of hookscope's op log and op checks). The classes are imported, not
wrapped: without them the ops probe cannot exist, so a torch that moves one fails at
import, by name, rather than degrading.
"""

from __future__ import annotations

from typing import Any

from torch._ops import HigherOrderOperator, OpOverload, OpOverloadPacket
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = [
    "HigherOrderOperator",
    "OpOverload",
    "OpOverloadPacket",
    "TorchDispatchMode",
    "custom_op_overload",
    "op_schema",
]


def op_schema(func: Any) -> Any | None:
    """The ``torch._C.FunctionSchema`` of op ``func`` (its ``name``, ``arguments``,
    ``returns``); ``None`` for something without one (a higher-order operator)."""
    return getattr(func, "_schema", None)


def custom_op_overload(target: Any) -> OpOverload | None:
    """The ``OpOverload`` a ``torch.library.custom_op`` registered (``None``: ``target``
    is not one)."""
    overload = getattr(target, "_opoverload", None)
    return overload if isinstance(overload, OpOverload) else None
