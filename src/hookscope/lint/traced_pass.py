""":func:`observe`: the one forward (and backward) pass of a lint run, and what it shows.

:func:`observe` runs the model once under :class:`hookscope.Tracer` (shapes only) and,
for as long as that pass lasts, one process-wide forward pre-hook
(``torch.nn.modules.module.register_module_forward_pre_hook``) that notes every call of
a module that is not registered in the model, and three process-wide registration
hooks (module, parameter, buffer) that note where the forward made a module or
registered a member, so HS501 and HS505 point at that line. Before the tracer's exit it also reads
what the forward registered on the model (a layer made on the first call) and, with
``backward=True``, takes the gradients: the exit takes such registrations out again
and makes lazy modules lazy again (their parameters have values only until then).
The hooks are removed in a ``finally`` (:class:`~hookscope.core.engine.handles.HandleGroup`);
the tracer restores ``training`` flags and ``requires_grad``, and :func:`observe` puts
back every buffer the forward changed (BatchNorm running statistics), so the model is
left as it was. The forward runs with grad enabled only for ``backward=True``, and
gradients are taken with ``torch.autograd.grad``: no ``.grad`` is touched. The rules
that read the result are in ``lint/checks/dynamic.py``.

While the pass runs, every module of the process goes through torch's hooked call
path, as with any global module hook.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import nn

import hookscope
from hookscope.core.engine.handles import HandleGroup
from hookscope.core.engine.run_backward import backward_roots
from hookscope.core.model.buffer_state import restore_buffers, saved_buffers
from hookscope.errors import ModelRunError
from hookscope.lint.checks.containers import contents
from hookscope.lint.context import (
    ForeignCall,
    ForwardFacts,
    LateMember,
    LintContext,
    Lost,
    modules_by_id,
)
from hookscope.lint.locate import caller_location
from hookscope.lint.reads import reads_training
from hookscope.lint.source import Location


class _Registrations:
    """The global registration hooks' state: where the forward made each module it made,
    and registered each member it registered on the model (the first line of the
    user's code: ``lint/locate.py``)."""

    def __init__(self, ctx: LintContext) -> None:
        self.ctx = ctx
        # by ``id`` with a weak reference to tell a reused ``id``: a module class may
        # define ``__eq__`` and so not be hashable
        self._made: dict[int, tuple[weakref.ref[nn.Module], Location]] = {}
        self.members: dict[tuple[int, str], Location] = {}

    def made(self, module: nn.Module) -> Location | None:
        """Where the forward made ``module``, when it did and it registered anything."""
        entry = self._made.get(id(module))
        return entry[1] if entry is not None and entry[0]() is module else None

    def __call__(self, module: nn.Module, name: str, value: Any) -> None:
        try:
            self._note(module, name)
        except Exception:  # a place not found must not break the forward
            return

    def _note(self, module: nn.Module, name: str) -> None:
        if id(module) in self.ctx.module_ids:
            if (id(module), name) not in self.members:
                where = caller_location()
                if where is not None:
                    self.members[id(module), name] = where
        elif self.made(module) is None:
            # a module registers its first member while it is built: the line that
            # builds it is the first one outside its ``__init__``
            where = caller_location(building=module)
            if where is not None:
                self._made[id(module)] = (weakref.ref(module), where)

    def install(self, handles: HandleGroup) -> None:
        from torch.nn.modules import module as torch_module

        for register in (torch_module.register_module_module_registration_hook,
                         torch_module.register_module_parameter_registration_hook,
                         torch_module.register_module_buffer_registration_hook):
            handles.add(register(self))


class _ForeignWatch:
    """The global pre-hook's state: calls of unregistered modules, outermost only."""

    def __init__(
        self, ctx: LintContext, tracer: hookscope.Tracer, made: _Registrations
    ) -> None:
        self.ctx, self.tracer, self.registrations = ctx, tracer, made
        self.found: dict[tuple[str, str | None, str], ForeignCall] = {}
        self.objects: dict[tuple[str, str | None, str], set[int]] = {}
        self.inner: set[int] = set()  # submodules of an unregistered module seen

    def __call__(self, module: nn.Module, args: Any) -> None:
        key = id(module)
        if key in self.ctx.module_ids or key in self.inner:
            return
        self.inner.update(id(m) for m in modules_by_id(module) if m is not module)
        call = self.tracer.current_call
        caller = call.path if call is not None else ""
        lost = _lost(self.ctx, module, self.ctx.modules.get(caller, self.ctx.model))
        if lost is None or _registered_now(self.ctx, module):
            return  # nothing lost, or registered by the forward itself (HS505)
        group = (*_holder(self.ctx, caller, module), type(module).__name__)
        record = self.found.get(group)
        if record is None:
            where = None if group[1] is not None else (
                self.registrations.made(module) or caller_location())
            record = self.found[group] = ForeignCall(*group, lost, location=where)
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
    own = [m for m in modules_by_id(module) if id(m) not in ctx.module_ids]
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


def _late_members(ctx: LintContext, made: _Registrations) -> list[LateMember]:
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
                    found.append(LateMember(path, name, type(child).__name__, numel,
                                            made.members.get((id(module), name))))
        for name, p in module._parameters.items():
            if p is not None and id(p) not in known:
                found.append(LateMember(path, name, "Parameter", p.numel(),
                                        made.members.get((id(module), name))))
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
    registrations = _Registrations(ctx)
    watch = _ForeignWatch(ctx, tracer, registrations)
    saved = saved_buffers(m for _, m in ctx.members)
    handles = HandleGroup()
    gradients: tuple[list[str] | None, str | None] = (None, None)
    try:
        handles.add(torch.nn.modules.module.register_module_forward_pre_hook(watch))
        registrations.install(handles)
        try:
            with tracer, torch.set_grad_enabled(backward):
                output = model(*args, **kwargs)
                # before the tracer's exit takes them out again (and makes lazy modules
                # lazy again: their parameters have values only until then)
                late = _late_members(ctx, registrations)
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
    them: ``core/engine/run_backward.py``)."""
    leaves = backward_roots(output)
    params = [(p, t) for p, t in ctx.tensors(buffers=False) if t.requires_grad]
    if not leaves or not params:
        return [], "no floating output requires grad (or no parameter does)"
    total = torch.stack(
        [t.float().sum() if t.is_floating_point() else t.abs().float().sum() for t in leaves]
    ).sum()
    grads = torch.autograd.grad(total, [t for _, t in params], allow_unused=True)
    return [path for (path, _), g in zip(params, grads, strict=True) if g is None], None
