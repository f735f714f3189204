"""Real architectures: torchvision ResNet-18 and ViT, transformers GPT-2 and BERT.

Models are built from configs with random weights (nothing is downloaded), once per
module (module-scoped fixtures). The default run uses ResNet-18 at full size and small
configs (2 layers) of the others; ``-m slow`` adds full-size ViT-B/16, GPT-2 (12 layers)
and BERT-base.

Oracles: ``sum(p.numel() for p in model.parameters())`` (torch counts a tied tensor
once), the real outputs' shapes (each recorded path is evaluated on the real output),
``torch.equal`` of outputs with and without observation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from helpers import (
    assert_outputs_identical,
    assert_state_unchanged,
    snapshot_state,
    tensors_in,
    total_hooks,
)

torchvision = pytest.importorskip("torchvision")
transformers = pytest.importorskip("transformers")


@dataclasses.dataclass
class RealModel:
    name: str
    model: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    tied: dict[str, str]


def _resnet18() -> RealModel:
    model = torchvision.models.resnet18(weights=None)
    return RealModel("resnet18", model, (torch.randn(1, 3, 224, 224),), {}, {})


def _vit_small() -> RealModel:
    model = torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
        num_classes=10,
    )
    return RealModel("vit-small", model, (torch.randn(2, 3, 32, 32),), {}, {})


def _vit_b_16() -> RealModel:
    model = torchvision.models.vit_b_16(weights=None)
    return RealModel("vit_b_16", model, (torch.randn(1, 3, 224, 224),), {}, {})


def _gpt2(**config: Any) -> RealModel:
    cfg = transformers.GPT2Config(**config)
    model = transformers.GPT2LMHeadModel(cfg)
    ids = torch.randint(0, cfg.vocab_size, (1, 32))
    return RealModel("gpt2", model, (ids,), {}, {"lm_head.weight": "transformer.wte.weight"})


def _bert(**config: Any) -> RealModel:
    cfg = transformers.BertConfig(**config)
    model = transformers.BertModel(cfg)
    ids = torch.randint(0, cfg.vocab_size, (2, 16))
    mask = torch.ones_like(ids)
    return RealModel("bert", model, (ids,), {"attention_mask": mask}, {})


SMALL_GPT2 = {"n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 1000,
              "n_positions": 64, "bos_token_id": 0, "eos_token_id": 0}
SMALL_BERT = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
              "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 64}

BUILDERS: dict[str, Callable[[], RealModel]] = {
    "resnet18": _resnet18,
    "vit-small": _vit_small,
    "gpt2-small": lambda: _gpt2(**SMALL_GPT2),
    "bert-small": lambda: _bert(**SMALL_BERT),
}
SLOW_BUILDERS: dict[str, Callable[[], RealModel]] = {
    "vit_b_16": _vit_b_16,
    "gpt2-full": lambda: _gpt2(),
    "bert-base": lambda: _bert(),
}
PARAMS = [pytest.param(k, id=k) for k in BUILDERS] + [
    pytest.param(k, id=k, marks=pytest.mark.slow) for k in SLOW_BUILDERS
]


@pytest.fixture(scope="module", params=PARAMS)
def real(request: pytest.FixtureRequest) -> RealModel:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        built = {**BUILDERS, **SLOW_BUILDERS}[request.param]()
    built.model.eval()
    return built





def _available_probes() -> set[str]:
    import hookscope.probes

    return set(hookscope.probes.PROBES)


def _trace(real: RealModel, **options: Any) -> hookscope.Trace:
    flags = {k: k in _available_probes() for k in ("time", "stats", "memory")}
    flags.update(options)
    return hookscope.trace(real.model, *real.args, kwargs=real.kwargs, **flags)


def test_param_totals_match_torch(real: RealModel) -> None:
    model = real.model
    result = hookscope.summary(model, *real.args, kwargs=real.kwargs)
    unique = list(model.parameters())
    assert result.trace.model.params_total == sum(p.numel() for p in unique)
    assert result.trace.model.params_trainable == sum(
        p.numel() for p in unique if p.requires_grad)
    assert result.trace.model.buffers_total == sum(b.numel() for b in model.buffers())
    for path, module in model.named_modules():
        assert result.trace.modules[path].total_params == sum(
            p.numel() for p in module.parameters()), path
    info = hookscope.inspect(model)
    assert info.tied == real.tied
    if real.tied:  # counted once: less than the naive sum over every name
        naive = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
        assert info.total_params < naive
        tied_path, first = next(iter(real.tied.items()))
        assert model.get_parameter(tied_path) is model.get_parameter(first)


def test_output_shapes_equal_real_outputs(real: RealModel) -> None:
    with torch.no_grad():
        out = real.model(*real.args, **real.kwargs)
    trace = _trace(real, time=False, stats=False, memory=False)
    tensors = [m for m in trace.outputs if m.layout != "object"]  # not the KV cache object
    assert len(tensors) == len(tensors_in(out)) > 0
    for meta in tensors:
        tensor = eval(meta.path, {"out": out})  # the path is how a user indexes the output
        assert meta.shape == tuple(tensor.shape), meta.path
        assert meta.dtype == str(tensor.dtype).removeprefix("torch.")
    # every call of a leaf module has outputs; the root's are the model's outputs
    assert trace.calls[0].outputs == trace.outputs
    leaves = {p for p, m in real.model.named_modules() if not list(m.children())}
    for call in trace.calls:
        if call.path in leaves and call.module_class != "Dropout":
            assert call.outputs, call.name


def test_json_round_trip(real: RealModel) -> None:
    trace = _trace(real, ops="ops" in _available_probes())
    assert hookscope.Trace.from_json(trace.to_json()) == trace
    assert hookscope.Trace.from_json(trace.to_json(indent=None)) == trace
    summary = hookscope.summary(real.model, *real.args, kwargs=real.kwargs)
    assert hookscope.Trace.from_json(summary.to_json()) == summary.trace


def test_no_hooks_left_and_outputs_bit_identical(real: RealModel) -> None:
    model = real.model
    before = snapshot_state(model)
    with torch.no_grad():
        expected = model(*real.args, **real.kwargs)
        with hookscope.Tracer(model, **{k: True for k in _available_probes()}) as tracer:
            observed = model(*real.args, **real.kwargs)
    assert_outputs_identical(observed, expected)
    assert tracer.trace is not None and tracer.trace.error is None
    assert total_hooks(model) == 0
    assert_state_unchanged(before, model)
    _trace(real)
    hookscope.summary(model, *real.args, kwargs=real.kwargs)
    assert total_hooks(model) == 0
    assert_state_unchanged(before, model)


def test_backward_leaves_grads_alone(real: RealModel) -> None:
    model = real.model
    before = snapshot_state(model)
    trace = _trace(real, backward=True)
    assert trace.error is None
    assert all(p.grad is None for p in model.parameters())
    assert total_hooks(model) == 0
    assert_state_unchanged(before, model)
