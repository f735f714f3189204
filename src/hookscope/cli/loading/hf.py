"""Models from transformers: ``transformers:TYPE[/TASK]``, built from the default config.

Where it sits: one source of :mod:`hookscope.cli.loading`. transformers is imported
only when a spec names it (:func:`~hookscope.cli.loading.common.require`), with
``HF_HUB_OFFLINE=1`` so that nothing is downloaded; the module is named ``hf`` so that
it never shadows the real ``transformers`` package. ``--config`` overrides are coerced
to the config's own number types and checked against its settings; ``dtype`` and
``attn_implementation`` go to ``from_config`` instead. :func:`transformers_inputs` and
:func:`vocab_size` also serve a transformers model that a user's factory returns.
"""

from __future__ import annotations

import os
import re
from types import ModuleType
from typing import Any

import torch
from torch import nn

from hookscope.cli.inputs import DTYPES, InputSpec, suggest
from hookscope.cli.loading.common import LoadedModel, ModelSource, build, describe, require
from hookscope.errors import SpecError

__all__ = [
    "DEFAULT_SEQ_LEN",
    "TRANSFORMERS_TASKS",
    "load_transformers",
    "transformers_inputs",
    "vocab_size",
]

TRANSFORMERS_TASKS: dict[str, str] = {
    "base": "AutoModel",
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "seq-cls": "AutoModelForSequenceClassification",
}
"""Suffixes of ``transformers:TYPE/TASK`` and the auto class each one builds."""

DEFAULT_SEQ_LEN = 128
_BUILD_KWARGS = ("attn_implementation", "dtype")


def load_transformers(
    spec: str, name: str, overrides: dict[str, object], device: torch.device | None
) -> LoadedModel:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: nothing is downloaded
    transformers = require("transformers", spec=spec, extra="transformers")
    model_type, task = _split_transformers_name(name, spec, transformers.CONFIG_MAPPING.keys())
    build_kwargs = _pop_build_kwargs(overrides)
    config = _transformers_config(transformers, model_type, overrides)
    auto = getattr(transformers, TRANSFORMERS_TASKS[task])
    what = f"building transformers model {name!r}"
    model = build(lambda: _from_config(auto, config, task, build_kwargs), device, what=what)
    float_dtype = build_kwargs.get("dtype")
    if not isinstance(float_dtype, torch.dtype):
        float_dtype = torch.float32
    inputs = transformers_inputs(model.eval(), config, float_dtype=float_dtype)
    return LoadedModel(model, spec, ModelSource.TRANSFORMERS, inputs, vocab_size(config))


def _split_transformers_name(name: str, spec: str, known: Any) -> tuple[str, str]:
    model_type, _, task = name.partition("/")
    types: list[str] = list(known)
    if model_type not in types:
        # A checkpoint id ('meta-llama/Llama-2-7b') often contains its type as a word.
        words = [w for w in re.split(r"[-_/.]", name.lower()) if w in types]
        hint = f" (close matches: {', '.join(dict.fromkeys(words))})" if words else ""
        raise SpecError(
            f"transformers has no model type {name!r}{hint or suggest(model_type, types)}; "
            "NAME is a model type such as 'gpt2', 'bert' or 'llama', not a checkpoint id"
        )
    task = task or "base"
    if task not in TRANSFORMERS_TASKS:
        raise SpecError(
            f"task {task!r} in model spec {spec!r} is unknown; use one of "
            f"{', '.join(TRANSFORMERS_TASKS)} (e.g. 'transformers:{model_type}/causal-lm')"
        )
    return model_type, task


def _pop_build_kwargs(overrides: dict[str, object]) -> dict[str, object]:
    """Take out the overrides that go to ``from_config`` instead of to the config."""
    kwargs = {k: overrides.pop(k) for k in _BUILD_KWARGS if k in overrides}
    if "dtype" in kwargs:
        dtype = DTYPES.get(str(kwargs["dtype"]))
        if dtype is None or not dtype.is_floating_point:
            floats = ", ".join(k for k, v in DTYPES.items() if v.is_floating_point)
            raise SpecError(f"config override dtype={kwargs['dtype']!r} is not one of {floats}")
        kwargs["dtype"] = dtype
    return kwargs


def _transformers_config(
    transformers: ModuleType, model_type: str, overrides: dict[str, Any]
) -> Any:
    auto_config = transformers.AutoConfig
    default = auto_config.for_model(model_type)
    overrides = {k: _coerce(v, getattr(default, k, None)) for k, v in overrides.items()}
    try:
        config = auto_config.for_model(model_type, **overrides)
    except Exception as e:
        raise SpecError(f"config overrides for {model_type!r} are invalid: {describe(e)}") from e
    known = [*default.to_dict(), *getattr(default, "attribute_map", {})]
    for key in overrides:
        # A key the config does not know becomes a new attribute; one it consumed
        # (e.g. llama's rope_theta, moved into rope_parameters) does not.
        if not hasattr(default, key) and hasattr(config, key):
            raise SpecError(
                f"{type(default).__name__} has no setting {key!r}{suggest(key, known)}; "
                "check the spelling of the config override"
            )
    return config


def _coerce(value: object, default: object) -> object:
    """Give a parsed override the number type of the config's default (``1e4`` → int)."""
    if isinstance(default, bool) or isinstance(value, bool):
        return value
    if isinstance(default, int) and isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(default, float) and isinstance(value, int):
        return float(value)
    return value


def _from_config(auto: Any, config: Any, task: str, kwargs: dict[str, object]) -> nn.Module:
    try:
        model: nn.Module = auto.from_config(config, **kwargs)
    except ValueError as e:
        if not str(e).startswith("Unrecognized configuration class"):
            raise
        raise SpecError(
            f"transformers model type {config.model_type!r} has no {task!r} variant "
            f"({auto.__name__} does not take {type(config).__name__}); "
            f"use another of {', '.join(TRANSFORMERS_TASKS)}"
        ) from e
    return model


def transformers_inputs(
    model: nn.Module, config: Any, *, float_dtype: torch.dtype
) -> tuple[InputSpec, ...]:
    main = getattr(model, "main_input_name", "input_ids")
    vocab = getattr(config, "vocab_size", None)
    if main == "input_ids" and isinstance(vocab, int):
        ids = InputSpec((1, _seq_len(config)), torch.int64, "input_ids")
        if getattr(config, "is_encoder_decoder", False):
            return (ids, InputSpec(ids.shape, torch.int64, "decoder_input_ids"))
        return (ids,)
    size, channels = getattr(config, "image_size", None), getattr(config, "num_channels", None)
    if main == "pixel_values" and size is not None and isinstance(channels, int):
        height, width = (size, size) if isinstance(size, int) else tuple(size)
        return (InputSpec((1, channels, height, width), float_dtype, "pixel_values"),)
    return ()


def _seq_len(config: Any) -> int:
    limits = [getattr(config, a, None) for a in ("max_position_embeddings", "n_positions")]
    return min([DEFAULT_SEQ_LEN, *(n for n in limits if isinstance(n, int) and n > 0)])


def vocab_size(config: Any) -> int | None:
    get_text_config = getattr(config, "get_text_config", None)
    text_config = get_text_config() if callable(get_text_config) else config
    vocab = getattr(text_config, "vocab_size", getattr(config, "vocab_size", None))
    return vocab if isinstance(vocab, int) and vocab > 0 else None
