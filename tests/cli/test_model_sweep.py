"""Every transformers family summarised from the command line with its default inputs.

Each model type is built from its own default config made tiny by
:func:`model_sweep.tiny_config` (one layer, width 32), then ``hookscope summary`` runs it
with no ``--input``: the inputs come from the model's signature and config alone. The
oracle is the model itself: it runs, and the JSON lists the inputs its signature calls
for. The default run covers 30 types (text, vision, speech, multimodal,
encoder-decoder, mixture-of-experts) in about 20 s; three hierarchical vision models,
slower at their native image size, are marked slow.
"""

from __future__ import annotations

import json

import pytest
from model_sweep import tiny_config

from hookscope.cli import main

pytest.importorskip("transformers")

#: model type (or TYPE/TASK) -> the input names its default call must have.
TYPES: dict[str, frozenset[str]] = {
    **dict.fromkeys(
        ["gpt2", "bert", "llama", "mistral", "qwen2", "gemma", "falcon", "gpt_neox",
         "roberta", "distilbert", "albert", "electra", "deberta-v2", "opt", "bloom", "phi",
         "mpt", "mamba", "gptj", "codegen", "llava", "gpt2/causal-lm", "bert/masked-lm",
         "bert/sequence-classification", "llama/seq-cls"], frozenset({"input_ids"})),
    **dict.fromkeys(["mixtral", "qwen2_moe"], frozenset({"input_ids"})),  # mixture of experts
    **dict.fromkeys(["t5", "bart", "mbart", "pegasus", "marian", "t5/seq2seq-lm"],
                    frozenset({"input_ids", "decoder_input_ids"})),
    **dict.fromkeys(["whisper", "speech_to_text"],
                    frozenset({"input_features", "decoder_input_ids"})),
    **dict.fromkeys(["wav2vec2", "hubert"], frozenset({"input_values"})),
    **dict.fromkeys(["vit", "vit/image-classification"], frozenset({"pixel_values"})),
    **dict.fromkeys(["clip", "siglip", "blip"], frozenset({"input_ids", "pixel_values"})),
}
#: Hierarchical vision models run at 224 pixels (a few seconds each).
SLOW: dict[str, frozenset[str]] = dict.fromkeys(
    ["resnet", "swin", "convnext"], frozenset({"pixel_values"})
)


def summarise(name: str, capsys: pytest.CaptureFixture[str]) -> frozenset[str]:
    code = main(["summary", f"transformers:{name}", "--config",
                 tiny_config(name.partition("/")[0]), "-f", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    root = json.loads(out)["calls"][0]
    return frozenset(
        m["path"].split('"')[1] for m in root["inputs"] if m["path"].startswith("kwargs")
    )


def test_the_sweep_covers_25_types() -> None:
    assert len({n.partition("/")[0] for n in TYPES}) >= 25


@pytest.mark.parametrize("name", list(TYPES))
def test_default_inputs_run(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert summarise(name, capsys) == TYPES[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SLOW))
def test_default_inputs_run_more(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert summarise(name, capsys) == SLOW[name]
