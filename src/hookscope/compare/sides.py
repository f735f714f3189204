"""Side B of a compare: the model and the settings it runs under.

One model can be compared with itself under other settings, so side B is side A's model
(or a second model) plus what changes: autocast (``b_autocast``), a cast copy
(``b_dtype``), a copy on another device (``b_device``), other weights (``b_weights``: a
state dict, a safetensors file or a ``torch.save`` file read with
``weights_only=True``), a copy run through ``torch.compile`` (``b_compile``). A model
that must change is copied first (``copy.deepcopy``): the user's models are never
modified. Inputs follow the model: side B's inputs are side A's, moved to its device and
cast to its dtype.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import os
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hookscope.core.inputs import model_device, parse_device
from hookscope.core.records.tensor_paths import map_tensors
from hookscope.errors import SpecError

_AUTOCAST = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
             "fp16": torch.float16, "float16": torch.float16, "half": torch.float16}
_DTYPES = {**_AUTOCAST, "fp32": torch.float32, "float32": torch.float32,
           "fp64": torch.float64, "float64": torch.float64, "double": torch.float64}

Weights = Mapping[str, torch.Tensor] | str | os.PathLike[str]


def parse_dtype(value: torch.dtype | str | None, *, option: str,
                allowed: Mapping[str, torch.dtype] = _DTYPES) -> torch.dtype | None:
    """``value`` (a floating ``torch.dtype`` or a name: ``bf16``, ``float16``, ...) as a
    dtype that ``allowed`` holds.

    Raises:
        SpecError: any other value.
    """
    if value is None:
        return None
    dtype = allowed.get(value.lower()) if isinstance(value, str) else value
    if dtype not in set(allowed.values()):
        names = ", ".join(sorted({k for k in allowed if len(k) <= 4}))
        flag = "--" + option.replace("_", "-")
        raise SpecError(f"{option}= ({flag}) must be a floating dtype ({names}), got "
                        f"{value!r}")
    return dtype


@dataclass(frozen=True)
class SideB:
    """What side B runs: its model (side A's, the second model, or a copy of either) and
    its settings.

    Attributes:
        model: the model side B runs.
        autocast: the autocast dtype its forward runs under (``None``: none).
        dtype: the floating dtype its inputs are cast to (``None``: as they are).
        device: the device its inputs are moved to (``None``: as they are).
        copy_bytes: bytes of the copy made for side B (0 when none was made).
        compiled: the ``torch.compile`` backend (``None``: not compiled).
        home: the device side B's model is on, where its re-runs get side A's stored
            values (which are kept on the CPU).
    """

    model: nn.Module
    autocast: torch.dtype | None = None
    dtype: torch.dtype | None = None
    device: torch.device | None = None
    copy_bytes: int = 0
    compiled: str | None = None
    home: torch.device | None = None

    def inputs(self, value: Any, *, copy: bool = False,
               copy_ids: AbstractSet[int] = frozenset()) -> Any:
        """Side A's ``value`` (inputs of a call, or a call's output) as side B takes it:
        floating tensors cast to :attr:`dtype`, every tensor moved to :attr:`device`
        (``copy``: always a new tensor, which the call may write in place; ``copy_ids``:
        a new tensor for the tensors whose ``id`` it holds)."""
        device = self.device or self.home
        if self.dtype is None and device is None and not copy and not copy_ids:
            return value

        def move(t: torch.Tensor) -> torch.Tensor:
            dtype = self.dtype if self.dtype is not None and t.is_floating_point() else None
            return t.to(device=device or t.device, dtype=dtype or t.dtype,
                        copy=copy or id(t) in copy_ids)

        return map_tensors(move, value)

    def running(self) -> contextlib.AbstractContextManager[Any]:
        """The context side B's forward runs in (autocast, or nothing)."""
        if self.autocast is None:
            return contextlib.nullcontext()
        device = self.device or model_device(self.model)
        return torch.autocast(device.type, dtype=self.autocast)


def side_b(
    model_a: nn.Module, model_b: nn.Module | None, *, autocast: torch.dtype | str | None,
    dtype: torch.dtype | str | None, device: str | torch.device | None,
    compile: bool | str, weights: Weights | None,
) -> SideB:
    """Build side B from the options of :func:`hookscope.compare` (validated here).

    Raises:
        SpecError: a bad option, weights that do not fit the model.
    """
    base = model_a if model_b is None else model_b
    if not isinstance(base, nn.Module):
        raise SpecError(f"compare: model_b must be a torch.nn.Module or None, got "
                        f"{type(base).__name__}; to compare a model with itself under "
                        "other settings: compare(model, None, x, b_autocast='bf16')")
    amp = parse_dtype(autocast, option="b_autocast", allowed=_AUTOCAST)
    cast = parse_dtype(dtype, option="b_dtype")
    dev = parse_device(device)
    if dev is not None and dev.type == "meta":
        raise SpecError("b_device='meta' has no values to compare; use 'cpu' or 'cuda'")
    if not isinstance(compile, (bool, str)):
        raise SpecError(f"b_compile= must be True, False or a backend name, got {compile!r}")
    if isinstance(compile, str):
        _check_backend(compile)
    state = None if weights is None else read_weights(weights)
    model, copied = base, 0
    # NB: torch.compile marks the module it wraps (``_is_torch_compile``): compiled is a copy
    if cast is not None or dev is not None or state is not None or compile:
        model = copy.deepcopy(base)
        if state is not None:
            _load(model, state)
        model.to(device=dev, dtype=cast)
        copied = sum(t.nbytes for t in (*model.parameters(), *model.buffers()))
    backend = (compile if isinstance(compile, str) else "inductor") if compile else None
    if backend is not None:
        compiler: Callable[..., Any] = torch.compile
        model = compiler(model, backend=backend)
    return SideB(model, amp, cast, dev, copied, backend, dev or model_device(model))


def _check_backend(name: str) -> None:
    """Refuse a ``torch.compile`` backend this torch does not have, before anything runs
    (torch would raise at side B's first call)."""
    known = torch.compiler.list_backends(exclude_tags=())
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3)
        hint = f" (close matches: {', '.join(close)})" if close else ""
        raise SpecError(f"b_compile={name!r} is not a torch.compile backend here{hint}; "
                        f"use one of {', '.join(torch.compiler.list_backends())}, eager "
                        "or aot_eager")


def read_weights(weights: Weights) -> Mapping[str, torch.Tensor]:
    """A state dict from ``weights``: itself, or read from a safetensors file
    (``.safetensors``) or a ``torch.save`` file (``torch.load(weights_only=True)``).

    Raises:
        SpecError: the file is missing or unreadable, or holds no state dict.
    """
    if isinstance(weights, Mapping):
        state: Any = weights
    else:
        path = Path(weights)
        if not path.is_file():
            raise SpecError(f"b_weights={str(weights)!r} is not a file; give a state dict, "
                            "a .safetensors file or a torch.save file")
        try:
            if path.suffix == ".safetensors":
                from safetensors.torch import load_file

                state = load_file(str(path))
            else:
                state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:
            raise SpecError(f"b_weights={str(weights)!r} could not be read: "
                            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                            ) from None
    if isinstance(state, Mapping) and "state_dict" in state and isinstance(
            state["state_dict"], Mapping):
        state = state["state_dict"]  # a training checkpoint: {"state_dict": ..., "step": ...}
    if not isinstance(state, Mapping) or not all(
            isinstance(v, torch.Tensor) for v in state.values()):
        raise SpecError(f"b_weights must be a state dict of tensors (name -> tensor), got "
                        f"{type(state).__name__}")
    return state


def _load(model: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise SpecError(
            f"b_weights do not fit {type(model).__name__}: missing {missing[:3]!r}"
            f"{' ...' if len(missing) > 3 else ''}, unexpected {unexpected[:3]!r}"
            f"{' ...' if len(unexpected) > 3 else ''} (a prefix such as 'module.' to strip?)"
        )
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise SpecError(f"b_weights do not fit {type(model).__name__}: "
                        f"{str(e).splitlines()[-1].strip()}") from None
