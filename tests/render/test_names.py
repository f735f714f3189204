"""The narrowest width that keeps parameter paths apart is found by bisection.

Oracle: the plain search, width after width from the floor, each judged by
:func:`hookscope.render.names.distinct_forms` (the matching the tables use). Inputs:
BERT-like paths, paths that fit whole, paths holding an ellipsis themselves, and the
4,000-odd parameter paths of a 445-layer Llama built on the meta device.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
import torch

from hookscope.render import names as names_module
from hookscope.render.names import LABEL_MIN, distinct_forms, distinct_min


def linear_min(labels: Sequence[str], floor: int) -> int:
    widest = max(map(len, labels), default=0)
    width = min(floor, widest)
    while width < widest and not distinct_forms(labels, width)[1]:
        width += 1
    return width


def llama_paths(layers: int) -> list[str]:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=layers,
                         num_attention_heads=2, num_key_value_heads=1, vocab_size=64)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    return [name for name, _ in model.named_parameters()]


BERT = [f"encoder.layer.{i}.attention.self.{part}.{kind}" for i in range(12)
        for part in ("query", "key", "value") for kind in ("weight", "bias")]
CASES = {
    "bert": BERT,
    "fit-whole": ["fc1.weight", "fc1.bias", "fc2.weight"],
    "ellipsis": [f"block.{i}.a…b.{j}.weight" for i in range(6) for j in range(4)],
    "one": ["transformer.h.0.attn.c_attn.weight"],
    "empty": [],
}


@pytest.mark.parametrize("floor", [1, 5, LABEL_MIN, 20, 200])
@pytest.mark.parametrize("case", sorted(CASES))
def test_distinct_min_equals_the_plain_search(case: str, floor: int) -> None:
    labels = CASES[case]
    assert distinct_min(labels, floor) == linear_min(labels, floor)


def test_distinct_min_on_4000_paths_of_a_deep_model(monkeypatch: pytest.MonkeyPatch) -> None:
    labels = llama_paths(445)
    assert len(labels) >= 4000
    expected = linear_min(labels, LABEL_MIN)
    assert LABEL_MIN < expected < max(map(len, labels))  # some widths fail, so it searches
    calls = []
    match = names_module._match

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args[1])
        return match(*args, **kwargs)

    monkeypatch.setattr(names_module, "_match", counted)
    assert distinct_min(labels, LABEL_MIN) == expected
    span = max(map(len, labels)) - LABEL_MIN
    assert len(calls) <= math.ceil(math.log2(span)) + 1, calls
