"""The module table a tracer records with every trace: the module tree with parameter
and buffer counts, made in one walk of the model, without a record per tensor.

:func:`module_table` is what ``Tracer.__enter__`` calls (and what ``inspect`` builds
on); it runs in the time budget of one forward pass, so it walks the model once and
sums plain counts when nothing is shared; a model traced again, unchanged, gets its
last table back after a check made of C-level loops (``core/model/table_reuse.py``).
The per-tensor records of ``hookscope.inspect`` are ``core/model/structure.py``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from hookscope.core.model import table_reuse
from hookscope.core.records.module_records import ModelSummary, ModuleInfo

Walk = list[tuple[str, nn.Module]]
Members = table_reuse.Members  # a Walk, or a reused table's Pairs

# What ``is_lazy`` tests, without its call per tensor in ``module_table``.
_Uninitialized: type = torch.nn.parameter.UninitializedTensorMixin  # type: ignore[attr-defined]


def tensor_path(mod_path: str, name: str) -> str:
    return f"{mod_path}.{name}" if mod_path else name


def first_paths(
    walk: Members, table: str
) -> tuple[list[tuple[str, str, nn.Module, torch.Tensor]], dict[str, str]]:
    """``(path, name, module, tensor)`` of every tensor in the modules' ``table``
    (``_parameters`` or ``_buffers``) at its first path, and ``tied``: each later path
    of the same tensor -> its first path."""
    found: list[tuple[str, str, nn.Module, torch.Tensor]] = []
    tied: dict[str, str] = {}
    first: dict[int, str] = {}
    for mod_path, module in walk:
        for name, t in getattr(module, table).items():
            if t is None:
                continue
            path = tensor_path(mod_path, name)
            if id(t) in first:
                tied.setdefault(path, first[id(t)])
                continue
            first[id(t)] = path
            found.append((path, name, module, t))
    return found, tied


def param_numel(t: torch.Tensor) -> int:
    """``t.numel()``; 0 for a lazy module's parameter before its first forward."""
    if is_lazy(t):  # no shape until materialised
        return 0
    return t.numel()


def _subtree_counts(model: nn.Module) -> dict[int, tuple[int, int]]:
    """``id(module) -> (total, trainable)`` numel of the unique parameters below it.

    One bottom-up pass: each module's parameter set is its own plus its children's,
    keyed by tensor identity, so a tied tensor counts once per subtree. (A module
    registered inside itself adds what its set holds so far: the walk ends.)
    """
    sizes: dict[int, tuple[int, bool]] = {}
    sets: dict[int, set[int]] = {}

    def visit(module: nn.Module) -> set[int]:
        found = sets.get(id(module))
        if found is None:
            found = sets[id(module)] = set()  # before the children, for a cycle
            for _, p in module._parameters.items():
                if p is not None:
                    sizes[id(p)] = (param_numel(p), p.requires_grad)
                    found.add(id(p))
            for child in module._modules.values():
                if child is not None:
                    found |= visit(child)
        return found

    visit(model)
    counts: dict[int, tuple[int, int]] = {}
    for key, ids in sets.items():
        total = trainable = 0
        for i in ids:
            n, requires_grad = sizes[i]
            total += n
            trainable += n if requires_grad else 0
        counts[key] = (total, trainable)
    return counts


@dataclass(slots=True)
class ModuleTable:
    """The module tree with parameter counts, without a record per tensor.

    What a tracer keeps with every trace (``Trace.model``/``Trace.modules``), made in
    one walk of the model (see :func:`module_table`).

    Attributes:
        summary: model-level counts and bytes, each tensor once.
        modules: a :class:`ModuleInfo` per module, at its first path, in tree order.
        walk: ``named_modules(remove_duplicate=False)``: every path of every module.
        members: each module once, at its first path (``named_modules()``).
        parameters: each parameter once (``parameters()``).
        lazy: a lazy module's parameter or buffer is not materialised yet (counted
            as 0).
        tied: each later path of a parameter registered twice -> its first path
            (empty when nothing is tied: found only then, at no cost otherwise).
        tied_numel: the element count of each such parameter, by its first path.
        depth: the depth of the deepest module (0: the root alone).
        scan: for a table reused from the model's last run (``core/model/table_reuse.py``),
            what this run's check read of every module on the way; ``None`` otherwise.
    """

    summary: ModelSummary
    modules: dict[str, ModuleInfo]
    walk: Members
    members: Members
    parameters: list[nn.Parameter]
    lazy: bool
    tied: dict[str, str] = field(default_factory=dict)
    depth: int = 0
    scan: table_reuse.ModelScan | None = None
    tied_numel: dict[str, int] = field(default_factory=dict)


def module_paths(model: nn.Module) -> dict[str, tuple[str, ...]]:
    """Each module's first path (``named_modules`` order) -> every path it is
    registered at, the first one first (a module shared by ``self.a`` and
    ``self.blocks[0]`` has both): what a selector matches a module by."""
    first: dict[int, str] = {}
    paths: dict[str, list[str]] = {}
    for path, module in _walk(model):
        key = first.setdefault(id(module), path)
        paths.setdefault(key, []).append(path)
    return {k: tuple(v) for k, v in paths.items()}


def _walk(model: nn.Module) -> Walk:
    """``list(model.named_modules(remove_duplicate=False))``, without a generator per
    module: every path of every module, parents before children, in registration order.

    A module registered inside itself (a child that keeps its parent as an attribute:
    ``self.owner = parent`` registers it) is listed at that path too, but not walked
    into again: torch's own walk never ends there (``RecursionError``).
    """
    out: Walk = []
    seen: set[int] = set()
    # (path, module, its ancestors as a linked list: (module, the parent's link))
    stack: list[tuple[str, nn.Module, Any]] = [("", model, None)]
    while stack:
        path, module, above = stack.pop()
        out.append((path, module))
        key = id(module)
        if key in seen and _encloses(above, module):
            continue  # asked only for a module met before: shared modules are rare
        seen.add(key)
        subs = module._modules
        if subs:
            prefix = f"{path}." if path else ""
            link = (module, above)
            children = [(prefix + name, c, link) for name, c in subs.items() if c is not None]
            stack.extend(reversed(children))
    return out


def _encloses(above: Any, module: nn.Module) -> bool:
    """Whether ``module`` is one of the ancestors in the linked list ``above``."""
    while above is not None:
        if above[0] is module:
            return True
        above = above[1]
    return False


@dataclass(slots=True)
class _OwnCounts:
    own: list[tuple[int, int, int]]  # per member: (params, trainable, buffer elements)
    parameters: list[nn.Parameter]  # each once
    totals: tuple[int, int, int, int, int]  # params, trainable, param bytes, buffers, bytes
    tied: bool
    lazy: bool


def _own_counts(members: Walk, *, exact: bool) -> _OwnCounts:
    """Elements of the parameters and buffers registered on each module.

    ``exact=False`` assumes no tensor is registered twice (the common case, without a
    set operation per tensor) and reports in ``tied`` whether that held; ``exact=True``
    counts a tensor registered twice once, at its first path.
    """
    seen: set[int] = set()
    seen_buffers: set[int] = set()
    lazy = False
    parameters: list[nn.Parameter] = []
    own: list[tuple[int, int, int]] = []
    all_buffers: list[torch.Tensor] = []
    p_total = p_trainable = p_bytes = b_total = b_bytes = 0
    for _, module in members:
        n_own = n_trainable = n_buffers = 0
        params = module._parameters
        if params:
            for p in params.values():
                if p is None:
                    continue
                if exact:
                    if id(p) in seen:
                        continue
                    seen.add(id(p))
                parameters.append(p)
                if isinstance(p, _Uninitialized):  # lazy: no shape until a forward
                    lazy = True
                    continue
                n = p.numel()
                n_own += n
                p_bytes += n * p.element_size()
                if p.requires_grad:
                    n_trainable += n
        buffers = module._buffers
        if buffers:
            for b in buffers.values():
                if b is None:
                    continue
                if exact:
                    if id(b) in seen_buffers:
                        continue
                    seen_buffers.add(id(b))
                all_buffers.append(b)
                if isinstance(b, _Uninitialized):  # lazy, as a parameter can be
                    lazy = True
                else:
                    n = b.numel()
                    n_buffers += n
                    b_bytes += n * b.element_size()
        own.append((n_own, n_trainable, n_buffers))
        p_total += n_own
        p_trainable += n_trainable
        b_total += n_buffers
    tied = not exact and (
        len({id(p) for p in parameters}) != len(parameters)
        or len({id(b) for b in all_buffers}) != len(all_buffers)
    )
    totals = (p_total, p_trainable, p_bytes, b_total, b_bytes)
    return _OwnCounts(own, parameters, totals, tied, lazy)


def module_table(model: nn.Module, *, extra_repr: bool = True) -> ModuleTable:
    """The module tree of ``model`` with own and subtree parameter counts.

    Tied tensors count once, at their first path (``named_parameters`` order); a
    module registered under several paths is one module, at its first path. With
    ``extra_repr=False`` (what a tracer records), ``ModuleInfo.extra_repr`` is ``None``.

    A tracer makes this on every run, in the time budget of one forward pass: one
    walk, plain sums when nothing is shared, positional record construction.
    """
    if not extra_repr:
        reused = table_reuse.reuse(model)
        if reused is not None:
            kept, infos, walked, parameters, depth, scan = reused
            return ModuleTable(kept, infos, walked, walked, parameters, False, {},
                               depth, scan)
    walk = _walk(model)
    canonical: dict[int, str] = {}
    aliases: dict[int, list[str]] = {}
    members: Walk = []
    for path, module in walk:
        key = id(module)
        if key in canonical:
            aliases.setdefault(key, []).append(path)
        else:
            canonical[key] = path
            members.append((path, module))
    counted = _own_counts(members, exact=False)
    tied = counted.tied
    reusable = not extra_repr and not tied and not aliases and not counted.lazy
    if tied:  # a tensor registered twice: count it at its first path only
        counted = _own_counts(members, exact=True)
    own, parameters, lazy = counted.own, counted.parameters, counted.lazy
    p_total, p_trainable, p_bytes, b_total, b_bytes = counted.totals
    counts: dict[int, tuple[int, int]]
    if tied or aliases:
        counts = _subtree_counts(model)
    else:  # a tree without shared tensors or modules: a subtree's count is a plain sum
        counts = {}
        bottom_up = zip(reversed(members), reversed(own), strict=True)
        for (_, module), (total, trainable, _) in bottom_up:
            for child in module._modules.values():
                if child is not None:
                    t, tr = counts[id(child)]
                    total += t
                    trainable += tr
            counts[id(module)] = (total, trainable)
    modules: dict[str, ModuleInfo] = {}
    deepest = 0
    for (path, module), (n_own, _, n_buffers) in zip(members, own, strict=True):
        total, trainable = counts[id(module)]
        depth = path.count(".") + 1 if path else 0
        if depth > deepest:
            deepest = depth
        children: tuple[str, ...] = ()
        subs = module._modules
        if subs:  # a child registered under two names is listed once
            unique = dict.fromkeys(subs.values()) if aliases else subs.values()
            children = tuple([canonical[id(c)] for c in unique if c is not None])
        modules[path] = ModuleInfo(
            path,
            type(module).__name__,
            depth,
            path.rpartition(".")[0] if path else None,
            children,
            tuple(aliases[id(module)]) if aliases and id(module) in aliases else (),
            n_own,
            total,
            trainable,
            n_buffers,
            _safe_extra_repr(module) if extra_repr else None,
        )
    summary = ModelSummary(
        type(model).__name__, p_total, p_trainable, b_total, p_bytes, b_bytes
    )
    tied_paths: dict[str, str] = {}
    tied_numel: dict[str, int] = {}
    if tied:
        found, tied_paths = first_paths(walk, "_parameters")
        firsts = set(tied_paths.values())
        tied_numel = {path: param_numel(t) for path, _, _, t in found if path in firsts}
    if reusable:
        table_reuse.remember(model, summary, modules, walk, deepest)
    return ModuleTable(summary, dict(modules) if reusable else modules, walk, members,
                       parameters, lazy, tied_paths, deepest, tied_numel=tied_numel)


def _safe_extra_repr(module: nn.Module) -> str:
    try:
        return module.extra_repr()
    except Exception:  # a user's extra_repr must never break inspection
        return ""
