"""HS2xx: tensors, parameters and buffers: plain tensor attributes, buffers that require
grad, tied and frozen parameters.

A tensor assigned as ``self.t = torch.zeros(...)`` is neither a parameter nor a buffer
(``nn.Module.__setattr__`` registers only ``nn.Parameter`` values), so it is left out of
everything torch does to a module's state. HS201 reports such a tensor only when it is
an attribute of a module of the model when linting starts, and not the very object of a
registered parameter or buffer (transformers keeps ``original_inv_freq`` as a second
name of the ``inv_freq`` buffer, say), and not one torch's ``prune``, ``weight_norm``
or ``spectral_norm`` makes anew from registered parameters before every call. Tensors
inside plain containers are not reported: libraries keep lists of constant tensors on
purpose and move them themselves (torchvision's ``AnchorGenerator.cell_anchors``).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from hookscope.lint.context import LintContext
from hookscope.lint.findings import Hit, Severity
from hookscope.lint.locate import locate_write
from hookscope.lint.rules import register_rule


@register_rule(
    "HS201", "plain-tensor-attribute", severity=Severity.WARNING,
    why="""A tensor assigned as a plain attribute (self.t = torch.ones(3)) is neither a
    parameter nor a buffer. If it was meant to be learned, it is not in parameters() and
    never trained. If it is a constant that belongs to the model, it is not in
    state_dict() (not saved, not loaded) and .to()/.cuda()/.half() do not move or
    convert it, so the model fails with a device or dtype mismatch after model.cuda().""",
    fix="self.register_buffer(name, tensor) for a constant (persistent=False to keep it "
    "out of state_dict), nn.Parameter(tensor) for a weight to learn",
)
def plain_tensor_attribute(ctx: LintContext) -> Iterator[Hit]:
    for path, module, name, value in ctx.plain_attributes():
        if not isinstance(value, torch.Tensor) or isinstance(value, torch.nn.Parameter):
            continue  # an unregistered Parameter is HS102's
        if id(value) in ctx.tensor_ids:
            continue  # a second name of a registered parameter or buffer
        if name in _recomputed(module):
            continue  # torch's prune, weight_norm, spectral_norm: made anew every call
        if value.requires_grad:
            why = ("it requires grad, so it looks like a weight, but it is not in "
                   "parameters(): the optimizer never updates it")
        else:
            why = ("it is not in state_dict() (never saved or loaded), and .to()/.cuda() "
                   "do not move it")
        shape = tuple(value.shape)
        yield Hit(path, name, f"self.{name} is a plain tensor of shape {shape}, neither "
                              f"parameter nor buffer: {why}")


def _recomputed(module: torch.nn.Module) -> set[str]:
    """Names a forward pre-hook of torch's reparametrizations (``nn.utils.prune``, the
    old ``nn.utils.weight_norm`` and ``spectral_norm``) sets from registered parameters
    (``weight_orig``, ``weight_g``/``weight_v``) before every call: plain on purpose."""
    names: set[str] = set()
    for hook in module._forward_pre_hooks.values():
        if isinstance(hook, _REPARAMETRIZATIONS):
            found = getattr(hook, "_tensor_name", None) or getattr(hook, "name", None)
            if isinstance(found, str):
                names.add(found)
    return names


def _reparametrizations() -> tuple[type, ...]:
    found: list[type] = []
    for module, cls in (("torch.nn.utils.prune", "BasePruningMethod"),
                        ("torch.nn.utils.weight_norm", "WeightNorm"),
                        ("torch.nn.utils.spectral_norm", "SpectralNorm")):
        try:
            found.append(getattr(__import__(module, fromlist=[cls]), cls))
        except (ImportError, AttributeError):  # another torch: that one is not known
            continue
    return tuple(found)


_REPARAMETRIZATIONS = _reparametrizations()


@register_rule(
    "HS202", "buffer-requires-grad", severity=Severity.WARNING,
    why="""A buffer is state that follows the model but is not learned: it is not in
    parameters(), so no optimizer updates it. A buffer with requires_grad=True makes
    autograd track it (and keep its graph) for nothing, or is a weight registered as a
    buffer by mistake.""",
    fix="use nn.Parameter for a weight to learn; otherwise register the buffer detached "
    "(register_buffer(name, t.detach()))",
)
def buffer_requires_grad(ctx: LintContext) -> Iterator[Hit]:
    for path, module in ctx.members:
        for name, b in module._buffers.items():
            if b is not None and b.requires_grad:
                yield Hit(path, name, f"buffer {name!r} requires grad, but buffers are not "
                                      "in parameters(): no optimizer updates it")


@register_rule(
    "HS203", "tied-parameter", severity=Severity.INFO,
    why="""The same nn.Parameter object is registered under two or more names (tied
    weights, such as an output projection sharing the input embedding). torch counts it
    once in parameters() and every use adds to its gradient. Worth knowing when counting
    parameters, loading a state_dict or reinitialising one of the names.""",
    fix="nothing, if the tie is intended; otherwise give each name its own nn.Parameter",
)
def tied_parameter(ctx: LintContext) -> Iterator[Hit]:
    for alias, first in ctx.info.tied.items():
        if first in ctx.info.parameters:
            path, name = ctx.split(alias)
            yield Hit(path, name, f"{alias} is the same Parameter as {first} (tied): "
                                  "counted once, and both uses train it")


@register_rule(
    "HS204", "frozen-parameter", severity=Severity.INFO,
    why="""Parameters with requires_grad=False get no gradient and are not trained.
    Intended when fine-tuning part of a model; a surprise when a layer was frozen by
    mistake or never unfrozen.""",
    fix="nothing, if freezing is intended; otherwise p.requires_grad_(True)",
)
def frozen_parameter(ctx: LintContext) -> Iterator[Hit]:
    frozen_trees: list[str] = []
    for path, info in ctx.info.modules.items():
        frozen = info.total_params and not info.trainable_params
        if frozen and not any(_below(path, top) for top in frozen_trees):
            frozen_trees.append(path)
            yield Hit(path, None, f"all {info.total_params:,} parameters of "
                      f"{path or 'the model'} are frozen (requires_grad=False)",
                      location=locate_write(ctx, path, None, freeze=True))
    for tensor_path, p in ctx.info.parameters.items():
        if not p.trainable and not any(_below(tensor_path, top) for top in frozen_trees):
            path, name = ctx.split(tensor_path)
            yield Hit(path, name, f"{tensor_path} is frozen (requires_grad=False)",
                      location=locate_write(ctx, path, name, freeze=True))


def _below(path: str, top: str) -> bool:
    return not top or path == top or path.startswith(top + ".")
