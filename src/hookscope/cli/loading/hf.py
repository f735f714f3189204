"""Models from transformers: ``transformers:TYPE[/TASK]``, built from the default config.

Where it sits: one source of :mod:`hookscope.cli.loading`. transformers is imported
only when a spec names it (:func:`~hookscope.cli.loading.common.require`), with
``HF_HUB_OFFLINE=1`` so that nothing is downloaded; the module is named ``hf`` so that
it never shadows the real ``transformers`` package. ``--config`` overrides are coerced
to the config's own number types and checked against its settings; ``dtype`` and
``attn_implementation`` go to ``from_config`` instead. Default inputs come from
``hf_inputs.py``; :func:`transformers_loaded` also serves a transformers model that a
user's factory returns. ``--config SECTION.KEY=VALUE`` sets a sub-config's value
(``vision_config.image_size=32``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

import torch
from torch import nn

from hookscope.cli.input_specs import DTYPES, suggest
from hookscope.cli.loading.common import (
    LoadedModel,
    ModelSource,
    build,
    describe,
    floating_dtype,
    require,
)
from hookscope.cli.loading.hf_inputs import hf_inputs, position_limit, vocab_size
from hookscope.errors import SpecError

__all__ = [
    "TASK_ALIASES",
    "TRANSFORMERS_TASKS",
    "load_transformers",
    "transformers_loaded",
]

TRANSFORMERS_TASKS: dict[str, str] = {
    "base": "AutoModel",
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
    "sequence-classification": "AutoModelForSequenceClassification",
    "image-classification": "AutoModelForImageClassification",
}
"""Suffixes of ``transformers:TYPE/TASK`` and the auto class each one builds."""

TASK_ALIASES: dict[str, str] = {"seq-cls": "sequence-classification"}
"""Other names accepted for a task."""

_BUILD_KWARGS = ("attn_implementation", "dtype")


def load_transformers(
    spec: str,
    name: str,
    overrides: dict[str, object],
    device: torch.device | None,
    *,
    dtype: torch.dtype | None = None,
) -> LoadedModel:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: nothing is downloaded
    transformers = require("transformers", spec=spec, extra="transformers")
    types = transformers.CONFIG_MAPPING.keys()
    saved = None if name.partition("/")[0] in types else _saved_config(transformers, name)
    if saved is None:
        model_type, task = _split_transformers_name(name, spec, types)
    else:
        model_type, task = saved.config.model_type, saved.task
    build_kwargs = _pop_build_kwargs(overrides)
    if dtype is not None:
        build_kwargs["dtype"] = dtype
    config = _transformers_config(transformers, model_type, overrides,
                                  saved=None if saved is None else saved.config)
    auto = getattr(transformers, TRANSFORMERS_TASKS[task])
    if type(config) not in auto._model_mapping:
        valid = _valid_tasks(transformers, config)
        if not valid:  # a composite (rag, encoder-decoder): built from other models' configs
            raise SpecError(
                f"transformers model type {model_type!r} cannot be built from its default "
                "config by any Auto class (a composite of other models); build it in a "
                "file and pass file.py:factory"
            )
        raise SpecError(
            f"transformers model type {model_type!r} has no {task!r} variant; the tasks "
            f"it has are: {', '.join(valid)} (e.g. 'transformers:{model_type}/{valid[0]}')"
        )
    what = f"building transformers model {name!r}"
    model = build(lambda: _from_config(auto, config, task, build_kwargs), device, what=what)
    return transformers_loaded(model.eval(), config, spec, ModelSource.TRANSFORMERS)


def transformers_loaded(
    model: nn.Module, config: Any, spec: str, source: ModelSource
) -> LoadedModel:
    """A transformers model with the inputs its signature and config call for."""
    inputs = hf_inputs(model, config, float_dtype=floating_dtype(model))
    return LoadedModel(
        model, spec, source, inputs.defaults, vocab_size(config), main_input=inputs.main,
        companions=inputs.companions, max_positions=position_limit(model, config),
    )


def _valid_tasks(transformers: ModuleType, config: Any) -> list[str]:
    return [
        task for task, auto in TRANSFORMERS_TASKS.items()
        if type(config) in getattr(transformers, auto)._model_mapping
    ]


class _Saved(NamedTuple):
    config: Any  # the config as saved
    task: str


def _saved_config(transformers: ModuleType, name: str) -> _Saved | None:
    """The config of a checkpoint id in the local Hugging Face cache, or of a directory
    holding a ``config.json``, with the task a trailing ``/TASK`` names, else ``None``.
    Only local files are read: nothing is downloaded."""
    where, _, last = name.rpartition("/")
    tries = [(name, "base")]
    if where and TASK_ALIASES.get(last, last) in TRANSFORMERS_TASKS:
        tries.append((where, TASK_ALIASES.get(last, last)))
    for source, task in tries:
        try:
            config = transformers.AutoConfig.from_pretrained(source, local_files_only=True)
        except Exception as e:  # not cached, not a directory: try the next
            if (Path(source) / "config.json").is_file():  # there, but unreadable: say why
                raise SpecError(f"the config.json in {source!r} cannot be read by "
                                f"transformers: {describe(e)}") from e
            continue
        return _Saved(config, task)
    return None


def _split_transformers_name(name: str, spec: str, known: Any) -> tuple[str, str]:
    model_type, slash, task = name.partition("/")
    if slash and not task:
        raise SpecError(
            f"model spec {spec!r} ends with '/' but names no task; drop the '/' for the "
            f"base model, or add one of {', '.join(TRANSFORMERS_TASKS)} "
            f"(e.g. 'transformers:{model_type}/causal-lm')"
        )
    types: list[str] = list(known)
    if model_type not in types:
        # A checkpoint id ('meta-llama/Llama-2-7b') often contains its type as a word.
        words = [w for w in re.split(r"[-_/.]", name.lower()) if w in types]
        hint = f" (close matches: {', '.join(dict.fromkeys(words))})" if words else ""
        raise SpecError(
            f"transformers has no model type {name!r}{hint or suggest(model_type, types)}, "
            "and no config of that name is in the local Hugging Face cache (nothing is "
            "downloaded); NAME is a model type such as 'gpt2', 'bert' or 'llama', a "
            "checkpoint id whose config is cached, or a directory with a config.json"
        )
    task = TASK_ALIASES.get(task, task or "base")
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
    transformers: ModuleType, model_type: str, overrides: dict[str, Any], *,
    saved: Any = None,
) -> Any:
    """The config of ``model_type`` (or the ``saved`` config, as read from disk) with
    ``overrides``."""
    auto_config = transformers.AutoConfig

    def make(**kwargs: Any) -> Any:
        if saved is None:
            return auto_config.for_model(model_type, **kwargs)
        if not kwargs:
            return saved
        # through the config class's __init__, as for_model builds one, from the saved
        # settings it cannot derive: a layer count given derives the layers' types again
        return type(saved).from_dict({**_underived(saved), **kwargs})

    default = make()
    overrides = _nest(default, overrides)
    overrides = {k: _coerce(v, getattr(default, k, None)) for k, v in overrides.items()}
    try:
        config = make(**overrides)
    except Exception as e:
        raise SpecError(
            f"config overrides for {model_type!r} are invalid: {describe(e, whole=True)}"
        ) from e
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


def _underived(config: Any) -> dict[str, Any]:
    """The settings of ``config`` that its class's ``__init__`` would not derive from the
    others (``layer_types`` from ``num_hidden_layers``, ``rope_parameters`` from
    ``rope_theta``, a class default): what an override must not be checked against."""
    data = config.to_dict()
    kept = {}
    for key, value in data.items():
        try:
            derived = type(config).from_dict(
                {k: v for k, v in data.items() if k != key}).to_dict().get(key)
        except Exception:  # the others cannot stand without it
            kept[key] = value
            continue
        if derived != value:
            kept[key] = value
    return kept


def _nest(default: Any, overrides: dict[str, Any]) -> dict[str, Any]:
    """Fold ``vision_config.image_size=32`` into a ``vision_config`` dict override."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        section, dot, field = key.partition(".")
        if not dot:
            out[key] = value
            continue
        sub: Any = getattr(default, section, None)
        if not hasattr(sub, "to_dict") or not field.isidentifier():
            raise SpecError(
                f"config override {key!r}: {type(default).__name__} has no sub-config "
                f"{section!r}; write SECTION.KEY=VALUE only for sections such as text_config"
            )
        if not hasattr(sub, field) and _kept_as_unknown(sub, field, value):
            known = [*sub.to_dict(), *getattr(sub, "attribute_map", {})]
            raise SpecError(
                f"{type(sub).__name__} ({section}) has no setting {field!r}"
                f"{suggest(field, known)}; see transformers' {type(sub).__name__} for its "
                "settings"
            )
        if section not in out:
            out[section] = sub.to_dict()
        out[section][field] = _coerce(value, getattr(sub, field, None))
    return out


def _kept_as_unknown(sub: Any, field: str, value: object) -> bool:
    """Whether ``sub``'s class keeps ``field=value`` as a new attribute (a typo: it is
    silently dropped) rather than consume it (llama's ``rope_theta``, moved into
    ``rope_parameters``), as the top level tells them apart."""
    try:
        built = type(sub)(**{**sub.to_dict(), field: value})
    except Exception:  # invalid: the model's own config says so when it is built
        return False
    return hasattr(built, field)


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
