"""The first non-finite value, in one call or around the user's own loop.

:func:`find_anomaly` is the one-call form (a ``hookscope.trace`` with only the
non-finite probe, ``debug/nonfinite.py``); :func:`detect_anomaly` wraps the user's own
loop. Both find the first module call, in execution order, whose output (or
gradient) holds a NaN or an Inf, and the aten op inside it that produced the value;
the run stops there. The report (``debug/anomaly_records.py``) prints through
``hookscope.render.anomaly_report``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from hookscope.api.tracing import trace as _trace
from hookscope.core import torch_private
from hookscope.core.engine.run_facts import cuda_devices
from hookscope.core.meta import is_on_meta
from hookscope.core.model.module_table import module_table
from hookscope.core.model.state import ModelState
from hookscope.core.model.structure import check_model
from hookscope.core.options import check_flags
from hookscope.core.records.tensor_paths import iter_tensors
from hookscope.debug.anomaly_records import AnomalyReport
from hookscope.debug.grad_nodes import node_lines_of_rerun
from hookscope.debug.grad_probe import NonFiniteGradProbe
from hookscope.debug.nonfinite import NonFiniteError, NonFiniteProbe
from hookscope.errors import SpecError

__all__ = [
    "NonFiniteError", "NonFiniteGradProbe", "NonFiniteProbe", "detect_anomaly",
    "find_anomaly",
]


def find_anomaly(
    model: nn.Module,
    *inputs: Any,
    kwargs: dict[str, Any] | None = None,
    backward: bool = False,
    loss: Callable[[Any], torch.Tensor] | None = None,
    collect_all: bool = False,
    ops: bool = True,
    pdb: bool = False,
) -> AnomalyReport | None:
    """Run the model once and find the first module call whose output holds NaN or Inf.

    Calls are checked in execution order, as each ends; the run stops at the first
    anomalous one (the rest of the model does not run) and the model is left as it was.

    Args:
        model: the model.
        *inputs: its positional inputs.
        kwargs: its keyword inputs.
        backward: if the forward is clean, run a backward pass from ``loss``
            (``torch.autograd.grad``: no ``.grad`` changes) and find where the first
            non-finite gradient was made: the autograd node that computed it from
            finite gradients (``SqrtBackward0``), the module call whose forward made
            that node, the forward op, the line of the model's code that called it,
            and the statistics of the gradients the node received and computed.
            The line is read from a second forward (and ``loss``) with anomaly mode
            on, run only when a node was found (``pdb=True``: the first forward
            records the stacks, which costs a fifth more).
        loss: ``loss(output) -> Tensor``: the scalar to differentiate, as for
            :func:`hookscope.trace` (default: the sum of every floating output); a
            gradient its own ops make non-finite is found too, outside any module.
        collect_all: do not stop: report every anomalous call (in a NaN's wake, most
            calls after the first one).
        ops: also name the first aten op inside the call that produced the value.
        pdb: open the debugger at the first anomaly, while the run is there, after a
            one-line banner: in the forward, in a frame whose locals are the call's
            ``module``, ``path``, ``inputs``, ``kwargs`` and ``output``; in the
            backward, ``module`` (``None`` for the loss), ``path``, the ``node`` and
            its ``grad_inputs`` and ``grad_outputs``. ``up`` goes to the model's code;
            ``c`` or ``q`` ends the session and the report is returned. As
            :func:`hookscope.breakpoint`, ``PYTHONBREAKPOINT`` picks another debugger.

    Returns:
        ``None`` when every output (and gradient) is finite, else the
        :class:`~hookscope.AnomalyReport`: ``print`` it, or read ``report.first``.

    Raises:
        ModelRunError: the model raised.
        SpecError: an option is wrong, the model or an input is on the meta device
            (no values to check), or ``backward=True`` and no output needs grad.

    Example:
        >>> report = hookscope.find_anomaly(model, x)
        >>> print(report)  # the layer, the output, the inputs, the op
    """
    check_model(model)
    check_flags(backward=backward, collect_all=collect_all, ops=ops, pdb=pdb)
    if _on_meta(model, inputs, kwargs):
        raise SpecError(
            "find_anomaly looks for NaN and Inf values, and the meta device has shapes "
            "but no values; run it with the model and inputs on 'cpu' or 'cuda'"
        )
    probe: NonFiniteProbe
    if backward:  # the found node's line comes from a second forward (grad_nodes.py)
        probe = NonFiniteGradProbe(collect_all=collect_all, ops=ops, pdb=pdb,
                                   node_stacks=False)
    else:
        probe = NonFiniteProbe(collect_all=collect_all, ops=ops, pdb=pdb)
    hunted = loss
    if loss is not None and callable(loss) and isinstance(probe, NonFiniteGradProbe):
        hunted = _hunted(loss, probe)
    report: AnomalyReport | None
    try:
        result = _trace(
            model, *inputs, kwargs=kwargs, backward=backward, loss=hunted, shapes=False,
            time=False, stats=False, memory=False, grads=False, probes=[probe],
        )
    except NonFiniteError as e:
        report = e.report
    else:
        report = probe.report(result)
    if isinstance(probe, NonFiniteGradProbe) and report is not None:
        report = _with_node_lines(report, probe,
                                  lambda: _rerun(model, inputs, kwargs, loss))
    return report


@contextmanager
def detect_anomaly(
    model: nn.Module, *, backward: bool = True, ops: bool = True
) -> Iterator[None]:
    """Raise at the first non-finite module output (or gradient) inside the block.

    Wrap a training loop: every call of ``model`` (and, with ``backward``, every
    backward pass run inside the block) is checked; the first NaN or Inf raises
    :class:`NonFiniteError` (a :class:`~hookscope.RunStopped`) whose ``.report`` is
    the :class:`~hookscope.AnomalyReport` :func:`find_anomaly` gives. Every hook is
    removed when the block ends.

    Args:
        model: the model to watch.
        backward: also check gradients: the autograd nodes of each forward of
            ``model`` are hooked, and the first that makes a non-finite gradient from
            finite ones is named, with its line (anomaly mode records the forward
            stacks while ``model`` runs); a gradient made non-finite by the loop's
            own loss is found at the first module whose output gradient holds it.
        ops: also name the first aten op that produced the value.

    Raises:
        NonFiniteError: at the first anomaly.

    Example:
        >>> with hookscope.detect_anomaly(model):
        ...     for x, y in batches:
        ...         loss_fn(model(x), y).backward()
    """
    from hookscope.api.tracing import Tracer

    check_flags(backward=backward, collect_all=False, ops=ops)
    probe = (NonFiniteGradProbe if backward else NonFiniteProbe)(ops=ops)
    with Tracer(model, shapes=False, probes=[probe]):
        yield


def _hunted(
    loss: Callable[[Any], torch.Tensor], probe: NonFiniteGradProbe
) -> Callable[[Any], torch.Tensor]:
    """``loss`` whose autograd nodes the backward hunt hooks too, with their lines."""

    def hunted(output: Any) -> torch.Tensor:
        probe.hunt.record_stacks()
        try:
            value = loss(output)
        finally:
            probe.hunt.restore_mode()
        if isinstance(value, torch.Tensor):
            probe.hunt.hook([value])
        return value

    return hunted


def _with_node_lines(report: AnomalyReport, probe: NonFiniteGradProbe,
                     run: Callable[[], list[torch.Tensor]]) -> AnomalyReport:
    """``report`` with the lines of the autograd nodes it names, read from a second
    forward (``run``), where the hunt recorded no stacks."""
    found_at = probe.hunt.found_at
    places = [i for i, a in enumerate(report.anomalies) if a.node is not None]
    if probe.node_stacks or not found_at or not places:
        return report
    try:
        lines = node_lines_of_rerun(run, found_at)
    except Exception:  # a model that does not run twice keeps its nodes without lines
        return report
    anomalies = list(report.anomalies)
    # the report lists the nodes in the order the hunt found them
    for i, (_, name), source in zip(places, found_at, lines, strict=False):
        node = anomalies[i].node
        if node is not None and node.source is None and node.name == name and source:
            anomalies[i] = replace(anomalies[i], node=replace(node, source=source))
    return replace(report, anomalies=tuple(anomalies))


def _rerun(model: nn.Module, inputs: tuple[Any, ...], kwargs: dict[str, Any] | None,
           loss: Callable[[Any], torch.Tensor] | None) -> list[torch.Tensor]:
    """The model's forward once more (and ``loss``), leaving its flags, buffers and
    random state as they were: the tensors whose graphs hold the hunt's nodes."""
    table = module_table(model, extra_repr=False)
    state = ModelState(table, buffers=True)
    try:
        with torch.random.fork_rng(devices=[d.index or 0 for d in cuda_devices(table)]):
            output = model(*inputs, **(kwargs or {}))
            value = loss(output) if loss is not None else None
    finally:
        state.restore()
    found = [t for _, t in iter_tensors(output, "out")]
    return [*found, value] if isinstance(value, torch.Tensor) else found


def _on_meta(model: nn.Module, inputs: tuple[Any, ...], kwargs: dict[str, Any] | None) -> bool:
    """Whether the model or one of its input tensors is on the meta device."""
    leaves = torch_private.pytree.tree_leaves((inputs, kwargs))
    tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
    return is_on_meta(model) or any(t.is_meta for t in tensors)


