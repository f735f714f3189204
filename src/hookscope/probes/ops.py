"""Ops probe: every aten op the model runs, its FLOPs, and the module call it belongs to.

``install`` enters a ``TorchDispatchMode`` for the tracer's lifetime. The mode sees each
aten op below autograd, runs it, and records an :class:`~hookscope.core.records.values.OpRecord`:
overload name, input and output shapes, phase, FLOPs (``hookscope/flops/registry.py``), its
start and host time (two ``time.perf_counter_ns`` reads around the op, on the clock of the
calls' ``start_ns``; on CUDA the time of the launch, not of the kernel), and the
call it is attributed to:

- forward ops: the innermost module call running (``tracer.current_call``);
- backward ops: the call whose forward created the autograd node that runs them
  (``Tracer.node_owner``: the engine notes autograd's node numbers at every call enter
  and exit while a probe watches ops). The phase is backward while an autograd graph
  task runs.

Ops that probes run on tensors themselves (``core/internal.py``'s ``internal_work``, which the
engine sets around every probe event) are not recorded. Ops
without a FLOP formula that have a ``CompositeImplicitAutograd`` decomposition are
decomposed and their parts recorded, as ``FlopCounterMode`` does (except on nested
tensors, which have kernels of their own for such ops). ``finalize`` fills
the facts ``self_flops``/``flops`` of every call and ``totals_flops``, ``uncounted_ops``,
``ops`` (and ``flop_formula_errors``) of the trace.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

import torch

from hookscope.core import torch_private
from hookscope.core.engine.handles import CallbackHandle
from hookscope.core.engine.probe import Probe, register_probe
from hookscope.core.engine.tracer import is_internal
from hookscope.core.records.facts import Column, Fact, Field, Unit
from hookscope.core.records.tensor_paths import tensor_meta
from hookscope.core.records.trace import Call, Trace
from hookscope.core.records.value_json import flops_in, flops_out, ops_in, ops_out
from hookscope.core.records.values import FlopCount, FlopRule, OpRecord, Phase, TensorMeta
from hookscope.errors import SpecError
from hookscope.flops.collectives import collective_bytes, is_collective
from hookscope.flops.op_rules import FlopFormula, is_floating_op, rule_without_formula
from hookscope.flops.registry import OpTarget, find_formula, flops_text, normalize_formulas
from hookscope.probes.flop_totals import aggregate_flops

if TYPE_CHECKING:
    from hookscope.core.engine.handles import Removable
    from hookscope.core.engine.tracer import Tracer

#: Not recorded: ``detach`` is a free alias that autograd itself dispatches while
#: saving tensors for backward, more or fewer times depending on whether saved-tensor
#: hooks (the memory probe's, or the user's ``save_on_cpu``) are active: recording it
#: would make the op log depend on which probes ran.
_DETACH = torch.ops.aten.detach.default


class _OpInfo:
    """What the probe needs to know about one operator, computed once per run."""

    __slots__ = ("decompose", "formula", "name", "rule")

    def __init__(self, func: Any, custom: Mapping[Any, FlopFormula]) -> None:
        # a higher-order operator (flex_attention, cond, ...) is one record
        if isinstance(func, torch_private.HigherOrderOperator):
            self.name = f"higher_order.{func.name()}"  # type: ignore[no-untyped-call]  # torch: untyped
            self.formula = find_formula(func, custom)
            self.rule = FlopRule.FORMULA if self.formula is not None else FlopRule.UNCOUNTED
            self.decompose = False
            return
        self.name = str(func)
        self.formula = find_formula(func.overloadpacket, custom)
        self.rule = FlopRule.FORMULA if self.formula is not None else rule_without_formula(func)
        self.decompose = self.rule is FlopRule.UNCOUNTED and _has_decomposition(func)


def _has_decomposition(func: torch_private.OpOverload) -> bool:
    return torch_private.dispatch_has_composite_kernel(func)


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


@torch_private.unwrapped_dispatch_mode
class _OpsMode(torch_private.TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch: untyped
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
        run = tracer.run
        self._origin = 0 if run is None else run.origin_ns

    def __torch_dispatch__(
        self,
        func: torch_private.OpOverload,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is _DETACH or is_internal():
            return func(*args, **kwargs)
        info = self._infos.get(func)
        if info is None:
            info = self._infos[func] = _OpInfo(func, self._probe.formulas)
        if info.decompose and not _any_nested(args, kwargs):
            with self:
                result = func.decompose(*args, **kwargs)
            if result is not NotImplemented:
                return result
        # NB: host time around the call: on CUDA the launch, not the kernel (which runs
        # later, asynchronously); the time probe's CUDA events time the kernels per call.
        start = perf_counter_ns()
        out = func(*args, **kwargs)
        end = perf_counter_ns()
        self._probe.record(info, args, kwargs, out, start - self._origin, end - start)
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
    install_touches_modules = False
    watches_ops = True
    order = 40
    column_rank = 50
    facts = (
        Fact("flops", "FLOPs of the call's subtree, forward and backward (FlopCount)",
             flops_out, flops_in),
        Fact("self_flops", "FLOPs of the call's own ops (FlopCount)", flops_out, flops_in),
        Fact("comm_bytes", "bytes of the collectives (all-reduce, all-gather, ...) the "
             "call's own ops issued (flops/collectives.py)"),
    )
    trace_facts = (
        Fact("ops", "every aten op, in order (OpRecord)", ops_out, ops_in,
             default_factory=list),
        Fact("totals_flops", "FLOPs of the whole run (FlopCount)", flops_out, flops_in),
        Fact("uncounted_ops", "op name -> executions without a FLOP formula",
             default_factory=dict),
        Fact("flop_formula_errors", "op name -> why its formula failed", default_factory=dict),
    )
    columns = (
        Column("flops_fwd", "FLOPs", lambda c, t: _flops(c, False), Unit.COUNT,
               text=lambda c, t: flops_text(c.facts.get("flops"), False),
               footer=lambda t: flops_text(_shown_total(t), False)),
        Column("flops_bwd", "FLOPs bwd", lambda c, t: _flops(c, True), Unit.COUNT,
               text=lambda c, t: flops_text(c.facts.get("flops"), True),
               footer=lambda t: flops_text(_shown_total(t), True),
               when_present=True),
        Column("comm_bytes", "Comm bytes", lambda c, t: c.facts.get("comm_bytes"),
               Unit.BYTES, when_present=True),
    )
    fields = (
        Field("flops_forward", lambda c, t: _flops(c, False), "Int64", column="flops_fwd"),
        Field("flops_backward", lambda c, t: _flops(c, True), "Int64", column="flops_bwd"),
        Field("flops_partial", lambda c, t: _flop_attr(c, "partial"), "boolean"),
        Field("comm_bytes", lambda c, t: c.facts.get("comm_bytes"), "Int64",
              column="comm_bytes"),
    )

    def __init__(self, *, formulas: Mapping[OpTarget, Callable[..., int]] | None = None) -> None:
        self.formulas = normalize_formulas(formulas)
        self._ops: list[OpRecord] = []
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
        mode = _OpsMode(self, tracer)
        mode.__enter__()  # type: ignore[no-untyped-call]  # torch leaves it untyped
        return [CallbackHandle(lambda: _exit_mode(mode))]

    def record(
        self, info: _OpInfo, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any,
        start_ns: int | None = None, time_ns: int | None = None,
    ) -> None:
        """Append the record of one executed op (called by the dispatch mode), with its
        start on the trace's clock and its host time, when measured."""
        tracer = self._tracer
        assert tracer is not None
        if not torch_private.graph_task_running():
            phase = Phase.FORWARD
            current = tracer.current_call
            call = None if current is None else current.index
        else:
            node = torch_private.current_autograd_node()
            phase, call = Phase.BACKWARD, tracer.node_owner(node)
        rule, flops = info.rule, None
        tensors = _tensors(args, kwargs)
        if rule is FlopRule.UNCOUNTED and not is_floating_op([t for _, t in tensors]):
            rule = FlopRule.FREE  # integer or bool tensors: no floating-point work
        if info.formula is not None:
            flops = self._flops(info, args, kwargs, out)
            rule = FlopRule.FORMULA if flops is not None else FlopRule.UNCOUNTED
        elif rule is not FlopRule.UNCOUNTED:
            flops = 0
        self._ops.append(
            OpRecord(
                len(self._ops), info.name, call, phase, _metas(tensors),
                _metas(_outputs(out)), flops, rule is not FlopRule.UNCOUNTED, rule,
                start_ns, time_ns,
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
        self._tracer = None
        facts = trace.facts
        facts["ops"], self._ops = self._ops, []
        _add_comm_bytes(trace)
        totals, uncounted = aggregate_flops(trace)
        facts["totals_flops"] = totals
        facts["uncounted_ops"] = dict(sorted(uncounted.items()))
        if self._errors:
            facts["flop_formula_errors"] = dict(sorted(self._errors.items()))


def _add_comm_bytes(trace: Trace) -> None:
    """Each call's ``comm_bytes``: the sizes of the collectives among its own ops."""
    for op in trace.facts["ops"]:
        if op.call is not None and is_collective(op.name):
            facts = trace.calls[op.call].facts
            moved = collective_bytes((*op.inputs, *op.outputs))
            facts["comm_bytes"] = facts.get("comm_bytes", 0) + moved


def _exit_mode(mode: _OpsMode) -> None:
    mode.__exit__(None, None, None)  # type: ignore[no-untyped-call]  # torch: untyped


def _flop_attr(call: Call, attr: str) -> Any:
    f = call.facts.get("flops")
    return None if f is None else getattr(f, attr)


def _flops(call: Call, backward: bool) -> int | None:
    value: int | None = _flop_attr(call, "backward" if backward else "forward")
    return value


def _shown_total(trace: Trace) -> FlopCount | None:
    """The footer's total: the top-level calls' FLOPs, as the time column's (with
    ``select=``, or ops of the ``Tracer`` block outside the model, the whole run's
    ``totals_flops`` is more: the ops table says that one)."""
    found = [c.facts.get("flops") for c in trace.roots]
    counts: list[FlopCount] = [f for f in found if f is not None]
    if not counts or len(counts) < len(found):
        total: FlopCount | None = trace.facts.get("totals_flops")
        return total
    return FlopCount(
        forward=sum(f.forward for f in counts), backward=sum(f.backward for f in counts),
        partial=any(f.partial for f in counts),
    )


