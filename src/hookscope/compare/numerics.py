"""How far side B's value of a call is from side A's: the measures of a compare.

Each output tensor of a call is measured on its own (:func:`tensor_error`), in
``float64`` on side A's device (sums over millions of elements in ``float32`` move a
cosine of 0.99999 in its fifth digit):

- ``max_abs``: ``max |a - b|``;
- ``max_rel``: ``max |a - b| / max |a|`` (NB: relative to side A's largest magnitude,
  not element by element: an element that is 0 on side A and ``1e-9`` on side B would
  otherwise make every ReLU's relative error infinite);
- ``cosine``: ``<a, b> / (||a|| ||b||)`` over the flattened tensors (1 when both are 0);
- ``sqnr_db``: ``20 log10(||a|| / ||a - b||)``, the quantization Numeric Suite's
  signal-to-quantization-noise ratio (``torch.ao.ns.fx.utils.compute_sqnr``); ``inf``
  when the two are equal.

A call's measures (:func:`value_errors` folded by :func:`worst`) are the worst over its
output tensors: the largest errors, the smallest cosine and SQNR.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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
    return a.detach().double(), b.detach().to(device=a.device, dtype=torch.float64)


def tensor_error(a: torch.Tensor, b: torch.Tensor, *, path: str = "out") -> TensorError:
    """The measures of side B's tensor ``b`` against side A's ``a`` (module docstring)."""
    if a.shape != b.shape:
        return _missing(path, f"shapes differ: {list(a.shape)} vs {list(b.shape)}")
    if a.numel() == 0:
        return TensorError(path, 0.0, 0.0, 1.0, math.inf)
    x, y = _common(a, b)
    diff = x - y
    max_abs = diff.abs().max().item()
    scale = x.abs().max().item()
    max_rel = max_abs / scale if scale else (0.0 if max_abs == 0 else math.inf)
    nx, ny = torch.linalg.vector_norm(x).item(), torch.linalg.vector_norm(y).item()
    if max_abs == 0 or nx == 0 or ny == 0:
        cosine = 1.0 if max_abs == 0 else 0.0
    else:  # NB: clamped: rounding of the sums can give 1.0000000000000002
        cosine = min(1.0, max(-1.0, torch.dot(x.flatten(), y.flatten()).item() / (nx * ny)))
    noise = torch.linalg.vector_norm(diff).item()
    sqnr = math.inf if noise == 0 else (20 * math.log10(nx / noise) if nx else -math.inf)
    return TensorError(path, max_abs, max_rel, cosine, sqnr)


def _missing(path: str, note: str) -> TensorError:
    nan = math.nan
    return TensorError(path, nan, nan, nan, nan, note)


def value_errors(a: Any, b: Any) -> list[TensorError]:
    """The measures of each tensor of side A's value ``a`` (a call's output: a tensor,
    or tuples, dicts, dataclasses of them) against the tensor at the same place in
    ``b``."""
    theirs = dict(iter_tensors(b, "out"))
    out = []
    for path, t in iter_tensors(a, "out"):
        other = theirs.pop(path, None)
        out.append(_missing(path, "side B has no tensor here") if other is None
                   else tensor_error(t, other, path=path))
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
