"""HS5xx: what one forward (and backward) pass shows.

The pass is run by :func:`hookscope.lint.traced_pass.observe`, which stores what it saw in
:attr:`LintContext.forward <hookscope.lint.context.LintContext.forward>`: the calls of
registered modules, the calls of unregistered ones (HS501), what the forward
registered (HS505) and, with ``backward=True``, the parameters that got no gradient
(HS503).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from hookscope.core.torch_private import BatchNormBase
from hookscope.lint.context import CONTAINERS, LintContext
from hookscope.lint.findings import Hit, Severity
from hookscope.lint.locate import locate
from hookscope.lint.reads import reads_training, uses_attribute
from hookscope.lint.rules import Needs, register_rule


@register_rule(
    "HS501", "unregistered-module-called", severity=Severity.ERROR, needs=Needs.FORWARD,
    why="""A module with parameters or buffers ran during forward but is not registered in
    the model. Created inside forward, it gets fresh random weights on every call and
    is never trained; kept in a plain list or dict (see HS101), it is never trained,
    saved or moved. Only what the model does not register counts: a wrapper made in
    forward around registered layers (nn.Sequential(self.a, self.b)(x)) loses nothing,
    and a stateless module made inside forward (nn.ReLU()(x)) is not reported, unless
    its training flag differs from the model's and its class reads that flag (a
    Dropout made in forward keeps dropping in eval mode). A module that forward
    registers on its first call is HS505's.""",
    fix="create the module once in __init__ and assign it to self (or to an nn.ModuleList "
    "/ nn.ModuleDict); use torch.nn.functional for stateless operations",
)
def unregistered_module_called(ctx: LintContext) -> Iterator[Hit]:
    assert ctx.forward is not None
    for f in ctx.forward.foreign:
        times = f"{f.calls} time" + ("" if f.calls == 1 else "s")
        if f.attribute is not None:
            yield Hit(f.path, f.attribute, f"a {f.class_name} held in the plain attribute "
                      f"self.{f.attribute} ran {times} during forward, unregistered: "
                      f"{_HELD[f.lost]}")
        else:
            fresh = f", {f.objects} different objects" if f.objects > 1 else ""
            yield Hit(f.path, None, f"a {f.class_name} not registered in the model ran "
                      f"{times} during forward{fresh}: made inside forward, "
                      f"{_MADE[f.lost]}", location=f.location)


_HELD = {
    "parameters": "never trained, saved or moved",
    "buffers": "its buffers are never saved or moved",
    "mode": ".train()/.eval() do not reach it, and its class reads its training flag",
}
_MADE = {
    "parameters": "it has fresh weights on every call and is never trained",
    "buffers": "its buffers start afresh on every call and are never saved",
    "mode": "it keeps the training flag it was made with (.train()/.eval() do not "
            "reach it), and its class reads that flag",
}


@register_rule(
    "HS502", "module-never-called", severity=Severity.WARNING, needs=Needs.FORWARD,
    why="""A registered module with parameters or buffers did not run during the forward
    pass, none of its submodules ran, and no method of the class that holds it (other
    than __init__) reads self.<attribute>: a layer defined and forgotten (x.norm() or
    F.linear is not a use of self.norm or self.linear). Its parameters get no gradient
    but are saved, counted and moved. A module its class does use is taken to be on a
    branch these inputs did not take (an auxiliary head in eval mode, an expert no
    token was routed to) and is not reported, nor is one its class may reach
    without naming it (getattr(self, name), self.children(), a helper given self).""",
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
    torch.no_grad(), or detaches it (.detach(), .data, .item()). A loss computed from
    the outputs does not train it (an optimizer skips a parameter whose .grad stays
    None). In eval mode a parameter may be used on a training-only branch (wav2vec2's
    masked_spec_embed; torchvision's RPN head, whose proposals are detached and which
    is trained through its losses): when its module or one around it is in eval mode
    and reads its training flag, it is not reported; lint the model in training mode
    (model.train()) to check it. Parameters of modules that did not run are left to
    HS502. One finding per module: the outermost module none of whose trainable
    parameters gets a gradient (aux: 4 parameters get no gradient), else the module
    that holds them; Finding.parameters lists them all.""",
    fix="use the parameter in forward without detaching it, or freeze it "
    "(requires_grad_(False)) or delete it if it is not needed",
)
def parameter_without_gradient(ctx: LintContext) -> Iterator[Hit]:
    assert ctx.forward is not None
    called = ctx.forward.called_paths
    missing: set[str] = set()
    for tensor_path in ctx.forward.no_grad or []:
        path, _ = ctx.split(tensor_path)
        holder = ctx.owner(path)[0] if isinstance(ctx.modules.get(path), CONTAINERS) else path
        if holder and holder not in called:
            continue
        if _eval_switch(ctx, path):
            continue  # perhaps used on a branch taken in training mode only
        missing.add(tensor_path)
    for path, params, whole in _by_module(ctx, missing):
        n = len(params)
        names = [p[len(path) + 1:] if path else p for p in params]
        shown = ", ".join(names[:_SHOWN]) + (f", ... ({n - _SHOWN} more)" if n > _SHOWN else "")
        what = (f"{n} parameters get no gradient" if n > 1 else "1 parameter gets no gradient")
        message = (f"{path or 'the model'}: {what} ({shown}): a loss computed from the "
                   f"outputs does not train {'them' if n > 1 else 'it'}")
        # a module none of whose parameters is trained: where it is made; else the first
        where = locate(ctx, *(ctx.owner(path) if whole and n > 1 else ctx.split(params[0])))
        if n == 1:  # at the parameter itself, as ignore= globs name it
            parent, name = ctx.split(params[0])
            at = ctx.owner(parent) if isinstance(ctx.modules.get(parent), CONTAINERS) else (
                parent, name)
            yield Hit(*at, message, location=where, parameters=tuple(params))
        else:
            yield Hit(path, None, message, location=where, parameters=tuple(params))


_SHOWN = 6  # parameter names a message lists; the finding's ``parameters`` has them all


def _by_module(
    ctx: LintContext, missing: set[str]
) -> list[tuple[str, list[str], bool]]:
    """``(module path, parameters, whole)``: ``missing`` grouped by module, first the
    outermost modules all of whose trainable parameters are missing (``whole``), then
    each module that holds the others."""
    if not missing:
        return []
    inside: dict[str, list[str]] = {}  # module path -> the trainable parameters under it
    for p, t in ctx.tensors(buffers=False):
        if t.requires_grad:
            parent = ctx.split(p)[0]
            for at in {"", *(parent[:i] for i in _prefix_ends(parent) if parent)}:
                inside.setdefault(at, []).append(p)
    groups: list[tuple[str, list[str], bool]] = []
    left = set(missing)
    for path, _ in ctx.members:
        params = inside.get(path, [])
        if params and all(p in left for p in params):
            groups.append((path, params, True))
            left -= set(params)
    by_parent: dict[str, list[str]] = {}
    for p in (p for p in inside.get("", []) if p in left):
        by_parent.setdefault(ctx.split(p)[0], []).append(p)
    return groups + [(path, params, False) for path, params in by_parent.items()]


def _eval_switch(ctx: LintContext, path: str) -> bool:
    """Whether the module at ``path`` or one around it is in eval mode and reads its
    ``training`` flag (wav2vec2's model, torchvision's ``RegionProposalNetwork``)."""
    for at in ["", *(path[:i] for i in _prefix_ends(path))]:
        module = ctx.modules.get(at)
        if module is not None and not module.training and reads_training(type(module)):
            return True
    return False


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
        if not isinstance(module, BatchNormBase) or not module.training or call.path in seen:
            continue
        shapes = [m.shape for m in call.inputs if m.shape]
        if shapes and shapes[0][0] == 1:
            seen.add(call.path)
            shape = "x".join(map(str, shapes[0]))
            owner, attribute = ctx.owner(call.path)
            yield Hit(owner, attribute, f"{call.path} ({type(module).__name__}) in training "
                      f"mode got a batch of one (input {shape}): statistics of one sample")


@register_rule(
    "HS505", "registered-in-forward", severity=Severity.WARNING, needs=Needs.FORWARD,
    why="""The forward pass registered a parameter, or a submodule with parameters,
    that __init__ did not create (if not hasattr(self, "proj"): self.proj =
    nn.Linear(...)). Until the first forward the model does not have it: an optimizer
    built before then never trains it, a state_dict saved before then lacks it (and one
    saved after does not load into a fresh model), and .to()/.cuda() before then does
    not move it (it is created on the default device). The lint run takes it out again.
    Buffers registered in forward (a cache), and submodules that add no parameter
    (nn.ReLU(), a wrapper of registered layers), are not reported.""",
    fix="create it in __init__; when a size is known only from the input, use torch's "
    "lazy modules (nn.LazyLinear, nn.LazyConv2d) or run the model once before building "
    "the optimizer",
)
def registered_in_forward(ctx: LintContext) -> Iterator[Hit]:
    assert ctx.forward is not None
    for late in ctx.forward.late:
        size = (f"{late.numel:,} values" if late.class_name == "Parameter"
                else f"{late.numel:,} parameters")
        yield Hit(late.path, late.name, f"self.{late.name} ({late.class_name}, {size}) is "
                  "created in forward and registered on its first call, not in __init__: "
                  "before the first forward it is not in parameters() (an optimizer built "
                  "then never trains it) nor in state_dict()", location=late.location)
