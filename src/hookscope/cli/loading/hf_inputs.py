"""Default inputs of a transformers model, read from its ``forward`` signature and config.

Where it sits: part of the transformers source of :mod:`hookscope.cli.loading`
(``hf.py`` builds the model, this module decides what to call it with). There is no
per-model table: each input the signature names is made from the config it needs,

- ``input_ids`` / ``decoder_input_ids``: int64 ids within the text vocabulary, of
  ``1 x min(128, the positions the model has)``; ``decoder_input_ids`` only for
  encoder-decoders (also added when the user gives ``input_ids`` alone);
- ``pixel_values``: ``1 x C x H x W`` from the (vision) config's ``num_channels`` and
  ``image_size`` (224 when it has none), in the model's floating dtype;
- ``input_features``: a speech model's log-mel frames, ``1 x mels x 2*positions``
  (Whisper) or ``1 x frames x features`` (Speech2Text);
- ``input_values``: one second of 16 kHz audio (wav2vec2, HuBERT);
- any other input without a default whose name ends in ``mask``: ones.

The model's ``main_input_name`` comes first; a model with a text and a vision tower and
no image placeholder token (CLIP, SigLIP) gets both ``input_ids`` and ``pixel_values``.
:func:`position_limit` says how many tokens a model with a table of positions takes, so
that a longer ``--input`` is refused before the model runs.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from hookscope.cli.input_specs import InputSpec
from hookscope.errors import SpecError

__all__ = [
    "DEFAULT_IMAGE_SIZE", "DEFAULT_SEQ_LEN", "HfInputs", "PositionLimit", "hf_inputs",
    "position_limit", "vocab_size",
]

DEFAULT_SEQ_LEN = 128
DEFAULT_IMAGE_SIZE = 224
AUDIO_SAMPLES = 16_000
_IMAGE_TOKEN_KEYS = ("image_token_id", "image_token_index", "image_token")


@dataclass(frozen=True)
class HfInputs:
    """What a transformers model is called with by default.

    Attributes:
        defaults: the inputs used when the user gives none.
        main: what an unnamed ``--input`` means (its dtype), ``None`` when unknown.
        companions: inputs added when the user leaves them out (``decoder_input_ids``).
    """

    defaults: tuple[InputSpec, ...] = ()
    main: InputSpec | None = None
    companions: tuple[InputSpec, ...] = ()


def hf_inputs(model: nn.Module, config: Any, *, float_dtype: torch.dtype) -> HfInputs:
    """The default inputs of ``model`` (see the module docstring)."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return HfInputs()
    main = getattr(model, "main_input_name", "input_ids")
    made = {name: _make(name, config, float_dtype) for name in params}
    specs = {name: spec for name, spec in made.items() if spec is not None}
    wanted = [main]
    if main == "input_ids" and _is_dual_encoder(config):
        wanted.append("pixel_values")
    companions: list[InputSpec] = []
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in specs:
        companions.append(specs["decoder_input_ids"])
    for name, param in params.items():
        required = param.default is param.empty and param.kind in (
            param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY
        )
        if required and name not in wanted and name.endswith("mask"):
            companions.append(InputSpec((1, _seq_len(config)), torch.int64, name))
    if main not in specs or any(name not in specs for name in wanted):
        return HfInputs(main=specs.get(main), companions=tuple(companions))
    defaults = tuple(specs[name] for name in wanted) + tuple(companions)
    return HfInputs(defaults, specs[main], tuple(companions))


@dataclass(frozen=True)
class PositionLimit:
    """The most tokens a model takes: its config's ``attr`` is ``value``, which a table
    of positions in the model has rows for (``tokens`` is fewer when position ids start
    after the padding index, as in RoBERTa)."""

    tokens: int
    attr: str
    value: int

    def check(self, length: int, spec: InputSpec) -> None:
        """Refuse ``spec``, whose sequence is ``length`` tokens long, when it is too long.

        Raises:
            SpecError: ``length`` is more than ``tokens``.
        """
        if length <= self.tokens:
            return
        name = f"{spec.name}=" if spec.name is not None else ""
        shorter = name + ",".join(map(str, (*spec.shape[:-1], self.tokens)))
        raise SpecError(
            f"--input {spec}: {length} tokens is more than this model's {self.tokens} "
            f"positions (its config's {self.attr}={self.value}); give a sequence of at "
            f"most {self.tokens} tokens, e.g. --input {shorter}"
        )


#: Config attributes that name how many positions a model has.
_POSITION_ATTRS = ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len",
                   "max_sequence_length", "max_target_positions")


def position_limit(model: nn.Module, config: Any) -> PositionLimit | None:
    """The most tokens ``model`` takes, ``None`` when it has no table of positions.

    A config's count is a hard limit only where the model looks positions up in a
    table of that many rows (BERT, GPT-2; two more in BART and OPT); rotary and
    relative positions (Llama, T5) are computed for any length, which the config's
    count does not bound.
    """
    rows = {m.num_embeddings for m in _position_tables(model)}
    found: list[PositionLimit] = []
    for section in (config, _text_config(config)):
        for attr in _POSITION_ATTRS:
            value = getattr(section, attr, None)
            if not isinstance(value, int) or value <= 0 or not any(
                    value <= n <= value + 2 for n in rows):
                continue
            offset = _position_offset(section) if attr == "max_position_embeddings" else 0
            found.append(PositionLimit(max(1, value - offset), attr, value))
    return min(found, key=lambda limit: limit.tokens, default=None)


#: Words in a module path that name a table of positions (BERT, GPT-2's ``wpe``, BART).
_POSITION_WORDS = ("pos", "wpe")


def _position_tables(model: nn.Module) -> list[nn.Embedding]:
    """The embeddings of ``model`` that may be tables of positions.

    The token table (``get_input_embeddings()``, and any embedding sharing its weight)
    is never one, although its vocabulary may be as large as the positions are many
    (a rotary Llama with ``vocab_size == max_position_embeddings``); embeddings whose
    path names positions are preferred over the rest.
    """
    tokens = _input_embeddings(model)
    tables = [(path, m) for path, m in model.named_modules() if isinstance(m, nn.Embedding)
              and m is not tokens and (tokens is None or m.weight is not tokens.weight)]
    named = [m for path, m in tables if any(w in path.lower() for w in _POSITION_WORDS)]
    return named or [m for _, m in tables]


def _input_embeddings(model: nn.Module) -> nn.Embedding | None:
    get = getattr(model, "get_input_embeddings", None)
    try:
        tokens = get() if callable(get) else None
    except (NotImplementedError, AttributeError):  # a model that does not say
        return None
    return tokens if isinstance(tokens, nn.Embedding) else None


def _make(name: str, config: Any, float_dtype: torch.dtype) -> InputSpec | None:
    if name in ("input_ids", "decoder_input_ids"):
        if vocab_size(config) is None:
            return None
        return InputSpec((1, _seq_len(config)), torch.int64, name)
    if name == "pixel_values":
        return _pixel_values(config, float_dtype)
    if name == "input_features":
        return _input_features(config, float_dtype)
    if name == "input_values":
        return InputSpec((1, AUDIO_SAMPLES), float_dtype, name)
    return None


def _pixel_values(config: Any, float_dtype: torch.dtype) -> InputSpec:
    vision = getattr(config, "vision_config", None) or config
    size = getattr(vision, "image_size", None) or getattr(config, "image_size", None)
    if isinstance(size, dict):  # {"height": H, "width": W}
        size = (size.get("height"), size.get("width"))
    if isinstance(size, (list, tuple)) and len(size) == 2 and all(isinstance(s, int) for s in size):
        height, width = size
    else:
        height = width = size if isinstance(size, int) and size > 0 else DEFAULT_IMAGE_SIZE
    channels = getattr(vision, "num_channels", None)
    channels = channels if isinstance(channels, int) and channels > 0 else 3
    return InputSpec((1, channels, height, width), float_dtype, "pixel_values")


def _input_features(config: Any, float_dtype: torch.dtype) -> InputSpec | None:
    mels, positions = (getattr(config, a, None) for a in ("num_mel_bins", "max_source_positions"))
    if isinstance(mels, int) and isinstance(positions, int):
        # Whisper: two convolutions (the second of stride 2) make 2*positions frames fit.
        return InputSpec((1, mels, 2 * positions), float_dtype, "input_features")
    per_channel = getattr(config, "input_feat_per_channel", None)
    if isinstance(per_channel, int):  # Speech2Text: frames x features, subsampled by 4
        features = per_channel * int(getattr(config, "input_channels", 1) or 1)
        return InputSpec((1, 4 * _seq_len(config), features), float_dtype, "input_features")
    return None


def _is_dual_encoder(config: Any) -> bool:
    """A text and a vision tower (CLIP, SigLIP), not a language model that reads image
    placeholder tokens (LLaVA), which runs on text alone."""
    towers = getattr(config, "text_config", None) and getattr(config, "vision_config", None)
    return bool(towers) and not any(getattr(config, k, None) is not None for k in _IMAGE_TOKEN_KEYS)


def _seq_len(config: Any) -> int:
    limits = []
    for section in (config, _text_config(config)):
        for attr in ("max_position_embeddings", "n_positions", "max_target_positions"):
            value = getattr(section, attr, None)
            if isinstance(value, int) and value > 0:
                limits.append(value - _position_offset(section)
                              if attr == "max_position_embeddings" else value)
    return max(1, min([DEFAULT_SEQ_LEN, *limits]))


#: Model types whose position ids start after the padding index (``padding_idx + 1``,
#: transformers' ``create_position_ids_from_input_ids``): fewer tokens fit their
#: position table than it has rows.
_OFFSET_POSITIONS = frozenset({
    "roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "roberta-prelayernorm",
    "data2vec-text", "longformer", "ibert", "luke", "mpnet", "markuplm", "xmod",
    "layoutlmv3", "esm",
})


def _position_offset(config: Any) -> int:
    if getattr(config, "model_type", None) not in _OFFSET_POSITIONS:
        return 0
    pad = getattr(config, "pad_token_id", None)
    return pad + 1 if isinstance(pad, int) and pad >= 0 else 0


def _text_config(config: Any) -> Any:
    get_text_config = getattr(config, "get_text_config", None)
    return get_text_config() if callable(get_text_config) else config


def vocab_size(config: Any) -> int | None:
    """The vocabulary size of the model's text part, ``None`` if it has none; with a
    decoder vocabulary of its own (Marian's ``decoder_vocab_size``), the smaller one:
    every token id drawn is valid on both sides."""
    vocab = getattr(_text_config(config), "vocab_size", getattr(config, "vocab_size", None))
    decoder = getattr(config, "decoder_vocab_size", None)
    sizes = [v for v in (vocab, decoder) if isinstance(v, int) and v > 0]
    return min(sizes) if sizes else None
