"""The memory guard: build on the meta device first, and only then for real if it fits.

Where it sits: :func:`~hookscope.cli.loading.load_model` calls :func:`too_large` with the
model built on meta (which allocates nothing: a 47B-parameter Mixtral config builds in
a second) before it builds the model where the user's code would put it. The bytes of
its parameters and buffers are compared with the memory available there
(:func:`hookscope.core.meta.available_memory`, which tests patch); a model that does not
fit is never allocated. What happens instead is the command's choice
(:class:`TooLarge`): analyse it on meta, with a one-line notice, or stop with one line
naming its size and ``--device meta``. An explicit ``--device`` skips the guard: it is
how the user forces a real device.
"""

from __future__ import annotations

import enum

import torch
from torch import nn

from hookscope.core import meta

__all__ = ["TooLarge", "too_large"]


class TooLarge(str, enum.Enum):
    """What to do with a model that does not fit in the memory available."""

    META = "meta"
    """Analyse it on the meta device (shapes, parameters, FLOPs), with a notice."""
    STOP = "stop"
    """Stop: the command needs real values (times, statistics)."""


def too_large(model: nn.Module, spec: str, device: torch.device | None) -> str | None:
    """Why ``model`` (built on meta) would not fit on ``device``; ``None`` when it fits.

    The reason reads ``transformers:llama has 6.74 B parameters and buffers (25.1 GiB in
    float32), more than the 21.5 GiB of memory available``.
    """
    needed = meta.state_bytes(model)
    available = meta.available_memory(device)
    if available is None or needed <= available:
        return None
    count = sum(t.numel() for t in (*model.parameters(), *model.buffers()))
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()})
    where = f"{device.type.upper()} memory" if device is not None else "memory"
    return (
        f"{spec} has {_count(count)} parameters and buffers ({_gib(needed)} in "
        f"{'/'.join(dtypes) or 'no dtype'}), more than the {_gib(available)} of {where} "
        "available"
    )


def _count(n: int) -> str:
    for unit, scale in (("B", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return str(n)


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"
