"""Where a finding points: the line of the user's code to edit to fix it.

The runner (``lint/runner.py``) gives each finding the location of :func:`locate`: where
``self.<attribute>`` is assigned (``lint/source.py``) in the class of the module the
finding is about or, for an attribute a ``torch.nn`` class assigns (the ``weight`` of an
``nn.Linear``), in the user's class that holds that module, and so on up the tree. A
rule that knows better gives its hit a location itself: what the forward creates
(HS501, HS505) is located where the forward created it, by :func:`caller_location`
while the pass runs (``lint/traced_pass.py``).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator
from types import FrameType

import torch
from torch import nn

from hookscope.lint.context import LintContext
from hookscope.lint.source import Location, find_assignment, find_class
from hookscope.lint.writes import find_write

# Frames of these packages are never the line a user edits.
_LIBRARIES = tuple(os.path.dirname(path) + os.sep for path in (
    torch.__file__, os.path.dirname(__file__)))


def locate(ctx: LintContext, path: str, attribute: str | None) -> Location | None:
    """Where ``self.<attribute>`` is assigned in the class of the module at ``path``.

    An assignment through attributes from a module further up (``self.head.weight =
    self.embed.weight`` in the model's class, for ``head``'s ``weight``) is the most
    specific place and is looked for first. Then an attribute that a ``torch.nn``
    class assigns is located where the user's code assigns that module instead, and so
    on up the tree; the model's own class definition is the last resort.
    """
    steps = list(_steps(ctx, path, attribute))
    for _, module, _, chain in steps:
        if "." in chain and not _from_torch(type(module)):
            found = find_assignment(type(module), chain)
            if found is not None:
                return found
    for _, module, name, _ in steps:
        if name is not None and not _from_torch(type(module)):
            found = find_assignment(type(module), name)
            if found is not None:
                return found
    if not steps or steps[-1][0] or _from_torch(type(steps[-1][1])):
        return None  # the walk did not reach the root, or the root is torch's
    return find_class(type(steps[-1][1]))


def locate_write(
    ctx: LintContext, path: str, attribute: str | None, *, freeze: bool
) -> Location | None:
    """Where a method of the user's classes (``forward`` excepted) last freezes
    (``freeze=True``: ``requires_grad_(False)``, ``.requires_grad = False``) or writes the
    values of (``nn.init.zeros_(self.fc.weight)``, ``self.w.data.fill_(1.)``) the
    target, or one around it (``for p in self.fc.parameters(): ...``); else
    :func:`locate`. A write outside the model's classes (in a training script) is
    not seen."""
    for _, module, _, chain in _steps(ctx, path, attribute):
        if not _from_torch(type(module)):
            found = find_write(type(module), chain, freeze=freeze)
            if found is not None:
                return found
    return locate(ctx, path, attribute)


def _steps(
    ctx: LintContext, path: str, attribute: str | None
) -> Iterator[tuple[str, nn.Module, str | None, str]]:
    """``(path, module, attribute, chain)`` from the module at ``path`` up to the root, where
    ``self.<chain>`` in that module's class names the target through attributes
    (through a container, ``self.layers[3].fc``, only the container's name is kept)."""
    chain = attribute or ""
    while True:
        module = ctx.modules.get(path)
        if module is None:
            return
        yield path, module, attribute, chain
        if not path:
            return
        parent, name = ctx.owner(path)
        assert name is not None
        direct = path == (f"{parent}.{name}" if parent else name)
        chain = f"{name}.{chain}" if direct and chain else name
        path, attribute = parent, name


def _from_torch(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "torch"


def caller_location(*, building: nn.Module | None = None) -> Location | None:
    """The line of the user's code running now: the innermost frame outside torch and
    hookscope and, with ``building``, outside the ``__init__`` of that module (for a
    registration made while a module is built, the line that builds it)."""
    frame = inspect.currentframe()
    try:
        while frame is not None:
            file = frame.f_code.co_filename
            if not file.startswith(_LIBRARIES) and not _builds(frame, building):
                return file, frame.f_lineno, _column(frame)
            frame = frame.f_back
        return None
    finally:
        del frame  # a frame kept in a local is a reference cycle


def _builds(frame: FrameType, module: nn.Module | None) -> bool:
    """Whether ``frame`` runs an ``__init__`` of ``module`` (a base's too)."""
    code = frame.f_code
    if module is None or code.co_name != "__init__" or not code.co_argcount:
        return False
    return frame.f_locals.get(code.co_varnames[0]) is module


def _column(frame: FrameType) -> int:
    """1-based column of the expression ``frame`` runs (1 when not known: before
    Python 3.11, code objects have no positions)."""
    co_positions = getattr(frame.f_code, "co_positions", None)
    if co_positions is None:
        return 1
    positions = list(co_positions())
    index = frame.f_lasti // 2
    col = positions[index][2] if 0 <= index < len(positions) else None
    return col + 1 if col is not None else 1
