"""Activation patching: :func:`replace_with` returns a stored value (a capture's, in
memory or read from disk, or any value) instead of a module's output, a copy put back in
the classes the model returns now (``hookscope.patches.replace_with``, gathered in
``functions.py``).
"""

from __future__ import annotations

import copy
import dataclasses
from collections import OrderedDict
from collections.abc import Mapping
from contextlib import suppress
from typing import Any

import torch
from torch import nn

from hookscope.core.records.tensor_paths import map_tensors
from hookscope.core.records.trace import Call
from hookscope.errors import SpecError
from hookscope.interventions.patch import PatchFn, call_aware, output_only
from hookscope.interventions.recording import CapturedActivations
from hookscope.interventions.storage_format import Fields, ModuleInputs, _Unrestorable
from hookscope.interventions.storage_reader import Activations


def replace_with(source: Any) -> PatchFn:
    """Return a stored value instead of the output: activation patching.

    Args:
        source: a value to return for every patched call (a tensor or a nested
            output), or the mapping of a capture (``hookscope.capture`` of another
            input): each call gets the captured value of the same call name
            (``path`` or ``path#N``). Of a capture made with ``what="both"``, the
            output is used.

    Raises:
        SpecError: ``source`` is a capture made with ``what="input"`` (or one of its
            values): what a module received is no output.

    Example:
        >>> clean = hookscope.capture(model, x_clean, select="layer3")
        >>> with hookscope.patch(model, {"layer3": hookscope.patches.replace_with(clean)}):
        ...     patched = model(x_corrupt)
    """
    captured = isinstance(source, (Activations, CapturedActivations))
    # every value of a capture has the form its ``what`` gave: the first one tells
    # (read from disk for a capture there: one call's tensors, memory-mapped)
    if isinstance(next(iter(source.values()), None) if captured else source, ModuleInputs):
        raise SpecError(
            "replace_with: this is a capture made with what='input' (what modules "
            "received, not their outputs); capture with what='output' or 'both' to "
            "patch outputs, or give a module the inputs stored for it with "
            "hookscope.patch_inputs(model, {path: lambda m, args, kwargs: acts[path]})"
        )

    def patch_fn(module: nn.Module, inputs: tuple[Any, ...], output: Any, *,
                 call: Call) -> Any:
        value = source
        if captured:
            if call.name not in source:
                again = (" (a patch block numbers a module's calls across all the "
                         "forwards it sees: enter one block per forward)"
                         if call.call_index and call.path in source else "")
                raise SpecError(f"replace_with: the capture has no call {call.name!r}; "
                                f"it has {list(source)[:5]!r}{again}")
            value = source[call.name]
        return _like(_output_part(value), output, call.name)

    return output_only(call_aware(patch_fn))


def _output_part(value: Any) -> Any:
    """The output of a ``what="both"`` capture's value (``{"input": ModuleInputs,
    "output": ...}``, in memory as from disk); any other value as it is."""
    if isinstance(value, Mapping) and set(value) == {"input", "output"} \
            and isinstance(value["input"], ModuleInputs):
        return value["output"]
    return value


def _quantized_like(value: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    """``value`` (float) quantized as ``output`` is: its scheme, scales, zero points."""
    if output.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric,
                            torch.per_channel_affine_float_qparams):
        return torch.quantize_per_channel(
            value, output.q_per_channel_scales(), output.q_per_channel_zero_points(),
            output.q_per_channel_axis(), output.dtype)
    return torch.quantize_per_tensor(
        value, output.q_scale(), output.q_zero_point(), output.dtype)


def _like(value: Any, output: Any, name: str) -> Any:
    """A copy of ``value`` in the form of ``output``: each tensor on the output's
    tensor's device and dtype (its shape must match), in the output's own containers.

    A capture read from disk holds plain containers: a ``ModelOutput`` is a ``dict``
    there, a namedtuple a ``tuple``, a dataclass its :class:`Fields`, and an object
    that is not a tensor or container its repr. Each is put back in the class the
    model returns now (a repr: the model's own object of this call), so the caller
    gets what the model returns, as with a capture in memory.

    A copy on every call: the model may write into what a call returned (``out +=
    identity``, ``ReLU(inplace=True)``), which must not change the stored value."""
    if isinstance(value, torch.Tensor):
        if not isinstance(output, torch.Tensor):
            return value.clone()
        if value.shape != output.shape:
            raise SpecError(
                f"replace_with: the stored value for {name!r} has shape "
                f"{list(value.shape)}, the output has {list(output.shape)}"
            )
        if output.is_quantized and not value.is_quantized:  # saved dequantized
            return _quantized_like(value.to(output.device), output)
        return value.to(device=output.device, dtype=output.dtype, copy=True)
    if isinstance(value, _Unrestorable) and not isinstance(output, str):
        return output  # its repr only was saved: the model's own object
    # not a dataclass that is a mapping too (a ModelOutput): set field by field
    # past its own __setattr__, its items (out[0], out["logits"]) would keep the model's
    # tensors; the mapping branch below makes it anew from its class
    if _is_instance_of_dataclass(output) and not isinstance(output, Mapping) and (
            isinstance(value, Fields) or _is_instance_of_dataclass(value)):
        new = copy.copy(output)  # from memory as from disk, each field checked
        for f in dataclasses.fields(output):
            if hasattr(value, f.name):
                object.__setattr__(new, f.name, _like(getattr(value, f.name),
                                                      getattr(output, f.name), name))
        return new
    if isinstance(value, Mapping) and isinstance(output, Mapping):
        cls: Any = type(output)
        # the stored keys: a ModelOutput's set fields may differ from this call's
        items = {k: _like(v, output.get(k), name) for k, v in value.items()}
        if cls in (dict, OrderedDict):
            return cls(items) if list(value) == list(output) else map_tensors(
                torch.clone, value)
        with suppress(Exception):  # a ModelOutput: the model's class, from its fields
            return cls(**items)
        return map_tensors(torch.clone, value)
    if isinstance(value, (tuple, list)) and isinstance(output, (tuple, list)) \
            and len(value) == len(output):
        items_ = [_like(v, o, name) for v, o in zip(value, output, strict=True)]
        kind: Any = type(output)
        if hasattr(kind, "_fields"):  # a namedtuple (read back as a tuple)
            return kind(*items_)
        if hasattr(kind, "n_fields"):  # torch.return_types (torch.max(x, dim)): one sequence
            return kind(items_)
        if type(value) in (tuple, list):
            return type(value)(items_)
        return map_tensors(torch.clone, value)
    return map_tensors(torch.clone, value)


def _is_instance_of_dataclass(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)

