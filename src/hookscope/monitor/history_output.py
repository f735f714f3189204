"""TensorBoard logging of a :class:`~hookscope.monitor.GradHistory`.

tensorboard (``hookscope[tensorboard]``) is optional: it is imported only when a log
directory is asked for, and a missing one is a
:class:`~hookscope.errors.MissingDependencyError` naming the extra. Pictures are drawn
in ``monitor/plots.py``.
"""

from __future__ import annotations

import math
import os
from typing import Any

from hookscope.errors import MissingDependencyError, SpecError
from hookscope.monitor.history import GradHistory

__all__ = [
    "open_writer", "summary_writer", "write_histograms", "write_history", "write_scalars",
    "write_updates",
]


def summary_writer(logdir: Any) -> Any:
    """A ``torch.utils.tensorboard.SummaryWriter`` on ``logdir``.

    Raises:
        MissingDependencyError: tensorboard is not installed.
    """
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:
        raise MissingDependencyError("tensorboard", "tensorboard",
                                     needed_for="TensorBoard logging") from e
    return SummaryWriter(str(logdir))


def write_scalars(writer: Any, history: GradHistory, row: int) -> None:
    """Row ``row`` of ``history``: ``grad_norm/<parameter>`` per parameter and
    ``grad_norm/total`` (the joint norm), at the row's step."""
    step, values = history.steps[row], history.norms[row]
    total = 0.0
    # a NaN norm of a gradient that was there is written (and makes the total NaN):
    # only a parameter without a gradient that step is left out
    for name, v, had in zip(history.names, values, history.had_gradient(row), strict=True):
        if had:
            writer.add_scalar(f"grad_norm/{name}", v, step)
            total += v * v
    writer.add_scalar("grad_norm/total", math.sqrt(total), step)


def write_updates(writer: Any, history: GradHistory, row: int) -> None:
    """Optimizer step ``row`` of ``history`` (``updates=True``):
    ``update_ratio/<parameter>`` and ``weight_norm/<parameter>``, at its step."""
    step = history.update_steps[row]
    for name, ratio, weight in zip(history.names, history.update_ratio[row],
                                   history.weight_norms[row], strict=True):
        writer.add_scalar(f"update_ratio/{name}", ratio, step)
        writer.add_scalar(f"weight_norm/{name}", weight, step)


def write_histograms(writer: Any, history: GradHistory, row: int) -> None:
    """Histogram step ``row`` of ``history`` (``histograms=N``): ``grad/<parameter>`` and
    ``weight/<parameter>`` as TensorBoard histograms, at its step (left out for a
    writer without ``add_histogram_raw``)."""
    add = getattr(writer, "add_histogram_raw", None)
    if add is None:
        return
    step = history.histogram_steps[row]
    for prefix, found in (("grad", history.grad_histograms[row]),
                          ("weight", history.weight_histograms[row])):
        for name, h in zip(history.names, found, strict=True):
            if h is not None:
                add(f"{prefix}/{name}", min=h.low, max=h.high, num=h.total, sum=h.sum,
                    sum_squares=h.sum_squares, bucket_limits=h.edges[1:],
                    bucket_counts=h.counts, global_step=step)


def write_history(writer: Any, history: GradHistory) -> None:
    """Every row of ``history``: norms, updates and histograms."""
    for row in range(len(history)):
        write_scalars(writer, history, row)
    for row in range(len(history.update_steps)):
        write_updates(writer, history, row)
    for row in range(len(history.histogram_steps)):
        write_histograms(writer, history, row)


def open_writer(writer: Any) -> Any:
    """``writer`` itself when it is ``None`` or a ``SummaryWriter``-like object, else a
    writer for the log directory it names."""
    if writer is None or hasattr(writer, "add_scalar"):
        return writer
    if not isinstance(writer, (str, os.PathLike)):
        raise SpecError(
            f"writer= must be a TensorBoard SummaryWriter (anything with add_scalar) or a "
            f"log directory, got {type(writer).__name__}"
        )
    return summary_writer(writer)
