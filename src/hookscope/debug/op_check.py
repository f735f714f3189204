"""The check of every aten op while an anomaly hunt runs.

:class:`OpCheckMode` is a ``TorchDispatchMode`` that holds each op's floating outputs
while its module call runs and checks them only when the call's output turns out not
finite (``debug/checks.all_finite``), recording the first op that produced a
non-finite value in each module call (:class:`OpFindings`). It skips views (they
create no value), the creation ops that return uninitialised memory (``empty``:
whatever bits it holds are not the model's values), ops that probes run themselves
(``core.tracer.is_internal``), and every op of a call that already has its finding.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING, Any

import torch

from hookscope.core import torch_private
from hookscope.core.engine.tracer import is_internal
from hookscope.debug.anomaly_records import OpFinding
from hookscope.debug.checks import all_finite, checkable, tensor_check

if TYPE_CHECKING:
    from hookscope.core.engine.tracer import Tracer

_aten = torch.ops.aten
#: Ops whose output is uninitialised memory: its bits may read as NaN, and are not
#: a value the model computed.
_UNINITIALISED = frozenset({
    _aten.empty.memory_format, _aten.empty_like.default, _aten.empty_strided.default,
    _aten.new_empty.default, _aten.new_empty_strided.default, _aten.resize_.default,
    _aten.detach.default, _aten.set_.source_Storage_storage_offset,
})


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

    def before(self, call: int) -> OpFinding | None:
        """The first finding of a call that started before ``call`` (one of its
        callers, which are still running: the findings of a call that ended finite are
        dropped): a non-finite value made before ``call`` started."""
        return self.findings[0] if self.owners and self.owners[0] < call else None

    def last_owner(self) -> int:
        return self.owners[-1] if self.owners else -1

    def add(self, owner: int, finding: OpFinding) -> None:
        self.owners.append(owner)
        self.findings.append(finding)

    def drop_inside(self, call: int) -> None:
        """Forget the findings of ``call`` and the calls nested in it (a suffix)."""
        i = bisect_left(self.owners, call)
        del self.owners[i:], self.findings[i:]


#: An op that ran in a call and is not checked yet: ``(func, args, kwargs, out, owner,
#: elements)``, holding its inputs and outputs until the call's own output is known
#: finite (the op is then never checked) or not (the held ops are then checked in the
#: order they ran). A tuple: one is made per op.
_Pending = tuple[Any, tuple[Any, ...], dict[str, Any], Any, int, int]


#: Elements of op outputs held unchecked before they are checked anyway: the memory an
#: anomaly hunt may keep alive beyond the model's own (256 MiB of float32).
PENDING_LIMIT = 1 << 26


@torch_private.unwrapped_dispatch_mode
class OpCheckMode(torch_private.TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch: untyped
    """Note, per call, the first op whose floating output is not finite.

    Forward ops are checked lazily. Each op's outputs are held, unchecked, while its
    call runs. When a call ends with a finite output (nearly always) the ops that ran
    inside it are dropped unchecked, with any finding inside it: so what a call's
    finding names is the first non-finite op not hidden inside a nested call that
    ended finite (a ``-inf`` attention mask inside a finite attention block is not
    the cause of a later overflow). When a call's output is not finite,
    :meth:`flush` checks the held ops in the order they ran. An op that writes into a
    tensor (also ``resize_``, in-place views), and a held volume above
    :data:`PENDING_LIMIT` elements, flush first, so every check reads the value the op
    produced. The module outputs are checked
    anyway: one read of each op output inside a finite module was the whole cost of
    checking eagerly.

    Backward ops are checked as they run, until the first non-finite one.

    While a mode runs an op, torch disables the mode, so the checks' own ``sum`` and
    ``isfinite`` do not come back here.
    """

    def __init__(self, tracer: Tracer, findings: OpFindings) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves it untyped
        self._tracer = tracer
        self._findings = findings
        self._pending: list[_Pending] = []
        self._held = 0  # elements of the pending outputs
        self._writes: dict[Any, bool] = {}  # op -> it writes into an argument
        #: Ops so far that wrote into a tensor: a value read before is still the value
        #: only while this has not moved (a write through ``.data`` bumps no version).
        self.writes = 0

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if is_internal():
            return func(*args, **kwargs)
        writes = self._writes.get(func)
        if writes is None:
            writes = self._writes[func] = _writes(func)
        if writes:
            self.writes += 1
            if self._pending:  # so that every check reads the value its op produced
                self.flush()
        if func in _UNINITIALISED or getattr(func, "is_view", False):
            return func(*args, **kwargs)
        if torch_private.graph_task_running():
            out = func(*args, **kwargs)
            if self._findings.backward is None:
                outputs = _checkable(out)
                if outputs and not all(all_finite(t) for _, t in outputs):
                    self._record(func, args, kwargs, outputs, None, backward=True)
            return out
        call = self._tracer.current_call
        if call is None or call.index <= self._findings.last_owner():
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        # the outputs are sorted out (floating? dense?) only if they are ever checked
        held = out.numel() if type(out) is torch.Tensor else _elements(out)
        self._pending.append((func, args, kwargs, out, call.index, held))
        if held:
            self._held += held
            if self._held > PENDING_LIMIT:
                self.flush()
        return out

    def flush(self) -> None:
        """Check the held ops in the order they ran; note each call's first bad one."""
        pending, self._pending, self._held = self._pending, [], 0
        findings = self._findings
        for func, args, kwargs, out, owner, _ in pending:
            if owner <= findings.last_owner():
                continue
            outputs = _checkable(out)
            if outputs and not all(all_finite(t) for _, t in outputs):
                self._record(func, args, kwargs, outputs, owner, backward=False)

    def maker_of(
        self, values: list[torch.Tensor], call: int, *, nan: bool, outside: set[int],
    ) -> OpFinding | bool:
        """The op that made the non-finite ``values`` a call received (call ``call``,
        before its ops are checked), among the ops its callers ran before it and still
        hold: each value is followed back, every branch of it, through ops that only
        passed a non-finite value on, to the ops that made one from finite inputs (or
        wrote into their own input, which then reads as their output). Of those, the
        one that made the kind of value found (``nan``: a NaN, else an Inf) is named;
        else the first found (an Inf from which arithmetic made the NaN).

        ``False`` when every value came from outside the held ops: ``outside`` (the
        ids of the model's inputs, parameters and buffers); ``True`` when some value
        is not known (made by an op checked and dropped already: the caller's first
        finding may tell)."""
        wanted = {id(t) for t in values}
        makers: list[OpFinding] = []
        for func, args, kwargs, out, owner, _ in reversed(self._pending):
            if not wanted:
                break
            if owner >= call:
                continue
            outputs = _checkable(out)
            matched = {id(t) for _, t in outputs} & wanted
            if not matched:
                continue
            wanted -= matched
            tensors = _arg_tensors(args, kwargs)
            bad = [t for _, t in tensors if checkable(t) and not all_finite(t)]
            if bad and not _writes(func):  # passed it on: follow every bad input back
                wanted |= {id(t) for t in bad}
                continue
            makers.append(OpFinding(
                name=str(func), phase="forward", call=owner, path=self._path(owner),
                inputs=tuple(tensor_check(p, t) for p, t in tensors),
                outputs=tuple(tensor_check(p, t) for p, t in outputs), inplace=_writes(func),
            ))
        kind = [m for m in makers if any((o.nan_count if nan else o.inf_count)
                                         for o in m.outputs)]
        if kind:
            return kind[0]
        if wanted - outside:
            return True
        return makers[0] if makers else False

    def _path(self, owner: int | None) -> str | None:
        trace = self._tracer.trace
        return None if owner is None or trace is None else trace.calls[owner].path

    def ended_finite(self, call: int) -> None:
        """``call`` ended with a finite output: drop what ran inside it, unchecked."""
        pending = self._pending
        i = len(pending)
        while i and pending[i - 1][4] >= call:  # the ops since it started: a suffix
            i -= 1
        if i < len(pending):
            self._held -= sum(op[5] for op in pending[i:])
            del pending[i:]
        if self._findings.last_owner() >= call:
            self._findings.drop_inside(call)

    def _record(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
        outputs: list[tuple[str, torch.Tensor]], owner: int | None, *, backward: bool,
    ) -> None:
        if backward:
            node = torch_private.current_autograd_node()
            owner = self._tracer.node_owner(node)
        trace = self._tracer.trace
        path = None if owner is None or trace is None else trace.calls[owner].path
        finding = OpFinding(
            name=str(func), phase="backward" if backward else "forward", call=owner,
            path=path,
            inputs=tuple(tensor_check(p, t) for p, t in _arg_tensors(args, kwargs)),
            outputs=tuple(tensor_check(p, t) for p, t in outputs), inplace=_writes(func),
        )
        if backward:
            self._findings.backward = finding
        elif owner is not None:
            self._findings.add(owner, finding)


def _writes(func: Any) -> bool:
    """Whether the op writes into one of its arguments (``add_``, ``out=``; and the
    batch norms whose schemas do not say so: they update the running statistics they
    are given, so those inputs are read after the op wrote them)."""
    schema = torch_private.op_schema(func)
    if schema is None:
        return False
    if schema.name in _UNANNOTATED_WRITERS:
        return True
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


_UNANNOTATED_WRITERS = frozenset(
    {"aten::native_batch_norm", "aten::cudnn_batch_norm", "aten::miopen_batch_norm"}
)


def _elements(out: Any) -> int:
    """Elements of the tensors in an op's tuple or list output (what holding it keeps)."""
    if isinstance(out, (tuple, list)):
        return sum(t.numel() for t in out if isinstance(t, torch.Tensor))
    return 0


def _checkable(out: Any) -> list[tuple[str, torch.Tensor]]:
    if isinstance(out, torch.Tensor):  # the common case, without building a list first
        return [("out", out)] if checkable(out) else []
    return [(p, t) for p, t in _op_tensors(out, "out") if checkable(t)]


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
