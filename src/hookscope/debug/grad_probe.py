"""The probe of an anomaly hunt with ``backward=True``: the forward's checks
(:class:`~hookscope.debug.nonfinite.NonFiniteProbe`), then the backward's.

In the backward, the first non-finite gradient is found where it was made: the
autograd node that computed it from finite gradients (``debug/grad_nodes.py``), with
the module call whose forward made that node and the line of the model's code. The
gradients of each call's outputs and inputs, and of each parameter, are checked too,
as the backward delivers them: what ``collect_all`` lists after the node, and what
names a gradient made in a graph the hunt did not hook (a loss computed outside
:func:`~hookscope.find_anomaly`, in a loop under :func:`~hookscope.detect_anomaly`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hookscope.core.engine.handles import CallbackHandle
from hookscope.core.records.tensor_paths import iter_tensors
from hookscope.debug.anomaly_records import Anomaly, AnomalyKind, BackwardNode
from hookscope.debug.checks import all_finite, counts
from hookscope.debug.grad_nodes import NodeHunt, forward_op, user_line
from hookscope.debug.nonfinite import NonFiniteError, NonFiniteProbe, tensor_stats
from hookscope.debug.stops import at_backward_node

if TYPE_CHECKING:
    from hookscope.core.engine.handles import Removable
    from hookscope.core.engine.tracer import Tracer
    from hookscope.core.records.trace import Call
    from hookscope.core.records.values import ParamGrad, TensorStats


class NonFiniteGradProbe(NonFiniteProbe):
    """:class:`NonFiniteProbe` that also checks gradients, in backward order: first the
    autograd node that made a non-finite gradient from finite ones
    (``debug/grad_nodes.py``), then the gradients of each call and parameter."""

    def __init__(self, *, collect_all: bool = False, ops: bool = True, pdb: bool = False,
                 node_stacks: bool = True) -> None:
        """``node_stacks=False``: record no forward stacks on the nodes (the caller reads
        the found node's line from a second forward: ``grad_nodes.py``); a debugger
        opened at the node shows its line, so ``pdb`` records them."""
        super().__init__(collect_all=collect_all, ops=ops, pdb=pdb)
        self.node_stacks = node_stacks or pdb

    def install(self, tracer: Tracer) -> list[Removable]:
        handles = super().install(tracer)
        self.hunt = NodeHunt(self._node_found, stacks=self.node_stacks)
        return [*handles, CallbackHandle(self.hunt.remove)]

    def on_enter(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        if call.parent is None:
            self.hunt.forward_starts()
        super().on_enter(call, module, args, kwargs)

    def on_exit(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
        output: Any, failed: bool,
    ) -> None:
        try:
            super().on_exit(call, module, args, kwargs, output, failed)
        finally:
            if call.parent is None:
                outputs = () if failed else iter_tensors(output, "out")
                self.hunt.forward_ends(t for _, t in outputs)

    def _node_found(
        self, node: Any, index: int, grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...],
    ) -> None:
        tracer = self._tracer
        assert tracer is not None
        with tracer.internal_work():  # its reads are not the model's ops
            owner = tracer.node_owner(node)
            trace = tracer.trace
            call = None if owner is None or trace is None else trace.calls[owner]
            found = BackwardNode(
                str(node.name()), forward_op(node), user_line(node),
                _grad_stats("grad_out", grad_outputs), _grad_stats("grad_in", grad_inputs),
            )
            g = grad_inputs[index]
            nans, infs = counts(g)
        anomaly = Anomaly(
            AnomalyKind.BACKWARD_NODE, "backward", call.path if call else "",
            call.module_class if call else "", call.call_index if call else None, owner,
            f"grad_in[{index}]", g.numel(), nans or 0, infs or 0, node=found,
        )
        if self.pdb:
            module = tracer.model.get_submodule(call.path) if call is not None else None
            self._debug(anomaly, at_backward_node, module, anomaly.path, node, grad_inputs,
                        grad_outputs)
        try:
            self._found(anomaly)
        except NonFiniteError as e:
            e.locate(self.name, call)
            raise

    def on_backward_enter(self, call: Call, grad_outputs: tuple[Any, ...]) -> None:
        self._grads(call, grad_outputs, AnomalyKind.GRAD_OUTPUT, "grad_out")

    def on_backward_exit(self, call: Call, grad_inputs: tuple[Any, ...]) -> None:
        self._grads(call, grad_inputs, AnomalyKind.GRAD_INPUT, "grad_in")

    def on_param_grad(self, grad: ParamGrad) -> None:
        g = grad.grad
        if g is None or all_finite(g):
            return
        owner = grad.path.rpartition(".")[0]
        trace = None if self._tracer is None else self._tracer.trace
        info = None if trace is None else trace.modules.get(owner)
        nans, infs = counts(g)
        self._found(Anomaly(
            AnomalyKind.PARAM_GRAD, "backward", owner, info.class_name if info else "",
            None, None, grad.path, g.numel(), nans or 0, infs or 0,
            op=self.findings.backward, parameter=grad.path,
        ))

    def _grads(self, call: Call, grads: tuple[Any, ...], kind: AnomalyKind, root: str) -> None:
        for i, g in enumerate(grads):
            if isinstance(g, torch.Tensor) and not all_finite(g):
                nans, infs = counts(g)
                self._found(Anomaly(
                    kind, "backward", call.path, call.module_class, call.call_index,
                    call.index, f"{root}[{i}]", g.numel(), nans or 0, infs or 0,
                    op=self.findings.backward,
                ))
                return


def _grad_stats(root: str, grads: tuple[Any, ...]) -> tuple[TensorStats, ...]:
    """Statistics of each gradient tensor of a node (``None``: none flowed there)."""
    return tuple(tensor_stats(f"{root}[{i}]", g) for i, g in enumerate(grads)
                 if isinstance(g, torch.Tensor))
