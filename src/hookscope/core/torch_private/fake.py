"""Fake tensors: tensors with shapes, dtypes, devices and storages but no data.

Private: ``torch._subclasses.fake_tensor`` (``FakeTensorMode`` and the exceptions its
ops raise when an output depends on tensor values). The memory plan
(``hookscope/memory_plan/``) runs a model's training step under this mode: every op
computes its output's metadata only, and each output has a storage of the right size
whose lifetime follows the real one's, so storage bytes can be counted without
allocating them.

A few kernels return a workspace for their backward whose size only their library
knows (oneDNN's LSTM/GRU layer on the CPU): their fake kernels report it as empty.
:func:`real_workspace_nbytes` asks the real kernel, once per shape.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import torch

from hookscope.core.torch_private._warnings import _warn_once
from hookscope.core.torch_private.dispatch import dispatch_off

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


@contextlib.contextmanager
def quiet_fake_kernel_errors() -> Iterator[None]:
    """Keep ``FakeTensorMode`` from logging a kernel's failure with its traceback
    (``torch._subclasses.fake_tensor`` logs at ERROR before it raises): the exception
    it raises reaches the caller, which says it in one line."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def is_fake(t: torch.Tensor) -> bool:
    """Whether ``t`` is a fake tensor."""
    return FakeTensorMode is not None and type(t).__name__ == "FakeTensor"


WORKSPACE_OPS: frozenset[Any] = frozenset(
    getattr(getattr(torch.ops.aten, name, None), "default", None)
    for name in ("mkldnn_rnn_layer", "_cudnn_rnn", "miopen_rnn")) - {None}
"""Ops whose real kernel returns, as its fourth output, a workspace for the backward
that their fake kernel reports as empty."""

WORKSPACE_QUERY_BYTES = 256 * 2**20
"""The most bytes of real tensors :func:`real_workspace_nbytes` allocates to ask."""

_workspaces: dict[tuple[Any, ...], int | None] = {}


def real_workspace_nbytes(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
                          ) -> int | None:
    """The bytes of the workspace the real kernel of ``func`` (one of
    :data:`WORKSPACE_OPS`) returns for fake ``args``, or ``None`` where it cannot be
    asked: the op's tensors are not on the CPU, or more than
    :data:`WORKSPACE_QUERY_BYTES` of them would be allocated.

    The kernel runs once per signature (shapes, strides, dtypes, the other arguments),
    on zeros, with dispatch off (the fake mode and every other mode skip it).
    """
    flat = [*args, *kwargs.values()]
    tensors = [a for a in flat if isinstance(a, torch.Tensor)]
    key = (func, torch.is_grad_enabled(),
           *((tuple(a.shape), a.stride(), a.dtype, a.device.type)
             if isinstance(a, torch.Tensor) else repr(a) for a in flat))
    if key in _workspaces:
        return _workspaces[key]
    found: int | None = None
    inputs_bytes = sum(a.numel() * a.element_size() for a in tensors)
    # the outputs are about the size of the inputs again, the workspace a few times it
    if all(a.device.type == "cpu" for a in tensors) \
            and 8 * inputs_bytes <= WORKSPACE_QUERY_BYTES:
        # in the caller's grad mode: the kernel keeps no workspace under no_grad
        with dispatch_off():
            real = [torch.empty_strided(a.shape, a.stride(), dtype=a.dtype).zero_()
                    if isinstance(a, torch.Tensor) else a for a in flat]
            try:
                out = func(*real[:len(args)],
                           **dict(zip(kwargs, real[len(args):], strict=True)))
            except Exception:  # a kernel that refuses zeros: the plan goes without it
                out = None
        workspace = None if out is None else out[3]
        # a torch without the dispatch guard ran the fake kernel again: nothing learnt
        if isinstance(workspace, torch.Tensor) and not is_fake(workspace):
            found = int(workspace.untyped_storage().nbytes())
    _workspaces[key] = found
    return found
