"""Tiny configs for the transformers sweep (``test_model_sweep.py``).

:func:`tiny_config` decides one family's ``--config`` string from the settings its
default config has, so a new model type needs no entry of its own: every layer count
becomes 1, widths 32, heads 2, images 32 pixels, in the config and its sub-configs.
"""

from __future__ import annotations

from typing import Any

SIZES: dict[str, int] = {
    **dict.fromkeys(
        ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers",
         "decoder_layers", "num_decoder_layers"), 1),
    **dict.fromkeys(("hidden_size", "n_embd", "d_model"), 32),
    **dict.fromkeys(
        ("intermediate_size", "d_ff", "n_inner", "encoder_ffn_dim", "decoder_ffn_dim",
         "moe_intermediate_size"), 64),
    **dict.fromkeys(
        ("num_attention_heads", "n_head", "num_heads", "encoder_attention_heads",
         "decoder_attention_heads"), 2),
    "num_key_value_heads": 1,
    "head_dim": 16,
    "d_kv": 16,
    "image_size": 32,
    "patch_size": 8,
    "num_local_experts": 4,
    "num_experts": 4,
    "projection_dim": 32,
    "rotary_dim": 8,
    "projection_size": 32,
}
#: Hierarchical vision models (Swin, ConvNeXt) keep their image size: their windows and
#: downsampling stages need it.
_HIERARCHICAL = ("window_size", "hidden_sizes")
SECTIONS = ("text_config", "vision_config", "audio_config")


def tiny_config(model_type: str) -> str:
    """The ``--config`` string that makes ``model_type`` tiny."""
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    items = _items(default, "")
    for section in SECTIONS:
        sub = getattr(default, section, None)
        if hasattr(sub, "to_dict"):
            items += _items(sub, f"{section}.")
    return ",".join(items)


def _items(config: Any, prefix: str) -> list[str]:
    values = config.to_dict()
    keep = ("image_size", "patch_size") if any(k in values for k in _HIERARCHICAL) else ()
    return [
        f"{prefix}{k}={v}" for k, v in SIZES.items()
        if isinstance(values.get(k), int) and k not in keep
    ]
