""":func:`observe`: the one forward (and backward) pass of a lint run, and what it shows.

:func:`observe` runs the model once under :class:`hookscope.Tracer` (shapes only) and,
for as long as that pass lasts, one process-wide forward pre-hook
(``torch.nn.modules.module.register_module_forward_pre_hook``) that notes every call of
a module that is not registered in the model. Before the tracer's exit it also reads
what the forward registered on the model (a layer made on the first call) and, with
``backward=True``, takes the gradients: the exit takes such registrations out again
and makes lazy modules lazy again (their parameters have values only until then).
The hook is removed in a ``finally`` (:class:`~hookscope.core.handles.HandleGroup`);
the tracer restores ``training`` flags and ``requires_grad``, and :func:`observe` puts
back every buffer the forward changed (BatchNorm running statistics), so the model is
left as it was. The forward runs with grad enabled only for ``backward=True``, and
gradients are taken with ``torch.autograd.grad``: no ``.grad`` is touched. The rules
that read the result are in ``lint/checks/dynamic.py``.

NB: while the pass runs, every module of the process goes through torch's hooked call
path, as with any global module hook.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import hookscope
from hookscope.core.buffer_state import restore_buffers, saved_buffers
from hookscope.core.handles import HandleGroup
from hookscope.core.run_backward import backward_roots
from hookscope.errors import ModelRunError
from hookscope.lint.checks.containers import contents
from hookscope.lint.context import ForeignCall, ForwardFacts, LateMember, LintContext, Lost
from hookscope.lint.source import reads_training


class _ForeignWatch:
    """The global pre-hook's state: calls of unregistered modules, outermost only."""

    def __init__(self, ctx: LintContext, tracer: hookscope.Tracer) -> None:
        self.ctx, self.tracer = ctx, tracer
        self.found: dict[tuple[str, str | None, str], ForeignCall] = {}
        self.objects: dict[tuple[str, str | None, str], set[int]] = {}
        self.inner: set[int] = set()  # submodules of an unregistered module seen

    def __call__(self, module: nn.Module, args: Any) -> None:
        key = id(module)
        if key in self.ctx.module_ids or key in self.inner:
            return
        self.inner.update(id(m) for m in module.modules() if m is not module)
        call = self.tracer.current_call
        caller = call.path if call is not None else ""
        lost = _lost(self.ctx, module, self.ctx.modules.get(caller, self.ctx.model))
        if lost is None or _registered_now(self.ctx, module):
            return  # nothing lost, or registered by the forward itself (HS505)
        group = (*_holder(self.ctx, caller, module), type(module).__name__)
        record = self.found.setdefault(group, ForeignCall(*group, lost))
        record.calls += 1
        self.objects.setdefault(group, set()).add(key)
        record.objects = len(self.objects[group])


def _lost(ctx: LintContext, module: nn.Module, caller: nn.Module) -> Lost | None:
    """What goes wrong with ``module`` and the modules in it that the model does not
    register: parameters (then also buffers) the model does not have, or a
    ``training`` flag that differs from the caller's and is read by the class (a
    ``Dropout`` made inside ``forward`` drops also in eval mode); ``None`` when nothing
    does. A stateless module that behaves the same either way (``nn.ReLU()(x)``,
    transformers' module-level ``gelu``, made at import in training mode) changes
    nothing, nor does a wrapper of registered layers (``nn.Sequential(self.a, self.b)``
    made in ``forward``): they are trained, saved and switched as the model's."""
    own = [m for m in module.modules() if id(m) not in ctx.module_ids]
    known = ctx.tensor_ids
    if any(id(p) not in known for m in own for p in m.parameters(recurse=False)):
        return "parameters"
    if any(id(b) not in known for m in own for b in m.buffers(recurse=False)):
        return "buffers"
    modal = any(m.training != caller.training and reads_training(type(m)) is not False
                for m in own)
    return "mode" if modal else None


def _registered_now(ctx: LintContext, module: nn.Module) -> bool:
    """Whether a module of the model registers ``module`` now (the forward did)."""
    return any(child is module for _, m in ctx.members for child in m._modules.values())


def _holder(ctx: LintContext, caller: str, module: nn.Module) -> tuple[str, str | None]:
    """``(path, attribute)``: the module of the model whose plain attribute holds
    ``module`` (the caller's first), or ``(caller, None)`` when none does."""
    for path, _, name, value in sorted(ctx.plain_attributes(), key=lambda a: a[0] != caller):
        if value is module or any(item is module for item in contents(value)):
            return path, name
    return caller, None


def _late_members(ctx: LintContext) -> list[LateMember]:
    """The parameters the forward registered on the model's modules, and the submodules
    it registered that hold parameters the model did not have (not a stateless one,
    nor a wrapper of the model's own layers: nothing to train is missing)."""
    known = ctx.tensor_ids
    found: list[LateMember] = []
    for path, module in ctx.members:
        for name, child in module._modules.items():
            if child is not None and id(child) not in ctx.module_ids:
                numel = sum(p.numel() for p in child.parameters() if id(p) not in known)
                if numel:
                    found.append(LateMember(path, name, type(child).__name__, numel))
        for name, p in module._parameters.items():
            if p is not None and id(p) not in known:
                found.append(LateMember(path, name, "Parameter", p.numel()))
    return found


def observe(
    ctx: LintContext, args: tuple[Any, ...], kwargs: dict[str, Any], *, backward: bool
) -> ForwardFacts:
    """Run the model once on ``args``/``kwargs`` and return what the rules need.

    Raises:
        ModelRunError: the model raised; ``.trace`` holds the partial trace.
    """
    model = ctx.model
    # its forward is run for the caller: buffers put back too (parameters too)
    tracer = hookscope.Tracer(model, shapes=True, restore_state=True, restore_buffers=True)
    watch = _ForeignWatch(ctx, tracer)
    saved = saved_buffers(m for _, m in ctx.members)
    handles = HandleGroup()
    gradients: tuple[list[str] | None, str | None] = (None, None)
    try:
        handles.add(torch.nn.modules.module.register_module_forward_pre_hook(watch))
        try:
            with tracer, torch.set_grad_enabled(backward):
                output = model(*args, **kwargs)
                # before the tracer's exit takes them out again (and makes lazy modules
                # lazy again: their parameters have values only until then)
                late = _late_members(ctx)
                if backward:
                    gradients = _backward(ctx, output, tracer)
        except ModelRunError:
            raise  # the backward's
        except Exception as e:
            trace = tracer.trace
            assert trace is not None
            where = trace.error.path if trace.error is not None else None
            raise ModelRunError(
                f"the model raised during hookscope.lint's forward pass"
                f"{f' in {where!r}' if where else ''}: {type(e).__name__}: {e}",
                trace=trace, path=where,
            ) from e
        assert tracer.trace is not None
    finally:
        handles.remove()
        restore_buffers(saved)  # values, and the versions the forward did not move
    return ForwardFacts(tracer.trace.calls, list(watch.found.values()), late, *gradients)


def _backward(
    ctx: LintContext, output: Any, tracer: hookscope.Tracer
) -> tuple[list[str], str | None]:
    """:func:`_missing_gradients`, a failure of the model's own backward as a
    ``ModelRunError``."""
    try:
        return _missing_gradients(ctx, output)
    except Exception as e:
        assert tracer.trace is not None
        raise ModelRunError(
            f"the model's backward pass raised during hookscope.lint: "
            f"{type(e).__name__}: {e}", trace=tracer.trace, path=None,
        ) from e


def _missing_gradients(ctx: LintContext, output: Any) -> tuple[list[str], str | None]:
    """Paths of trainable parameters that get no gradient from the floating (or
    complex) outputs, wherever they are in the output (as ``trace(backward=True)`` finds
    them: ``core/run_backward.py``)."""
    leaves = backward_roots(output)
    params = [(p, t) for p, t in ctx.tensors(buffers=False) if t.requires_grad]
    if not leaves or not params:
        return [], "no floating output requires grad (or no parameter does)"
    total = torch.stack(
        [t.float().sum() if t.is_floating_point() else t.abs().float().sum() for t in leaves]
    ).sum()
    grads = torch.autograd.grad(total, [t for _, t in params], allow_unused=True)
    return [path for (path, _), g in zip(params, grads, strict=True) if g is None], None
