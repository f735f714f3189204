"""HS4xx: parameters and buffers on mixed devices, or with mixed floating dtypes.

Both rules group the model's tensors (each parameter and buffer once) by device, or
by floating dtype (leaving out non-persistent float32 buffers, constants kept in full
precision on purpose), take the group with the most elements as the model's, and
report one finding per other group, at its first tensor. They read only metadata, so they
work on the meta device.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch.nn.parameter import is_lazy

from hookscope.lint.context import LintContext
from hookscope.lint.findings import Hit, Severity
from hookscope.lint.rules import register_rule


def _minorities(
    ctx: LintContext, key: Callable[[torch.Tensor], str | None]
) -> Iterator[tuple[str, list[str], str, int]]:
    """``(group, its tensor paths, the model's group, tensors there)`` for each group of
    tensors other than the largest one (by elements, then by count)."""
    groups: dict[str, list[tuple[str, int]]] = {}
    for path, t in ctx.tensors():
        k = key(t)
        if k is not None:
            groups.setdefault(k, []).append((path, 0 if is_lazy(t) else t.numel()))
    if len(groups) < 2:
        return
    main = max(groups, key=lambda g: (sum(n for _, n in groups[g]), len(groups[g])))
    for group, members in groups.items():
        if group != main:
            yield group, [p for p, _ in members], main, len(groups[main])


def _plural(n: int) -> str:
    return f"{n} tensor" + ("" if n == 1 else "s")


@register_rule(
    "HS401", "mixed-devices", severity=Severity.WARNING,
    why="""Some parameters or buffers live on another device than the rest of the model.
    A forward pass then fails with "Expected all tensors to be on the same device", or
    silently copies tensors between devices on every call. Usually a tensor created
    inside __init__ with an explicit device=, or a submodule moved on its own.""",
    fix="move the whole model at once (model.to(device)) and create tensors without an "
    "explicit device in __init__",
)
def mixed_devices(ctx: LintContext) -> Iterator[Hit]:
    for device, paths, main, n_main in _minorities(ctx, lambda t: str(t.device)):
        path, name = ctx.split(paths[0])
        yield Hit(path, name, f"{_plural(len(paths))} on {device} (first: {paths[0]}) while "
                              f"the model's {_plural(n_main)} are on {main}")


@register_rule(
    "HS402", "mixed-dtypes", severity=Severity.WARNING,
    why="""Floating parameters or buffers have different dtypes (float32 and float16,
    say). Operations between them fail ("expected scalar type Float but found Half") or
    are promoted silently, costing memory and time. Usually a half-converted submodule
    or a tensor created with an explicit dtype= in __init__. Mixed precision through
    torch.autocast keeps one parameter dtype and is not reported, nor is a
    non-persistent float32 buffer: a constant computed in __init__ and never loaded
    from a checkpoint, which libraries keep in full precision on purpose in a bfloat16
    or float16 model (the rotary embedding's inv_freq of transformers' Llama, Qwen,
    Mistral...).""",
    fix="convert the whole model at once (model.to(dtype)); keep a deliberately "
    "float32 part (a norm) documented and silence this finding there",
)
def mixed_dtypes(ctx: LintContext) -> Iterator[Hit]:
    full_precision = {id(b) for _, m in ctx.members for n, b in m._buffers.items()
                      if n in m._non_persistent_buffers_set and b is not None
                      and b.dtype == torch.float32}

    def floating(t: torch.Tensor) -> str | None:
        if not t.is_floating_point() or id(t) in full_precision:
            return None
        return str(t.dtype).removeprefix("torch.")

    for dtype, paths, main, n_main in _minorities(ctx, floating):
        path, name = ctx.split(paths[0])
        yield Hit(path, name, f"{_plural(len(paths))} in {dtype} (first: {paths[0]}) while "
                              f"the model's {_plural(n_main)} are {main}")
