"""Where an attribute of a module is assigned in its class's source.

The runner (``lint/runner.py``) asks :func:`find_assignment` for the file, line and
column of ``self.<attribute> = ...`` (also ``self.x: T = ...`` and ``self.x += ...``)
in the class of the module a finding is about, then in its bases (nearest first,
``nn.Module`` and its own bases excluded). The class source comes from
``inspect.getsource``; it is parsed with ``ast`` once per class and cached.

What a class's methods read is in ``lint/reads.py``, what they write in
``lint/writes.py``; all three parse the class (:func:`parse_class`,
:func:`class_methods`) once per class (:func:`once_per_class`).

``self.register_buffer("x", ...)``, ``register_parameter``, ``add_module``,
``register_module`` and ``setattr(self, "x", ...)`` with a literal name count as
assignments of ``x``; ``self.head.weight = ...`` is found as ``head.weight``.

NB: an attribute set under a computed name, or on a class whose source cannot be read
(defined in a REPL, compiled), has no location: the finding is reported without one.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import weakref
from typing import Any, NamedTuple

from torch import nn

Location = tuple[str, int, int]  # file, 1-based line, 1-based column


def find_assignment(cls: type, attribute: str) -> Location | None:
    """``(file, line, col)`` of the first ``self.<attribute> = ...`` in ``cls`` or a base.

    ``attribute`` may be dotted (``head.weight``: ``self.head.weight = ...``).
    ``__init__`` is searched before the other methods of a class.
    """
    for klass in cls.__mro__:
        if klass is nn.Module or not issubclass(klass, nn.Module):
            continue
        found: Location | None = once_per_class(_ASSIGNED, klass, _assignments).get(attribute)
        if found is not None:
            return found
    return None


_ASSIGNED: weakref.WeakKeyDictionary[type, dict[str, Location]] = weakref.WeakKeyDictionary()


def once_per_class(cache: weakref.WeakKeyDictionary[type, Any], cls: type, make: Any) -> Any:
    """``make(cls)``, parsed once per class (forgotten with the class)."""
    if cls not in cache:
        cache[cls] = make(cls)
    return cache[cls]


def _assignments(cls: type) -> dict[str, Location]:
    """Every attribute ``cls``'s own methods assign on ``self``, at its first assignment."""
    parsed = parse_class(cls)
    if parsed is None:
        return {}
    found: dict[str, Location] = {}
    for fn in class_methods(parsed.tree):
        owner = fn.args.args[0].arg if fn.args.args else "self"
        named = sorted((at.lineno, at.col_offset, name) for node in ast.walk(fn)
                       for name, at in _assigned(node, owner))
        for line, col, name in named:  # in source order: the first one wins
            found.setdefault(name, parsed.location(line, col))
    return found


class ClassSource(NamedTuple):
    """The parsed source of a class, with what turns an ``ast`` position into a
    :data:`Location`: its file, the line of its ``class`` statement, and the columns
    its source was dedented by (a class defined inside a function or a class)."""

    file: str
    tree: ast.Module
    first: int
    indent: int

    def location(self, lineno: int, col_offset: int) -> Location:
        """The place in the file of ``ast``'s ``lineno`` and ``col_offset``."""
        return self.file, self.first + lineno - 1, col_offset + 1 + self.indent


def parse_class(cls: type) -> ClassSource | None:
    """The source of ``cls``, parsed; ``None`` when it cannot be read or parsed."""
    try:
        lines, first = inspect.getsourcelines(cls)
        file = inspect.getsourcefile(cls)
        source = "".join(lines)
        tree = ast.parse(textwrap.dedent(source))
    except (OSError, TypeError, SyntaxError):
        return None
    if file is None:
        return None
    return ClassSource(file, tree, first, len(source) - len(source.lstrip()))


#: methods of ``self`` that register a member under the name they are given first
_REGISTERS = frozenset({"register_buffer", "register_parameter", "add_module",
                        "register_module"})


def _assigned(node: ast.AST, owner: str) -> list[tuple[str, ast.expr]]:
    """``(name, where)`` of what ``node`` assigns on ``owner``: ``self.x = ...`` (``x``),
    ``self.x.y = ...`` (``x.y``), ``self.register_buffer("x", ...)`` and
    ``setattr(self, "x", ...)`` (``x``)."""
    found = [(name, t) for t in _targets(node) if (name := _chain(t, owner))]
    if isinstance(node, ast.Call) and (name := _registered_name(node, owner)):
        found.append((name, node))
    return found


def _chain(node: ast.expr, owner: str) -> str | None:
    """``"x.y"`` for ``self.x.y``; ``None`` for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if parts and isinstance(node, ast.Name) and node.id == owner:
        return ".".join(reversed(parts))
    return None


def _registered_name(call: ast.Call, owner: str) -> str | None:
    """The literal name ``self.register_buffer("x", ...)`` (and its kin) or
    ``setattr(self, "x", ...)`` registers; ``None`` otherwise."""
    func, args = call.func, call.args
    if (isinstance(func, ast.Attribute) and func.attr in _REGISTERS
            and isinstance(func.value, ast.Name) and func.value.id == owner):
        named = args[0] if args else next(
            (k.value for k in call.keywords if k.arg == "name"), None)
    elif (isinstance(func, ast.Name) and func.id == "setattr" and len(args) >= 2
            and isinstance(args[0], ast.Name) and args[0].id == owner):
        named = args[1]
    else:
        return None
    if isinstance(named, ast.Constant) and isinstance(named.value, str):
        return named.value
    return None


def class_methods(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The class body's methods, ``__init__`` first."""
    if not tree.body or not isinstance(tree.body[0], ast.ClassDef):
        return []
    fns = [n for n in tree.body[0].body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return sorted(fns, key=lambda fn: fn.name != "__init__")


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return [t for target in node.targets for t in _flatten(target)]
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        return [node.target]
    return []


def _flatten(target: ast.expr) -> list[ast.expr]:
    """``self.a, self.b = ...`` assigns both."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [t for elt in target.elts for t in _flatten(elt)]
    return [target]


def find_class(cls: type) -> Location | None:
    """``(file, line, col)`` of the ``class`` statement of ``cls``."""
    try:
        file = inspect.getsourcefile(cls)
        _, line = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return None
    return (file, line, 1) if file is not None else None
