"""HS3xx: suspicious initial values of parameters.

These rules read parameter values on the parameter's own device: one ``aminmax`` pass
per parameter, shared by both rules (``LintContext.extremes``). Parameters on the meta
device (no values), complex and lazy (not yet materialised) parameters are skipped, so
a model built on meta is linted without reading anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch.nn.parameter import is_lazy

from hookscope.lint.context import LintContext
from hookscope.lint.findings import Hit, Severity
from hookscope.lint.locate import locate_write
from hookscope.lint.rules import register_rule


def _readable(t: torch.Tensor) -> bool:
    return (not is_lazy(t) and t.device.type != "meta" and t.numel() > 0
            and t.is_floating_point() and t.layout == torch.strided)


@register_rule(
    "HS301", "non-finite-parameter", severity=Severity.WARNING,
    why="""A parameter holding NaN or infinity makes every output that depends on it
    NaN from the first forward pass on, and its gradient too: training cannot recover.
    Usually a broken initialisation (log of zero, division by a zero fan-in) or a
    checkpoint saved after training diverged.""",
    fix="re-initialise the parameter (e.g. with nn.init) or load a checkpoint from before "
    "the divergence",
)
def non_finite_parameter(ctx: LintContext) -> Iterator[Hit]:
    for tensor_path, p in ctx.tensors(buffers=False):
        if not _readable(p) or all(map(math.isfinite, ctx.extremes(p))):
            continue  # min and max are finite only when every value is
        values = p.detach()
        bad = int((~torch.isfinite(values)).sum())
        nan = int(torch.isnan(values).sum())
        path, name = ctx.split(tensor_path)
        yield Hit(path, name, f"{tensor_path} holds {bad:,} non-finite values "
                              f"({nan:,} NaN, {bad - nan:,} infinite) of {p.numel():,}",
                  location=locate_write(ctx, path, name, freeze=False))


@register_rule(
    "HS302", "constant-weight", severity=Severity.WARNING,
    why="""A trainable weight matrix (or convolution kernel) whose values are all the same
    gives every output unit the same output and, with symmetric neighbours, the same
    gradient: the units stay identical through training (symmetry is never broken);
    usually an initialisation that fills the weights (the seed's W.data.fill_(1.)).
    A matrix of one non-zero value is always reported. All-zero matrices are a
    deliberate idiom when they are few (a zero-initialised classifier head, LoRA's B,
    ControlNet's zero convolutions: the neighbours are random, so symmetry breaks), so
    they are reported only when more than half of the model's trainable weight
    matrices are all zero. Vectors (biases, norm scales), tensors with a single
    dimension above 1 (a (1, 1, D) token) and frozen tensors are not reported.""",
    fix="initialise it randomly (nn.init.kaiming_uniform_, nn.init.normal_, ...); "
    "only biases and norm parameters start constant",
)
def constant_weight(ctx: LintContext) -> Iterator[Hit]:
    matrices = [(path, p) for path, p in ctx.tensors(buffers=False)
                if p.requires_grad and _readable(p) and sum(d > 1 for d in p.shape) >= 2]
    constant = [(path, p, ctx.extremes(p)[0]) for path, p in matrices
                if ctx.extremes(p)[0] == ctx.extremes(p)[1]]  # never for NaN (HS301)
    zeros = sum(value == 0 for _, _, value in constant)
    zeros_matter = 2 * zeros > len(matrices)
    for tensor_path, p, value in constant:
        if value == 0 and not zeros_matter:
            continue
        what = "0" if value == 0 else f"the same value {value:g}"
        path, name = ctx.split(tensor_path)
        shape = "x".join(map(str, p.shape))
        yield Hit(path, name, f"all {p.numel():,} values of the {shape} weight "
                              f"{tensor_path} are {what}: its units never differ",
                  location=locate_write(ctx, path, name, freeze=False))
