"""``hookscope grads --format json`` against a training loop written by hand: the same
seed, batches, loss and optimizer give the same losses and per-step gradient norms."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from helpers import run_cli

CLASSIFIER = textwrap.dedent("""
    import torch
    from torch import nn

    def build():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
""")


def _build_classifier() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def _hand_loop(model: torch.nn.Module, *, steps: int, seed: int, lr: float,
               clip: float | None = None) -> dict[str, Any]:
    """The loop a user writes: each step's batch, then its labels, from one generator
    seeded with seed, cross-entropy, SGD, clip_grad_norm_ before the step."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    got: dict[str, Any] = {"loss": [], "norms": [], "weights": [], "total": [], "after": []}
    for _ in range(steps):
        x = torch.randn(5, 4, generator=g)
        y = torch.randint(0, 3, (5,), generator=g)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        got["loss"].append(loss.item())
        got["norms"].append({n: p.grad.norm().item() for n, p in model.named_parameters()})
        got["weights"].append({n: p.norm().item() for n, p in model.named_parameters()})
        grads = [p.grad for p in model.parameters()]
        got["total"].append(torch.cat([g.flatten() for g in grads]).norm().item())
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            got["after"].append(torch.cat([g.flatten() for g in grads]).norm().item())
        opt.step()
        opt.zero_grad()
    return got


def _grads_json(capsys: pytest.CaptureFixture[str], spec: str, *options: str) -> Any:
    code, out, err = run_cli(capsys, "grads", spec, "--format", "json", *options)
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def classifier(tmp_path: Path) -> str:
    path = tmp_path / "classifier.py"
    path.write_text(CLASSIFIER)
    return f"{path}:build"


def test_a_classifier_trains_on_cross_entropy_as_a_hand_written_loop_does(
    capsys: pytest.CaptureFixture[str], classifier: str
) -> None:
    doc = _grads_json(capsys, classifier, "--input", "5,4", "--steps", "4", "--seed", "7",
                      "--lr", "0.5")
    want = _hand_loop(_build_classifier(), steps=4, seed=7, lr=0.5)
    assert doc["loss"] == "ce"
    assert [s["loss"] for s in doc["steps"]] == pytest.approx(want["loss"], rel=1e-5)
    assert [s["total_norm"] for s in doc["steps"]] == pytest.approx(want["total"], rel=1e-5)
    for entry in doc["parameters"]:
        hand = [row[entry["path"]] for row in want["norms"]]
        assert entry["grad_norms"] == pytest.approx(hand, rel=1e-5), entry["path"]
        # a new batch each step: the norms move (on one batch of sums, they barely did)
        assert len(set(entry["grad_norms"])) == len(hand)


def test_clip_scales_the_total_norm_before_the_step_and_reports_both(
    capsys: pytest.CaptureFixture[str], classifier: str
) -> None:
    doc = _grads_json(capsys, classifier, "--input", "5,4", "--steps", "3", "--lr", "0.5",
                      "--clip", "0.3")
    want = _hand_loop(_build_classifier(), steps=3, seed=0, lr=0.5, clip=0.3)
    assert max(want["total"]) > 0.3  # the clip acts
    steps = doc["steps"]
    assert [s["total_norm"] for s in steps] == pytest.approx(want["total"], rel=1e-5)
    assert [s["total_norm_clipped"] for s in steps] == pytest.approx(want["after"], rel=1e-5)
    for entry in doc["parameters"]:  # before the clip; later steps follow clipped updates
        hand = [row[entry["path"]] for row in want["norms"]]
        assert entry["grad_norms"] == pytest.approx(hand, rel=1e-5), entry["path"]


def test_relative_is_each_gradient_norm_over_its_weights_norm(
    capsys: pytest.CaptureFixture[str], classifier: str
) -> None:
    doc = _grads_json(capsys, classifier, "--input", "5,4", "--steps", "2", "--relative")
    want = _hand_loop(_build_classifier(), steps=2, seed=0, lr=1e-3)
    for entry in doc["parameters"]:
        path = entry["path"]
        hand = [n[path] / w[path] for n, w in zip(want["norms"], want["weights"], strict=True)]
        assert entry["ratios"] == pytest.approx(hand, rel=1e-5), path


def test_top_lists_the_largest_last_norms_largest_first(
    capsys: pytest.CaptureFixture[str], classifier: str
) -> None:
    doc = _grads_json(capsys, classifier, "--input", "5,4", "--steps", "3", "--top", "2")
    last = _hand_loop(_build_classifier(), steps=3, seed=0, lr=1e-3)["norms"][-1]
    by_hand = sorted(last, key=last.__getitem__, reverse=True)[:2]
    assert [p["path"] for p in doc["parameters"]] == by_hand
    assert by_hand != list(last)[:2]  # not the tree order


GPT2 = textwrap.dedent("""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    def build():
        torch.manual_seed(0)
        config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=97, n_positions=32,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return GPT2LMHeadModel(config)
""")


def test_a_causal_lm_trains_on_the_loss_transformers_computes_from_labels(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("transformers")
    path = tmp_path / "gpt2.py"
    path.write_text(GPT2)
    doc = _grads_json(capsys, f"{path}:build", "--input", "2,12", "--steps", "3",
                      "--lr", "0.1")
    assert doc["loss"] == "lm"
    namespace: dict[str, Any] = {}
    exec(GPT2, namespace)
    model = namespace["build"]().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, norms = [], []
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        ids = torch.randint(0, 97, (2, 12), generator=g)
        loss = model(ids, labels=ids).loss  # transformers shifts the labels itself
        loss.backward()
        losses.append(loss.item())
        norms.append({n: p.grad.norm().item() for n, p in model.named_parameters()})
        opt.step()
        opt.zero_grad()
    assert [s["loss"] for s in doc["steps"]] == pytest.approx(losses, rel=1e-4)
    for entry in doc["parameters"]:
        hand = [row[entry["path"]] for row in norms]
        assert entry["grad_norms"] == pytest.approx(hand, rel=1e-4), entry["path"]


SEQUENCE = textwrap.dedent("""
    import torch
    from torch import nn

    class Own(nn.Module):
        '''Its output holds its own loss, as a transformers model given labels does.'''
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.proj = nn.Linear(4, 3)

        def forward(self, x):
            y = self.proj(x)
            return {"loss": (y ** 2).mean() + y.mean(), "logits": y}

    def per_token():  # [batch, tokens, features]: no classifier, no causal LM
        torch.manual_seed(0)
        return nn.Linear(4, 3)

    def own():
        return Own()
""")


@pytest.mark.parametrize(("factory", "kind"), [("per_token", "mse"), ("own", "model")])
def test_mse_to_a_seeded_target_and_the_models_own_loss(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, factory: str, kind: str
) -> None:
    path = tmp_path / "sequence.py"
    path.write_text(SEQUENCE)
    doc = _grads_json(capsys, f"{path}:{factory}", "--input", "2,5,4", "--steps", "3",
                      "--lr", "0.1")
    assert doc["loss"] == kind
    namespace: dict[str, Any] = {}
    exec(SEQUENCE, namespace)
    model = namespace[factory]()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        out = model(torch.randn(2, 5, 4, generator=g))
        # the MSE target is drawn after the batch, from the same generator
        loss = F.mse_loss(out, torch.randn(2, 5, 3, generator=g)) if kind == "mse" else (
            out["loss"])
        loss.backward()
        losses.append(loss.item())
        opt.step()
        opt.zero_grad()
    assert [s["loss"] for s in doc["steps"]] == pytest.approx(losses, rel=1e-5)
    assert len(set(losses)) == 3


def test_two_seeds_share_no_batch(capsys: pytest.CaptureFixture[str], classifier: str) -> None:
    """Step k was seeded with seed + k, so --seed 1 trained on --seed 0's batches shifted
    by one step: two runs meant to show the spread over seeds were the same run. With
    --lr 0 the weights never move and each step's loss is a function of its batch only
    (the oracle: the hand-written loop of one generator per run)."""
    runs = {seed: [s["loss"] for s in _grads_json(
        capsys, classifier, "--input", "5,4", "--steps", "4", "--seed", str(seed),
        "--lr", "0")["steps"]] for seed in (0, 1)}
    assert not set(runs[0]) & set(runs[1]), runs
    for seed, losses in runs.items():
        assert losses == pytest.approx(
            _hand_loop(_build_classifier(), steps=4, seed=seed, lr=0.0)["loss"], rel=1e-5)
