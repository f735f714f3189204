"""Where an attribute of a module is assigned in its class's source.

The runner (``lint/runner.py``) asks :func:`find_assignment` for the file, line and
column of ``self.<attribute> = ...`` (also ``self.x: T = ...`` and ``self.x += ...``)
in the class of the module a finding is about, then in its bases (nearest first,
``nn.Module`` and its own bases excluded). The class source comes from
``inspect.getsource``; it is parsed with ``ast`` once per class and cached.

NB: an attribute set with ``setattr``, ``add_module`` or ``register_buffer``, or on a
class whose source cannot be read (defined in a REPL, compiled), has no location:
the finding is reported without one.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import weakref
from typing import Any

from torch import nn

Location = tuple[str, int, int]  # file, 1-based line, 1-based column


def find_assignment(cls: type, attribute: str) -> Location | None:
    """``(file, line, col)`` of the first ``self.<attribute> = ...`` in ``cls`` or a base.

    ``__init__`` is searched before the other methods of a class.
    """
    for klass in cls.__mro__:
        if klass is nn.Module or not issubclass(klass, nn.Module):
            continue
        found: Location | None = _cached(_ASSIGNED, klass, _assignments).get(attribute)
        if found is not None:
            return found
    return None


_ASSIGNED: weakref.WeakKeyDictionary[type, dict[str, Location]] = weakref.WeakKeyDictionary()
_USED: weakref.WeakKeyDictionary[type, frozenset[str] | None] = weakref.WeakKeyDictionary()


def _cached(cache: weakref.WeakKeyDictionary[type, Any], cls: type, make: Any) -> Any:
    """``make(cls)``, parsed once per class (forgotten with the class)."""
    if cls not in cache:
        cache[cls] = make(cls)
    return cache[cls]


def _assignments(cls: type) -> dict[str, Location]:
    """Every attribute ``cls``'s own methods assign on ``self``, at its first assignment."""
    try:
        lines, first = inspect.getsourcelines(cls)
        file = inspect.getsourcefile(cls)
    except (OSError, TypeError):
        return {}
    if file is None:
        return {}
    source = "".join(lines)
    indent = len(source) - len(source.lstrip())
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return {}
    found: dict[str, Location] = {}
    for fn in _methods(tree):
        owner = fn.args.args[0].arg if fn.args.args else "self"
        for node in ast.walk(fn):
            for target in _targets(node):
                if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                        and target.value.id == owner and target.attr not in found):
                    found[target.attr] = (
                        file, first + target.lineno - 1, target.col_offset + 1 + indent
                    )
    return found


def _methods(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
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


def uses_attribute(cls: type, attribute: str) -> bool | None:
    """Whether a method of ``cls`` or a base other than ``__init__`` reads
    ``self.<attribute>`` (or names it in a string, as ``getattr(self, "x")`` does).

    ``None`` when no source of ``cls`` can be read (nothing can be said).
    """
    readable = False
    for klass in cls.__mro__:
        if klass is nn.Module or not issubclass(klass, nn.Module):
            continue
        names: frozenset[str] | None = _cached(_USED, klass, _uses)
        if names is None:
            continue
        readable = True
        if attribute in names:
            return True
    return False if readable else None


def _uses(cls: type) -> frozenset[str] | None:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        # a class made inside a function (``kernels``' ``Func``): inspect finds no
        # class statement by its name, but each method's own source
        return _methods_use(cls)
    names: set[str] = set()
    for fn in _methods(tree):
        if fn.name != "__init__":
            _add_names_read(fn, names)
    return frozenset(names)


def _methods_use(cls: type) -> frozenset[str] | None:
    """What :func:`_uses` reads, from the source of each method ``cls`` defines itself
    (``None`` when none has any)."""
    names: set[str] = set()
    read = False
    for name, value in vars(cls).items():
        if name == "__init__" or not inspect.isfunction(value):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(value)))
        except (OSError, TypeError, SyntaxError):
            continue
        read = True
        _add_names_read(tree, names)
    return frozenset(names) if read else None


def _add_names_read(tree: ast.AST, names: set[str]) -> None:
    """Add the attributes ``tree`` reads (``self.x``) and the strings it names
    (``getattr(self, "x")``) to ``names``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)


def find_class(cls: type) -> Location | None:
    """``(file, line, col)`` of the ``class`` statement of ``cls``."""
    try:
        file = inspect.getsourcefile(cls)
        _, line = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return None
    return (file, line, 1) if file is not None else None
