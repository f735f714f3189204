"""The values probes record as facts and the engine hands them: tensor metadata and
statistics, memory, FLOP counts, the aten operations of a run, a parameter's gradient.

Plain frozen records (``Call.facts`` holds them). They never hold live tensors or
modules, except :class:`ParamGrad`, an event's payload, which is never kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any


class Phase(str, Enum):
    """When an operation ran."""

    FORWARD = "forward"
    BACKWARD = "backward"


class FlopRule(str, Enum):
    """How the FLOPs of an op were obtained (see ``hookscope/flops/registry.py``).

    - ``FORMULA``: from a formula (``torch.utils.flop_counter``'s registry, hookscope's
      table for fused attention kernels, or the user's).
    - ``FREE``: the op does no arithmetic (views, copies, creation, indexing): 0.
    - ``CONVENTION``: elementwise, normalisation, softmax, pooling and reduction ops:
      0 by ``torch.utils.flop_counter``'s convention of counting matmul-like work only.
    - ``UNCOUNTED``: the op may do matmul-like work but has no formula; its FLOPs are
      unknown (``None``) and every total that includes it is marked partial.
    """

    FORMULA = "formula"
    FREE = "free"
    CONVENTION = "convention"
    UNCOUNTED = "uncounted"


@dataclass(frozen=True, slots=True)
class TensorMeta:
    """Shape and type of one tensor found in a call's inputs or outputs.

    Attributes:
        path: where the tensor sits in the nested structure, e.g. ``out``,
            ``out[0]``, ``out["logits"]``, ``args[0]``, ``kwargs["mask"]``.
        shape: the tensor's size; ``-1`` for a ragged dimension of a nested tensor.
        dtype: torch dtype name without the ``torch.`` prefix (``float32``).
        device: device string (``cpu``, ``cuda:0``, ``meta``).
        requires_grad: whether autograd tracks the tensor.
        layout: ``strided``, ``sparse_coo``, ...
    """

    path: str
    shape: tuple[int, ...]
    dtype: str
    device: str
    requires_grad: bool = False
    layout: str = "strided"

    @property
    def numel(self) -> int:
        """Number of elements; -1 when a dimension is ragged (a nested tensor's)."""
        n = 1
        for d in self.shape:
            if d < 0:
                return -1
            n *= d
        return n


_NAN = object()  # what a NaN field is compared and hashed as (NanEqualRecord)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    """The names of a dataclass's fields, read once per class (each compare and hash
    needs them)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


class NanEqualRecord:
    """Equality of a frozen statistics record: field by field, a NaN equal to a NaN.

    A NaN statistic is a fact about the tensor (it held NaNs), so a record equals its
    JSON round trip and the same statistics of another run, whichever NaN object each
    holds. The equality a dataclass writes relies on Python's identity shortcut
    for NaN, which holds for tuples of fields up to 3.12 but not for the field-by-field
    comparison of 3.13; the hash is of the same key, so equal records hash equal.
    """

    __slots__ = ()

    def _key(self) -> tuple[Any, ...]:
        return tuple(
            _NAN if isinstance(v, float) and math.isnan(v) else v
            for v in (getattr(self, name) for name in _field_names(type(self)))
        )

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, NanEqualRecord)
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True, slots=True, eq=False)
class TensorStats(NanEqualRecord):
    """Statistics of one tensor a call returned or received (see ``probes/stats.py``).

    Values that do not make sense for a dtype (the std of a bool tensor, say) are
    ``None``. For complex tensors, statistics are of the magnitude. A tensor with no
    readable data (meta, sparse, ...) has only ``numel``: every other field is ``None``.
    """

    path: str
    numel: int
    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    absmax: float | None
    zero_fraction: float | None
    nan_count: int | None
    inf_count: int | None


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """Memory facts of one call (see ``probes/memory.py``).

    Attributes:
        output_bytes: bytes of the call's output tensors (``numel * element_size``),
            a storage shared by several outputs counted once.
        saved_bytes: bytes autograd saved for backward while this call (excluding its
            children) ran; ``None`` when grad mode was off.
        allocated_delta: CUDA allocated-memory change across the call (``None`` off CUDA).
        peak_bytes: CUDA peak allocated memory during the call (``None`` off CUDA); a
            lower bound unless the call set a new process-wide peak (``probes/memory.py``).
    """

    output_bytes: int
    saved_bytes: int | None = None
    allocated_delta: int | None = None
    peak_bytes: int | None = None


class FlopTotals:
    """``total`` and MACs of a record with ``forward`` and ``backward`` FLOPs."""

    __slots__ = ()
    forward: int
    backward: int

    @property
    def total(self) -> int:
        """Forward and backward FLOPs together."""
        return self.forward + self.backward

    @property
    def macs_forward(self) -> int:
        """Forward multiply-adds: FLOPs / 2."""
        return self.forward // 2

    @property
    def macs_backward(self) -> int:
        """Backward multiply-adds: FLOPs / 2."""
        return self.backward // 2


@dataclass(slots=True)
class FlopCount(FlopTotals):
    """Floating-point operations of a call, its subtree or the whole trace.

    Conventions follow ``torch.utils.flop_counter``: a multiply-add is 2 FLOPs and
    ``macs == flops // 2``. ``partial`` is True when an op that does arithmetic but
    has no formula ran inside: the numbers are then lower bounds, never silent zeros.
    """

    forward: int = 0
    backward: int = 0
    partial: bool = False


@dataclass(frozen=True, slots=True)
class ParamGrad:
    """A parameter's gradient, as the engine hands it to probes (``on_param_grad``).

    Attributes:
        path: the parameter's path (its first one when tied).
        param: the parameter itself (live: read it, never keep it).
        grad: ``param.grad`` after accumulation (``accumulated``), or the gradient
            ``torch.autograd.grad`` computed for it.
        accumulated: True for ``.backward()`` (the gradient is in ``param.grad``).
    """

    path: str
    param: Any
    grad: Any
    accumulated: bool


@dataclass(frozen=True, slots=True)
class OpRecord:
    """One aten operation executed while the model ran (see ``probes/ops.py``).

    Attributes:
        name: the overload name, e.g. ``aten.convolution.default``.
        call: index of the innermost module call it is attributed to (for backward ops:
            the call whose forward created the autograd node), ``None`` if outside.
        phase: forward or backward.
        flops: FLOPs from ``torch.utils.flop_counter``'s registry; ``None`` when the op
            has no formula (then ``counted`` is False, unless the op is known free).
        counted: False for ops that do arithmetic but have no formula.
        rule: how ``flops`` was obtained (formula, free, 0 by convention, uncounted).
        start_ns: when the op started, in nanoseconds since the trace started (the clock
            of ``Call.start_ns``); ``None`` in traces recorded without op times.
        time_ns: how long the op ran on the host (``time.perf_counter_ns`` around the
            kernel call; on CUDA the launch, not the kernel); ``None`` like ``start_ns``.
    """

    index: int
    name: str
    call: int | None
    phase: Phase
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]
    flops: int | None
    counted: bool = True
    rule: FlopRule = FlopRule.FORMULA
    start_ns: int | None = None
    time_ns: int | None = None
