"""The backward pass of ``hookscope.trace(..., backward=True)``.

Gradients are computed with ``torch.autograd.grad`` with respect to every trainable
parameter and every input that requires grad, so no ``.grad`` of the user's model
changes; the tracer's backward events (``core/engine/backward.py``) see the pass. The loss (the
user's ``loss=``, or the sum of every floating output) is computed as internal work:
its ops are not the model's.

FSDP2 (``fully_shard``): the forward differentiates the all-gathered unsharded
parameters, not the sharded ``DTensor``\\ s on the module; the gradients are taken with
respect to those (``torch_private.fsdp_unsharded_params``) and delivered as the sharded
parameters': the full gradient of this rank's loss, not reduced over the data-parallel
ranks (no ``.grad`` is set, so FSDP's post-backward reduce-scatters nothing).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hookscope.core import torch_private
from hookscope.core.internal import outside_hookscope
from hookscope.core.records.tensor_paths import iter_tensors
from hookscope.errors import SpecError

if TYPE_CHECKING:
    from hookscope.core.engine.tracer import Tracer


def run_backward(
    tracer: Tracer, model: nn.Module, output: Any, args: tuple[Any, ...], kw: dict[str, Any],
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
) -> None:
    """Differentiate ``loss_fn(output)`` (default: the sum of every floating output)
    with respect to the model's trainable parameters and the inputs that require grad,
    inside ``tracer``; the loss's own ops are hookscope's, not the model's.

    Raises:
        SpecError: nothing to differentiate, or a loss that is not a scalar with grad.
    """
    if loss_fn is not None:
        with tracer.internal_work():
            try:
                loss = loss_fn(output)
            except Exception as e:  # the caller's function, not the model, raised
                said = (str(e).strip().splitlines() or [""])[0][:200]
                raise SpecError(
                    f"loss= raised {type(e).__name__}{': ' + said if said else ''} on the "
                    "model's output "
                    f"({_describe(output)}); loss= gets the output exactly as the model "
                    "returns it"
                ) from e
        _check_loss(loss)
        _gradients(loss, _grad_targets(tracer, model, args, kw))
        return
    roots = backward_roots(output)
    if not roots:
        raise SpecError(
            "backward=True needs an output that requires grad; no floating output of the "
            "model requires grad (are all parameters frozen?)"
        )
    targets = _grad_targets(tracer, model, args, kw)
    with tracer.internal_work():
        # the sum of the outputs, not the outputs as roots with seeds of ones (the
        # same gradients): autograd runs no tensor hook on a graph root, so the model's
        # outputs would get no backward event
        loss = torch.stack(
            [t.sum() if t.is_floating_point() else t.abs().sum() for t in roots]
        ).sum()
    _gradients(loss, targets)


def backward_roots(output: Any) -> list[torch.Tensor]:
    """Every tensor of ``output`` a default loss sums: floating or complex, requiring
    grad, anywhere in it (tuples, dicts, dataclasses, a ``torch.distributions`` object's
    parameters: ``core/records/tensor_paths.py``)."""
    return [
        t for _, t in iter_tensors(output, "out")
        if t.requires_grad and (t.is_floating_point() or t.is_complex())
    ]


def _gradients(loss: torch.Tensor, targets: list[torch.Tensor]) -> None:
    """``torch.autograd.grad`` of ``loss`` (no ``.grad`` of the user's model changes)."""
    try:
        torch.autograd.grad(loss, targets, allow_unused=True)
    except RuntimeError as e:
        if "use_reentrant=True" not in str(e):
            raise
        raise SpecError(
            "backward=True computes gradients with torch.autograd.grad, which the "
            "model's torch.utils.checkpoint(use_reentrant=True) refuses; run your own "
            "backward inside hookscope.Tracer(model, grads=True) instead, or checkpoint "
            "with use_reentrant=False"
        ) from e


def _grad_targets(
    tracer: Tracer, model: nn.Module, args: tuple[Any, ...], kw: dict[str, Any]
) -> list[torch.Tensor]:
    targets = _fsdp_targets(tracer, model, [p for p in model.parameters() if p.requires_grad])
    # also inputs that are not leaves (``x = w * 2``): the backward stops there
    targets += [t for _, t in iter_tensors((args, kw), "in") if t.requires_grad]
    if not targets:
        raise SpecError(
            "backward=True found nothing to differentiate: no parameter of the model and "
            "no input requires grad (the output's graph starts inside the model); pass "
            "an input with requires_grad=True or unfreeze a parameter"
        )
    return targets


def _fsdp_targets(
    tracer: Tracer, model: nn.Module, params: list[torch.Tensor]
) -> list[torch.Tensor]:
    """``params`` with FSDP2's sharded parameters (or the unsharded ones the module
    holds until FSDP reshards) replaced by the unsharded leaves the forward used, each
    watched for its sharded parameter when a probe takes parameters' gradients."""
    pairs = torch_private.fsdp_unsharded_params(model) if params else []
    run = tracer.run
    watch = run.backward if run is not None and run.plan.backward_handlers[
        "on_param_grad"] else None
    if pairs:
        of = {id(t): pair for pair in pairs for t in pair}
        if watch is not None:
            watch.watch_unsharded([(path, *of[id(p)]) for path, p in model.named_parameters()
                                   if p.requires_grad and id(p) in of])
        params = [of[id(p)][1] if id(p) in of else p for p in params]
    if watch is not None and any(hasattr(t, "device_mesh") for t in params):
        warnings.warn(
            "hookscope: the forward did not differentiate FSDP2's sharded parameters "
            "themselves and hookscope found no unsharded form of them: they are listed "
            "without a gradient (no_backward). The full gradients' norms: "
            "hookscope.GradientMonitor(model) around your training loop",
            UserWarning, stacklevel=outside_hookscope())
    return params


def _check_loss(loss: Any) -> None:
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        got = f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) \
            else type(loss).__name__
        raise SpecError(
            f"loss= must return a scalar tensor, got {got}; reduce it (.sum() or .mean())"
        )
    if not loss.requires_grad:
        raise SpecError(
            "the tensor loss= returned does not require grad (computed under no_grad, or "
            "from a detached output); compute it from the model's output"
        )


def _describe(output: Any) -> str:
    """What the model returned, in a few words (for an error about ``loss=``)."""
    if isinstance(output, torch.Tensor):
        return f"a tensor of shape {list(output.shape)}"
    if isinstance(output, dict):
        return f"a {type(output).__name__} with keys {list(output)[:6]}"
    if isinstance(output, (tuple, list)):
        return f"a {type(output).__name__} of {len(output)}"
    return f"a {type(output).__name__}"
