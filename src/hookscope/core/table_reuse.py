"""Reuse of a model's last module table: a tracer makes one on every run, and a model
traced again is most often the same model.

:func:`remember` keeps what :func:`~hookscope.core.module_table.module_table` made, and
the model's fingerprint; :func:`reuse` gives it back when the fingerprint is what it
was. The check is made of C-level ``map`` loops (NB: the fixed cost of every run, most
of which was the Python walk and counts it replaces). Nothing of the model is held
strongly, and no tensor at all: a weak reference to a tensor would make
``torch.utils.swap_tensors`` (``load_state_dict`` and ``Module._apply`` with
``torch.__future__.set_swap_module_params_on_conversion(True)``, DTensor) refuse it.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from itertools import chain
from operator import attrgetter, is_not
from typing import Any

import torch
from torch import nn

from hookscope.core.model_records import ModelSummary, ModuleInfo

Walk = list[tuple[str, nn.Module]]
Reused = tuple[ModelSummary, dict[str, ModuleInfo], Walk, list[nn.Parameter]]
"""The model summary, the module records (a new dict), the walk and the parameters."""


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
    model: nn.Module, summary: ModelSummary, modules: dict[str, ModuleInfo], walk: Walk,
) -> None:
    """Keep a table made of ``model`` (without tied tensors, shared modules or lazy
    parameters: ``walk`` is every module once) for :func:`reuse`."""
    walked = [m for _, m in walk]
    fingerprint = _fingerprint(walked)
    if fingerprint is None:
        return
    made = _Made(summary, modules, [path for path, _ in walk],
                 list(map(weakref.ref, walked)), fingerprint[0])
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

    def again(self, model: nn.Module) -> Reused | None:
        """The table again, if ``model`` is the one it was made of and its fingerprint
        is what it was."""
        walked = [ref() for ref in self.walked]
        if walked[0] is not model:  # NB: a model's own __eq__/__hash__ may match others
            return None
        # NB: by id: ``None in`` would call the modules' own __eq__
        if _NONE in map(id, walked):
            return None  # one of them is gone: the model let go of it
        now = _fingerprint(walked)  # type: ignore[arg-type]
        if now is None or now[0] != self.fingerprint:
            return None
        walk = list(zip(self.paths, walked, strict=True))
        return self.summary, dict(self.modules), walk, now[1]  # type: ignore[return-value]


#: The last table made for each model: a tracer makes one on every run, and when the
#: model's fingerprint (:func:`_fingerprint`) is what it was, so is the table (its
#: records, ``ModuleInfo`` and ``ModelSummary``, are read-only and shared between
#: traces; the dict and the lists are new). Weak: a model that is gone takes its
#: entry with it. Tables with tied tensors, shared modules, lazy parameters or
#: ``extra_repr`` are made anew every time.
_MADE: weakref.WeakKeyDictionary[nn.Module, _Made] = weakref.WeakKeyDictionary()

_NONE = id(None)
_chain = chain.from_iterable
_submodules, _own_parameters = attrgetter("_modules"), attrgetter("_parameters")
_own_buffers = attrgetter("_buffers")
_dtype_and_grad, _dtype = attrgetter("dtype", "requires_grad"), attrgetter("dtype")
_not_none = partial(is_not, None)
_DICTS = {dict, OrderedDict}


def _fingerprint(
    walked: list[nn.Module],
) -> tuple[tuple[Any, ...], list[nn.Parameter]] | None:
    """Everything a table is made from, read from the modules of its walk, and the
    parameters (each once, in walk order): each module's class, its submodules (names,
    order, identities), the number of entries of its parameter and buffer tables, and
    each parameter's and buffer's element count, dtype and ``requires_grad``.

    Equal fingerprints mean an equal table: the walk is the same (by induction from the
    root: the same submodules under the same names, in the same order), and so are the
    counts. Submodules are compared by ``id``: the caller holds every module the last
    fingerprint named (alive: no other object has its ``id``), and ``==`` would call a
    module's own ``__eq__``. A tensor's ``id`` only tells it from ``None`` here (none
    is held: a replaced one may even have a freed one's ``id``): the table depends on
    the tensors' counts, dtypes and flags alone, which are compared. NB: C-level
    ``map`` loops only, the fixed cost of every run. ``None`` when a module's tables
    are not plain dicts.
    """
    subs = list(map(_submodules, walked))
    params = list(map(_own_parameters, walked))
    bufs = list(map(_own_buffers, walked))
    if not {*map(type, subs), *map(type, params), *map(type, bufs)} <= _DICTS:
        return None  # a TorchScript module's tables, or something else a user put there
    parameters = list(filter(_not_none, _chain(map(dict.values, params))))
    buffers = list(filter(_not_none, _chain(map(dict.values, bufs))))
    numel = torch.Tensor.numel
    return (
        list(map(type, walked)),
        list(map(len, subs)), list(_chain(subs)), list(map(id, _chain(map(dict.values, subs)))),
        # the ids place each None entry: which module's tensor a count belongs to
        list(map(len, params)), list(map(id, _chain(map(dict.values, params)))),
        list(map(len, bufs)), list(map(id, _chain(map(dict.values, bufs)))),
        list(map(numel, parameters)), list(map(_dtype_and_grad, parameters)),
        list(map(numel, buffers)), list(map(_dtype, buffers)),
    ), parameters
