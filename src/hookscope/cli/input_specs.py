"""Parse ``--input`` and ``--config`` strings and make example input tensors.

Input specs: ``1,3,224,224``, ``2x3x32x32:float16``, ``input_ids=1,128:int64`` (a name
makes a keyword input). Config overrides: ``hidden_size=256,tie_word_embeddings=false``.
``cli/loading/`` builds the model; this module makes what it is called with. Every
mistake raises :class:`~hookscope.errors.SpecError` naming the bad value and the fix.
"""

from __future__ import annotations

import contextlib
import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from hookscope.core.inputs import parse_device, random_tensor
from hookscope.errors import SpecError

__all__ = [
    "DTYPES",
    "MODEL_DTYPES",
    "InputSpec",
    "make_inputs",
    "parse_config_overrides",
    "parse_device",
    "parse_input_spec",
    "parse_model_dtype",
]

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
    "complex64": torch.complex64,
}
"""Dtype names accepted after ``:`` in an input spec (and the short names below)."""

_DTYPE_ALIASES: dict[str, str] = {
    "fp32": "float32", "float": "float32", "fp16": "float16", "half": "float16",
    "bf16": "bfloat16", "fp64": "float64", "double": "float64", "long": "int64",
    "int": "int32",
}

@dataclass(frozen=True)
class InputSpec:
    """Shape, dtype and (for keyword inputs) name of one example input.

    ``str(spec)`` is an input spec that :func:`parse_input_spec` reads back.
    ``explicit_dtype`` is false for a spec written without ``:DTYPE``, whose dtype the
    model decides (``input_ids`` are int64, images the model's floating dtype).
    """

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    name: str | None = None
    explicit_dtype: bool = field(default=True, compare=False, repr=False)

    def __str__(self) -> str:
        prefix = f"{self.name}=" if self.name is not None else ""
        dtype = next((k for k, v in DTYPES.items() if v == self.dtype), str(self.dtype)[6:])
        return f"{prefix}{','.join(map(str, self.shape))}:{dtype}"


MODEL_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float64": torch.float64, "fp64": torch.float64, "double": torch.float64,
}
"""Names accepted by ``--dtype``, the floating dtype the model and its inputs are cast to."""


def parse_model_dtype(text: str | None) -> torch.dtype | None:
    """``--dtype``'s value as a floating dtype (``None`` stays ``None``).

    Raises:
        SpecError: the name is not one of :data:`MODEL_DTYPES`.

    Example:
        >>> parse_model_dtype("bf16")
        torch.bfloat16
    """
    if text is None:
        return None
    dtype = MODEL_DTYPES.get(text.strip().lower())
    if dtype is None:
        raise SpecError(
            f"--dtype {text!r} is not a floating dtype{suggest(text, list(MODEL_DTYPES))}; "
            "use float32, float16 (half, fp16), bfloat16 (bf16) or float64"
        )
    return dtype


def suggest(name: str, choices: Sequence[str]) -> str:
    matches = difflib.get_close_matches(name, choices, n=5, cutoff=0.5)
    return f" (close matches: {', '.join(matches)})" if matches else ""


# ----------------------------------------------------------------------------- options


def parse_config_overrides(text: str) -> dict[str, object]:
    """Parse ``KEY=VALUE,KEY=VALUE`` config overrides.

    Values are read as int, float, ``true``/``false``/``none`` (any case), a list in
    brackets (``depths=[1,1]``, its items read the same way), or else a string; quote a
    value (``'1'``) to keep it a string. ``SECTION.KEY`` sets a value of a sub-config
    (``vision_config.image_size=32``).

    Raises:
        SpecError: an item is not ``KEY=VALUE``, a key is not an identifier or repeats,
            or a bracket is not closed.

    Example:
        >>> parse_config_overrides("num_hidden_layers=2,rope_theta=1e4,tie_word_embeddings=false")
        {'num_hidden_layers': 2, 'rope_theta': 10000.0, 'tie_word_embeddings': False}
    """
    overrides: dict[str, object] = {}
    for item in filter(None, (part.strip() for part in _split_items(text))):
        key, sep, value = (s.strip() for s in item.partition("="))
        if not sep or not all(part.isidentifier() for part in key.split(".")) or not value:
            raise SpecError(
                f"config override {item!r} is not of the form KEY=VALUE; "
                "write e.g. 'num_hidden_layers=2,hidden_size=256'"
            )
        if key in overrides:
            raise SpecError(f"config override {key!r} is given twice; give it once")
        overrides[key] = _parse_value(value)
    return overrides


def _split_items(text: str) -> list[str]:
    """``text`` split at the commas outside brackets (``depths=[1,1],x=2``)."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise SpecError(f"config overrides {text!r}: a ']' closes no '['")
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise SpecError(f"config overrides {text!r}: a '[' is not closed; write lists "
                        "as depths=[1,1]")
    items.append(text[start:])
    return items


def _parse_value(text: str) -> object:
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return [_parse_value(part.strip()) for part in _split_items(inner)] if inner else []
    constants: dict[str, object] = {"true": True, "false": False, "none": None}
    if text.lower() in constants:
        return constants[text.lower()]
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    for number in (int, float):
        with contextlib.suppress(ValueError):
            return number(text)
    return text


# ------------------------------------------------------------------------------ inputs


def parse_input_spec(text: str) -> InputSpec:
    """Parse ``[NAME=]D0,D1,...[:DTYPE]`` (``x`` also separates dimensions).

    Raises:
        SpecError: the spec is empty, a dimension is not a non-negative integer, the name
            is not an identifier or the dtype is unknown.

    Example:
        >>> parse_input_spec("input_ids=1x128:int64")
        InputSpec(shape=(1, 128), dtype=torch.int64, name='input_ids')
    """
    name, sep, rest = text.strip().rpartition("=")
    if sep and not name.strip().isidentifier():
        raise SpecError(
            f"input name {name.strip()!r} in input spec {text!r} is not a Python identifier; "
            "write e.g. 'input_ids=1,128:int64'"
        )
    shape_text, sep, dtype_text = rest.partition(":")
    dtype = _parse_dtype(dtype_text.strip(), text) if sep else torch.float32
    return InputSpec(_parse_shape(shape_text, text), dtype, name.strip() or None, bool(sep))


def _parse_shape(shape_text: str, text: str) -> tuple[int, ...]:
    if not shape_text.strip():
        raise SpecError(
            f"input spec {text!r} has no shape; write e.g. '1,3,224,224' or '1,128:int64'"
        )
    dims: list[int] = []
    for part in re.split(r"[,xX]", shape_text):
        if not part.strip():  # '1,4,', '1,,4', 'x': a separator with no size beside it
            raise SpecError(
                f"input spec {text!r} has an empty dimension (a ',' or 'x' at an end, or "
                "two in a row); write one integer size between separators, e.g. '1,3,224,224'"
            )
        try:
            dim = int(part)
        except ValueError:
            raise SpecError(
                f"dimension {part.strip()!r} in input spec {text!r} is not an integer; "
                "separate integer sizes with ',' or 'x', e.g. '1,3,224,224'"
            ) from None
        if dim < 0:
            raise SpecError(f"dimension {dim} in input spec {text!r} is negative; sizes are >= 0")
        if dim >= 2**63:
            raise SpecError(f"dimension {dim} in input spec {text!r} is too large for a tensor "
                            "size (at most 2**63 - 1); give a smaller shape")
        dims.append(dim)
    return tuple(dims)


def _parse_dtype(name: str, text: str) -> torch.dtype:
    name = _DTYPE_ALIASES.get(name.lower(), name.lower())
    if name not in DTYPES:
        raise SpecError(
            f"dtype {name!r} in input spec {text!r} is unknown{suggest(name, list(DTYPES))}; "
            f"use one of {' '.join(DTYPES)}"
        )
    return DTYPES[name]


def make_inputs(
    specs: Sequence[InputSpec],
    *,
    device: str | torch.device | None,
    vocab_size: int | None = None,
    seed: int = 0,
    generator: torch.Generator | None = None,
) -> tuple[tuple[torch.Tensor, ...], dict[str, torch.Tensor]]:
    """Random tensors for ``specs``: unnamed ones positional, named ones keyword.

    Floats (and complex) are standard normal; integers are drawn from
    ``[0, vocab_size)`` (``[0, 2)`` when the vocabulary is unknown), except inputs whose
    name ends in ``mask``, which are all ones, in ``position_ids``, which count
    ``0, 1, ...`` along the last dimension, and in ``type_ids`` (segments), drawn from
    ``[0, 2)``; bools are random. Values come from a
    generator seeded with ``seed`` on the CPU, so they are the same on every device and
    torch's global random state is untouched. On ``meta``, no data is made. A
    ``generator`` given is drawn from instead (``seed`` is then unused), so a caller can
    draw more from it after the inputs (``hookscope grads``: the labels of a batch).

    Raises:
        SpecError: the device is not usable, or two specs share a name.
    """
    dev = parse_device(device) or torch.device("cpu")
    generator = generator or torch.Generator().manual_seed(seed)
    args: list[torch.Tensor] = []
    kwargs: dict[str, torch.Tensor] = {}
    for spec in specs:
        if spec.name in kwargs:
            raise SpecError(f"input {spec.name!r} is given twice; give each keyword input once")
        try:
            tensor = _make_tensor(spec, dev, generator, vocab_size)
        except RuntimeError as e:  # too large to allocate, or a size that overflows
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise SpecError(
                f"cannot make input {str(spec)!r} on {dev}: {reason[:200]}; give a smaller "
                "shape, or --device meta for shapes without memory"
            ) from e
        if spec.name is None:
            args.append(tensor)
        else:
            kwargs[spec.name] = tensor
    return tuple(args), kwargs


def _make_tensor(
    spec: InputSpec, device: torch.device, generator: torch.Generator, vocab_size: int | None
) -> torch.Tensor:
    integer = not (spec.dtype.is_floating_point or spec.dtype.is_complex)
    is_mask = spec.name is not None and spec.name.endswith("mask")
    if is_mask and integer and spec.dtype != torch.bool and device.type != "meta":
        # all ones: a random mask could hide every token
        return torch.ones(spec.shape, dtype=spec.dtype, device=device)
    name = spec.name or ""
    if integer and spec.dtype != torch.bool and name.endswith("position_ids") and spec.shape:
        # 0, 1, ... along the sequence: a token id would index past the position table
        positions = torch.arange(spec.shape[-1], dtype=spec.dtype, device=device)
        return positions.expand(spec.shape).contiguous()
    # segment ids (token_type_ids) index a table of 2 rows, not the vocabulary
    high = 2 if name.endswith("type_ids") else vocab_size or 2
    return random_tensor(spec.shape, spec.dtype, device=device, generator=generator, high=high)
