"""Example inputs made from sizes, for ``input_size=`` and the command line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from hookscope.errors import SpecError

InputSize = Sequence[int] | Sequence[Sequence[int]]


def model_float_dtype(model: nn.Module) -> torch.dtype:
    """The floating dtype of the model's first floating parameter or buffer (float32 for
    a model without one): what inputs made from sizes are drawn in."""
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.is_floating_point():
            return tensor.dtype
    return torch.float32


def model_device(model: nn.Module) -> torch.device:
    """Device of the model's first parameter or buffer (CPU for a stateless model)."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


def parse_device(device: str | torch.device | None) -> torch.device | None:
    """``device`` as a ``torch.device`` (``None`` stays ``None``), if this machine has it.

    Raises:
        SpecError: ``device`` names no device, its backend (CUDA, MPS, XPU, ...) is not
            available here, or its index is beyond the devices there are.
    """
    if device is None:
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as e:
        raise SpecError(
            f"device {device!r} is not a torch device; use 'cpu', 'cuda', 'cuda:0' or 'meta'"
        ) from e
    if dev.type in ("cpu", "meta"):
        return dev
    backend = getattr(torch, dev.type, None)
    is_available = getattr(backend, "is_available", None)
    count = getattr(backend, "device_count", None)
    if not callable(is_available) or not is_available():
        other = ", or 'cuda'" if torch.cuda.is_available() else ""
        raise SpecError(
            f"device {device!r} is not available here ({dev.type.upper()} is not available "
            f"on this machine); use 'cpu' or 'meta'{other}"
        )
    if dev.index is not None and callable(count) and dev.index >= count():
        raise SpecError(
            f"device {device!r} does not exist: this machine has {count()} {dev.type} "
            "device(s), numbered from 0"
        )
    return dev


def _normalize_sizes(input_size: InputSize) -> list[tuple[int, ...]]:
    if isinstance(input_size, (dict, str, bytes)) or not isinstance(input_size, Sequence):
        # list() of a dict is its keys: {3: 'a', 4: 'b'} would read as the shape (3, 4)
        raise SpecError(
            f"input_size must be a shape like (1, 3, 224, 224) or a list of shapes, got "
            f"{type(input_size).__name__} {input_size!r}; for keyword inputs pass tensors "
            "with kwargs={...}"
        )
    items: list[Any] = list(input_size)
    sizes: list[Any] = [items] if all(isinstance(d, int) for d in items) else items
    out: list[tuple[int, ...]] = []
    for size in sizes:
        if isinstance(size, int) or not all(isinstance(d, int) and d >= 0 for d in size):
            raise SpecError(
                f"input_size must be a shape like (1, 3, 224, 224) or a list of shapes, "
                f"got {input_size!r}"
            )
        out.append(tuple(size))
    return out


def random_tensor(
    shape: Sequence[int],
    dtype: torch.dtype,
    *,
    device: torch.device,
    generator: torch.Generator,
    high: int = 2,
) -> torch.Tensor:
    """One example tensor, drawn on the CPU from ``generator`` and moved to ``device``.

    Floating and complex dtypes are standard normal, bool is random, other integers are
    drawn from ``[0, high)``. On the meta device no data is made.
    """
    if device.type == "meta":
        return torch.empty(tuple(shape), dtype=dtype, device=device)
    if dtype.is_floating_point or dtype.is_complex:
        tensor = torch.randn(tuple(shape), generator=generator, dtype=dtype)
    elif dtype == torch.bool:
        tensor = torch.randint(0, 2, tuple(shape), generator=generator).bool()
    else:
        high = min(high, torch.iinfo(dtype).max + 1)
        tensor = torch.randint(0, high, tuple(shape), generator=generator, dtype=dtype)
    return tensor.to(device)


def make_example_inputs(
    input_size: InputSize,
    *,
    dtypes: Sequence[torch.dtype] | None = None,
    device: torch.device,
    seed: int = 0,
    float_dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, ...]:
    """Random tensors of the given sizes, without touching torch's global RNG.

    Floating dtypes are standard normal, integer dtypes are 0 or 1, bool is random.
    Without ``dtypes``, every input gets ``float_dtype``.
    """
    sizes = _normalize_sizes(input_size)
    if dtypes is None:
        dtypes = [float_dtype] * len(sizes)
    if len(dtypes) != len(sizes):
        raise SpecError(f"got {len(sizes)} input sizes but {len(dtypes)} dtypes; give one each")
    gen = torch.Generator().manual_seed(seed)
    return tuple(
        random_tensor(size, dtype, device=device, generator=gen)
        for size, dtype in zip(sizes, dtypes, strict=True)
    )
