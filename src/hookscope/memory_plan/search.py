"""The largest batch size whose planned peak fits a memory budget.

The peak grows with the batch size by about the same bytes per sample (activations
and temporaries scale with it, the model's states do not), so two plans give a line
and its crossing with the budget a first guess; the guess is then checked by planning
at it and at one more sample, and moved (doubling outwards, then bisecting) until the
answer ``n`` fits and ``n + 1`` does not. Every number comes from a plan: nothing is
tried on a device.
"""

from __future__ import annotations

from collections.abc import Callable

_MAX_BATCH = 1 << 24


def largest_batch(peak_of: Callable[[int], int], budget: int, *, start: int,
                  start_peak: int) -> int:
    """The largest ``n >= 1`` with ``peak_of(n) <= budget`` (0: not even one fits).

    Args:
        peak_of: the planned peak at a batch size.
        budget: bytes available.
        start: a batch size already planned.
        start_peak: its peak.
    """
    peaks = {start: start_peak}

    def fits(n: int) -> bool:
        if n not in peaks:
            peaks[n] = peak_of(n)
        return peaks[n] <= budget

    other = start * 2 if start > 1 else 2
    peaks[other] = peak_of(other)
    per_sample = (peaks[other] - start_peak) / (other - start)
    guess = start if per_sample <= 0 else start + int((budget - start_peak) // per_sample)
    guess = min(max(guess, 1), _MAX_BATCH)
    if fits(guess):
        low, high = guess, guess + 1
        while high <= _MAX_BATCH and fits(high):
            low, high = high, high + max(1, (high - guess) * 2)
        if high > _MAX_BATCH:
            return low
    else:
        high, low = guess, guess - 1
        while low >= 1 and not fits(low):
            high, low = low, low - max(1, (guess - low) * 2)
        if low < 1:
            if not fits(1):
                return 0
            low = 1
    while high - low > 1:  # low fits, high does not
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low
