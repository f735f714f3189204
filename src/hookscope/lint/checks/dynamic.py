"""HS5xx: what one forward (and backward) pass shows; and :func:`observe`, which runs it.

:func:`observe` runs the model once under :class:`hookscope.Tracer` (shapes only) and,
for as long as that pass lasts, one process-wide forward pre-hook
(``torch.nn.modules.module.register_module_forward_pre_hook``) that notes every call of
a module that is not registered in the model. Both are removed in a ``finally``
(:class:`~hookscope.core.handles.HandleGroup`); the tracer restores ``training`` flags
and ``requires_grad``, and :func:`observe` puts back every buffer the forward changed
(BatchNorm running statistics), so the model is left as it was. With
``backward=True`` the forward runs with grad enabled and gradients are taken with
``torch.autograd.grad``: no ``.grad`` is touched.

NB: while the pass runs, every module of the process goes through torch's hooked call
path, as with any global module hook.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

import hookscope
from hookscope.core.buffer_state import restore_buffers, saved_buffers
from hookscope.core.handles import HandleGroup
from hookscope.core.run_backward import backward_roots
from hookscope.errors import ModelRunError
from hookscope.lint.checks.containers import contents
from hookscope.lint.context import CONTAINERS, ForeignCall, ForwardFacts, LintContext
from hookscope.lint.findings import Hit, Severity
from hookscope.lint.rules import Needs, register_rule
from hookscope.lint.source import uses_attribute


class _ForeignWatch:
    """The global pre-hook's state: calls of unregistered modules, outermost only."""

    def __init__(self, ctx: LintContext, tracer: hookscope.Tracer) -> None:
        self.ctx, self.tracer = ctx, tracer
        self.found: dict[tuple[str, str, str | None], ForeignCall] = {}
        self.objects: dict[tuple[str, str, str | None], set[int]] = {}
        self.inner: set[int] = set()  # submodules of an unregistered module seen

    def __call__(self, module: nn.Module, args: Any) -> None:
        key = id(module)
        if key in self.ctx.module_ids or key in self.inner:
            return
        self.inner.update(id(m) for m in module.modules() if m is not module)
        call = self.tracer.current_call
        caller = call.path if call is not None else ""
        if not _matters(module, self.ctx.modules.get(caller, self.ctx.model)):
            return
        attribute = _holder(self.ctx, caller, module)
        group = (caller, type(module).__name__, attribute)
        record = self.found.setdefault(group, ForeignCall(*group[:2], attribute=attribute))
        record.calls += 1
        self.objects.setdefault(group, set()).add(key)
        record.objects = len(self.objects[group])


def _matters(module: nn.Module, caller: nn.Module) -> bool:
    """A module with state, or whose ``training`` flag differs from its caller's and is
    read by its class (a ``Dropout`` made inside ``forward`` drops also in eval mode).
    A stateless module that behaves the same either way (``nn.ReLU()(x)``, transformers'
    module-level ``gelu``, made at import in training mode) changes nothing."""
    has_state = any(True for _ in module.parameters()) or any(True for _ in module.buffers())
    return has_state or (
        module.training != caller.training and uses_attribute(type(module), "training") is not False
    )


def _holder(ctx: LintContext, caller: str, module: nn.Module) -> str | None:
    """The plain attribute of ``caller`` (or of any module) that holds ``module``."""
    owners = [m for p, m in ctx.members if p == caller] + [m for _, m in ctx.members]
    for owner in owners:
        for name, value in vars(owner).items():
            if value is module or any(item is module for item in contents(value)):
                return name
    return None


def observe(
    ctx: LintContext, args: tuple[Any, ...], kwargs: dict[str, Any], *, backward: bool
) -> ForwardFacts:
    """Run the model once on ``args``/``kwargs`` and return what the rules need.

    Raises:
        ModelRunError: the model raised; ``.trace`` holds the partial trace.
    """
    model = ctx.model
    tracer = hookscope.Tracer(model, shapes=True, restore_state=True)
    tracer._restore_buffers = True  # its forward is run for the caller (parameters too)
    watch = _ForeignWatch(ctx, tracer)
    saved = saved_buffers(m for _, m in ctx.members)
    handles = HandleGroup()
    try:
        handles.add(torch.nn.modules.module.register_module_forward_pre_hook(watch))
        try:
            with tracer, torch.set_grad_enabled(backward):
                output = model(*args, **kwargs)
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
        facts = ForwardFacts(tracer.trace.calls, list(watch.found.values()))
        if backward:
            try:
                with torch.enable_grad():  # also when the caller is in torch.no_grad()
                    facts.no_grad, facts.backward_skipped = _missing_gradients(ctx, output)
            except Exception as e:  # the model's own backward raised
                raise ModelRunError(
                    f"the model's backward pass raised during hookscope.lint: "
                    f"{type(e).__name__}: {e}", trace=tracer.trace, path=None,
                ) from e
    finally:
        handles.remove()
        restore_buffers(saved)  # values, and the versions the forward did not move
    return facts


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


@register_rule(
    "HS501", "unregistered-module-called", severity=Severity.ERROR, needs=Needs.FORWARD,
    why="""A module with parameters or buffers ran during forward but is not registered in
    the model. Created inside forward, it gets fresh random weights on every call and
    is never trained; kept in a plain list or dict (see HS101), it is never trained,
    saved or moved. A stateless module made inside forward (nn.ReLU()(x)) is not
    reported, unless its training flag differs from the model's and its class reads
    that flag (a Dropout made in forward keeps dropping in eval mode).""",
    fix="create the module once in __init__ and assign it to self (or to an nn.ModuleList "
    "/ nn.ModuleDict); use torch.nn.functional for stateless operations",
)
def unregistered_module_called(ctx: LintContext) -> Iterator[Hit]:
    assert ctx.forward is not None
    for f in ctx.forward.foreign:
        times = f"{f.calls} time" + ("" if f.calls == 1 else "s")
        if f.attribute is not None:
            yield Hit(f.caller, f.attribute, f"a {f.class_name} held in the plain attribute "
                      f"self.{f.attribute} ran {times} during forward, unregistered: never "
                      "trained, saved or moved")
        else:
            fresh = f", {f.objects} different objects" if f.objects > 1 else ""
            yield Hit(f.caller, None, f"a {f.class_name} not registered in the model ran "
                      f"{times} during forward{fresh}: made inside forward, it has fresh "
                      "weights on every call and is never trained")


@register_rule(
    "HS502", "module-never-called", severity=Severity.WARNING, needs=Needs.FORWARD,
    why="""A registered module with parameters or buffers did not run during the forward
    pass, none of its submodules ran, and no method of the class that holds it (other
    than __init__) mentions its attribute: a layer defined and forgotten. Its parameters
    get no gradient but are saved, counted and moved. A module its class does mention
    is taken to be on a branch these inputs did not take (an auxiliary head in eval
    mode, an expert no token was routed to) and is not reported.""",
    fix="call the layer in forward, or delete it from __init__",
)
def module_never_called(ctx: LintContext) -> Iterator[Hit]:
    assert ctx.forward is not None
    ran = {p[:i] for p in ctx.forward.called_paths for i in _prefix_ends(p)}
    reported: list[str] = []
    for path, module in ctx.members:
        if not path or path in ran or isinstance(module, CONTAINERS):
            continue  # it, or a submodule of it, ran
        if _under(path, reported):
            continue
        if not ctx.info.modules[path].total_params and not _has_buffers(module):
            continue  # stateless: not calling it changes nothing
        owner, attribute = ctx.owner(path)
        holder = ctx.modules[owner]
        if isinstance(holder, torch.jit.ScriptModule):
            continue  # TorchScript runs its submodules unobserved: whether it ran is unknown
        if attribute is None or uses_attribute(type(holder), attribute) is not False:
            continue
        reported.append(path)
        yield Hit(owner, attribute, f"{path} ({type(module).__name__}) never ran during "
                  f"forward and no method of {type(holder).__name__} but __init__ uses "
                  f"self.{attribute}: a forgotten layer, its parameters get no gradient")


def _prefix_ends(path: str) -> list[int]:
    """Where each ancestor path of ``path`` ends, and ``path`` itself."""
    return [i for i, c in enumerate(path) if c == "."] + [len(path)]


def _under(path: str, tops: list[str]) -> bool:
    return any(path.startswith(top + ".") for top in tops)


def _has_buffers(module: nn.Module) -> bool:
    return any(True for _ in module.buffers())


@register_rule(
    "HS503", "parameter-without-gradient", severity=Severity.WARNING, needs=Needs.BACKWARD,
    why="""A parameter that requires grad got no gradient from the model's outputs,
    although the module that holds it ran: forward does not use it, uses it under
    torch.no_grad(), or detaches it (.detach(), .data, .item()). The optimizer never
    changes it. Parameters of modules that did not run are left to HS502.""",
    fix="use the parameter in forward without detaching it, or freeze it "
    "(requires_grad_(False)) or delete it if it is not needed",
)
def parameter_without_gradient(ctx: LintContext) -> Iterator[Hit]:
    assert ctx.forward is not None
    called = ctx.forward.called_paths
    for tensor_path in ctx.forward.no_grad or []:
        path, name = ctx.split(tensor_path)
        holder, attribute = ctx.owner(path) if isinstance(
            ctx.modules.get(path), CONTAINERS) else (path, name)
        if holder and holder not in called:
            continue
        yield Hit(holder, attribute, f"{tensor_path} requires grad but got no gradient "
                  "from the outputs: the optimizer never changes it")


@register_rule(
    "HS504", "batchnorm-batch-of-one", severity=Severity.WARNING, needs=Needs.FORWARD,
    why="""A BatchNorm layer in training mode normalises with the statistics of the
    batch. With a batch of one sample they are that sample's own statistics: the output
    carries little information, and the running mean and variance used in eval mode
    drift towards single samples (BatchNorm1d on a (1, C) input raises). Usually a
    model left in training mode for inference, or a batch size of 1 in training.""",
    fix="call model.eval() for inference; train with batches of 2 or more, or use "
    "GroupNorm/LayerNorm when batches must be tiny",
)
def batchnorm_batch_of_one(ctx: LintContext) -> Iterator[Hit]:
    assert ctx.forward is not None
    seen: set[str] = set()
    for call in ctx.forward.calls:
        module = ctx.modules.get(call.path)
        if not isinstance(module, _BatchNorm) or not module.training or call.path in seen:
            continue
        shapes = [m.shape for m in call.inputs if m.shape]
        if shapes and shapes[0][0] == 1:
            seen.add(call.path)
            shape = "x".join(map(str, shapes[0]))
            owner, attribute = ctx.owner(call.path)
            yield Hit(owner, attribute, f"{call.path} ({type(module).__name__}) in training "
                      f"mode got a batch of one (input {shape}): statistics of one sample")
