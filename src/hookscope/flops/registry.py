"""FLOP formulas: the registry the ops probe reads, and aggregates over recorded ops.

The ops probe (``probes/ops.py``) asks :func:`find_formula` for every aten op it sees.
Formulas come, first match wins, from the per-run mapping (``OpsProbe(formulas=...)``),
the user's registry (:func:`register_flop_formula`), ``torch.utils.flop_counter``'s
``flop_registry``, and hookscope's table of fused attention kernels
(``hookscope/flops/formulas.py``). A formula is called exactly as ``FlopCounterMode``
calls it: ``formula(*args, **kwargs, out_val=out)``; formulas registered without
``get_raw=True`` receive shapes instead of tensors (``torch.utils.flop_counter``'s
``shape_wrapper``). Ops without a formula are free, 0 by convention, or uncounted
(:func:`~hookscope.flops.op_rules.rule_without_formula`).

Counting follows ``torch.utils.flop_counter``: a multiply-add is 2 FLOPs, MACs are
FLOPs / 2, and only matmul-like work (matmuls, convolutions, attention) is counted.

:func:`by_op` and :func:`ops_of` read a finished :class:`~hookscope.Trace`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from torch.utils import flop_counter as fc

from hookscope.core import torch_private
from hookscope.core.engine.handles import CallbackHandle
from hookscope.core.records.trace import Call, Trace
from hookscope.core.records.values import FlopCount, FlopRule, FlopTotals, OpRecord, Phase
from hookscope.errors import SpecError
from hookscope.flops.formulas import (
    HOOKSCOPE_FORMULAS,
    HOOKSCOPE_OVERRIDES,
    FlopFormula,
    shape_wrapper,
)

__all__ = [
    "FlopFormula",
    "OpTotals",
    "by_op",
    "find_formula",
    "normalize_formulas",
    "ops_of",
    "register_flop_formula",
    "to_packet",
]

OpTarget = Any  # OpOverloadPacket | OpOverload | CustomOpDef | HigherOrderOperator
#: What formulas are keyed by: an ``OpOverloadPacket``, or a ``HigherOrderOperator``.
OpKey = Any

_USER_FORMULAS: dict[OpKey, FlopFormula] = {}


def to_packet(target: OpTarget) -> OpKey:
    """The ``OpOverloadPacket`` of ``torch.ops.ns.op``, one of its overloads, or a custom
    op; a higher-order operator (``flex_attention``) is its own key.

    Raises:
        SpecError: for anything else.
    """
    if isinstance(target, (torch_private.OpOverloadPacket, torch_private.HigherOrderOperator)):
        return target
    if isinstance(target, torch_private.OpOverload):
        return target.overloadpacket
    overload = torch_private.custom_op_overload(target)  # a torch.library.custom_op
    if overload is not None:
        return overload.overloadpacket
    raise SpecError(
        f"expected an operator such as torch.ops.aten.mm, torch.ops.mylib.foo.default or a "
        f"torch.library.custom_op, got {target!r} of type {type(target).__name__}"
    )


def _wrap(fn: Callable[..., int], *, get_raw: bool) -> FlopFormula:
    if not callable(fn):
        raise SpecError(f"a FLOP formula must be callable, got {fn!r}")
    if get_raw or getattr(fn, "_get_raw", False):
        return fn
    return shape_wrapper(fn)


def _builtin_formula(packet: OpKey) -> tuple[FlopFormula | None, str]:
    override = HOOKSCOPE_OVERRIDES.get(packet)
    if override is not None:
        return override, "hookscope"
    formula = fc.flop_registry.get(packet)
    if formula is not None:
        return formula, "torch.utils.flop_counter"
    return HOOKSCOPE_FORMULAS.get(packet), "hookscope"


def register_flop_formula(
    target: OpTarget, fn: Callable[..., int], *, get_raw: bool = False
) -> CallbackHandle:
    """Count ``target``'s FLOPs with ``fn`` in every later trace.

    ``fn`` has the signature of ``torch.utils.flop_counter``'s formulas:
    ``fn(*arg_shapes, out_shape=..., **kwargs) -> int`` where every tensor argument is
    replaced by its shape, or, with ``get_raw=True``,
    ``fn(*args, out_val=out, **kwargs) -> int`` with the tensors themselves.

    Args:
        target: the operator: ``torch.ops.mylib.foo``, one of its overloads, or the
            object ``torch.library.custom_op`` returned.
        fn: the formula.
        get_raw: pass tensors instead of shapes.

    Returns:
        A handle; ``remove()`` (or leaving it as a context manager) unregisters ``fn``.

    Raises:
        SpecError: ``target`` is not an operator, or already has a formula here or in
            ``torch.utils.flop_counter`` (override per run with ``OpsProbe(formulas=)``).

    Example:
        >>> def foo_flop(x_shape, w_shape, *, out_shape=None):
        ...     return 2 * x_shape[0] * x_shape[1] * w_shape[1]
        >>> handle = hookscope.register_flop_formula(torch.ops.mylib.foo, foo_flop)
    """
    packet = to_packet(target)
    formula = _wrap(fn, get_raw=get_raw)
    owner = "hookscope.register_flop_formula" if packet in _USER_FORMULAS else None
    if owner is None and _builtin_formula(packet)[0] is not None:
        owner = _builtin_formula(packet)[1]
    if owner is not None:
        raise SpecError(
            f"a FLOP formula for {packet} is already registered (by {owner}); remove that "
            f"registration first, or override it for one run with OpsProbe(formulas=...)"
        )
    _USER_FORMULAS[packet] = formula

    def unregister() -> None:
        if _USER_FORMULAS.get(packet) is formula:
            del _USER_FORMULAS[packet]

    return CallbackHandle(unregister)


def normalize_formulas(
    formulas: Mapping[OpTarget, Callable[..., int]] | None,
) -> dict[OpKey, FlopFormula]:
    """Per-run formulas keyed by packet, shape-wrapped unless marked ``_get_raw``.

    Mirrors ``FlopCounterMode(custom_mapping=...)``.
    """
    if formulas is None:
        return {}
    if not isinstance(formulas, Mapping):
        raise SpecError(f"formulas must map operators to FLOP formulas, got {formulas!r}")
    return {to_packet(k): _wrap(v, get_raw=False) for k, v in formulas.items()}


def find_formula(
    packet: OpKey,
    custom: Mapping[OpKey, FlopFormula],
) -> FlopFormula | None:
    """The formula for ``packet``: per-run, user, torch's registry, then hookscope's."""
    formula = custom.get(packet) or _USER_FORMULAS.get(packet)
    return formula if formula is not None else _builtin_formula(packet)[0]


# -- aggregates over a trace ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpTotals(FlopTotals):
    """Executions and FLOPs of one op type (see :func:`by_op`).

    Attributes:
        count: executions, forward and backward.
        forward: FLOPs of its forward executions (known ones only).
        backward: FLOPs of its backward executions (known ones only).
        count_forward: executions in the forward phase.
        count_backward: executions in the backward phase.
        uncounted: executions whose FLOPs are unknown (no formula).
        rule: how its FLOPs were counted (``UNCOUNTED`` if any execution was).
    """

    count: int
    forward: int
    backward: int
    count_forward: int
    count_backward: int
    uncounted: int
    rule: FlopRule


def subtree_indices(trace: Trace, call: Call | int) -> set[int]:
    """Indices of ``call`` and every call nested in it."""
    root = call if isinstance(call, int) else call.index
    found, todo = set(), [root]
    while todo:
        i = todo.pop()
        found.add(i)
        todo.extend(trace.calls[i].children)
    return found


def ops_of(trace: Trace, call: Call | int, *, subtree: bool = False) -> list[OpRecord]:
    """Ops attributed to ``call`` (forward and backward), or to its whole subtree."""
    if subtree:
        wanted = subtree_indices(trace, call)
        return [op for op in trace.ops if op.call in wanted]
    index = call if isinstance(call, int) else call.index
    return [op for op in trace.ops if op.call == index]


def _totals(ops: Iterable[OpRecord]) -> OpTotals:
    fwd = bwd = n_fwd = n_bwd = unknown = 0
    rule: FlopRule | None = None
    for op in ops:
        backward = op.phase is Phase.BACKWARD
        n_bwd += backward
        n_fwd += not backward
        if op.flops is None:
            unknown += 1
        elif backward:
            bwd += op.flops
        else:
            fwd += op.flops
        rule = FlopRule.UNCOUNTED if op.flops is None else (rule or op.rule)
    return OpTotals(n_fwd + n_bwd, fwd, bwd, n_fwd, n_bwd, unknown, rule or FlopRule.FREE)


def by_op(trace: Trace, *, call: Call | int | None = None) -> dict[str, OpTotals]:
    """Totals per op name, heaviest first (FLOPs, then executions, then name).

    Args:
        trace: a trace recorded with ``ops=True``.
        call: only the ops of this call's subtree (``None``: every op).
    """
    ops = trace.ops if call is None else ops_of(trace, call, subtree=True)
    groups: dict[str, list[OpRecord]] = {}
    for op in ops:
        groups.setdefault(op.name, []).append(op)
    totals = {name: _totals(group) for name, group in groups.items()}
    order = sorted(totals, key=lambda n: (-totals[n].total, -totals[n].count, n))
    return {name: totals[name] for name in order}


def flops_text(f: FlopCount | None, backward: bool) -> str:
    """A call's FLOPs as a table cell: the exact count (``1,234``), with ``+`` when an op
    without a formula ran inside (a lower bound); ``None`` (not counted) -> empty.

    The ops probe's columns and the renderers' tables show FLOPs through this one
    function, so a lower bound reads the same everywhere.
    """
    if f is None:
        return ""
    return f"{f.backward if backward else f.forward:,}" + ("+" if f.partial else "")
