"""Fake tensors: tensors with shapes, dtypes, devices and storages but no data.

Private: ``torch._subclasses.fake_tensor`` (``FakeTensorMode`` and the exceptions its
ops raise when an output depends on tensor values). The memory plan
(``hookscope/memory_plan/``) runs a model's training step under this mode: every op
computes its output's metadata only, and each output has a storage of the right size
whose lifetime follows the real one's, so storage bytes can be counted without
allocating them.
"""

from __future__ import annotations

from typing import Any

import torch

from hookscope.core.torch_private._warnings import _warn_once

try:
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
        FakeTensorMode,
    )

    VALUE_DEPENDENT: tuple[type[Exception], ...] = (
        DataDependentOutputException, DynamicOutputShapeException)
except ImportError:  # pragma: no cover - a torch that moved it
    FakeTensorMode = None  # type: ignore[assignment,misc]
    VALUE_DEPENDENT = ()


def fake_mode() -> Any:
    """A new ``FakeTensorMode`` that accepts no real tensor as an op's input, or ``None``
    (and a warning once) where torch has none."""
    if FakeTensorMode is None:  # pragma: no cover
        _warn_once("memory plans", "has no torch._subclasses.fake_tensor.FakeTensorMode")
        return None
    return FakeTensorMode(allow_non_fake_inputs=False)


def is_fake(t: torch.Tensor) -> bool:
    """Whether ``t`` is a fake tensor."""
    return FakeTensorMode is not None and type(t).__name__ == "FakeTensor"
