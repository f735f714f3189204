"""Histograms of gradients and weights (``GradientMonitor(histograms=N)``).

Every N steps the recorder (``monitor/recorder.py``) asks :class:`HistogramTaker` for
the histograms of each watched parameter's gradient (at the step: after the loop's own
clip and a ``GradScaler``'s unscale, before the monitor's ``clip=``) and of its weight
(before the optimizer step), ``bins`` equal bins over each tensor's own range. The
range needs the host: one transfer of every tensor's min, max, sum and sum of squares
per histogram step (not one per parameter); then ``torch.histc`` bins each tensor on
its device and the counts wait there for the monitor's next host transfer. Off by
default: a step without histograms costs nothing here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from hookscope.errors import SpecError
from hookscope.monitor.norms import rows_to_host

__all__ = [
    "Histogram", "HistogramTaker", "PendingHistograms", "check_histograms", "host_histograms",
]


@dataclass(frozen=True)
class Histogram:
    """The values of one tensor at one step, in equal bins from ``low`` to ``high``.

    Attributes:
        low, high: the range (the tensor's min and max).
        counts: the number of values in each bin.
        total, sum, sum_squares: the number of values, their sum and sum of squares.
    """

    low: float
    high: float
    counts: list[float]
    total: int
    sum: float
    sum_squares: float

    @property
    def edges(self) -> list[float]:
        """The ``len(counts) + 1`` bin edges."""
        width = (self.high - self.low) / len(self.counts)
        return [self.low + k * width for k in range(len(self.counts) + 1)]


@dataclass
class PendingHistograms:
    """One step's histograms with their counts still on the device."""

    step: int
    ranges: list[list[float] | None]  # per tensor: low, high, total, sum, sum of squares
    counts: torch.Tensor | None  # the binned tensors' counts, one after the other


def check_histograms(histograms: object, bins: object) -> int:
    """``histograms=``: ``False``/``0`` (off), ``True`` (every step) or every N steps;
    ``bins=``: a positive integer. The step interval (0: off).

    Raises:
        SpecError: naming the option.
    """
    if histograms is True:
        every = 1
    elif histograms is False or histograms is None:
        every = 0
    elif isinstance(histograms, int) and histograms >= 0:
        every = histograms
    else:
        raise SpecError(f"histograms= must be True, False or every how many steps (an "
                        f"integer), got {histograms!r}")
    if not isinstance(bins, int) or isinstance(bins, bool) or bins < 1:
        raise SpecError(f"bins= must be a positive integer, got {bins!r}")
    return every


class HistogramTaker:
    """Takes the histograms of the watched gradients and weights every ``every`` steps."""

    def __init__(self, params: Sequence[torch.Tensor], *, every: int, bins: int) -> None:
        self._params, self._every, self.bins = list(params), every, bins
        self.pending: list[PendingHistograms] = []

    def maybe_take(self, step: int) -> None:
        """At a histogram step: the gradients' histograms, then the weights'."""
        if self._every and step % self._every == 0:
            tensors = [p.grad for p in self._params] + [p.detach() for p in self._params]
            with torch.no_grad():
                self.pending.append(_take(step, tensors, self.bins))

    def take(self) -> list[PendingHistograms]:
        pending, self.pending = self.pending, []
        return pending


def _binnable(t: torch.Tensor | None) -> bool:
    return (t is not None and t.numel() > 0 and t.layout == torch.strided
            and not t.is_complex())


def _take(step: int, tensors: list[torch.Tensor | None], bins: int) -> PendingHistograms:
    # one float copy per tensor (none for float32), shared by its stats and its counts
    floats = [t.float() if t is not None and _binnable(t) else None for t in tensors]
    chosen = [f for f in floats if f is not None]
    if not chosen:
        return PendingHistograms(step, [None] * len(tensors), None)
    device = chosen[0].device
    stats = [torch.stack([f.min(), f.max(), f.sum(), f.pow(2).sum()]).to(device)
             for f in chosen]
    host = iter(rows_to_host([torch.cat(stats)])[0][k:k + 4] for k in range(0, 4 * len(chosen), 4))
    ranges: list[list[float] | None] = []
    counts = []
    for t in floats:
        if t is None:
            ranges.append(None)
            continue
        low, high, total_sum, squares = next(host)
        if not (math.isfinite(low) and math.isfinite(high)):
            ranges.append(None)  # a non-finite value: no range to bin (an anomaly says so)
            continue
        if low == high:  # one value: a bin around it
            low, high = low - 0.5, high + 0.5
        ranges.append([low, high, float(t.numel()), total_sum, squares])
        counts.append(torch.histc(t, bins, low, high).to(device))
    return PendingHistograms(step, ranges, torch.cat(counts) if counts else None)


def host_histograms(pending: PendingHistograms, counts: list[float],
                    bins: int) -> list[Histogram | None]:
    """``pending`` with its counts on the host: a histogram per tensor (``None``: no
    gradient, or one that cannot be binned: complex, sparse, non-finite)."""
    out: list[Histogram | None] = []
    offset = 0
    for r in pending.ranges:
        if r is None:
            out.append(None)
            continue
        low, high, total, total_sum, squares = r
        out.append(Histogram(low, high, counts[offset:offset + bins], int(total), total_sum,
                             squares))
        offset += bins
    return out
