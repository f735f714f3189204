"""Which rows a tree table shows: repeated blocks folded, a depth chosen to fit.

A run of sibling calls of one module class whose blocks after the first are identical
(same class, child names, parameter counts and input and output shapes all the way
down: GPT-2's ``h.1`` ... ``h.11``, a ResNet stage's bottlenecks after the first) is
shown as the first block, expanded, and one :class:`Folded` row for the rest, with
their parameters, FLOPs and times summed, when the rest are at least two blocks (a
single repeat is shown whole: folding it would hide its statistics for a few
lines). ``fold=False`` shows every row.

:func:`structure_rows` folds :func:`hookscope.inspect`'s tree the same way.

:func:`auto_depth` picks the deepest depth whose table, folded, has at most
``max_rows`` rows (what the CLI shows without ``--depth``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from hookscope.core.records.module_records import ModuleInfo
from hookscope.core.records.trace import Call, Trace

if TYPE_CHECKING:
    from hookscope.core.model.structure import ModelInfo

DEFAULT_MAX_ROWS = 60
"""Without ``--depth``, the CLI shows the deepest levels that fit in this many rows."""


@dataclass(frozen=True)
class Folded:
    """One row for a run of identical blocks.

    Attributes:
        calls: the folded blocks' calls (each the top of its block), in order.
        hidden: how many rows folding hides (the blocks and what is inside them).
    """

    calls: tuple[Call, ...]
    hidden: int

    @property
    def depth(self) -> int:
        return self.calls[0].depth


Row = Call | Folded

MIN_REPEATS = 2
"""A run folds when at least this many blocks repeat the first (``h.1 ... h.2 x2``)."""

T = TypeVar("T")
F = TypeVar("F")


def signatures(trace: Trace) -> list[int]:
    """A hash per call of what makes two blocks the same (see the module docstring)."""
    calls = trace.calls
    sigs = [0] * len(calls)
    for call in reversed(calls):  # a child starts after its parent
        info = trace.modules.get(call.path)
        params = info.total_params if info is not None else None
        kids = tuple((calls[i].path.rpartition(".")[2], sigs[i]) for i in call.children)
        sigs[call.index] = hash((
            call.module_class, params,
            tuple((m.shape, m.dtype) for m in call.facts.get("inputs", ())),
            tuple((m.shape, m.dtype) for m in call.facts.get("outputs", ())),
            kids,
        ))
    return sigs


def tree_rows(trace: Trace, *, depth: int | None = None, fold: bool = True) -> list[Row]:
    """The rows of a tree table, in call order, down to ``depth``."""
    calls = trace.calls
    sigs = signatures(trace) if fold else []
    sizes = _subtree_rows(trace, depth)
    out: list[Row] = []
    stack: list[Row] = list(reversed(_group(trace.roots, sigs, sizes, fold)))
    while stack:
        row = stack.pop()
        out.append(row)
        if isinstance(row, Folded) or (depth is not None and row.depth >= depth):
            continue
        kids = [calls[i] for i in row.children]
        stack.extend(reversed(_group(kids, sigs, sizes, fold)))
    return out


def _group(
    kids: Sequence[Call], sigs: list[int], sizes: list[int], fold: bool
) -> list[Row]:
    if not fold or len(kids) < 2:
        return list(kids)

    def folded(first: Call, rest: Sequence[Call]) -> Folded | None:
        hidden = sum(sizes[c.index] for c in rest)
        # from two repeats on: one block folded hides its rows, statistics
        # included, to save a few lines. Blocks, not leaves, and rows are saved: their
        # rows below, or (at the depth limit, where a block is one row) the run itself
        if rest[0].module_class != first.module_class:
            return None
        if hidden > len(rest) or bool(rest[0].children):
            return Folded(tuple(rest), hidden)
        return None

    return _fold_runs(kids, lambda c: (c.module_class, sigs[c.index]), folded)


def _fold_runs(items: Sequence[T], key: Callable[[T], Hashable],
               fold: Callable[[T, Sequence[T]], F | None]) -> list[T | F]:
    """``items`` with each run of alike items after an item replaced by one row.

    A run is the items after ``items[i]`` whose ``key`` is that of ``items[i + 1]``:
    the item before a run is always shown whole (a stack's first block often differs
    from the rest: its input's shape, a relative-position table). A run of at least
    :data:`MIN_REPEATS` items becomes ``fold(items[i], run)`` unless that is ``None``,
    in which case the next item is tried as the first of a run.
    """
    out: list[T | F] = []
    i = 0
    while i < len(items):
        out.append(items[i])
        j = i + 1
        alike = key(items[j]) if j < len(items) else None
        while j < len(items) and key(items[j]) == alike:
            j += 1
        row = fold(items[i], items[i + 1:j]) if j - i - 1 >= MIN_REPEATS else None
        if row is None:
            i += 1
        else:
            out.append(row)
            i = j
    return out


def _subtree_rows(trace: Trace, depth: int | None) -> list[int]:
    """Per call: the rows its subtree takes, unfolded, down to ``depth``."""
    calls = trace.calls
    sizes = [1] * len(calls)
    for call in reversed(calls):
        if depth is None or call.depth < depth:
            sizes[call.index] += sum(sizes[i] for i in call.children)
    return sizes


def auto_depth(trace: Trace, *, fold: bool = True, max_rows: int = DEFAULT_MAX_ROWS) -> int | None:
    """The deepest depth whose table has at most ``max_rows`` rows (``None``: all fit)."""
    deepest = max((c.depth for c in trace.calls), default=0)
    if len(tree_rows(trace, fold=fold)) <= max_rows:
        return None
    best = 0
    for d in range(1, deepest):  # not monotonic: a fold may hide more rows deeper
        if len(tree_rows(trace, depth=d, fold=fold)) <= max_rows:
            best = d
    return best


def hidden_deeper(trace: Trace, depth: int | None, *, fold: bool = True) -> int:
    """How many more rows the table would have without the depth limit."""
    if depth is None:
        return 0
    return len(tree_rows(trace, fold=fold)) - len(tree_rows(trace, depth=depth, fold=fold))


def folded_rows(rows: Sequence[Row]) -> tuple[int, int]:
    """``(runs, hidden rows)`` of the folded rows among ``rows``."""
    folds = [r for r in rows if isinstance(r, Folded)]
    return len(folds), sum(f.hidden for f in folds) - len(folds)


@dataclass(frozen=True)
class FoldedModules:
    """One row of :func:`hookscope.inspect`'s tree for a run of identical blocks.

    Attributes:
        modules: the folded blocks (each the top of its block), in order.
        inside: every module of the folded blocks, their tops included.
    """

    modules: tuple[ModuleInfo, ...]
    inside: tuple[ModuleInfo, ...]


StructureRow = ModuleInfo | FoldedModules


def structure_rows(info: ModelInfo, *, fold: bool = True) -> list[StructureRow]:
    """The rows of :func:`hookscope.inspect`'s tree: every module, in registration
    order, runs of identical blocks folded as in a trace (the same class, extra_repr,
    child names and parameter and buffer counts all the way down)."""
    mods = info.modules
    if not fold or not mods:
        return list(mods.values())
    sigs: dict[str, int] = {}
    for m in reversed(mods.values()):  # a child is registered after its parent
        kids = tuple((p.rpartition(".")[2], sigs.get(p, 0)) for p in m.children)
        sigs[m.path] = hash((m.class_name, m.extra_repr, m.total_params, m.trainable_params,
                             m.own_buffers, len(m.aliases), kids))
    out: list[StructureRow] = []
    stack: list[StructureRow] = [m for m in reversed(mods.values()) if m.parent is None]
    while stack:
        row = stack.pop()
        out.append(row)
        if isinstance(row, ModuleInfo):
            below = [mods[p] for p in row.children if p in mods]
            stack.extend(reversed(_fold_modules(info, below, sigs)))
    return out


def _fold_modules(info: ModelInfo, kids: list[ModuleInfo], sigs: dict[str, int]
                  ) -> list[StructureRow]:
    def folded(first: ModuleInfo, rest: Sequence[ModuleInfo]) -> FoldedModules | None:
        if not rest[0].children:
            return None
        inside = tuple(m for r in rest for m in (r, *info.descendants(r.path)))
        return FoldedModules(tuple(rest), inside)

    return _fold_runs(kids, lambda m: sigs[m.path], folded)
