"""Ready-made patch functions for :func:`hookscope.patch`, as ``hookscope.patches.NAME``.

Each factory returns ``fn(module, inputs, output)``; it is applied to every tensor of a
nested output (``torch.utils._pytree``), and non-float tensors are left alone. The
backward-path ones (:func:`scale_grad`, :func:`clip_grad`) leave the forward values
bit-identical and change only the gradient that flows back through the output.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import numbers
import operator
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from typing import Any

import torch
from torch import nn

from hookscope.core.records import Call
from hookscope.core.tensors import map_tensors
from hookscope.errors import SpecError
from hookscope.interventions.capture import CapturedActivations
from hookscope.interventions.patch import PatchFn, call_aware, output_only
from hookscope.interventions.storage import Activations, Fields, ModuleInputs, _Unrestorable

Index = int | Sequence[int] | None
Bound = float | torch.Tensor | None


def _on_floats(fn: Callable[[torch.Tensor], torch.Tensor]) -> PatchFn:
    def patch_fn(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> Any:
        return map_tensors(lambda t: fn(t) if t.is_floating_point() else t, output)

    return output_only(patch_fn)


def _mask(t: torch.Tensor, indices: list[int] | None, dim: int) -> torch.Tensor | None:
    """A boolean mask of ``t``'s shape selecting ``indices`` along ``dim`` (None: all)."""
    if indices is None:
        return None
    if not -t.dim() <= dim < t.dim():
        raise SpecError(f"patches: dim={dim} is not a dimension of an output of shape "
                        f"{list(t.shape)}; pass dim= the dimension the indices are along")
    size = t.shape[dim]
    outside = [i for i in indices if not -size <= i < size]
    if outside:
        raise SpecError(f"patches: index {outside[0]} is out of range for dimension {dim} "
                        f"of size {size} (output shape {list(t.shape)})")
    shape = [1] * t.dim()
    shape[dim] = size
    mask = torch.zeros(size, dtype=torch.bool)
    mask[torch.as_tensor(indices, dtype=torch.long)] = True
    return mask.reshape(shape).to(t.device)


def _indices(index: Any, dim: Any, name: str) -> tuple[list[int] | None, int]:
    """``index`` as a list of ints (``None``: all) and ``dim`` as an int, checked when
    the function is made, not mid-forward: an int, a sequence of ints, or a tensor or
    array of them (``scores.topk(2).indices``); numpy integers too."""
    try:
        if isinstance(dim, bool):
            raise TypeError
        dim = operator.index(dim)
    except TypeError:
        raise SpecError(f"patches.{name}: dim= must be an integer, got {dim!r}") from None
    if index is None:
        return None, dim
    items = index.tolist() if hasattr(index, "tolist") and not isinstance(index, list) \
        else index
    if not isinstance(items, Sequence) or isinstance(items, (str, bytes)):
        items = [items]  # one index (a range, a list, a tensor's list are sequences)
    try:
        if any(isinstance(i, bool) for i in items):
            raise TypeError
        return [operator.index(i) for i in items], dim
    except TypeError:
        raise SpecError(f"patches.{name}: the index is an integer or a list of integers "
                        f"(channels, positions), got {index!r}") from None


def _check_number(value: Any, what: str, *, nonnegative: bool = False,
                  positive: bool = False) -> None:
    """``value`` a real number (numpy's too; not NaN, ``>= 0`` with ``nonnegative``,
    ``> 0`` with ``positive``), or a tensor (used as it is)."""
    if isinstance(value, torch.Tensor):
        return
    # NB: int, float and numpy's numbers (a Fraction is a Real tensors cannot take)
    numeric = isinstance(value, (int, float)) or (
        isinstance(value, numbers.Real) and type(value).__module__ == "numpy")
    if isinstance(value, bool) or not numeric or math.isnan(float(value)) \
            or (nonnegative and value < 0) or (positive and not value > 0):
        need = "a number >= 0" if nonnegative else "a number > 0" if positive else "a number"
        raise SpecError(f"patches.{what} must be {need}, got {value!r}")


def zero(index: Index = None, *, dim: int = 1) -> PatchFn:
    """Zero the output, or only ``index`` along ``dim`` (ablation).

    ``dim=1`` is the channel dimension of a convolution's ``[N, C, H, W]`` and the
    position dimension of a sequence model's ``[batch, positions, features]``.

    Example:
        >>> hookscope.patches.zero([3, 7])          # channels 3 and 7 of a conv
    """
    indices, dim = _indices(index, dim, "zero")

    def apply(t: torch.Tensor) -> torch.Tensor:
        mask = _mask(t, indices, dim)
        if mask is None:  # every element: a mask that broadcasts
            mask = torch.ones((), dtype=torch.bool, device=t.device)
        # NB: a fill, not ``t * 0``, which is NaN where ``t`` is +-inf or NaN (a causal
        # mask's scores); like ``t * 0`` it stays in the graph, a zero gradient flowing
        # back through every zeroed position
        return t.masked_fill(mask, 0.0)

    return _on_floats(apply)


ablate = zero


def scale(factor: float, index: Index = None, *, dim: int = 1) -> PatchFn:
    """Multiply the output (or ``index`` along ``dim``) by ``factor``."""
    _check_number(factor, "scale: factor")
    indices, dim = _indices(index, dim, "scale")

    def apply(t: torch.Tensor) -> torch.Tensor:
        mask = _mask(t, indices, dim)
        if mask is None:
            return t * factor
        return torch.where(mask, t * factor, t)

    return _on_floats(apply)


def clamp(lower: Bound = None, upper: Bound = None) -> PatchFn:
    """Clamp the output to ``[lower, upper]`` (either may be ``None``).

    A bound is a number or a tensor that broadcasts to the output's shape (one bound
    per channel of ``[N, C, H, W]``: a tensor of shape ``[C, 1, 1]``)."""
    if lower is None and upper is None:
        raise SpecError("patches.clamp needs lower=, upper= or both")
    for name, bound in (("lower", lower), ("upper", upper)):
        if bound is not None:
            _check_number(bound, f"clamp: {name}")
    if lower is not None and upper is not None and _above(lower, upper):
        raise SpecError(f"patches.clamp: lower={lower!r} is above upper={upper!r}")
    if not isinstance(lower, torch.Tensor) and not isinstance(upper, torch.Tensor):
        return _on_floats(lambda t: torch.clamp(t, lower, upper))

    def apply(t: torch.Tensor) -> torch.Tensor:
        # NB: both bounds as tensors of the output's dtype and device: torch.clamp takes
        # two numbers or two tensors, and a float32 bound would make a bfloat16 output
        # float32
        return torch.clamp(t, _bound_like(lower, t), _bound_like(upper, t))

    return _on_floats(apply)


def _above(lower: float | torch.Tensor, upper: float | torch.Tensor) -> bool:
    """Whether ``lower`` is above ``upper`` anywhere (tensors: element by element)."""
    low, high = torch.as_tensor(lower, device="cpu"), torch.as_tensor(upper, device="cpu")
    try:
        return bool((low > high).any())
    except RuntimeError:
        raise SpecError(f"patches.clamp: lower of shape {list(low.shape)} and upper of "
                        f"shape {list(high.shape)} do not broadcast together") from None


def _bound_like(bound: Bound, t: torch.Tensor) -> torch.Tensor | None:
    if bound is None:
        return None
    bound = torch.as_tensor(bound, dtype=t.dtype, device=t.device)
    try:
        bound.expand_as(t)  # it broadcasts to the output's shape, and no further
    except RuntimeError:
        raise SpecError(f"patches.clamp: a bound of shape {list(bound.shape)} does not "
                        f"broadcast to the output's shape {list(t.shape)}; give a number "
                        "or a tensor of a shape that does (one per channel: [C, 1, 1])"
                        ) from None
    return bound


def noise(std: float, *, seed: int = 0) -> PatchFn:
    """Add Gaussian noise of standard deviation ``std``, from a generator seeded with
    ``seed`` when the function is made: the same sequence of patched calls gets the
    same noise, and torch's global RNG is not used."""
    _check_number(std, "noise: std", nonnegative=True)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise SpecError(f"patches.noise: seed= must be an integer, got {seed!r}")
    gen = torch.Generator().manual_seed(seed)

    def apply(t: torch.Tensor) -> torch.Tensor:
        draw = torch.randn(t.shape, generator=gen, dtype=torch.float32)
        return t + (std * draw).to(device=t.device, dtype=t.dtype)

    return _on_floats(apply)


def replace_with(source: Any) -> PatchFn:
    """Return a stored value instead of the output: activation patching.

    Args:
        source: a value to return for every patched call (a tensor or a nested
            output), or the mapping of a capture (``hookscope.capture`` of another
            input): each call gets the captured value of the same call name
            (``path`` or ``path#N``). Of a capture made with ``what="both"``, the
            output is used.

    Raises:
        SpecError: ``source`` is a capture made with ``what="input"`` (or one of its
            values): what a module received is no output.

    Example:
        >>> clean = hookscope.capture(model, x_clean, select="layer3")
        >>> with hookscope.patch(model, {"layer3": hookscope.patches.replace_with(clean)}):
        ...     patched = model(x_corrupt)
    """
    captured = isinstance(source, (Activations, CapturedActivations))
    # NB: every value of a capture has the form its ``what`` gave: the first one tells
    # (read from disk for a capture there: one call's tensors, memory-mapped)
    if isinstance(next(iter(source.values()), None) if captured else source, ModuleInputs):
        raise SpecError(
            "replace_with: this is a capture made with what='input' (what modules "
            "received, not their outputs); capture with what='output' or 'both' to "
            "patch outputs, or give a module the inputs stored for it with "
            "hookscope.patch_inputs(model, {path: lambda m, args, kwargs: acts[path]})"
        )

    def patch_fn(module: nn.Module, inputs: tuple[Any, ...], output: Any, *,
                 call: Call) -> Any:
        value = source
        if captured:
            if call.name not in source:
                again = (" (a patch block numbers a module's calls across all the "
                         "forwards it sees: enter one block per forward)"
                         if call.call_index and call.path in source else "")
                raise SpecError(f"replace_with: the capture has no call {call.name!r}; "
                                f"it has {list(source)[:5]!r}{again}")
            value = source[call.name]
        return _like(_output_part(value), output, call.name)

    return output_only(call_aware(patch_fn))


def _output_part(value: Any) -> Any:
    """The output of a ``what="both"`` capture's value (``{"input": ModuleInputs,
    "output": ...}``, in memory as from disk); any other value as it is."""
    if isinstance(value, Mapping) and set(value) == {"input", "output"} \
            and isinstance(value["input"], ModuleInputs):
        return value["output"]
    return value


def _like(value: Any, output: Any, name: str) -> Any:
    """A copy of ``value`` in the form of ``output``: each tensor on the output's
    tensor's device and dtype (its shape must match), in the output's own containers.

    A capture read from disk holds plain containers: a ``ModelOutput`` is a ``dict``
    there, a namedtuple a ``tuple``, a dataclass its :class:`Fields`, and an object
    that is not a tensor or container its repr. Each is put back in the class the
    model returns now (a repr: the model's own object of this call), so the caller
    gets what the model returns, as with a capture in memory.

    NB: a copy on every call: the model may write into what a call returned (``out +=
    identity``, ``ReLU(inplace=True)``), which must not change the stored value."""
    if isinstance(value, torch.Tensor):
        if not isinstance(output, torch.Tensor):
            return value.clone()
        if value.shape != output.shape:
            raise SpecError(
                f"replace_with: the stored value for {name!r} has shape "
                f"{list(value.shape)}, the output has {list(output.shape)}"
            )
        return value.to(device=output.device, dtype=output.dtype, copy=True)
    if isinstance(value, _Unrestorable) and not isinstance(output, str):
        return output  # its repr only was saved: the model's own object
    if _is_instance_of_dataclass(output) and (
            isinstance(value, Fields) or _is_instance_of_dataclass(value)):
        new = copy.copy(output)  # NB: from memory as from disk, each field checked
        for f in dataclasses.fields(output):
            if hasattr(value, f.name):
                object.__setattr__(new, f.name, _like(getattr(value, f.name),
                                                      getattr(output, f.name), name))
        return new
    if isinstance(value, Mapping) and isinstance(output, Mapping):
        cls: Any = type(output)
        # the stored keys: a ModelOutput's set fields may differ from this call's
        items = {k: _like(v, output.get(k), name) for k, v in value.items()}
        if cls in (dict, OrderedDict):
            return cls(items) if list(value) == list(output) else map_tensors(
                torch.clone, value)
        with suppress(Exception):  # a ModelOutput: the model's class, from its fields
            return cls(**items)
        return map_tensors(torch.clone, value)
    if isinstance(value, (tuple, list)) and isinstance(output, (tuple, list)) \
            and len(value) == len(output):
        items_ = [_like(v, o, name) for v, o in zip(value, output, strict=True)]
        kind: Any = type(output)
        if hasattr(kind, "_fields"):  # a namedtuple (read back as a tuple)
            return kind(*items_)
        if hasattr(kind, "n_fields"):  # torch.return_types (torch.max(x, dim)): one sequence
            return kind(items_)
        if type(value) in (tuple, list):
            return type(value)(items_)
        return map_tensors(torch.clone, value)
    return map_tensors(torch.clone, value)


def _is_instance_of_dataclass(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


class _GradTransform(torch.autograd.Function):
    """Identity forward (a copy with the same values); ``fn(grad)`` backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
        ctx.fn = fn
        # NB: a copy, not ``x`` itself: autograd forbids modifying a custom Function's
        # view output in place, and the next module may (``ReLU(inplace=True)``).
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        return ctx.fn(grad), None


def _on_grad(fn: Callable[[torch.Tensor], torch.Tensor]) -> PatchFn:
    return _on_floats(lambda t: _GradTransform.apply(t, fn) if t.requires_grad else t)


def scale_grad(factor: float) -> PatchFn:
    """Multiply the gradient flowing back through the output by ``factor``; the
    forward values are unchanged."""
    _check_number(factor, "scale_grad: factor")
    return _on_grad(lambda g: g * factor)


def clip_grad(limit: float | torch.Tensor, *, norm: bool = False) -> PatchFn:
    """Clip the gradient flowing back through the output: each element to
    ``[-limit, limit]``, or with ``norm=True`` the whole tensor's L2 norm to ``limit``
    (a number > 0, or a tensor of one). The forward values are unchanged."""
    if isinstance(limit, torch.Tensor):
        if limit.numel() != 1:
            raise SpecError(f"patches.clip_grad: limit must be one number, got a tensor "
                            f"of shape {list(limit.shape)}")
        limit = limit.item()
    _check_number(limit, "clip_grad: limit", positive=True)
    value = float(limit)
    if norm:
        return _on_grad(lambda g: g * torch.clamp(value / (g.norm() + 1e-12), max=1.0))
    return _on_grad(lambda g: g.clamp(-value, value))


class PatchFunctions:
    """The ready-made patch functions, as ``hookscope.patches.NAME``: :func:`zero`
    (alias :func:`ablate`), :func:`scale`, :func:`clamp`, :func:`noise`,
    :func:`replace_with`, :func:`scale_grad`, :func:`clip_grad`."""

    zero = staticmethod(zero)
    ablate = staticmethod(ablate)
    scale = staticmethod(scale)
    clamp = staticmethod(clamp)
    noise = staticmethod(noise)
    replace_with = staticmethod(replace_with)
    scale_grad = staticmethod(scale_grad)
    clip_grad = staticmethod(clip_grad)

    def __repr__(self) -> str:
        return "<hookscope.patches: zero, ablate, scale, clamp, noise, replace_with, " \
               "scale_grad, clip_grad>"


patches = PatchFunctions()
