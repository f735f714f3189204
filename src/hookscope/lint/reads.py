"""What the methods of a module's class read, for the rules about unused layers and
the ``training`` flag.

The rules ask what a class's methods (``__init__`` excepted) read:
:func:`uses_attribute` whether ``self.<attribute>`` may be read (HS502: a layer its
class never uses), soundly: any use of ``self`` that may reach an attribute without
naming it counts as reading them all; :func:`reads_training` whether a ``training``
flag is read (``.train()``/``.eval()`` change what the class does). The class source
is parsed with ``ast`` once per class and cached, like the assignments of
``lint/source.py``.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import weakref
from collections.abc import Callable
from typing import NamedTuple

from torch import nn

from hookscope.lint.source import class_methods, once_per_class


class _Reads(NamedTuple):
    """What the methods of one class (``__init__`` excepted) read."""

    names: frozenset[str]  # attributes of any object, and every string named
    of_self: frozenset[str]  # attributes of ``self`` (or an alias), and every string named
    dynamic: bool  # ``self`` reached otherwise: any of its attributes may be read


_USED: weakref.WeakKeyDictionary[type, _Reads | None] = weakref.WeakKeyDictionary()


def uses_attribute(cls: type, attribute: str) -> bool | None:
    """Whether a method of ``cls`` or a base other than ``__init__`` reads
    ``self.<attribute>`` (also through an alias, ``m = self``, or ``super()``), names it
    in a string (``getattr(self, "x")``), or reaches the attributes of ``self`` without
    naming them (``getattr(self, name)``, ``self._modules``, ``self.children()``,
    ``helper(self)``): then any attribute may be read. ``x.norm()`` or ``F.linear`` is
    not a read of ``self.norm`` or ``self.linear``.

    ``None`` when no source of ``cls`` can be read (nothing can be said).
    """
    return _any_read(cls, lambda reads: reads.dynamic or attribute in reads.of_self)


def reads_training(cls: type) -> bool | None:
    """Whether a method of ``cls`` or a base other than ``__init__`` reads a
    ``training`` flag, of ``self`` or of any module it is given (``module.training``),
    or names it in a string; ``None`` when no source of ``cls`` can be read."""
    return _any_read(cls, lambda reads: "training" in reads.names)


def _any_read(cls: type, test: Callable[[_Reads], bool]) -> bool | None:
    readable = False
    for klass in cls.__mro__:
        if klass is nn.Module or not issubclass(klass, nn.Module):
            continue
        reads: _Reads | None = once_per_class(_USED, klass, _uses)
        if reads is None:
            continue
        readable = True
        if test(reads):
            return True
    return False if readable else None


def _uses(cls: type) -> _Reads | None:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        # a class made inside a function (``kernels``' ``Func``): inspect finds no
        # class statement by its name, but each method's own source
        return _methods_use(cls)
    return _reads([fn for fn in class_methods(tree) if fn.name != "__init__"])


def _methods_use(cls: type) -> _Reads | None:
    """What :func:`_uses` reads, from the source of each method ``cls`` defines itself
    (``None`` when none has any)."""
    fns: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    for name, value in vars(cls).items():
        if name == "__init__" or not inspect.isfunction(value):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(value)))
        except (OSError, TypeError, SyntaxError):
            continue
        fns += [fn for fn in tree.body if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return _reads(fns) if fns else None


#: attributes of a module that reach its other attributes without naming them
_REACH_ALL = frozenset({
    "__dict__", "__getattr__", "__getattribute__", "_modules", "_parameters", "_buffers",
    "children", "named_children", "modules", "named_modules", "parameters",
    "named_parameters", "buffers", "named_buffers", "get_submodule", "get_parameter",
    "get_buffer", "state_dict",
})
#: builtins that reach an attribute of ``self`` by a name given as a string
_BY_NAME = frozenset({"getattr", "hasattr", "setattr", "delattr"})


def _reads(fns: list[ast.FunctionDef | ast.AsyncFunctionDef]) -> _Reads:
    names: set[str] = set()
    of_self: set[str] = set()
    dynamic = False
    for fn in fns:
        parents: dict[int, ast.AST] = {
            id(child): node for node in ast.walk(fn) for child in ast.iter_child_nodes(node)
        }
        selves = _selves(fn)
        if selves is None:  # ``def forward(*args)``: self is args[0]
            dynamic, selves = True, set()
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                names.add(node.attr)
                if _is_super(node.value):
                    of_self.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value)
                of_self.add(node.value)
            elif isinstance(node, ast.Name) and node.id in selves and isinstance(
                    node.ctx, ast.Load):
                parent = parents.get(id(node))
                if isinstance(parent, ast.Attribute):
                    if parent.attr in _REACH_ALL:
                        dynamic = True
                    elif isinstance(parent.ctx, ast.Load):
                        of_self.add(parent.attr)
                elif not _names_attribute(parent, node):
                    dynamic = True
    return _Reads(frozenset(names), frozenset(of_self), dynamic)


def _selves(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str] | None:
    """The name of ``self`` in ``fn`` (its first parameter) and of its aliases
    (``m = self``): none in a static or class method, ``None`` when a method has no
    positional parameter to name it (``def forward(*args)``)."""
    decorators = {d.id for d in fn.decorator_list if isinstance(d, ast.Name)}
    if decorators & {"staticmethod", "classmethod"}:
        return set()
    positional = [*fn.args.posonlyargs, *fn.args.args]
    if not positional:
        return None
    selves = {positional[0].arg}
    for node in ast.walk(fn):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                and node.value.id in selves):
            selves.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return selves


def _names_attribute(parent: ast.AST | None, node: ast.Name) -> bool:
    """Whether this bare use of ``self`` reads no attribute it does not name:
    ``m = self``, ``getattr(self, "x")`` (the string is counted), ``super(C, self)``."""
    if isinstance(parent, ast.Assign):
        return parent.value is node
    if not isinstance(parent, ast.Call) or not isinstance(parent.func, ast.Name):
        return False
    if parent.func.id == "super":
        return True
    return (parent.func.id in _BY_NAME and len(parent.args) >= 2 and parent.args[0] is node
            and isinstance(parent.args[1], ast.Constant)
            and isinstance(parent.args[1].value, str))


def _is_super(node: ast.expr) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "super")
