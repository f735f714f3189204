"""Ready-made patch functions that change an output's values (``hookscope.patches``,
gathered in ``functions.py``): :func:`zero` (alias :func:`ablate`), :func:`scale`,
:func:`clamp` and :func:`noise`; and what the ready-made functions share: a function
applied to each float tensor of a nested output (:func:`_on_floats`), and indices and
numbers checked when the function is made, not mid-forward.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from hookscope.core.records.tensor_paths import map_tensors
from hookscope.errors import SpecError
from hookscope.interventions.patch import PatchFn, output_only

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
    # int, float and numpy's numbers (a Fraction is a Real tensors cannot take)
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
        # a fill, not ``t * 0``, which is NaN where ``t`` is +-inf or NaN (a causal
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
        # both bounds as tensors of the output's dtype and device: torch.clamp takes
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

