"""The frame a debugger opens in, inside a module call, and the pdb that opens there.

:func:`in_call` (:func:`in_backward_of_call` in the backward) is the frame: its only
locals are the module call's (``module``, ``path``, ``inputs``, ``kwargs``, ``output``,
``grad_output``). With Python's own breakpoint hook and ``PYTHONBREAKPOINT`` unset (or
``pdb.set_trace``) it opens :class:`CallerPdb` there, whose stack goes from the frame
straight to the code that called the module: hookscope's frames, and torch's
module-call and autograd machinery between them, are left out, so ``up`` reaches the
caller. Otherwise it calls ``sys.breakpointhook()``: the debugger ``PYTHONBREAKPOINT``
names (``0``: none). Used by ``hookscope.breakpoint`` (``debug/breakpoints.py``) and
``find_anomaly(pdb=True)`` (``debug/anomaly.py``).
"""

from __future__ import annotations

import os
import pdb
import sys
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from torch import nn

from hookscope.core import torch_private


def in_call(
    module: nn.Module, path: str, inputs: tuple[Any, ...], kwargs: dict[str, Any], output: Any,
) -> None:
    """The frame the debugger opens in: its arguments are its only locals."""
    if not _pdb_opened(sys._getframe()):
        sys.breakpointhook()
    return None  # the debugger stops here: the locals are the module call's


def in_backward_of_call(
    module: nn.Module, path: str, inputs: tuple[Any, ...], kwargs: dict[str, Any], output: Any,
    grad_output: tuple[Any, ...],
) -> None:
    """:func:`in_call` of the backward phase: ``grad_output`` too."""
    if not _pdb_opened(sys._getframe()):
        sys.breakpointhook()
    return None  # the debugger stops here: the locals are the module call's


def at_backward_node(
    module: nn.Module | None, path: str, node: Any, grad_inputs: tuple[Any, ...],
    grad_outputs: tuple[Any, ...],
) -> None:
    """The frame ``find_anomaly(pdb=True)`` opens at the backward node that made the
    first non-finite gradient: the module whose forward made it (``None``: the loss),
    the node, the gradients it computed and those it received."""
    if not _pdb_opened(sys._getframe()):
        sys.breakpointhook()
    return None  # the debugger stops here: the locals are the node's


def debugger_disabled() -> bool:
    """Whether ``PYTHONBREAKPOINT=0`` turned Python's own breakpoint hook off."""
    return sys.breakpointhook is sys.__breakpointhook__ and (
        os.environ.get("PYTHONBREAKPOINT") == "0")


def _pdb_opened(frame: FrameType) -> bool:
    """Open pdb in ``frame`` when the hook is Python's own and ``PYTHONBREAKPOINT``
    names pdb or nothing: a pdb whose stack (``where``, ``up``) goes from ``frame``
    straight to the module's caller, without hookscope's frames and torch's module-call
    machinery. ``False`` when another debugger is asked for: the caller then calls
    ``sys.breakpointhook()``."""
    if sys.breakpointhook is not sys.__breakpointhook__ or os.environ.get(
            "PYTHONBREAKPOINT", "") not in ("", "pdb.set_trace"):
        return False
    CallerPdb().set_trace(frame)
    return True


class CallerPdb(pdb.Pdb):
    """pdb whose stack leaves out the frames between the stop and the module's caller."""

    def get_stack(self, f: FrameType | None, t: TracebackType | None) -> tuple[
            list[tuple[FrameType, int]], int]:
        stack, i = super().get_stack(f, t)
        here = stack[i]
        kept = [e for e in stack if e is here or not _machinery(e[0])]
        return kept, kept.index(here)


_HOOKSCOPE = str(Path(__file__).resolve().parents[1]) + os.sep


def _machinery(frame: FrameType) -> bool:
    file = frame.f_code.co_filename
    return os.path.realpath(file).startswith(_HOOKSCOPE) or torch_private.is_torch_machinery(file)
