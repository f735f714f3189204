"""The model's state around a run, put back when it ends: :class:`ModelState`.

``Tracer(restore_state=True)`` takes one on entry and restores it on exit: every
module's ``training`` flag, every parameter's ``requires_grad``; for a forward run for
the caller (``trace``, ``summary``, ``capture``, ``find_anomaly``, ``lint``), also the
buffers of modules in training mode and of quantization observers
(``core/model/buffer_state.py``), the plain tensor attributes of modules with forward
pre-hooks, lazy modules (``core/model/lazy_state.py``) and the parameters a forward writes in
place where a copy was kept.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from itertools import chain, repeat
from operator import attrgetter, is_, itemgetter
from typing import Any

import torch
from torch import nn

from hookscope.core import torch_private
from hookscope.core.internal import outside_hookscope
from hookscope.core.model.buffer_state import (
    SavedBuffer,
    has_values,
    records_statistics,
    restore_buffers,
    saved_buffers,
    tensor_version,
)
from hookscope.core.model.lazy_state import LazyState, is_lazy_module
from hookscope.core.model.module_table import ModuleTable


class ModelState:
    """``training`` flags and ``requires_grad`` of a model, and (``buffers=True``) the
    buffers a forward may change, to restore them on exit.

    A forward in training mode changes buffers: BatchNorm's running statistics and
    ``num_batches_tracked`` (in place, inside its kernel, without bumping the tensors'
    version counters, so a change cannot be seen and every value is copied back). So do
    quantization observers and fake-quantize modules in eval mode too (``torch.ao``:
    their min/max and histograms). A forward the tracer runs for its caller (``trace``,
    ``summary``, ``capture``) on generated or sample inputs must not move a trained
    model's statistics, nor a model's calibration. Other buffers of modules in eval mode
    are not copied: torch's own modules do not change them there, and a summary of an
    eval model costs nothing more. (A user's own module that writes its buffers in eval
    mode, a KV cache, is not known here: its buffers stay as the forward left them.)

    Each buffer written back also gets back the version it had when the forward did not
    bump it (BatchNorm's kernel does not): a graph the user built before, which saved
    the buffer, still runs its backward. A buffer that cannot be written back (an
    inference tensor, an expanded one) is left as the forward left it, with a warning:
    the restore never raises.
    """

    def __init__(self, table: ModuleTable, *, buffers: bool = False) -> None:
        scan = table.scan  # what the table's check read already
        self.parameters = table.parameters
        #: the modules' ``__dict__``, where the check read them: ``restore`` compares
        #: their flags in one C-level pass
        self._dicts: list[dict[str, Any]] | None = None
        if scan is None:
            self.modules = [m for _, m in table.members]
            self.training = [m.training for m in self.modules]
            self.requires_grad = [p.requires_grad for p in self.parameters]
            types = set(map(type, self.modules))
        else:
            self.modules, self.training, self._dicts = scan.modules, scan.training, scan.dicts
            self.requires_grad, types = scan.requires_grad, set(scan.types)
        self.buffers: list[SavedBuffer] = []
        # the plain tensor attributes of modules with forward pre-hooks, which such a
        # hook may set anew on every forward (``nn.utils.spectral_norm``'s ``weight``,
        # weight norm's): put back by identity (a scan without hooks has none)
        # (only for a forward run for the caller, as the buffers: a user's own loop in
        # a Tracer block keeps what it did, weight_u and weight alike)
        self.attributes: list[tuple[dict[str, Any], str, torch.Tensor]] = [] \
            if not buffers or (scan is not None and scan.plain) else [
                (vars(m), k, v) for m in self.modules if m._forward_pre_hooks
                for k, v in vars(m).items() if isinstance(v, torch.Tensor)
            ]
        # a lazy module the forward would materialise (its class, parameters and hooks
        # changed for good): put back as it was, unless the block's forward is the user's
        self.lazy = [LazyState(m) for m in self.modules if is_lazy_module(m)] if table.lazy else []
        #: parameters a forward for the caller writes in place (a max-norm constraint):
        #: their versions, and a copy of those of the known writers
        self.param_versions: list[int] | None = None
        self.param_copies: list[tuple[torch.Tensor, torch.Tensor, int]] = []
        # every module's tables of submodules, parameters and buffers, their sizes, and
        # the sum of them
        self._tables: tuple[dict[str, Any], ...] = ()
        self._sizes: list[int] = []
        self._entries = 0
        self._rng: list[_RngState] = []
        if not buffers:
            return
        # what a forward registers (a cache or a counter made on the first call, a layer
        # built then): the state_dict gains keys (counted, in one C-level pass, read
        # with the table's check when it is reused; the new entries come last)
        if scan is not None:
            self._tables, self._sizes = scan.tables, scan.sizes
        else:
            dicts = list(map(vars, self.modules))
            self._tables = tuple(chain.from_iterable(map(map, _TABLES, repeat(dicts))))
            self._sizes = list(map(len, self._tables))
        self._entries = sum(self._sizes)
        self.param_versions = _versions(self.parameters)
        self._members = table.members  # to name a parameter in a warning
        self.param_copies = [
            (w, w.detach().clone(), tensor_version(w)) for m in self.modules
            if isinstance(m, _RENORMS) and getattr(m, "max_norm", None) is not None
            and isinstance(w := m._parameters.get("weight"), torch.Tensor) and has_values(w)
        ] if any(issubclass(t, _RENORMS) for t in types) else []
        # per class, and C-level passes: an eval model without observers (what
        # summary() mostly sees) pays no loop over its modules
        recorders = {cls for cls in types if records_statistics(cls)}
        if recorders or any(self.training):
            self.buffers = saved_buffers(
                m for m, flag in zip(self.modules, self.training, strict=True)
                if flag or type(m) in recorders
            )
        if any(self.training):  # dropout draws: the caller's random stream goes on as
            self._rng = _rng_states(self.parameters)  # if the run had not happened

    def restore(self) -> None:
        for lazy in self.lazy:
            lazy.restore()
        # most forwards change neither: C-level passes tell (read cold, after the
        # forward, each costs about what the loop would), the loops only then
        # (by identity: a forward that set ``training = 1`` is put back to ``True``)
        if self._dicts is None or not _identical(_flags(self._dicts), self.training):
            for m, flag in zip(self.modules, self.training, strict=True):
                if m.training is not flag:
                    m.training = flag
        if not _identical(list(map(_requires_grad, self.parameters)), self.requires_grad):
            for p, rg in zip(self.parameters, self.requires_grad, strict=True):
                if p.requires_grad is not rg:
                    p.requires_grad_(rg)
        if self.buffers:
            restore_buffers(self.buffers)
        for device, state in self._rng:
            if device is None:
                torch.set_rng_state(state)
            else:
                torch.cuda.set_rng_state(state, device)
        if self._tables and sum(map(len, self._tables)) != self._entries:
            self._remove_new_entries()
        if self.param_versions is not None:
            self._restore_parameters(self.param_versions)
        for attributes, name, value in self.attributes:
            if attributes.get(name) is not value:
                attributes[name] = value


    def _remove_new_entries(self) -> None:
        modules = self.modules * 3  # the order of the tables: see ``ModelScan``
        for module, table, size in zip(modules, self._tables, self._sizes, strict=True):
            for name in list(table)[size:]:
                del table[name]
                module._non_persistent_buffers_set.discard(name)

    def _restore_parameters(self, before: list[int]) -> None:
        """Put back the parameters the forward wrote in place where a copy was kept
        (``nn.Embedding(max_norm=...)`` renormalises its rows in its forward); warn,
        naming them, about any other (hookscope keeps no copy of every parameter)."""
        now = _versions(self.parameters)
        if now == before:
            return
        written = {id(p) for p, b, a in zip(self.parameters, before, now, strict=True)
                   if b != a}
        written -= {id(t) for lazy in self.lazy for t, *_ in lazy.tensors}  # put back
        with torch.no_grad():
            kept = [(p, v) for p, copy, v in self.param_copies if id(p) in written
                    and p.shape == copy.shape and p.copy_(copy) is not None]
        if kept:
            torch_private.set_versions([p for p, _ in kept], [v for _, v in kept])
        written -= {id(p) for p, _ in kept}
        if written:
            names = [f"{path}.{n}" if path else n for path, m in self._members
                     for n, p in m._parameters.items() if id(p) in written]
            warnings.warn(
                f"hookscope: the forward wrote into {len(written)} parameter(s) in place "
                f"({', '.join(names[:3])}); they keep the values it wrote",
                UserWarning, stacklevel=outside_hookscope(),
            )


_training, _requires_grad = itemgetter("training"), attrgetter("requires_grad")
_version_of = attrgetter("_version")
#: modules whose forward writes into their own weight (``max_norm``)
_RENORMS = (nn.Embedding, nn.EmbeddingBag)


_TABLES = (itemgetter("_modules"), itemgetter("_parameters"), itemgetter("_buffers"))
_RngState = tuple[torch.device | None, torch.Tensor]


def _rng_states(parameters: Sequence[torch.Tensor]) -> list[_RngState]:
    """The CPU's random number generator state, and that of each CUDA device holding
    ``parameters`` (``None``: the CPU's)."""
    states: list[_RngState] = [(None, torch.get_rng_state())]
    devices = {p.device for p in parameters if p.is_cuda}
    states += [(d, torch.cuda.get_rng_state(d)) for d in sorted(devices, key=str)]
    return states


def _versions(tensors: Sequence[torch.Tensor]) -> list[int]:
    """Each tensor's version counter, -1 for an inference tensor (one C-level pass
    where there is none)."""
    try:
        return list(map(_version_of, tensors))
    except RuntimeError:
        return list(map(tensor_version, tensors))


def _identical(now: list[Any] | None, before: list[Any]) -> bool:
    return now is not None and len(now) == len(before) and all(map(is_, now, before))


def _flags(dicts: list[dict[str, Any]]) -> list[Any] | None:
    """The ``training`` flags in the modules' ``__dict__``s (``None``: one has none)."""
    try:
        return list(map(_training, dicts))
    except KeyError:
        return None
