"""Reuse of a model's last module table: a tracer makes one on every run, and a model
traced again is most often the same model.

:func:`remember` keeps what :func:`~hookscope.core.model.module_table.module_table` made, and
the model's fingerprint; :func:`reuse` gives it back when the fingerprint is what it
was. The check is made of C-level ``map`` loops: it is the fixed cost of every run, cheaper
than the Python walk and counts it replaces. Nothing of the model is held
strongly, and no tensor at all: a weak reference to a tensor would make
``torch.utils.swap_tensors`` (``load_state_dict`` and ``Module._apply`` with
``torch.__future__.set_swap_module_params_on_conversion(True)``, DTensor) refuse it.

The same passes read what the rest of the run's start needs of every module
(:class:`ModelScan`: ``training`` flags, ``requires_grad``, whether any module has
forward hooks or a call path of its own), so the state snapshot
(``core/model/state.py``) and the plan of the stand-in (``core/engine/fast_path.py``) make no
pass of their own over the model: a pass over a model's modules right after a forward,
with the caches cold, costs about as much as the work in it.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from functools import partial
from itertools import chain, repeat
from operator import attrgetter, contains, is_not, itemgetter
from typing import Any, overload

import torch
from torch import nn

from hookscope.core.records.module_records import ModelSummary, ModuleInfo

Members = Sequence[tuple[str, nn.Module]]
"""``(path, module)`` pairs, each module once: a list, or a reused table's :class:`Pairs`."""


class Pairs(Sequence[tuple[str, nn.Module]]):
    """The ``(path, module)`` pairs of a reused table, made as they are read (a
    list of them would be one more object per module and per run for the garbage
    collector's young generation, whose collections in the middle of a run cost a
    fraction of a millisecond each: ``docs/architecture.md``)."""

    __slots__ = ("_modules", "_paths")

    def __init__(self, paths: list[str], modules: list[nn.Module]) -> None:
        self._paths, self._modules = paths, modules

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[tuple[str, nn.Module]]:
        return zip(self._paths, self._modules, strict=True)

    @overload
    def __getitem__(self, index: int) -> tuple[str, nn.Module]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[str, nn.Module]]: ...

    def __getitem__(
        self, index: int | slice
    ) -> tuple[str, nn.Module] | list[tuple[str, nn.Module]]:
        if isinstance(index, slice):
            return list(zip(self._paths[index], self._modules[index], strict=True))
        return self._paths[index], self._modules[index]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # as a list's

    def __repr__(self) -> str:
        return repr(list(self))


@dataclass(slots=True)
class ModelScan:
    """What the start of a run reads of each module of a model traced again, read once
    with the fingerprint (the modules and parameters in the order of the table's
    ``members`` and ``parameters``).

    Attributes:
        modules: every module once, in walk order.
        dicts: their ``__dict__``s.
        types: their classes.
        training: their ``training`` flags.
        requires_grad: each parameter's ``requires_grad``.
        plain: no module has forward (pre-)hooks, is compiled in place
            (``module.compile()``) or has a ``_call_impl`` of its own: what the plan of
            the stand-in depends on besides ``own_forward`` and the classes.
        own_forward: which modules have a ``forward`` patched on the instance.
        tables: every module's table of submodules, then every one's of parameters,
            then of buffers.
        sizes: how many entries each holds.
        plans: kept for this model as long as its table is reused: what
            ``core/engine/fast_path.py`` planned for it, by the plan's options.
    """

    modules: list[nn.Module]
    dicts: list[dict[str, Any]]
    types: list[type]
    training: list[bool]
    requires_grad: list[bool]
    plain: bool
    own_forward: list[bool]
    tables: tuple[dict[str, Any], ...] = ()
    sizes: list[int] = field(default_factory=list)
    plans: dict[Any, Any] = field(default_factory=dict)


Reused = tuple[ModelSummary, dict[str, ModuleInfo], Members, list[nn.Parameter], int, ModelScan]
"""The model summary, the module records (a new dict), the walk, the parameters, the
depth of the deepest module and this run's :class:`ModelScan`."""


def reuse(model: nn.Module) -> Reused | None:
    """The last table :func:`remember` kept for ``model``, if nothing it was made of
    changed since (else the entry is dropped)."""
    try:
        made = _MADE.get(model)
    except TypeError:  # a model that is not hashable (``__hash__ = None``)
        return None
    if made is None:
        return None
    try:
        found = made.again(model)
    except (RuntimeError, TypeError, ValueError):  # an uninitialized (lazy) tensor since
        found = None
    if found is None:
        _MADE.pop(model, None)
    return found


def remember(
    model: nn.Module, summary: ModelSummary, modules: dict[str, ModuleInfo], walk: Members,
    depth: int,
) -> None:
    """Keep a table made of ``model`` (without tied tensors, shared modules or lazy
    parameters: ``walk`` is every module once; ``depth``: of its deepest module) for
    :func:`reuse`."""
    walked = [m for _, m in walk]
    found = _fingerprint(walked)
    if found is None:
        return
    made = _Made(summary, modules, [path for path, _ in walk],
                 list(map(weakref.ref, walked)), found[0], depth, {})
    with suppress(TypeError):  # not hashable, or not weakly referenceable: not kept
        _MADE[model] = made


@dataclass(slots=True)
class _Made:
    """The last table made for a model: its records, and what it was made from (its
    modules held weakly: one the model let go of is not kept alive here)."""

    summary: ModelSummary
    modules: dict[str, ModuleInfo]
    paths: list[str]
    walked: list[weakref.ref[nn.Module]]  # the root first
    fingerprint: tuple[Any, ...]
    depth: int
    plans: dict[Any, Any]  # ModelScan.plans, kept from run to run

    def again(self, model: nn.Module) -> Reused | None:
        """The table again, if ``model`` is the one it was made of and its fingerprint
        is what it was."""
        walked: list[nn.Module] = list(map(_deref, self.walked))  # type: ignore[arg-type]
        if walked[0] is not model:  # a model's own __eq__/__hash__ may match others
            return None
        # by id: ``None in`` would call the modules' own __eq__
        if _NONE in map(id, walked):
            return None  # one of them is gone: the model let go of it
        now = _fingerprint(walked)
        if now is None or now[0] != self.fingerprint:
            return None
        _, parameters, scan = now
        scan.plans = self.plans
        walk = Pairs(self.paths, walked)
        return self.summary, dict(self.modules), walk, parameters, self.depth, scan


#: The last table made for each model: a tracer makes one on every run, and when the
#: model's fingerprint (:func:`_fingerprint`) is what it was, so is the table (its
#: records, ``ModuleInfo`` and ``ModelSummary``, are read-only and shared between
#: traces; the dict and the lists are new). Weak: a model that is gone takes its
#: entry with it. Tables with tied tensors, shared modules, lazy parameters or
#: ``extra_repr`` are made anew every time.
_MADE: weakref.WeakKeyDictionary[nn.Module, _Made] = weakref.WeakKeyDictionary()

_NONE = id(None)
_deref = weakref.ref.__call__
_chain = chain.from_iterable
# what a module's __dict__ holds for the table, the state snapshot and the plan
_TABLES = tuple(map(itemgetter, (
    "_modules", "_parameters", "_buffers", "training", "_forward_hooks", "_forward_pre_hooks"
)))
_dtype, _requires_grad = attrgetter("dtype"), attrgetter("requires_grad")
_not_none = partial(is_not, None)


def _fingerprint(
    walked: list[nn.Module],
) -> tuple[tuple[Any, ...], list[nn.Parameter], ModelScan] | None:
    """Everything a table is made from, read from the modules of its walk; the
    parameters (each once, in walk order); and the rest of what a run's start reads of
    the modules (:class:`ModelScan`). The fingerprint: each module's class, its
    submodules (names, order, identities), the number of entries of its parameter and
    buffer tables, and each parameter's and buffer's element count, dtype and
    ``requires_grad``.

    Equal fingerprints mean an equal table: the walk is the same (by induction from the
    root: the same submodules under the same names, in the same order), and so are the
    counts. Submodules are compared by ``id``: the caller holds every module the last
    fingerprint named (alive: no other object has its ``id``), and ``==`` would call a
    module's own ``__eq__``. Of a tensor entry only whether it is ``None`` counts (none
    is held, nor its ``id``: a replaced one may even have a freed one's): the table
    depends on the tensors' counts, dtypes and flags alone, which are compared.
    C-level ``map`` loops only, the fixed cost of every run (each module's ``__dict__``
    read once; no list of ``id``s where no entry is ``None``: 3 % of a summary's
    instructions beyond the forward on MobileNetV3). ``None``
    when a module's tables are not dicts, or not in its ``__dict__``.
    """
    dicts = list(map(vars, walked))
    try:
        # one pass per entry, not a tuple of them per module (once the tuple free
        # list is empty, each new tuple counts towards a garbage collection)
        subs, params, bufs, training, hooks, pre_hooks = (
            list(map(get, dicts)) for get in _TABLES)
        # each table's entries read once, then kept (``dict.values`` raises for a
        # table that is not a dict: a TorchScript module's, or something a user put there)
        children = list(_chain(map(dict.values, subs)))
        param_entries = list(_chain(map(dict.values, params)))
        buffer_entries = list(_chain(map(dict.values, bufs)))
    except (KeyError, TypeError):  # a module whose __init__ did not run, or odd tables
        return None
    parameters = list(filter(_not_none, param_entries))
    buffers = list(filter(_not_none, buffer_entries))
    numel = torch.Tensor.numel
    types = list(map(type, walked))
    dtypes, grads = list(map(_dtype, parameters)), list(map(_requires_grad, parameters))
    sizes = list(map(len, subs)), list(map(len, params)), list(map(len, bufs))
    fingerprint = (
        types, sizes[0], list(_chain(subs)), list(map(id, children)),
        # where the None entries are (which module's tensor a count belongs to), when
        # there are any (no list, no comparison, when there are none)
        sizes[1], _none_places(param_entries, parameters),
        sizes[2], _none_places(buffer_entries, buffers),
        list(map(numel, parameters)), dtypes, grads,
        list(map(numel, buffers)), list(map(_dtype, buffers)),
    )
    plain = not (
        any(hooks) or any(pre_hooks)
        or any(map(contains, dicts, repeat("_call_impl")))
        or any(map(is_not, map(dict.get, dicts, repeat("_compiled_call_impl")), repeat(None)))
    )
    scan = ModelScan(
        walked, dicts, types, training, grads, plain,
        list(map(contains, dicts, repeat("forward"))), (*subs, *params, *bufs),
        sizes[0] + sizes[1] + sizes[2],
    )
    return fingerprint, parameters, scan


def _none_places(entries: list[Any], tensors: list[Any]) -> list[bool] | None:
    """Which of a table's ``entries`` are tensors, ``None`` when every one is."""
    return None if len(tensors) == len(entries) else list(map(_not_none, entries))
