"""Reuse of a model's last module table: a tracer makes one on every run, and a model
traced again is most often the same model.

:func:`remember` keeps what :func:`~hookscope.core.module_table.module_table` made, and
the model's fingerprint; :func:`reuse` gives it back when the fingerprint is what it
was. The check is made of C-level ``map`` loops (NB: the fixed cost of every run, most
of which was the Python walk and counts it replaces); nothing of the model is held
strongly.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import Any

import torch
from torch import nn

from hookscope.core.model_records import ModelSummary, ModuleInfo

Walk = list[tuple[str, nn.Module]]
Reused = tuple[ModelSummary, dict[str, ModuleInfo], Walk, list[nn.Parameter]]
"""The model summary, the module records (a new dict), the walk and the parameters."""


def reuse(model: nn.Module) -> Reused | None:
    """The last table :func:`remember` kept for ``model``, if nothing it was made of
    changed since."""
    made = _MADE.get(model)
    return None if made is None else made.again()


def remember(
    model: nn.Module, summary: ModelSummary, modules: dict[str, ModuleInfo], walk: Walk,
    parameters: list[nn.Parameter], buffers: list[torch.Tensor],
) -> None:
    """Keep a table made of ``model`` (without tied tensors, shared modules or lazy
    parameters: ``walk`` is every module once) for :func:`reuse`."""
    walked = [m for _, m in walk]
    fingerprint = _fingerprint(walked, parameters, buffers)
    if fingerprint is not None:
        _MADE[model] = _Made(
            summary, modules, [path for path, _ in walk],
            list(map(weakref.ref, chain(walked, parameters, buffers))), len(parameters),
            fingerprint,
        )


@dataclass(slots=True)
class _Made:
    """The last table made for a model: its records, and what it was made from, held
    weakly (a module or tensor the model let go of is not kept alive here)."""

    summary: ModelSummary
    modules: dict[str, ModuleInfo]
    paths: list[str]
    #: the modules of the walk, then the parameters, then the buffers
    refs: list[weakref.ref[Any]]
    n_parameters: int
    fingerprint: tuple[Any, ...]

    def again(self) -> Reused | None:
        """The table again, if the model's fingerprint is what it was."""
        found = [ref() for ref in self.refs]
        # NB: by id: ``None in`` a list of tensors would compare their values with None
        if _NONE in map(id, found):
            return None  # one of them is gone: the model let go of it
        n_walked = len(self.paths)
        n_tensors = n_walked + self.n_parameters
        walked: list[nn.Module] = found[:n_walked]  # type: ignore[assignment]
        parameters: list[nn.Parameter] = found[n_walked:n_tensors]  # type: ignore[assignment]
        buffers: list[torch.Tensor] = found[n_tensors:]  # type: ignore[assignment]
        if self.fingerprint != _fingerprint(walked, parameters, buffers):
            return None
        walk = list(zip(self.paths, walked, strict=True))
        return self.summary, dict(self.modules), walk, parameters


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
_DICTS = {dict, OrderedDict}


def _fingerprint(
    walked: list[nn.Module], parameters: list[nn.Parameter], buffers: list[torch.Tensor]
) -> tuple[Any, ...] | None:
    """Everything a table is made from, read from the modules of its walk: each
    module's class, its submodules, parameters and buffers (names, order, identities),
    and each parameter's and buffer's element count, dtype and ``requires_grad``.

    Equal fingerprints mean an equal table: the walk is the same (by induction from the
    root: the same submodules under the same names, in the same order), so are the
    tensors, and so are their counts. Identities are compared by ``id``: the caller
    holds every object the last fingerprint named (alive: no other object has its
    ``id``), and ``==`` on two tensors would compare their values. NB: C-level ``map``
    loops only, the fixed cost of every run. ``None`` when a module's tables are not
    plain dicts.
    """
    subs = list(map(_submodules, walked))
    params = list(map(_own_parameters, walked))
    bufs = list(map(_own_buffers, walked))
    if not {*map(type, subs), *map(type, params), *map(type, bufs)} <= _DICTS:
        return None  # a TorchScript module's tables, or something else a user put there
    numel = torch.Tensor.numel
    return (
        list(map(type, walked)),
        list(map(len, subs)), list(_chain(subs)), list(map(id, _chain(map(dict.values, subs)))),
        list(map(len, params)), list(map(id, _chain(map(dict.values, params)))),
        list(map(len, bufs)), list(map(id, _chain(map(dict.values, bufs)))),
        list(map(numel, parameters)), list(map(_dtype_and_grad, parameters)),
        list(map(numel, buffers)), list(map(_dtype, buffers)),
    )
