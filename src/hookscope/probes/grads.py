"""Gradients probe: what the backward pass computed, per parameter and per module call.

Switched on by ``hookscope.trace(..., backward=True)`` (and ``hookscope trace
--backward``), or by ``Tracer(model, grads=True)`` around the user's own backward. It
is made of backward events only (``core/engine/backward.py`` delivers them; the probe
registers no hook):

- ``on_backward_enter(call, grad_outputs)``: the gradient with respect to the call's
  outputs is known, the start of the call's backward: its norm
  (``grad_output_norm``) and the start time;
- ``on_backward_exit(call, grad_inputs)``: the gradient with respect to its inputs,
  the end of its backward: its norm (``grad_input_norm``) and the backward time
  (``backward_ns``, inclusive; ``backward_self_ns`` = inclusive minus the direct
  children's, set in ``finalize``; none on the meta device, where nothing runs);
- ``on_param_grad``: per parameter, the norm, max-abs, mean, NaN and Inf counts of its
  gradient (after accumulation for ``.backward()``; FSDP2's sharded gradient is
  all-gathered first: the full parameter's).

Every value is computed on the gradient's own device and kept there as a 0-d
tensor (``probes/grad_values.py``); ``finalize`` moves them to the host in one
transfer per device. How (``probes/grad_norms.py``): on the CPU without a float64 copy
of each gradient, norms to better than 1e-6 relative, max-abs exact, the mean torch's
float32 mean (its absolute error about 1e-7 of the mean magnitude); on an accelerator
all from a float64 copy. A sparse gradient's statistics cover all its elements,
implicit zeros too; a complex one's are of its magnitudes (the mean is the mean
magnitude). The parameter list (``trace.param_grads``, records of
``probes/grad_records.py``) also holds parameters that got no gradient: ``frozen``
(``requires_grad=False``: no gradient, said so, not zero), ``unused``
(``requires_grad=True``, no gradient arrived although a backward that asked for every
parameter ran: what DDP's ``find_unused_parameters`` error is about) and
``no_backward`` (no backward asked for its gradient: none ran, or only
``torch.autograd.grad`` for other tensors, and the model's outputs depend on it). A
tied parameter is one entry, at its first path, with the other paths as ``aliases``.

NB: backward times are host times (``perf_counter_ns``): exact on the CPU; on CUDA
they time kernel launches, not the GPU's work. The probes' work in backward events
(this probe's and every other probe's of the tracer: ``Tracer.backward_overhead_now``)
is subtracted from them; the engine's own bookkeeping around them is not (small).
A call's backward runs from the moment its outputs' gradient is known to the moment
the last autograd node its forward made finishes (``Tracer.backward_end``): a branch
(a ResNet ``downsample``) is not charged for the other branch, nor the first layer of
an image model (whose inputs need no gradient) for the rest of the pass. Where the
engine cannot tell (none of the call's nodes ran, or torch has no sequence numbers),
it ends when the gradient of all its inputs is known, or with the pass.
"""

from __future__ import annotations

import warnings
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

import torch

from hookscope.core import torch_private
from hookscope.core.engine.probe import Probe, register_probe
from hookscope.core.engine.run_backward import backward_roots
from hookscope.core.internal import outside_hookscope
from hookscope.core.meta import is_on_meta
from hookscope.core.records.facts import Column, Fact, Field, Unit, set_exclusive
from hookscope.core.records.value_json import float_in, float_out
from hookscope.probes.grad_records import ParamGradStats, _ParamSlot, _stats_in, _stats_out
from hookscope.probes.grad_values import _grad_stats, _joint_norm, _skipped_batched, _to_host

if TYPE_CHECKING:
    from torch import nn

    from hookscope.core.engine.handles import Removable
    from hookscope.core.engine.tracer import Tracer
    from hookscope.core.records.trace import Call, Trace
    from hookscope.core.records.values import ParamGrad

__all__ = ["GradsProbe", "ParamGradStats"]


def _fact(name: str) -> Any:
    return lambda c, t: c.facts.get(name)


@register_probe
class GradsProbe(Probe):
    """Record gradient norms per call and gradient statistics per parameter."""

    name = "grads"
    install_touches_modules = False
    order = 80  # just inside the timing probe: its work is not part of a forward time
    uses_backward_end = True
    column_rank = 60
    facts = (
        Fact("grad_output_norm", "L2 norm of the gradient w.r.t. the call's outputs",
             float_out, float_in),
        Fact("grad_input_norm", "L2 norm of the gradient w.r.t. the call's inputs",
             float_out, float_in),
        Fact("backward_ns", "time of the call's backward, inclusive, in nanoseconds",
             timing=True),
        Fact("backward_self_ns", "backward time minus the direct children's, in ns",
             timing=True),
    )
    trace_facts = (
        Fact("param_grads", "per parameter: gradient norm, max-abs, mean, NaN/Inf counts",
             encode=_stats_out, decode=_stats_in, default_factory=list),
    )
    columns = (
        Column("grad_out", "|grad out|", _fact("grad_output_norm"), Unit.STAT),
        Column("grad_in", "|grad in|", _fact("grad_input_norm"), Unit.STAT),
        # none on the meta device (nothing runs there): not shown by default then
        Column("bwd_time", "Bwd time", _fact("backward_ns"), Unit.TIME_NS, when_present=True),
        Column("bwd_self_time", "Bwd self", _fact("backward_self_ns"), Unit.TIME_NS,
               when_present=True),
    )
    fields = (
        Field("grad_output_norm", _fact("grad_output_norm"), column="grad_out"),
        Field("grad_input_norm", _fact("grad_input_norm"), column="grad_in"),
        Field("backward_ns", _fact("backward_ns"), "Int64", column="bwd_time"),
        Field("backward_self_ns", _fact("backward_self_ns"), "Int64", column="bwd_self_time"),
    )

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._params: dict[int, _ParamSlot] = {}
        self._norms: list[tuple[Call, str, torch.Tensor]] = []
        # call index -> (start ns, the engine's backward overhead clock then)
        self._open: dict[int, tuple[int, int]] = {}
        self._backward_seen = False
        # which parameters the model's outputs depend on (``_reachable``, walked when an
        # outermost call ends), for those that get no gradient from a
        # backward that asked for some parameters only; ``None`` until such an output
        self._reached: set[int] | None = None
        # the nodes walked since the last backward started (held: no id is reused):
        # a graph is let go once a backward runs, not kept for the block
        self._walked: dict[int, Any] = {}
        self._accumulated = False  # a backward accumulated into .grad (``.backward()``)
        self._tracer: Tracer | None = None
        self._timed = True  # not on the meta device, where nothing runs to be timed

    def install(self, tracer: Tracer) -> list[Removable]:
        self._reset()  # a probe instance may serve several runs
        self._tracer = tracer
        self._timed = not is_on_meta(tracer.model)
        for path, p in tracer.model.named_parameters(remove_duplicate=False):
            slot = self._params.get(id(p))
            if slot is None:
                self._params[id(p)] = _ParamSlot(path, tuple(p.shape), p.requires_grad,
                                                  param=None if p.requires_grad else p)
            else:
                slot.aliases.append(path)
        return []

    def on_exit(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
        output: Any, failed: bool,
    ) -> None:
        # the outermost calls: the model's root, or with select= each outermost selected
        # call (one walk for all of them, each node visited once: a walk below each
        # from scratch would be quadratic)
        if call.parent is None and not failed and torch.is_grad_enabled():
            roots = [t.grad_fn if t.grad_fn is not None else t for t in backward_roots(output)]
            if roots:
                if self._reached is None:
                    self._reached = set()
                _reachable(roots, self._reached, self._walked)

    def on_backward_enter(self, call: Call, grad_outputs: tuple[Any, ...]) -> None:
        self._walked = {}  # the graph walked is being consumed: let its nodes go
        norm = _joint_norm(grad_outputs)
        if norm is not None:
            self._norms.append((call, "grad_output_norm", norm))
        if not self._timed:
            return
        tracer = self._tracer
        assert tracer is not None
        now = perf_counter_ns()
        self._open[call.index] = (now, tracer.backward_overhead_now(now))

    def on_backward_exit(self, call: Call, grad_inputs: tuple[Any, ...]) -> None:
        now = perf_counter_ns()
        opened = self._open.pop(call.index, None)
        tracer = self._tracer
        assert tracer is not None
        end = tracer.backward_end(call)  # the call's own last node, when known
        if opened is not None:
            # every probe's work in backward events meanwhile is hookscope's
            if end is None:
                overhead = tracer.backward_overhead_now(now) - opened[1]
            else:
                now, overhead = end[0], end[1] - opened[1]
            spent = now - opened[0] - overhead
            call.facts["backward_ns"] = (call.facts.get("backward_ns") or 0) + max(0, spent)
        norm = _joint_norm(grad_inputs)
        if norm is not None:
            self._norms.append((call, "grad_input_norm", norm))

    def on_param_grad(self, grad: ParamGrad) -> None:
        self._backward_seen = True
        self._accumulated = self._accumulated or grad.accumulated
        slot = self._params.get(id(grad.param))
        if slot is not None and isinstance(grad.grad, torch.Tensor):
            # a gradient on the meta device has a shape but no values to measure, and
            # a batched one (is_grads_batched) a batch of them
            if torch_private.batched(grad.grad):  # a batch of gradients: no numbers,
                _skipped_batched()  # nor does it erase those of a real one before it
                slot.events += 1
                return
            slot.values = None if grad.grad.is_meta else _grad_stats(_full(grad.grad))
            slot.events += 1

    def finalize(self, trace: Trace) -> None:
        values = [n for _, _, n in self._norms]
        values += [s.values for s in self._params.values() if s.values is not None]
        host = iter(_to_host(values))
        for call, name, _ in self._norms:
            call.facts[name] = next(host)[0]
        # a parameter that got no gradient although a backward ran is unused (what DDP
        # means: not used to produce the loss) when that backward asked for every
        # parameter: ``.backward()``, or ``trace(backward=True)`` (the tracer runs
        # nothing but the model and its backward). Where only torch.autograd.grad ran
        # in the user's block, one the outputs depend on was not asked for
        tracer = self._tracer
        asked_all = self._accumulated or (tracer is not None and tracer.exclusive)
        reached = None if asked_all else self._reached
        records: list[ParamGradStats] = []
        for key, slot in self._params.items():
            stats = next(host) if slot.values is not None else None
            used = None if reached is None else key in reached
            records.append(slot.record(stats, self._backward_seen, used))
        trace.facts["param_grads"] = records
        thawed = [s.path for s in self._params.values()
                  if s.param is not None and s.param.requires_grad]
        if thawed:  # what is watched is decided when the block starts
            warnings.warn(
                f"hookscope: {len(thawed)} parameter(s) frozen when the block started were "
                f"unfrozen inside it ({', '.join(thawed[:3])}{', ...' if len(thawed) > 3 else ''})"
                ": their gradients are not recorded (reported 'frozen'); set requires_grad "
                "before entering the Tracer to record them", UserWarning,
                stacklevel=outside_hookscope())
        _set_self_times(trace)
        self._norms, self._params, self._reached, self._walked = [], {}, None, {}
        self._accumulated = False
        self._tracer = None


def _full(grad: torch.Tensor) -> torch.Tensor:
    """The whole gradient of a sharded one (FSDP2 puts a ``DTensor`` shard of the
    reduce-scattered gradient into ``.grad`` and runs its post-accumulate hooks): an
    all-gather, which every rank makes in the same order, that of FSDP's own
    reduce-scatters in their backward. NB: it holds one full gradient at a time."""
    if hasattr(grad, "device_mesh") and hasattr(grad, "full_tensor"):
        return grad.full_tensor()  # type: ignore[no-any-return]
    return grad


def _reachable(roots: list[Any], found: set[int], seen: dict[int, Any]) -> None:
    """Add to ``found`` the ``id`` of every leaf tensor the autograd graph below
    ``roots`` (nodes, or leaf tensors themselves) accumulates into, not walking again
    below a node in ``seen`` (which holds the nodes: no id is reused meanwhile)."""
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        if isinstance(node, torch.Tensor):
            found.add(id(node))
            continue
        variable = getattr(node, "variable", None)  # an AccumulateGrad node
        if isinstance(variable, torch.Tensor):
            found.add(id(variable))
        stack += [n for n, _ in getattr(node, "next_functions", ())]




def _set_self_times(trace: Trace) -> None:
    """Self times; first, a call's backward time is made at least each child's.

    NB: a child's backward is part of its parent's, but a parent that returns its
    child's output unchanged gets the gradient from the same tensor, through a hook
    that runs after the child's: its start is read later, by the child's hook work
    (about 20 µs), and its time would come out below its child's."""
    calls = trace.calls
    for call in reversed(calls):  # children start after their parent: done first
        total = call.facts.get("backward_ns")
        if total is None or not call.children:
            continue
        inner = max((calls[i].facts.get("backward_ns") or 0 for i in call.children), default=0)
        if inner > total:
            call.facts["backward_ns"] = inner
    set_exclusive(calls, "backward_ns", "backward_self_ns")
