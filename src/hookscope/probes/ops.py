"""Ops probe: every aten op the model runs, its FLOPs, and the module call it belongs to.

``install`` enters a ``TorchDispatchMode`` for the tracer's lifetime. The mode sees each
aten op below autograd, runs it, and records an :class:`~hookscope.core.records.OpRecord`:
overload name, input and output shapes, phase, FLOPs (``hookscope/flops.py``), and the
call it is attributed to:

- forward ops: the innermost module call running (``tracer.current_call``);
- backward ops: the call whose forward created the autograd node that runs them.
  Autograd numbers nodes in creation order (``Node._sequence_nr()``); the probe notes
  the next number at every call enter and exit, so the call that was innermost when a
  node was created is found by bisection. Only integers are kept: no graph node or
  tensor outlives its use. The phase is backward while an autograd graph task runs.

Ops that other probes run on tensors (``tracer.internal > 0``) are not recorded. Ops
without a FLOP formula that have a ``CompositeImplicitAutograd`` decomposition are
decomposed and their parts recorded, as ``FlopCounterMode`` does (except on nested
tensors, which have kernels of their own for such ops). ``finalize`` fills
``Call.self_flops``/``Call.flops``, ``Trace.totals_flops`` and ``Trace.uncounted_ops``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch._C import DispatchKey
from torch._ops import HigherOrderOperator
from torch.utils._python_dispatch import TorchDispatchMode

from hookscope._flop_rules import FlopFormula, rule_without_formula
from hookscope.core.handles import CallbackHandle
from hookscope.core.records import Call, FlopCount, FlopRule, OpRecord, Phase, TensorMeta, Trace
from hookscope.core.tensors import tensor_meta
from hookscope.errors import SpecError
from hookscope.flops import OpTarget, find_formula, normalize_formulas
from hookscope.probes.base import Probe, register_probe

if TYPE_CHECKING:
    from hookscope.core.handles import Removable
    from hookscope.core.tracer import Tracer

_current_node = torch._C._current_autograd_node
_graph_task_id = torch._C._current_graph_task_id
_next_sequence_nr: Callable[[], int] | None = getattr(
    torch._C._autograd, "_get_sequence_nr", None
)
#: NB: not recorded. ``detach`` is a free alias that autograd itself dispatches while
#: saving tensors for backward, more or fewer times depending on whether saved-tensor
#: hooks (the memory probe's, or the user's ``save_on_cpu``) are active: recording it
#: would make the op log depend on which probes ran.
_DETACH = torch.ops.aten.detach.default
#: ``AccumulateGrad`` nodes carry this sequence number: they belong to no call.
_NO_SEQUENCE_NR = 2**63


class _OpInfo:
    """What the probe needs to know about one operator, computed once per run."""

    __slots__ = ("decompose", "formula", "name", "rule")

    def __init__(self, func: Any, custom: Mapping[Any, FlopFormula]) -> None:
        if isinstance(func, HigherOrderOperator):  # flex_attention, cond, ...: one record
            self.name = f"higher_order.{func._name}"
            self.formula = find_formula(func, custom)
            self.rule = FlopRule.FORMULA if self.formula is not None else FlopRule.UNCOUNTED
            self.decompose = False
            return
        self.name = str(func)
        self.formula = find_formula(func._overloadpacket, custom)
        self.rule = FlopRule.FORMULA if self.formula is not None else rule_without_formula(func)
        self.decompose = self.rule is FlopRule.UNCOUNTED and _has_decomposition(func)


def _has_decomposition(func: torch._ops.OpOverload) -> bool:
    key = DispatchKey.CompositeImplicitAutograd
    return key in func.py_kernels or torch._C._dispatch_has_kernel_for_dispatch_key(
        func._name, key
    )


class _NodeOwners:
    """Which call was innermost when an autograd node with a given sequence number was made."""

    __slots__ = ("_cache", "_calls", "_starts")

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._calls: list[int | None] = []
        self._cache: dict[int, int | None] = {}

    def mark(self, call: int | None) -> None:
        """From now on, new nodes belong to ``call``."""
        if _next_sequence_nr is not None:
            self._starts.append(_next_sequence_nr())
            self._calls.append(call)

    def owner(self, node: Any) -> int | None:
        if node is None or not self._starts:
            return None
        seq: int = node._sequence_nr()
        if seq >= _NO_SEQUENCE_NR:
            return None
        found = self._cache.get(seq, -1)
        if found == -1:
            i = bisect_right(self._starts, seq) - 1
            found = self._calls[i] if i >= 0 else None
            self._cache[seq] = found
        return found

    def clear(self) -> None:
        self._starts.clear()
        self._calls.clear()
        self._cache.clear()


def _tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, torch.Tensor]]:
    """``(path, tensor)`` of the tensor arguments of an op (lists one level deep)."""
    found: list[tuple[str, torch.Tensor]] = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            found.append((f"args[{i}]", a))
        elif isinstance(a, (list, tuple)):
            found.extend(
                (f"args[{i}][{j}]", b) for j, b in enumerate(a) if isinstance(b, torch.Tensor)
            )
    found.extend((f'kwargs["{k}"]', v) for k, v in kwargs.items() if isinstance(v, torch.Tensor))
    return found


def _any_nested(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a tensor argument is a nested tensor: nested tensors have kernels of their
    own for ops with a ``CompositeImplicitAutograd`` decomposition (``aten.linear``),
    and the dense decomposition fails on them."""
    return any(t.is_nested for _, t in _tensors(args, kwargs))


def _outputs(out: Any) -> list[tuple[str, torch.Tensor]]:
    if isinstance(out, torch.Tensor):
        return [("out", out)]
    if isinstance(out, (list, tuple)):
        return [(f"out[{i}]", t) for i, t in enumerate(out) if isinstance(t, torch.Tensor)]
    return []


def _metas(tensors: list[tuple[str, torch.Tensor]]) -> tuple[TensorMeta, ...]:
    try:
        return tuple(tensor_meta(path, t) for path, t in tensors)
    except RuntimeError:  # a tensor without a shape (uninitialized lazy parameter): skip it
        return tuple(_readable_metas(tensors))


def _readable_metas(tensors: list[tuple[str, torch.Tensor]]) -> list[TensorMeta]:
    metas = []
    for path, t in tensors:
        try:
            metas.append(tensor_meta(path, t))
        except RuntimeError:
            continue
    return metas


class _OpsMode(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch: untyped
    """The dispatch mode: run each op, then hand it to the probe.

    Higher-order operators (``flex_attention``, ``cond``) come here too; they run
    without the mode, so they are one record each, their inner ops unseen.
    """

    supports_higher_order_operators = True

    def __init__(self, probe: OpsProbe, tracer: Tracer) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves it untyped
        self._probe = probe
        self._tracer = tracer
        self._infos: dict[Any, _OpInfo] = {}

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if self._tracer.internal or func is _DETACH:
            return func(*args, **kwargs)
        info = self._infos.get(func)
        if info is None:
            info = self._infos[func] = _OpInfo(func, self._probe.formulas)
        if info.decompose and not _any_nested(args, kwargs):
            with self:
                result = func.decompose(*args, **kwargs)
            if result is not NotImplemented:
                return result
        out = func(*args, **kwargs)
        self._probe.record(info, args, kwargs, out)
        return out


@register_probe
class OpsProbe(Probe):
    """Record every aten op with its FLOPs (``Tracer(model, ops=True)``).

    Args:
        formulas: per-run FLOP formulas ``{operator: fn}`` that take precedence over
            every registry, like ``FlopCounterMode(custom_mapping=...)``; pass the probe
            as ``Tracer(model, probes=[OpsProbe(formulas=...)])`` instead of ``ops=True``.

    NB: backward attribution uses autograd's per-thread node numbering, so a forward
    that runs module calls on several threads at once is attributed approximately.
    """

    name = "ops"
    watches_ops = True
    order = 40

    def __init__(self, *, formulas: Mapping[OpTarget, Callable[..., int]] | None = None) -> None:
        self.formulas = normalize_formulas(formulas)
        self._ops: list[OpRecord] = []
        self._owners = _NodeOwners()
        self._errors: dict[str, str] = {}
        self._tracer: Tracer | None = None

    def install(self, tracer: Tracer) -> list[Removable]:
        others = [p for p in tracer.probes if isinstance(p, OpsProbe) and p is not self]
        if others:
            raise SpecError(
                "two ops probes in one tracer (ops=True and an OpsProbe in probes=); "
                "pass only one of them"
            )
        self._tracer = tracer
        self._ops = []
        self._errors = {}
        self._owners.clear()
        self._owners.mark(None)
        mode = _OpsMode(self, tracer)
        mode.__enter__()  # type: ignore[no-untyped-call]  # torch leaves it untyped
        return [CallbackHandle(lambda: _exit_mode(mode))]

    def on_enter(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        self._owners.mark(call.index)

    def on_exit(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
        output: Any, failed: bool,
    ) -> None:
        self._owners.mark(call.parent)

    def record(
        self, info: _OpInfo, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
    ) -> None:
        """Append the record of one executed op (called by the dispatch mode)."""
        if _graph_task_id() == -1:  # no autograd graph task is running
            phase = Phase.FORWARD
            current = self._tracer.current_call if self._tracer is not None else None
            call = None if current is None else current.index
        else:
            phase, call = Phase.BACKWARD, self._owners.owner(_current_node())
        rule, flops = info.rule, None
        if info.formula is not None:
            flops = self._flops(info, args, kwargs, out)
            rule = FlopRule.FORMULA if flops is not None else FlopRule.UNCOUNTED
        elif rule is not FlopRule.UNCOUNTED:
            flops = 0
        self._ops.append(
            OpRecord(
                len(self._ops), info.name, call, phase, _metas(_tensors(args, kwargs)),
                _metas(_outputs(out)), flops, rule is not FlopRule.UNCOUNTED, rule,
            )
        )

    def _flops(
        self, info: _OpInfo, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
    ) -> int | None:
        assert info.formula is not None
        try:
            return int(info.formula(*args, **kwargs, out_val=out))
        except Exception as e:  # a formula that cannot handle these inputs: uncounted
            self._errors.setdefault(info.name, f"{type(e).__name__}: {e}")
            return None

    def finalize(self, trace: Trace) -> None:
        self._owners.clear()
        self._tracer = None
        trace.ops = self._ops
        self._ops = []
        totals, uncounted = _aggregate(trace)
        trace.totals_flops = totals
        trace.uncounted_ops = dict(sorted(uncounted.items()))
        if self._errors:
            trace.meta["flop_formula_errors"] = dict(sorted(self._errors.items()))


def _exit_mode(mode: _OpsMode) -> None:
    mode.__exit__(None, None, None)  # type: ignore[no-untyped-call]  # torch: untyped


def _aggregate(trace: Trace) -> tuple[FlopCount, Counter[str]]:
    """Fill ``self_flops``/``flops`` of every call; return the totals and uncounted ops."""
    calls = trace.calls
    own = [FlopCount() for _ in calls]
    total = FlopCount()
    uncounted: Counter[str] = Counter()
    for op in trace.ops:
        target = own[op.call] if op.call is not None else None
        if op.flops is None:
            uncounted[op.name] += 1
            total.partial = True
            if target is not None:
                target.partial = True
            continue
        for count in (total, target):
            if count is None:
                continue
            if op.phase is Phase.BACKWARD:
                count.backward += op.flops
            else:
                count.forward += op.flops
    inclusive = [FlopCount(f.forward, f.backward, f.partial) for f in own]
    for call in reversed(calls):  # children start after, so have larger indices
        call.self_flops = own[call.index]
        call.flops = inclusive[call.index]
        if call.parent is not None:
            parent = inclusive[call.parent]
            parent.forward += call.flops.forward
            parent.backward += call.flops.backward
            parent.partial = parent.partial or call.flops.partial
    return total, uncounted
