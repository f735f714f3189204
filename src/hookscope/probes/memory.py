"""Memory probe: output bytes, bytes saved for backward, CUDA allocation per call.

Fills ``Call.memory`` (:class:`~hookscope.core.records.values.MemoryRecord`):

- ``output_bytes``: bytes of the tensors the call returned, ``numel * element_size``
  per tensor; tensors that share a storage (the same tensor twice, views, ``chunk``)
  count that storage once, and never for more than the storage's own size (so an
  ``expand``-ed view counts the memory it really uses). A sparse tensor counts its
  indices and values. A call that raised has 0 output bytes.
- ``saved_bytes``: bytes autograd saved for backward while the call ran, found with
  ``torch.autograd.graph.saved_tensors_hooks`` installed for each outermost call (and
  only then, so that the user's code between model calls, ``torch.func.grad`` say,
  which refuses saved-tensor hooks, runs as without hookscope). Each
  saved tensor is attributed to the innermost running call, so a parent's number
  excludes its children's; within a call a storage is counted once (same rule as the
  outputs). Saved parameters count too (``x * w`` saves both ``x`` and ``w``).
  ``None`` when nothing was saved and grad mode was off (``torch.no_grad()``,
  ``torch.inference_mode()``).
- ``allocated_delta``/``peak_bytes`` (CUDA models only): ``torch.cuda.memory_allocated``
  after minus before the call, and the peak allocated memory during the call.

The saved-tensor hooks change nothing the model computes: the pack hook stores a
``detach()``-ed alias (returning the tensor itself would create a reference cycle
through its ``grad_fn`` and keep activations alive until the garbage collector runs)
and the unpack hook performs autograd's in-place modification check itself, which
autograd skips for tensors that went through hooks. If the user already installed
saved-tensor hooks (``torch.autograd.graph.save_on_cpu``), the probe wraps them:
theirs still pack and unpack every tensor. Where saved-tensor hooks are disabled
(inside ``torch.func`` transforms), ``saved_bytes`` is ``None``.

NB: ``peak_bytes`` is exact when the call raised the process-wide peak
(``torch.cuda.max_memory_allocated``); otherwise the peak cannot be read without
resetting the user's peak statistics, and ``max(before, after)`` is recorded, a lower
bound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hookscope.core import torch_private
from hookscope.core.engine.handles import CallbackHandle
from hookscope.core.engine.probe import Probe, register_probe
from hookscope.core.engine.tracer import internal_work, is_internal
from hookscope.core.records.facts import Column, Fact, Field, Unit
from hookscope.core.records.tensor_paths import iter_tensors
from hookscope.core.records.trace import Call, Trace
from hookscope.core.records.value_json import memory_in, memory_out
from hookscope.core.records.values import MemoryRecord

if TYPE_CHECKING:
    from hookscope.core.engine.handles import Removable
    from hookscope.core.engine.tracer import Tracer

PackHook = Callable[[torch.Tensor], Any]
UnpackHook = Callable[[Any], torch.Tensor]


class ByteCounter:
    """Bytes of a set of tensors, each storage counted once (see the module docstring)."""

    __slots__ = ("_storages", "_views")

    def __init__(self) -> None:
        self._views: set[tuple[Any, ...]] = set()
        self._storages: dict[Any, list[int]] = {}  # storage key -> [capacity, bytes]

    def add(self, t: torch.Tensor) -> None:
        for part in _dense_parts(t):
            self._add_dense(part)

    def _add_dense(self, t: torch.Tensor) -> None:
        nbytes = t.numel() * t.element_size()
        try:
            storage = t.untyped_storage()
            key: Any = torch_private.storage_key(storage)
            capacity = storage.nbytes()
            view: tuple[Any, ...] = (key, t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
        except (RuntimeError, NotImplementedError, TypeError):
            key, capacity, view = ("tensor", id(t)), nbytes, ("tensor", id(t))
        if view in self._views:
            return
        self._views.add(view)
        entry = self._storages.get(key)
        if entry is None:
            self._storages[key] = [capacity, nbytes]
        else:
            entry[1] += nbytes

    @property
    def total(self) -> int:
        return sum(min(capacity, nbytes) for capacity, nbytes in self._storages.values())


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of ``tensors`` with shared storages counted once."""
    counter = ByteCounter()
    for t in tensors:
        counter.add(t)
    return counter.total


def _dense_parts(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
    layout = t.layout
    if layout == torch.strided:
        return (t,)
    if layout == torch.sparse_coo:
        return torch_private.sparse_coo_parts(t)
    if layout in (torch.sparse_csr, torch.sparse_bsr):
        return (t.crow_indices(), t.col_indices(), t.values())
    if layout in (torch.sparse_csc, torch.sparse_bsc):
        return (t.ccol_indices(), t.row_indices(), t.values())
    return (t,)


def output_bytes(output: Any) -> int:
    """Bytes of every tensor inside a call's output (see :class:`ByteCounter`)."""
    if isinstance(output, torch.Tensor) and output.layout == torch.strided:
        return tensor_bytes((output,))
    return tensor_bytes(t for _, t in iter_tensors(output, "out"))


def _memory(attr: str) -> Any:
    def value(call: Call, trace: Trace) -> int | None:
        m = call.facts.get("memory")
        return None if m is None else getattr(m, attr)

    return value


@register_probe
class MemoryProbe(Probe):
    """Record ``memory``: output bytes, saved-for-backward bytes, CUDA memory."""

    name = "memory"
    install_touches_modules = False
    reads_inputs_on_enter = False
    watches_tensor_work = True  # the saved-tensor hook leaves the other probes' work out
    order = 80
    column_rank = 40
    facts = (
        Fact("memory", "output, saved-for-backward and CUDA bytes (MemoryRecord)",
             memory_out, memory_in),
    )
    columns = (
        Column("out_bytes", "Out bytes", _memory("output_bytes"), Unit.BYTES),
        Column("saved_bytes", "Saved", _memory("saved_bytes"), Unit.BYTES, when_present=True),
        Column("alloc_delta", "Alloc Δ", _memory("allocated_delta"), Unit.BYTES,
               when_present=True),
        # a peak of one call: a fold of blocks does not add them up
        Column("peak", "Peak", _memory("peak_bytes"), Unit.BYTES, when_present=True,
               summed=False),
    )
    fields = tuple(
        Field(name, _memory(name), "Int64", column=column)
        for name, column in (("output_bytes", "out_bytes"), ("saved_bytes", "saved_bytes"),
                             ("allocated_delta", "alloc_delta"), ("peak_bytes", "peak"))
    )

    def __init__(self) -> None:
        self._tracer: Tracer | None = None
        self._saved: dict[int, ByteCounter] = {}
        self._watching = False  # saved-tensor hooks installed for the running root call
        # (call index, context) of the saved-tensor hooks of the running root call
        self._context: tuple[int, Any] | None = None
        self._cuda_device: torch.device | None = None
        # call index -> (allocated before, process-wide peak before), CUDA only
        self._cuda_open: dict[int, tuple[int, int]] = {}

    def install(self, tracer: Tracer) -> list[Removable]:
        self._tracer = tracer
        self._saved.clear()
        self._cuda_open.clear()
        self._cuda_device = tracer.cuda_devices[0] if tracer.cuda_devices else None
        self._context = None
        # the hooks of an outermost call that never finished (KeyboardInterrupt) come
        # off with the tracer's handles
        return [CallbackHandle(self._close)]

    def _open(self, call: Call) -> None:
        """Install the saved-tensor hooks for the outermost call ``call``."""
        self._close()  # those of an outermost call that never finished (KeyboardInterrupt)
        context = torch.autograd.graph.saved_tensors_hooks(*_chain_hooks(self._pack))
        try:
            context.__enter__()
        except RuntimeError:  # saved-tensor hooks are disabled here: no saved bytes
            self._watching = False
            return
        self._watching = True
        self._context = (call.index, context)

    def _close(self) -> None:
        opened, self._context = self._context, None
        if opened is not None:
            opened[1].__exit__(None, None, None)

    def on_enter(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        if call.parent is None:
            self._open(call)
        device = self._cuda_device
        if device is not None:
            before = torch.cuda.memory_allocated(device)
            self._cuda_open[call.index] = (before, torch.cuda.max_memory_allocated(device))

    def on_exit(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
        output: Any, failed: bool,
    ) -> None:
        counter = self._saved.pop(call.index, None)
        if counter is not None:
            saved: int | None = counter.total
        else:
            saved = 0 if self._watching and _autograd_records() else None
        delta = peak = None
        opened = self._cuda_open.pop(call.index, None)
        if opened is not None and self._cuda_device is not None:
            delta, peak = _cuda_change(self._cuda_device, *opened)
        size = 0 if failed else output_bytes(output)
        call.facts["memory"] = MemoryRecord(size, saved, delta, peak)
        if self._context is not None and self._context[0] == call.index:
            self._close()

    def finalize(self, trace: Trace) -> None:
        self._saved.clear()
        self._cuda_open.clear()
        self._tracer = None

    def _pack(self, t: torch.Tensor, keep: bool) -> Any:
        """Attribute a tensor autograd is saving to the innermost running call; with
        ``keep``, also return what the graph stores: a detached alias and its version."""
        tracer = self._tracer
        if tracer is None:  # pragma: no cover - hooks live only while the tracer does
            return (t.detach(), torch_private.version_counter(t)) if keep else None
        start = perf_counter_ns()
        try:
            # a tensor another probe's work saves (a norm taken with grad on) is not
            # the model's (the tracer marks probe work: watches_tensor_work)
            probe_work = is_internal()
            with internal_work():  # detach() is an aten op, not the model's
                call = tracer.current_call
                if call is not None and not probe_work:
                    counter = self._saved.get(call.index)
                    if counter is None:
                        counter = self._saved[call.index] = ByteCounter()
                    counter.add(t)
                return (t.detach(), torch_private.version_counter(t)) if keep else None
        finally:
            tracer.overhead_ns += perf_counter_ns() - start  # not the model's time


def _autograd_records() -> bool:
    """Whether autograd records operations now (grad mode on, not inference mode)."""
    return torch.is_grad_enabled() and not torch.is_inference_mode_enabled()


def _check_version(packed: tuple[torch.Tensor, int | None]) -> torch.Tensor:
    """Unpack hook: autograd's check that a saved tensor was not modified in place."""
    tensor, version = packed
    now = torch_private.version_counter(tensor)
    if now != version:
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: [{tensor.type()} {list(tensor.shape)}] is at version "
            f"{now}; expected version {version} instead (reported by "
            "hookscope's memory probe, which was watching the saved tensors)"
        )
    return tensor


def _chain_hooks(pack: Callable[[torch.Tensor, bool], Any]) -> tuple[PackHook, UnpackHook]:
    """Pack/unpack hooks that account each saved tensor, wrapping the user's hooks."""
    outer = _active_saved_tensor_hooks()
    if outer is None:
        return (lambda t: pack(t, True)), _check_version
    outer_pack, outer_unpack = outer

    def pack_outer(t: torch.Tensor) -> Any:
        pack(t, False)
        return outer_pack(t)  # the user's own work: observed like the model's

    return pack_outer, outer_unpack


def _active_saved_tensor_hooks() -> tuple[PackHook, UnpackHook] | None:
    """The saved-tensor hooks the user has active now, if any."""
    return torch_private.saved_tensor_default_hooks()


def _cuda_change(device: torch.device, before: int, peak_before: int) -> tuple[int, int]:
    after = torch.cuda.memory_allocated(device)
    peak_now = torch.cuda.max_memory_allocated(device)
    # NB: exact when this call raised the process-wide peak, else a lower bound.
    peak = peak_now if peak_now > peak_before else max(before, after)
    return after - before, peak
