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
from typing import Any

import torch
from torch import nn

from hookscope.api.tracing import trace as _trace
from hookscope.core import torch_private
from hookscope.core.meta import is_on_meta
from hookscope.core.model.structure import check_model
from hookscope.core.options import check_flags
from hookscope.debug.anomaly_records import AnomalyReport
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
            The forward then runs with anomaly mode on, which records a stack per
            autograd node (slower).
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
    probe = (NonFiniteGradProbe if backward else NonFiniteProbe)(
        collect_all=collect_all, ops=ops, pdb=pdb)
    if loss is not None and callable(loss) and isinstance(probe, NonFiniteGradProbe):
        loss = _hunted(loss, probe)
    try:
        result = _trace(
            model, *inputs, kwargs=kwargs, backward=backward, loss=loss, shapes=False,
            time=False, stats=False, memory=False, grads=False, probes=[probe],
        )
    except NonFiniteError as e:
        return e.report
    return probe.report(result)


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


def _on_meta(model: nn.Module, inputs: tuple[Any, ...], kwargs: dict[str, Any] | None) -> bool:
    """Whether the model or one of its input tensors is on the meta device."""
    leaves = torch_private.pytree.tree_leaves((inputs, kwargs))
    tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
    return is_on_meta(model) or any(t.is_meta for t in tensors)


