"""How far side B's value of a call is from side A's: the measures of a compare.

Each output tensor of a call is measured on its own (:func:`tensor_error`), in a common
floating dtype (``float32`` at least, ``float64`` when either side is) on side A's
device:

- ``max_abs``: ``max |a - b|``;
- ``max_rel``: ``max |a - b| / max |a|`` (NB: relative to side A's largest magnitude,
  not element by element: an element that is 0 on side A and ``1e-9`` on side B would
  otherwise make every ReLU's relative error infinite);
- ``cosine``: ``<a, b> / (||a|| ||b||)`` over the flattened tensors (1 when they are
  equal), from the norms of ``a``, ``b`` and ``a - b`` (:func:`_cosine` says why);
- ``sqnr_db``: ``20 log10(||a|| / ||a - b||)``, the quantization Numeric Suite's
  signal-to-quantization-noise ratio (``torch.ao.ns.fx.utils.compute_sqnr``); ``inf``
  when the two are equal.

A call's measures (:func:`value_errors` folded by :func:`worst`) are the worst over its
output tensors: the largest errors, the smallest cosine and SQNR.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from hookscope.core.records.tensor_paths import iter_tensors


@dataclass(frozen=True)
class TensorError:
    """How far side B's tensor is from side A's.

    Attributes:
        path: where the tensor sits in the call's output (``out``, ``out[0]``, ...).
        max_abs: ``max |a - b|``.
        max_rel: ``max |a - b| / max |a|``.
        cosine: the cosine similarity of the flattened tensors.
        sqnr_db: ``20 log10(||a|| / ||a - b||)`` in decibels.
        note: why the tensors could not be compared (shapes differ, a side has no
            tensor there); the measures are then ``nan``.
    """

    path: str
    max_abs: float
    max_rel: float
    cosine: float
    sqnr_db: float
    note: str = ""


def _common(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    wide = torch.promote_types(torch.promote_types(a.dtype, b.dtype), torch.float32)
    if not wide.is_floating_point:  # a complex output: compared as its real view
        return _common(torch.view_as_real(a), torch.view_as_real(b))
    return a.detach().to(wide), b.detach().to(device=a.device, dtype=wide)


def _absmax(t: torch.Tensor) -> torch.Tensor:
    """``max |t|`` as a 0-dim tensor (read with the call's other measures: one device
    synchronisation per tensor measured, not one per number)."""
    low, high = torch.aminmax(t)  # faster than vector_norm(t, inf) on the CPU
    return torch.maximum(low.abs(), high.abs())


def tensor_error(a: torch.Tensor, b: torch.Tensor, *, path: str = "out") -> TensorError:
    """The measures of side B's tensor ``b`` against side A's ``a`` (module docstring)."""
    if a.shape != b.shape:
        return _missing(path, f"shapes differ: {list(a.shape)} vs {list(b.shape)}")
    if a.numel() == 0:
        return TensorError(path, 0.0, 0.0, 1.0, math.inf)
    x, y = _common(a, b)
    diff = x - y
    norm = torch.linalg.vector_norm
    measured = torch.stack([_absmax(diff), _absmax(x), norm(x), norm(y), norm(diff)])
    max_abs, scale, nx, ny, noise = (float(v) for v in measured.tolist())
    max_rel = max_abs / scale if scale else (0.0 if max_abs == 0 else math.inf)
    sqnr = math.inf if noise == 0 else (20 * math.log10(nx / noise) if nx else -math.inf)
    return TensorError(path, max_abs, max_rel, _cosine(nx, ny, noise), sqnr)


def _cosine(nx: float, ny: float, noise: float) -> float:
    """``<x, y> / (||x|| ||y||)`` from the three norms: ``2 <x, y> = ||x||^2 + ||y||^2 -
    ||x - y||^2``. NB: a dot product summed in float32 over millions of elements moves
    a cosine of 0.999998 in its fifth digit; the norms' rounding, alike on both sides,
    cancels here (to about 1e-8 against float64 on 6.4M elements)."""
    if noise == 0:
        return 1.0
    if nx == 0 or ny == 0:
        return 0.0
    return min(1.0, max(-1.0, (nx * nx + ny * ny - noise * noise) / (2 * nx * ny)))


def max_abs_error(a: Any, b: Any) -> float:
    """The largest ``max |a - b|`` over the tensors of two values (``nan`` when none
    could be compared): all the introduced error needs, one pass per tensor."""
    theirs = dict(iter_tensors(b, "out"))
    found = []
    for path, t in iter_tensors(a, "out"):
        other = theirs.get(path)
        if other is not None and other.shape == t.shape and t.numel():
            x, y = _common(t, other)
            found.append(float(_absmax(x - y).item()))
        elif other is not None and other.shape == t.shape:
            found.append(0.0)
    return max(found) if found else math.nan


def _missing(path: str, note: str) -> TensorError:
    nan = math.nan
    return TensorError(path, nan, nan, nan, nan, note)


def value_errors(a: Any, b: Any, *,
                 measure: Callable[..., TensorError] = tensor_error) -> list[TensorError]:
    """The measures of each tensor of side A's value ``a`` (a call's output: a tensor,
    or tuples, dicts, dataclasses of them) against the tensor at the same place in
    ``b`` (``measure``: :func:`tensor_error`, or one that remembers its answers)."""
    theirs = dict(iter_tensors(b, "out"))
    out = []
    for path, t in iter_tensors(a, "out"):
        other = theirs.pop(path, None)
        out.append(_missing(path, "side B has no tensor here") if other is None
                   else measure(t, other, path=path))
    out += [_missing(path, "side A has no tensor here") for path in theirs]
    return out


@dataclass(frozen=True)
class Worst:
    """A call's measures: the worst over its output tensors (``nan`` when none could
    be compared)."""

    max_abs: float
    max_rel: float
    cosine: float
    sqnr_db: float


def worst(errors: Sequence[TensorError]) -> Worst:
    """The largest errors and the smallest cosine and SQNR of ``errors``."""
    ok = [e for e in errors if not e.note]
    if not ok:
        return Worst(math.nan, math.nan, math.nan, math.nan)
    return Worst(max(e.max_abs for e in ok), max(e.max_rel for e in ok),
                 min(e.cosine for e in ok), min(e.sqnr_db for e in ok))
