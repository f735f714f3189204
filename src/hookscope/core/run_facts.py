"""What a tracer records about the run and the model's state around it.

- :func:`run_facts`: the process facts of a run (``Trace.meta``) that a merged or
  timeline view needs: versions, start time, pid, device, rank and world size;
- :func:`cuda_devices`: the CUDA devices the model lives on (the timing and memory
  probes synchronise or read them);
- :class:`ModelState`: the ``training`` flags, ``requires_grad`` and the buffers of
  modules in training mode that ``Tracer(restore_state=True)`` puts back on exit.
"""

from __future__ import annotations

import functools
import os
import sys
import time as _time
import warnings
from collections.abc import Iterable, Sequence
from operator import attrgetter, is_, itemgetter
from typing import Any, TypeGuard

import torch
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import is_lazy

from hookscope.core import torch_private
from hookscope.core.module_table import ModuleTable


def run_facts(table: ModuleTable) -> dict[str, Any]:
    """What a merged or timeline view needs to know about the process of this run."""
    facts: dict[str, Any] = {
        "torch_version": torch.__version__,
        "hookscope_version": hookscope_version(),
        "started_at_ns": _time.time_ns(),
        "pid": os.getpid(),
    }
    if table.tied:  # later path -> first path, for renderers to name tied rows
        facts["tied"] = dict(table.tied)
        # first path -> elements: what counting a selection's parameters once needs
        facts["tied_numel"] = dict(table.tied_numel)
    first = table.parameters[0] if table.parameters else None
    # NB: a CPU tensor's device without making a device object and its string
    facts["device"] = "cpu" if first is None or first.is_cpu else str(first.device)
    dist = _distributed()
    if dist is not None and dist.is_initialized():
        facts["rank"], facts["world_size"] = dist.get_rank(), dist.get_world_size()
    return facts


@functools.cache
def _distributed() -> Any:
    """``torch.distributed`` where this torch build has it, else ``None`` (asked once)."""
    dist = getattr(torch, "distributed", None)
    return dist if dist is not None and dist.is_available() else None


_VERSION: list[str] = []


def hookscope_version() -> str:
    if not _VERSION:
        from importlib.metadata import PackageNotFoundError, version

        try:
            _VERSION.append(version("hookscope"))
        except PackageNotFoundError:  # running from a source checkout
            _VERSION.append("0.0.0+unknown")
    return _VERSION[0]


def cuda_devices(table: ModuleTable) -> list[torch.device]:
    """The CUDA devices that hold the model's parameters or buffers."""
    if not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # no CUDA tensor yet
        return []
    found = {p.device for p in table.parameters}
    for _, module in table.members:
        found.update(b.device for b in module._buffers.values() if b is not None)
    return sorted((d for d in found if d.type == "cuda"), key=str)


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
        # weight norm's): put back by identity (NB: a scan without hooks has none)
        # (only for a forward run for the caller, as the buffers: a user's own loop in
        # a Tracer block keeps what it did, weight_u and weight alike)
        self.attributes: list[tuple[dict[str, Any], str, torch.Tensor]] = [] \
            if not buffers or (scan is not None and scan.plain) else [
                (vars(m), k, v) for m in self.modules if m._forward_pre_hooks
                for k, v in vars(m).items() if isinstance(v, torch.Tensor)
            ]
        # a lazy module the forward would materialise (its class, parameters and hooks
        # changed for good): put back as it was, unless the block's forward is the user's
        self.lazy = [LazyState(m) for m in self.modules if _is_lazy(m)] if table.lazy else []
        #: parameters a forward for the caller writes in place (a max-norm constraint):
        #: their versions, and a copy of those of the known writers
        self.param_versions: list[int] | None = None
        self.param_copies: list[tuple[torch.Tensor, torch.Tensor, int]] = []
        if not buffers:
            return
        self.param_versions = _versions(self.parameters)
        self._members = table.members  # to name a parameter in a warning
        self.param_copies = [
            (w, w.detach().clone(), _version(w)) for m in self.modules
            if isinstance(m, _RENORMS) and getattr(m, "max_norm", None) is not None
            and isinstance(w := m._parameters.get("weight"), torch.Tensor) and _has_values(w)
        ] if any(issubclass(t, _RENORMS) for t in types) else []
        # NB: per class, and C-level passes: an eval model without observers (what
        # summary() mostly sees) pays no loop over its modules
        recorders = {cls for cls in types if _records_statistics(cls)}
        if recorders or any(self.training):
            self.buffers = saved_buffers(
                m for m, flag in zip(self.modules, self.training, strict=True)
                if flag or type(m) in recorders
            )

    def restore(self) -> None:
        for lazy in self.lazy:
            lazy.restore()
        # NB: most forwards change neither: C-level passes tell (read cold, after the
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
        if self.param_versions is not None:
            self._restore_parameters(self.param_versions)
        for attributes, name, value in self.attributes:
            if attributes.get(name) is not value:
                attributes[name] = value


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
                UserWarning, stacklevel=_outside_hookscope(),
            )


_training, _requires_grad = itemgetter("training"), attrgetter("requires_grad")
_version_of = attrgetter("_version")
#: modules whose forward writes into their own weight (``max_norm``)
_RENORMS = (nn.Embedding, nn.EmbeddingBag)


def _outside_hookscope() -> int:
    """The ``stacklevel`` of a warning raised here that points at the user's call of
    hookscope (``summary``, ``capture``, ``lint``...), however deep inside it is."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1  # NB: our own frames, not torch's
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


def _versions(tensors: Sequence[torch.Tensor]) -> list[int]:
    """Each tensor's version counter, -1 for an inference tensor (NB: one C-level pass
    where there is none)."""
    try:
        return list(map(_version_of, tensors))
    except RuntimeError:
        return list(map(_version, tensors))


def _identical(now: list[Any] | None, before: list[Any]) -> bool:
    return now is not None and len(now) == len(before) and all(map(is_, now, before))


def _flags(dicts: list[dict[str, Any]]) -> list[Any] | None:
    """The ``training`` flags in the modules' ``__dict__``s (``None``: one has none)."""
    try:
        return list(map(_training, dicts))
    except KeyError:
        return None


def _is_lazy(module: nn.Module) -> bool:
    return isinstance(module, LazyModuleMixin) and module.has_uninitialized_params()


class LazyState:
    """A lazy module before its first forward (``nn.LazyLinear``, ``LazyBatchNorm2d``,
    ``LazyConv2d``), to put back after one: the forward gives its uninitialised
    parameters and buffers a shape and values in place (the same objects become plain
    ``Parameter`` objects and tensors), removes its initialising hooks and switches its class
    (``LazyLinear`` becomes ``Linear``). NB: ``reset_parameters`` drew the values from
    torch's random generator, as the forward itself would have."""

    def __init__(self, module: nn.Module) -> None:
        self.module, self.cls = module, type(module)
        self.tables = {name: dict(getattr(module, name)) for name in _LAZY_TABLES
                       if isinstance(getattr(module, name, None), dict)}
        # its hooks' handles, and the plain settings ``initialize_parameters`` fills
        # in (``in_features``, ``in_channels``, ``num_features``: 0 until then)
        self.attributes: dict[str, Any] = {
            name: value for name, value in module.__dict__.items()
            if name in ("_initialize_hook", "_load_hook")
            or (not name.startswith("_") and isinstance(value, _PLAIN))
        }
        self.tensors = [(t, type(t), t.device, t.dtype)
                        for table in (module._parameters, module._buffers)
                        for t in table.values() if t is not None and is_lazy(t)]

    def restore(self) -> None:
        module = self.module
        with torch.no_grad():
            for t, cls, device, dtype in self.tensors:
                if type(t) is not cls:  # materialised: empty again, uninitialised again
                    t.data = torch.empty(0, device=device, dtype=dtype)
                    t.__class__ = cls
        if type(module) is not self.cls:
            module.__class__ = self.cls
        for name, saved in self.tables.items():
            table = getattr(module, name)
            if table != saved or list(table) != list(saved):
                table.clear()
                table.update(saved)
        module.__dict__.update(self.attributes)


_PLAIN = (int, float, bool, str, tuple, type(None))

#: The tables of a lazy module its first forward changes: its parameters and buffers
#: (the same objects), the initialising pre-hook and the state-dict load hook.
_LAZY_TABLES = ("_parameters", "_buffers", "_forward_pre_hooks",
                "_forward_pre_hooks_with_kwargs", "_load_state_dict_pre_hooks")


_RECORDS: dict[type, bool] = {}


def _records_statistics(cls: type) -> bool:
    """Whether ``cls`` records statistics in eval mode too: quantization observers and
    fake-quantize modules (``torch.ao.quantization``)."""
    found = _RECORDS.get(cls)
    if found is None:
        found = _RECORDS[cls] = issubclass(cls, _STATISTICS_RECORDERS)
    return found


def _recorders() -> tuple[type, ...]:
    try:
        from torch.ao.quantization import FakeQuantizeBase, ObserverBase
    except ImportError:  # a torch without torch.ao.quantization: none to save
        return ()
    return (ObserverBase, FakeQuantizeBase)


_STATISTICS_RECORDERS = _recorders()


SavedBuffer = tuple[nn.Module, str, torch.Tensor, torch.Tensor, int]
"""A module, a buffer's name, the buffer, a copy of its values, its version."""


def saved_buffers(modules: Iterable[nn.Module]) -> list[SavedBuffer]:
    """A copy of every buffer of ``modules`` that has values, for :func:`restore_buffers`."""
    return [
        (m, name, b, b.detach().clone(), _version(b))
        for m in modules for name, b in m._buffers.items() if _has_values(b)
    ]


def restore_buffers(saved: list[SavedBuffer]) -> None:
    """Put back every buffer object and value of :func:`saved_buffers` (see
    :class:`ModelState`): the version too where the forward did not move it; never
    raises (a warning names what could not be put back)."""
    back: list[torch.Tensor] = []
    versions: list[int] = []
    failed: list[str] = []
    with torch.no_grad():
        for module, name, buffer, value, version in saved:
            module._buffers[name] = buffer  # also one the forward replaced
            unchanged = version >= 0 and _version(buffer) == version
            try:
                if (buffer.shape, buffer.dtype, buffer.device) == (
                        value.shape, value.dtype, value.device):
                    buffer.copy_(value)
                else:  # resized or converted in the forward
                    buffer.data = value
            except RuntimeError as e:  # an inference tensor, overlapping memory:
                if not _same(buffer, value):  # which the forward cannot have written
                    failed.append(f"{type(module).__name__}.{name} "
                                  f"({(str(e).splitlines() or [''])[0]})")
                continue
            if unchanged:
                back.append(buffer)
                versions.append(version)
    if back:
        torch_private.set_versions(back, versions)
    if failed:
        warnings.warn(
            f"hookscope: could not put back {len(failed)} buffer(s) the forward changed: "
            f"{', '.join(failed[:3])}", UserWarning, stacklevel=4,
        )


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a.shape == b.shape and bool(torch.equal(a, b))
    except RuntimeError:
        return False


def _version(b: torch.Tensor) -> int:
    """``b``'s version counter (-1: an inference tensor, which has none)."""
    return -1 if b.is_inference() else b._version


def _has_values(b: torch.Tensor | None) -> TypeGuard[torch.Tensor]:
    """A buffer whose values can be copied: not a lazy module's, not on meta."""
    return (
        b is not None and not isinstance(b, nn.parameter.UninitializedBuffer)
        and b.device.type != "meta"
    )
