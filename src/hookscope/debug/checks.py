"""Finiteness checks: of a tensor, and of every aten op while an anomaly hunt runs.

:func:`all_finite` is the one check every module output and every op output goes
through: one sum (a single read pass, no boolean tensor allocated); a finite sum
proves every element finite (a NaN makes the sum NaN, an Inf makes it Inf or NaN).
Only when the sum is not finite, which a large finite tensor can also give by
overflowing, does the exact element-wise test decide. So the check is exact, and on
the common path it costs one reduction.

:class:`OpCheckMode` is a ``TorchDispatchMode`` that runs each op and checks its
floating outputs, recording the first op that produced a non-finite value in each
module call (:class:`OpFindings`). It skips views (they create no value), the
creation ops that return uninitialised memory (``empty``: whatever bits it holds are
not the model's values), ops that probes run themselves (``core.tracer.is_internal``),
and every op of a call that already has its finding.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hookscope.core import torch_private
from hookscope.core.tensors import dtype_str
from hookscope.core.tracer import is_internal
from hookscope.debug.records import OpFinding, TensorCheck

if TYPE_CHECKING:
    from hookscope.core.tracer import Tracer

_aten = torch.ops.aten
#: Ops whose output is uninitialised memory: its bits may read as NaN, and are not
#: a value the model computed.
_UNINITIALISED = frozenset({
    _aten.empty.memory_format, _aten.empty_like.default, _aten.empty_strided.default,
    _aten.new_empty.default, _aten.new_empty_strided.default, _aten.resize_.default,
    _aten.detach.default, _aten.set_.source_Storage_storage_offset,
})
_REDUCED = (torch.float16, torch.bfloat16)


def checkable(t: torch.Tensor) -> bool:
    """A dense floating (or complex) tensor with readable values."""
    return (
        (t.is_floating_point() or t.is_complex()) and t.layout == torch.strided
        and not t.is_meta and not t.is_nested and t.numel() > 0
        and (type(t) is torch.Tensor or isinstance(t, torch.nn.Parameter))
    )


def all_finite(t: torch.Tensor) -> bool:
    """Whether every element of ``t`` is finite (``True`` for a tensor not checkable).

    NB: reading the result synchronises a CUDA device once per check: an anomaly hunt
    must stop at the first non-finite value, so it cannot defer the reads.
    """
    if not checkable(t):
        return True
    if type(t) is not torch.Tensor:
        t = t.as_subclass(torch.Tensor)
    if torch.is_grad_enabled():
        with torch.no_grad():
            return _finite(t)
    return _finite(t)


def _finite(t: torch.Tensor) -> bool:
    total = t.sum(dtype=torch.float32) if t.dtype in _REDUCED else t.sum()
    if bool(total.isfinite()):
        return True
    return bool(torch.isfinite(t).all())


def counts(t: torch.Tensor) -> tuple[int | None, int | None]:
    """``(nan_count, inf_count)`` of ``t`` (``(None, None)`` when not checkable)."""
    if not checkable(t):
        return None, None
    if type(t) is not torch.Tensor:
        t = t.as_subclass(torch.Tensor)
    with torch.no_grad():
        return int(torch.isnan(t).sum()), int(torch.isinf(t).sum())


def tensor_check(path: str, t: torch.Tensor) -> TensorCheck:
    nans, infs = counts(t)
    return TensorCheck(path, tuple(t.shape), dtype_str(t.dtype), t.numel(), nans, infs)


class OpFindings:
    """The first non-finite op of each call, in call order (calls are numbered in the
    order they start, so the owners of the findings only increase).

    The first op inside call ``C`` (or a call nested in it) that produced a
    non-finite value is the first finding whose owner is ``C`` or later: every call
    that started after ``C`` and before ``C`` ended is nested in ``C``.
    """

    def __init__(self) -> None:
        self.owners: list[int] = []
        self.findings: list[OpFinding] = []
        self.backward: OpFinding | None = None  # the first one of the backward

    def inside(self, call: int) -> OpFinding | None:
        i = bisect_left(self.owners, call)
        return self.findings[i] if i < len(self.owners) else None

    def last_owner(self) -> int:
        return self.owners[-1] if self.owners else -1


class OpCheckMode(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch: untyped
    """Run each op; note the first one per call whose floating output is not finite.

    While a mode runs an op, torch disables the mode, so the checks' own ``sum`` and
    ``isfinite`` do not come back here.
    """

    def __init__(self, tracer: Tracer, findings: OpFindings) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves it untyped
        self._tracer = tracer
        self._findings = findings
        #: The outputs of the last op checked, with their versions and verdicts: a
        #: module usually returns its last op's output, whose check need not be
        #: repeated.
        self.last: list[tuple[torch.Tensor, int, bool]] = []

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in _UNINITIALISED or getattr(func, "is_view", False) or is_internal():
            return out
        backward = torch_private.graph_task_running()
        if backward:
            if self._findings.backward is None:
                self._check(func, args, kwargs, out, None, backward=True)
            return out
        call = self._tracer.current_call
        if call is not None and call.index > self._findings.last_owner():
            self._check(func, args, kwargs, out, call.index, backward=False)
        return out

    def _check(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any,
        owner: int | None, *, backward: bool,
    ) -> None:
        outputs = _op_tensors(out, "out")
        bad = False
        last = self.last = []
        for _, t in outputs:
            ok = all_finite(t)
            last.append((t, t._version, ok))
            bad = bad or not ok
        if not bad:
            return
        if backward:
            node = torch_private.current_autograd_node()
            owner = self._tracer.node_owner(node)
        trace = self._tracer.trace
        path = None if owner is None or trace is None else trace.calls[owner].path
        schema = getattr(func, "_schema", None)
        schema_mutates = schema is not None and any(
            a.alias_info is not None and a.alias_info.is_write for a in schema.arguments
        )
        finding = OpFinding(
            name=str(func), phase="backward" if backward else "forward", call=owner,
            path=path,
            inputs=tuple(tensor_check(p, t) for p, t in _arg_tensors(args, kwargs)),
            outputs=tuple(tensor_check(p, t) for p, t in outputs), inplace=schema_mutates,
        )
        if backward:
            self._findings.backward = finding
        elif owner is not None:
            self._findings.owners.append(owner)
            self._findings.findings.append(finding)


def _op_tensors(value: Any, root: str) -> list[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        return [(root, value)]
    if isinstance(value, (list, tuple)):
        return [(f"{root}[{i}]", t) for i, t in enumerate(value) if isinstance(t, torch.Tensor)]
    return []


def _arg_tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, torch.Tensor]]:
    found: list[tuple[str, torch.Tensor]] = []
    for i, a in enumerate(args):
        found += _op_tensors(a, f"args[{i}]")
    for k, v in kwargs.items():
        found += _op_tensors(v, f'kwargs["{k}"]')
    return found
