"""The plan's peak against a measured training step on the CPU (``oracles.py``), for a
ResNet, a small GPT-2 and an LSTM, with SGD and AdamW, with and without activation
checkpointing: within 5 %."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from oracles import measured_peak
from torch import nn

import hookscope


class LSTMTagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 32)
        self.lstm = nn.LSTM(32, 64, num_layers=2, batch_first=True)
        self.head = nn.Linear(64, 10)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embed(tokens))
        return self.head(out)


def resnet() -> tuple[nn.Module, tuple[Any, ...]]:
    import torchvision

    return torchvision.models.resnet18(), (torch.randn(2, 3, 64, 64),)


def gpt2() -> tuple[nn.Module, tuple[Any, ...]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=512, n_positions=64)
    return GPT2LMHeadModel(config), (torch.randint(0, 512, (2, 32)),)


def lstm() -> tuple[nn.Module, tuple[Any, ...]]:
    return LSTMTagger(), (torch.randint(0, 100, (4, 16)),)


MODELS = {"resnet18": (resnet, ("layer1.0", "layer1.1", "layer2.0", "layer2.1")),
          "gpt2": (gpt2, ("transformer.h.0", "transformer.h.1")),
          "lstm": (lstm, ("lstm",))}


@pytest.mark.parametrize("optimizer", [torch.optim.SGD, torch.optim.AdamW])
@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("name", ["resnet18", "gpt2", "lstm"])
def test_peak_matches_a_measured_step(name: str, optimizer: type[torch.optim.Optimizer],
                                      checkpointing: bool) -> None:
    torch.manual_seed(0)
    build, blocks = MODELS[name]
    model, inputs = build()
    chosen = blocks if checkpointing else ()
    measured = measured_peak(model, inputs, optimizer, checkpointed=chosen)
    plan = hookscope.memory_plan(model, *inputs, optimizer=optimizer,
                                 activation_checkpointing=list(chosen) or None)
    assert plan.peak_bytes == pytest.approx(measured, rel=0.05)


def test_lstm_without_onednn_matches_a_measured_step() -> None:
    """With oneDNN off (its workspace aside), the LSTM's own tensors are planned right."""
    torch.manual_seed(0)
    model, inputs = lstm()
    with torch.backends.mkldnn.flags(enabled=False):
        measured = measured_peak(model, inputs, torch.optim.AdamW)
        plan = hookscope.memory_plan(model, *inputs, optimizer="adamw")
    assert plan.peak_bytes == pytest.approx(measured, rel=0.05)


@pytest.mark.parametrize("cell", [nn.LSTM, nn.GRU])
def test_a_bidirectional_recurrent_layer_matches_a_measured_step(cell: type[nn.Module]) -> None:
    """oneDNN's recurrent layer keeps a workspace for backward that only its kernel can
    size; the plan asks it (``core/torch_private/fake.py``), per direction and layer."""
    torch.manual_seed(0)

    class Tagger(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(100, 32)
            self.rnn = cell(32, 48, num_layers=2, batch_first=True, bidirectional=True)
            self.head = nn.Linear(96, 10)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return self.head(self.rnn(self.embed(tokens))[0])

    model, tokens = Tagger(), torch.randint(0, 100, (3, 20))
    measured = measured_peak(model, (tokens,), torch.optim.AdamW)
    plan = hookscope.memory_plan(model, tokens, optimizer="adamw")
    assert plan.peak_bytes == pytest.approx(measured, rel=0.05)
    assert not plan.notes


def test_a_workspace_too_large_to_ask_is_named_in_the_notes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from hookscope.core.torch_private import fake

    model, inputs = lstm()
    monkeypatch.setattr(fake, "WORKSPACE_QUERY_BYTES", 0)
    monkeypatch.setattr(fake, "_workspaces", {})
    plan = hookscope.memory_plan(model, *inputs)
    assert any("mkldnn_rnn_layer" in note for note in plan.notes)
    convnet, images = resnet()
    assert not hookscope.memory_plan(convnet, *images).notes
