"""Where a class freezes a parameter or writes its values, for the rules about them.

HS204 (a frozen parameter) is fixed where ``requires_grad_(False)`` is called, and
HS301/HS302 (non-finite or constant values) where the values are written
(``nn.init.constant_(self.fc.weight, 0.5)``, ``self.w.data.fill_(1.)``), not where
``self.fc`` is assigned. :func:`find_write` finds such a statement in the methods of a
class (``forward`` excepted), parsed with ``ast`` once per class and cached;
``lint/locate.py`` asks it for the class of each module from the finding's up to the
root.

NB: only writes through ``self`` are seen: ``for p in self.fc.parameters(): ...`` is,
``module.weight.data.normal_()`` in a helper given the module (transformers'
``_init_weights``), or a freeze in a training script, is not.
"""

from __future__ import annotations

import ast
import weakref

from torch import nn

from hookscope.lint.source import Location, class_methods, once_per_class, parse_class

# (line, col, kind, self.<chain> written); kind is "freeze" or "values"
_Write = tuple[int, int, str, str]
_WRITES: weakref.WeakKeyDictionary[type, tuple[str, list[_Write]]] = (
    weakref.WeakKeyDictionary())


def find_write(cls: type, chain: str, *, freeze: bool) -> Location | None:
    """``(file, line, col)`` of the last statement of ``cls`` (or a base, nearest
    first) that freezes (``freeze=True``) or writes the values of ``self.<chain>``, of
    a part of it or of a module around it (``chain`` ``""`` is ``self``)."""
    kind = "freeze" if freeze else "values"
    for klass in cls.__mro__:
        if klass is nn.Module or not issubclass(klass, nn.Module):
            continue
        file, writes = once_per_class(_WRITES, klass, _writes)
        found = [(line, col) for line, col, k, reached in writes
                 if k == kind and _related(reached, chain)]
        if found:
            line, col = max(found)
            return file, line, col
    return None


def _related(reached: str, chain: str) -> bool:
    """Whether writing ``self.<reached>`` writes ``self.<chain>`` or a part of it."""
    return (not reached or not chain or reached == chain
            or chain.startswith(reached + ".") or reached.startswith(chain + "."))


def _writes(cls: type) -> tuple[str, list[_Write]]:
    parsed = parse_class(cls)
    if parsed is None:
        return "", []
    found: list[_Write] = []
    for fn in class_methods(parsed.tree):
        if fn.name == "forward" or not fn.args.args:
            continue
        owner = fn.args.args[0].arg
        for node in ast.walk(fn):
            if isinstance(node, (ast.stmt, ast.expr)):
                _, line, col = parsed.location(node.lineno, node.col_offset)
                found += [(line, col, kind, reached) for kind, reached in _written(node, owner)]
    return parsed.file, found


def _written(node: ast.AST, owner: str) -> list[tuple[str, str]]:
    """``(kind, chain)`` for each write of ``self.<chain>`` that ``node`` makes."""
    if isinstance(node, ast.For):
        reached = [c for n in ast.walk(node.iter) if (c := _chain_of(n, owner)) is not None]
        kinds = {kind for inner in node.body for n in ast.walk(inner)
                 for kind in _kinds(n)}
        return [(kind, chain) for kind in sorted(kinds) for chain in reached[:1]]
    found: list[tuple[str, str]] = []
    for kind in _kinds(node):
        for n in _operands(node):
            chain = _chain_of(n, owner)
            if chain is not None:
                found.append((kind, chain))
    return found


def _kinds(node: ast.AST) -> list[str]:
    """``["freeze"]`` for ``x.requires_grad_(False)`` or ``x.requires_grad = False``,
    ``["values"]`` for an in-place call (``x.fill_(1.)``, ``nn.init.zeros_(x)``) or an
    assignment to ``x.data`` or ``x[...]``; ``[]`` for anything else."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        name = node.func.attr
        if name == "requires_grad_":
            off = [*node.args, *(k.value for k in node.keywords)][:1]
            return ["freeze"] if off and _is_false(off[0]) else []
        if name.endswith("_") and not name.startswith("_"):
            return ["values"]
    if isinstance(node, ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Attribute) and target.attr == "requires_grad":
                return ["freeze"] if _is_false(node.value) else []
            if ((isinstance(target, ast.Attribute) and target.attr == "data")
                    or isinstance(target, ast.Subscript)):  # ``self.w[0, 0] = ...``
                return ["values"]
    return []


def _operands(node: ast.AST) -> list[ast.expr]:
    """What ``node`` writes: the receiver and first argument of a call, the target of
    an assignment."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return [node.func.value, *node.args[:1]]
    if isinstance(node, ast.Assign):
        return [t.value for t in node.targets if isinstance(t, (ast.Attribute, ast.Subscript))]
    return []


def _chain_of(node: ast.AST, owner: str) -> str | None:
    """``"fc.weight"`` for ``self.fc.weight`` (and ``self.fc.weight.data``), ``"fc"`` for
    ``self.fc.parameters()``, ``"layers"`` for ``self.layers[0].weight`` (the part that
    attributes name), ``""`` for ``self``; ``None`` when ``node`` is not reached from
    ``self``."""
    parts: list[str] = []
    while not isinstance(node, ast.Name):
        if isinstance(node, ast.Attribute):
            if node.attr != "data":
                parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript):
            parts, node = [], node.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in _METHODS):
            parts, node = [], node.func.value
        else:
            return None
    return ".".join(reversed(parts)) if node.id == owner else None


#: methods of a module that reach its parameters (``self.fc.parameters()``)
_METHODS = frozenset({"parameters", "named_parameters", "modules", "children", "buffers"})


def _is_false(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is False
