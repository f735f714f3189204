"""Human formatting of the numbers in a trace: times, bytes, statistics, percentages.

Used by the trace table, the annotated model print and error messages. Every function
maps ``None`` (not recorded) to the empty string.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

_BYTE_UNITS = ("KiB", "MiB", "GiB", "TiB")


def format_time(ns: int | None, *, ascii: bool = False) -> str:
    """``812 ns``, ``12.3 µs``, ``4.56 ms``, ``1.23 s``: 3 significant digits
    (``us`` for microseconds when ``ascii``)."""
    if ns is None:
        return ""
    if abs(ns) < 1_000:
        return f"{ns} ns"
    for scale, unit in ((1e3, "us" if ascii else "µs"), (1e6, "ms")):
        if abs(ns) < 999.5 * scale:
            return f"{_three_digits(ns / scale)} {unit}"
    return f"{_three_digits(ns / 1e9)} s"


def format_count(n: int | None) -> str:
    """``1234567`` -> ``1,234,567``; ``None`` -> empty."""
    return "" if n is None else f"{n:,}"


def format_bytes(n: int | None) -> str:
    """``512 B``, ``1.50 KiB``, ``256 KiB``, ``3.00 MiB``: binary units, 3 significant
    digits; negative values (a memory decrease) keep their sign."""
    if n is None:
        return ""
    size = float(abs(n))
    sign = "-" if n < 0 else ""
    if size < 1024:
        return f"{n} B"
    for unit in _BYTE_UNITS:
        size /= 1024
        if size < 999.5 or unit == _BYTE_UNITS[-1]:
            break
    return f"{sign}{_three_digits(size)} {unit}"


def format_stat(x: float | None, *, digits: int = 4) -> str:
    """A statistic with ``digits`` significant digits: ``0.1235``, ``-3.2e+04``, ``nan``."""
    if x is None:
        return ""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}g}"


def format_stats(values: Sequence[float | None], *, digits: int = 4) -> list[str]:
    """A column of statistics under one rule: ``digits`` significant digits, every value
    in fixed notation when each reads so (``0.1235``, ``12.35``), else every value in
    scientific notation (``1.235e-01``, ``3.049e+05``); ``None`` is empty, NaN and
    infinities are spelled out."""
    finite = [abs(v) for v in values if v is not None and math.isfinite(v) and v != 0]
    top = 10 ** digits - 0.5  # .4g writes 9999.6 as 1e+04
    fixed = all(1e-4 <= v < top for v in finite)
    out = []
    for v in values:
        if v is None or not math.isfinite(v):
            out.append(format_stat(v))
        else:
            out.append(f"{v:.{digits}g}" if fixed else f"{v:.{digits - 1}e}")
    return out


def _three_digits(x: float) -> str:
    """``4.56``, ``45.6``, ``456`` (never scientific notation)."""
    if abs(x) >= 99.95:
        return f"{x:.0f}"
    return f"{x:.1f}" if abs(x) >= 9.995 else f"{x:.2f}"


def format_percent(fraction: float | None) -> str:
    """``0.5123`` -> ``51.2%``."""
    return "" if fraction is None else f"{fraction * 100:.1f}%"
