"""Precision on real models: no warning or error on torchvision classification,
segmentation and detection models nor on transformers GPT-2, BERT, T5, Llama, Mixtral
and ViT (small configs), statically and with a forward pass; information only where
true (tied parameters, checked against torch's own ``named_parameters``).

The default run lints a few of each; ``-m slow`` lints every torchvision model of the
three families.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from helpers import assert_state_unchanged, snapshot_state, total_hooks

torchvision = pytest.importorskip("torchvision")
transformers = pytest.importorskip("transformers")


def _tied_oracle(model: nn.Module) -> set[str]:
    """Every name of a parameter after its first, from torch's own walk."""
    first: set[int] = set()
    tied: set[str] = set()
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            tied.add(name)
        first.add(id(p))
    return tied


def _check(model: nn.Module, *args: Any, **kwargs: Any) -> None:
    before = snapshot_state(model)
    for report in (hookscope.lint(model),
                   hookscope.lint(model, *args, kwargs=kwargs or None)):
        loud = [f for f in report if f.severity is not hookscope.Severity.INFO]
        assert not loud, report.to_text()
        assert {f.code for f in report} <= {"HS203"}, report.to_text()
        assert {f.target for f in report} == _tied_oracle(model)
    assert total_hooks(model) == 0
    assert_state_unchanged(before, model)


def _vision(name: str, *, family: Any = None) -> nn.Module:
    extra = {} if family is None else {"weights_backbone": None}
    return torchvision.models.get_model(name, weights=None, **extra).eval()


FAST_VISION = ["resnet18", "mobilenet_v3_small"]


@pytest.mark.parametrize("name", FAST_VISION)
def test_torchvision_classification(name: str) -> None:
    _check(_vision(name), torch.randn(1, 3, 224, 224))


def test_googlenet_auxiliary_heads_skipped_in_eval_mode_are_not_forgotten_layers() -> None:
    model = torchvision.models.googlenet(weights=None, init_weights=False).eval()
    _check(model, torch.randn(1, 3, 224, 224))


def test_torchvision_segmentation() -> None:
    _check(_vision("lraspp_mobilenet_v3_large", family="seg"), torch.randn(1, 3, 96, 96))


def test_torchvision_detection() -> None:
    model = _vision("fasterrcnn_mobilenet_v3_large_320_fpn", family="det")
    _check(model, [torch.rand(3, 128, 128)])


T = transformers
SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 64, "vocab_size": 100}
IDS = torch.randint(0, 100, (2, 8))
HF: dict[str, tuple[Callable[[], nn.Module], tuple[Any, ...], dict[str, Any]]] = {
    "gpt2": (lambda: T.GPT2LMHeadModel(T.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=100, bos_token_id=0, eos_token_id=0)),
        (IDS,), {}),
    "bert": (lambda: T.BertForMaskedLM(T.BertConfig(**SMALL)), (IDS,), {}),
    "t5": (lambda: T.T5ForConditionalGeneration(T.T5Config(
        d_model=32, d_ff=64, num_layers=2, num_heads=2, d_kv=16, vocab_size=100)),
        (IDS,), {"decoder_input_ids": IDS}),
    "llama": (lambda: T.LlamaForCausalLM(T.LlamaConfig(**SMALL, num_key_value_heads=1)),
              (IDS,), {}),
    "mixtral": (lambda: T.MixtralForCausalLM(T.MixtralConfig(
        **SMALL, num_key_value_heads=1, num_local_experts=4, num_experts_per_tok=2)),
        (IDS,), {}),
    "vit": (lambda: T.ViTForImageClassification(T.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        image_size=32, patch_size=8)), (torch.randn(2, 3, 32, 32),), {}),
}


@pytest.mark.parametrize("name", sorted(HF))
def test_transformers(name: str) -> None:
    build, args, kwargs = HF[name]
    _check(build().eval(), *args, **kwargs)


def test_tied_embeddings_are_reported_as_info() -> None:
    build, args, _ = HF["gpt2"]
    report = hookscope.lint(build().eval(), *args)
    assert [(f.code, f.target) for f in report] == [("HS203", "lm_head.weight")]


def _all(module: Any) -> list[str]:
    return sorted(torchvision.models.list_models(module=module))


@pytest.mark.slow
@pytest.mark.parametrize("name", _all(torchvision.models))
def test_every_torchvision_classification_model(name: str) -> None:
    if name.startswith("vit_h"):
        pytest.skip("632M parameters; vit_b/l cover the family")
    size = 299 if "inception" in name else 224
    _check(_vision(name), torch.randn(1, 3, size, size))


@pytest.mark.slow
@pytest.mark.parametrize("name", _all(torchvision.models.segmentation))
def test_every_torchvision_segmentation_model(name: str) -> None:
    _check(_vision(name, family="seg"), torch.randn(1, 3, 224, 224))


@pytest.mark.slow
@pytest.mark.parametrize("name", _all(torchvision.models.detection))
def test_every_torchvision_detection_model(name: str) -> None:
    _check(_vision(name, family="det"), [torch.rand(3, 256, 256)])


@pytest.mark.parametrize("reparametrize", ["prune", "weight_norm", "spectral_norm"])
def test_torch_s_own_reparametrizations_are_not_plain_tensors(reparametrize: str) -> None:
    """``prune``, the old ``weight_norm`` and ``spectral_norm`` keep ``weight`` as a plain
    tensor made anew from registered parameters before every call: HS201 said the
    optimizer never updates it."""
    import warnings

    import torch.nn.utils.prune as prune

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # weight_norm is deprecated
        if reparametrize == "prune":
            prune.l1_unstructured(model[0], "weight", amount=0.5)
        elif reparametrize == "weight_norm":
            nn.utils.weight_norm(model[0])
        else:
            nn.utils.spectral_norm(model[0])
    assert isinstance(vars(model[0])["weight"], torch.Tensor)  # plain, as the rule reads
    assert hookscope.lint(model, torch.randn(2, 4), backward=True).codes() == []
    model[2].stale = torch.ones(3, requires_grad=True)  # a real one is still found
    assert hookscope.lint(model).codes() == ["HS201"]


def test_a_rope_model_in_bfloat16_has_no_mixed_dtypes() -> None:
    """transformers keeps ``rotary_emb.inv_freq`` (a non-persistent buffer) in float32
    in a bfloat16 model on purpose: HS402 fired on every such model."""
    config = T.LlamaConfig(**SMALL, num_key_value_heads=1)
    model = T.LlamaForCausalLM._from_config(config, dtype=torch.bfloat16).eval()
    floats = {t.dtype for t in model.state_dict().values() if t.is_floating_point()}
    assert floats == {torch.bfloat16}  # the truth: what the model saves is one dtype
    kept = [(n, t.dtype) for n, t in model.named_buffers() if t.dtype == torch.float32]
    assert kept and all(n.endswith("inv_freq") for n, _ in kept)
    _check(model, IDS)


def test_wav2vec2_in_eval_mode_trains_its_mask_embedding_in_training_mode() -> None:
    """``masked_spec_embed`` is used on the training-only masking branch: HS503 said it
    got no gradient and "the optimizer never changes it"."""
    torch.manual_seed(0)
    config = T.Wav2Vec2Config(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        conv_dim=[16, 16], conv_stride=[5, 2], conv_kernel=[10, 3],
        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2)
    model, x = T.Wav2Vec2Model(config), torch.randn(2, 4000)
    twin = copy.deepcopy(model).train()  # the oracle: a training step by hand
    twin(x).last_hidden_state.sum().backward()
    assert twin.masked_spec_embed.grad is not None
    for mode in ("eval", "train"):
        report = hookscope.lint(getattr(model, mode)(), x, backward=True)
        assert report.backward and "HS503" not in report.codes(), report.to_text()


def test_torchvision_detection_in_eval_mode_trains_its_rpn_head_in_training_mode() -> None:
    """The RPN head's proposals are detached by design; its losses train it in training
    mode: HS503 reported each of its parameters in eval mode."""
    torch.manual_seed(0)
    model = _vision("fasterrcnn_mobilenet_v3_large_320_fpn", family="det")
    images = [torch.rand(3, 128, 128)]
    twin = copy.deepcopy(model).train()  # the oracle: a training step by hand
    targets = [{"boxes": torch.tensor([[10.0, 20.0, 60.0, 90.0]]), "labels": torch.tensor([1])}]
    sum(twin(images, targets).values()).backward()
    head = dict(twin.named_parameters())
    assert all(head[n].grad is not None for n in head if n.startswith("rpn.head."))
    report = hookscope.lint(model, images, backward=True)
    assert report.backward and "HS503" not in report.codes(), report.to_text()
