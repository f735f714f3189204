"""The options of :func:`hookscope.memory_plan`, checked in one place.

Each is turned into what the step needs (an optimizer factory, a dtype, a predicate
over module paths, a number of bytes), or a :class:`~hookscope.errors.SpecError` that
names the option, the value given and what it takes.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import re
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from hookscope.core.model.selectors import Selector, compile_selector
from hookscope.errors import SpecError
from hookscope.memory_plan.step import OptimizerFactory

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
          "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
          "bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float64": torch.float64,
          "fp64": torch.float64, "double": torch.float64}
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_LR = 1e-3


def _optimizer_classes() -> dict[str, type[torch.optim.Optimizer]]:
    return {name.lower(): cls for name, cls in vars(torch.optim).items()
            if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)
            and cls is not torch.optim.Optimizer}


def optimizer_factory(optimizer: Any) -> tuple[OptimizerFactory | None, str | None]:
    """``(factory, name)`` of ``optimizer``: a name of a ``torch.optim`` class
    (``"adamw"``, case-insensitive), an optimizer class, a callable
    ``fn(params) -> Optimizer`` (a ``functools.partial`` of a class with its options),
    or ``None`` (no optimizer step)."""
    if optimizer is None:
        return None, None
    if isinstance(optimizer, str):
        classes = _optimizer_classes()
        cls = classes.get(optimizer.strip().lower())
        if cls is None:
            close = difflib.get_close_matches(optimizer.lower(), list(classes), n=3)
            hint = f" (close: {', '.join(close)})" if close else ""
            raise SpecError(f"optimizer={optimizer!r} is not a torch.optim class{hint}; "
                            f"use one of {', '.join(sorted(classes))}")
        optimizer = cls
    if isinstance(optimizer, type) and issubclass(optimizer, torch.optim.Optimizer):
        cls = optimizer
        return _with_lr(cls), cls.__name__
    if callable(optimizer):
        target = optimizer.func if isinstance(optimizer, functools.partial) else optimizer
        return optimizer, getattr(target, "__name__", type(target).__name__)
    raise SpecError(f"optimizer={optimizer!r} is neither a name ('adamw', 'sgd'), an "
                    "optimizer class nor a function fn(params) -> Optimizer")


def _with_lr(cls: type[torch.optim.Optimizer]) -> OptimizerFactory:
    if "lr" not in inspect.signature(cls).parameters:
        return cls
    factory: OptimizerFactory = functools.partial(cls, lr=_LR)  # type: ignore[call-arg]  # a subclass's
    return factory


def parse_dtype(value: Any, *, option: str) -> torch.dtype | None:
    """A floating dtype from a ``torch.dtype`` or its name (``"bf16"``)."""
    if value is None or (isinstance(value, torch.dtype) and value.is_floating_point):
        return value
    dtype = DTYPES.get(value.strip().lower()) if isinstance(value, str) else None
    if dtype is None:
        raise SpecError(f"{option}={value!r} is not a floating dtype; use torch.bfloat16 "
                        "or a name: float32, float16 (fp16), bfloat16 (bf16), float64")
    return dtype


def parse_bytes(value: Any, *, option: str = "device_memory") -> int | None:
    """Bytes from an int or a size (``"80GiB"``, ``"80 GB"``, ``"1.5TiB"``)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]i?b|b)?\s*", str(value).lower())
    if isinstance(value, str) and match:
        size = float(match.group(1)) * _UNITS[match.group(2) or ""]
        if size >= 1:
            return int(size)
    raise SpecError(f"{option}={value!r} is not a size; give bytes or a number with a "
                    "unit: 80GiB, 24GB, 512MiB")


def positive(value: Any, *, option: str) -> int:
    """``value`` as an int of at least 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(f"{option}={value!r} must be a whole number of at least 1")
    return value


def repeated_blocks(model: nn.Module) -> list[str]:
    """The children of the outermost ``ModuleList``/``Sequential`` runs of at least two
    modules of one class (GPT-2's ``h.0``... , ResNet's ``layer1.0``...)."""
    chosen: list[str] = []
    for path, module in model.named_modules():
        if any(path.startswith(c + ".") for c in chosen):
            continue
        kids = list(module.named_children())
        if (isinstance(module, (nn.ModuleList, nn.Sequential)) and len(kids) >= 2
                and len({type(m) for _, m in kids}) == 1):
            chosen.extend(f"{path}.{name}" if path else name for name, m in kids
                          if not isinstance(m, nn.ModuleList))  # a list is never called
    return chosen


def checkpoint_choice(model: nn.Module, value: bool | Selector | None,
                      *, training: bool) -> list[str]:
    """The module paths whose forward is checkpointed: none, the repeated blocks
    (``True``), or those a selector picks."""
    if value is None or value is False:
        return []
    if not training:
        raise SpecError("activation_checkpointing applies to training; drop it or plan "
                        "with training=True")
    if value is True:
        paths = repeated_blocks(model)
        if not paths:
            raise SpecError("activation_checkpointing=True found no repeated blocks (a "
                            "ModuleList or Sequential of one class); name the modules, "
                            "e.g. activation_checkpointing='layers.*'")
        return paths
    selected: Callable[[str], bool] = compile_selector(value)
    paths = [p for p, _ in model.named_modules() if p and selected(p)]
    if not paths:
        raise SpecError(f"activation_checkpointing={value!r} selects no module; module "
                        "paths look like "
                        f"{', '.join(repr(p) for p, _ in list(model.named_modules())[1:4])}")
    return paths
