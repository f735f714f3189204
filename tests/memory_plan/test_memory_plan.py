"""``hookscope.memory_plan``: what it reports, checked by hand computations and real
runs; the user's model untouched; bad options refused with one line."""

from __future__ import annotations

import json
import math

import pytest
import torch
from oracles import LiveStorages, measured_peak
from test_plan_oracles import gpt2
from torch import nn

import hookscope
import zoo
from helpers import assert_state_unchanged, snapshot_state, total_hooks


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))


def _param_bytes(model: nn.Module, *, itemsize: int = 4, shards: int = 1) -> int:
    return sum(math.ceil(p.numel() * itemsize / shards) for p in model.parameters())


def test_the_user_model_is_left_exactly_as_it_was() -> None:
    model, (tokens,) = gpt2()
    model(tokens).logits.sum().backward()  # .grad present before the plan
    before = snapshot_state(model)
    hooks = total_hooks(model)
    hookscope.memory_plan(model, tokens, activation_checkpointing=True)
    assert_state_unchanged(before, model)
    assert total_hooks(model) == hooks
    assert type(model.transformer.h[0]).forward is type(model.transformer.h[0]).forward
    assert "forward" not in vars(model.transformer.h[0])
    assert model.config.use_cache  # the plan turns the cache off on its copy only


def test_columns_are_the_parameters_gradients_and_adam_states_by_hand() -> None:
    model = _mlp()
    plan = hookscope.memory_plan(model, torch.randn(8, 64), optimizer="adam")
    params = _param_bytes(model)
    root = plan.modules[0]
    assert (root.parameters, root.gradients) == (params, params)
    assert root.optimizer_states == 2 * params + 4 * 4  # exp_avg, exp_avg_sq, a step each
    first = next(m for m in plan.modules if m.path == "0")
    assert first.parameters == (64 * 256 + 256) * 4
    assert plan.peak_bytes == max(p.bytes for p in plan.timeline)
    assert sum(plan.at_peak.values()) == plan.peak_bytes
    assert [p.phase for p in plan.timeline][-1] == "optimizer"


def test_inference_is_one_forward_without_gradients() -> None:
    model, x = _mlp(), torch.randn(32, 64)
    plan = hookscope.memory_plan(model, x, training=False)
    live = LiveStorages()
    with torch.no_grad(), live:
        for t in [*model.parameters(), x]:
            live.add(t)
        model(x)
    assert plan.peak_bytes == live.peak
    assert plan.peak_phase == "forward" and plan.optimizer is None
    assert plan.at_peak["gradients"] == plan.at_peak["saved_activations"] == 0


def test_bf16_halves_the_parameters() -> None:
    model = _mlp()
    plan = hookscope.memory_plan(model, torch.randn(8, 64), dtype="bf16", optimizer="sgd")
    assert plan.modules[0].parameters == _param_bytes(model, itemsize=2)
    assert plan.dtype == "bfloat16"


def test_shards_divide_parameters_gradients_and_states_not_activations() -> None:
    model, x = _mlp(), torch.randn(8, 64)
    whole = hookscope.memory_plan(model, x, optimizer="adamw")
    rank = hookscope.memory_plan(model, x, optimizer="adamw", shards=4)
    assert rank.modules[0].parameters == _param_bytes(model, shards=4)
    assert rank.modules[0].gradients == _param_bytes(model, shards=4)
    assert rank.modules[0].saved_activations == whole.modules[0].saved_activations
    assert rank.peak_bytes < whole.peak_bytes
    assert "per rank of 4" in rank.headline()


def test_gradient_accumulation_runs_the_next_forward_with_the_gradients_alive() -> None:
    model, x = _mlp(), torch.randn(8, 64)
    one = hookscope.memory_plan(model, x, optimizer="sgd")
    two = hookscope.memory_plan(model, x, optimizer="sgd", gradient_accumulation=2)

    def forward_high(plan: hookscope.MemoryPlan) -> int:
        return max(p.bytes for p in plan.timeline if p.phase == "forward")

    assert forward_high(two) >= forward_high(one) + _param_bytes(model)


def test_checkpointing_saves_less_and_matches_a_measured_step() -> None:
    model, inputs = gpt2()
    plain = hookscope.memory_plan(model, *inputs, optimizer="sgd")
    ckpt = hookscope.memory_plan(model, *inputs, optimizer="sgd", activation_checkpointing=True)
    assert ckpt.checkpointed == ["transformer.h.0", "transformer.h.1"]
    assert ckpt.modules[0].saved_activations < plain.modules[0].saved_activations
    measured = measured_peak(model, inputs, torch.optim.SGD, checkpointed=tuple(ckpt.checkpointed))
    assert ckpt.peak_bytes == pytest.approx(measured, rel=0.05)


def test_the_largest_batch_fits_and_one_more_does_not() -> None:
    model = _mlp()
    budget = hookscope.memory_plan(model, torch.randn(100, 64)).peak_bytes
    plan = hookscope.memory_plan(model, torch.randn(4, 64), device_memory=budget)
    n = plan.max_batch_size
    assert n is not None and n >= 100
    assert hookscope.memory_plan(model, torch.randn(n, 64)).peak_bytes <= budget
    assert hookscope.memory_plan(model, torch.randn(n + 1, 64)).peak_bytes > budget
    assert f"with batch <= {n}" in plan.headline()


def test_a_budget_below_the_model_fits_no_batch() -> None:
    plan = hookscope.memory_plan(_mlp(), torch.randn(4, 64), device_memory="1KiB")
    assert plan.max_batch_size == 0
    assert "does not fit" in plan.headline()


def test_exports_hold_one_row_per_module() -> None:
    model = _mlp()
    plan = hookscope.memory_plan(model, torch.randn(8, 64))
    data = json.loads(plan.to_json())
    assert [m["path"] for m in data["modules"]] == [p for p, _ in model.named_modules()]
    assert data["peak_bytes"] == plan.peak_bytes
    assert len(plan.to_csv().splitlines()) == 1 + len(list(model.modules()))
    text = str(plan)
    assert text.splitlines()[0].strip() == plan.headline()
    assert "timeline: forward" in text
    assert plan.headline() in plan._repr_html_()


@pytest.mark.parametrize(("options", "message"), [
    ({"optimizer": "adamm"}, "close: adam"),
    ({"dtype": "int8"}, "dtype='int8'"),
    ({"shards": 0}, "shards=0"),
    ({"device_memory": "lots"}, "device_memory='lots'"),
    ({"activation_checkpointing": "nothing.*"}, "selects no module"),
    ({"activation_checkpointing": True, "training": False}, "applies to training"),
])
def test_bad_options_are_one_clear_error(options: dict[str, object], message: str) -> None:
    with pytest.raises(hookscope.SpecError, match=message.replace("(", r"\(")):
        hookscope.memory_plan(_mlp(), torch.randn(2, 64), **options)


def test_a_model_that_reads_values_is_named() -> None:
    class Reads(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x[x > 0].reshape(-1, 4))

    with pytest.raises(hookscope.SpecError, match="reads tensor values in the root module"):
        hookscope.memory_plan(Reads(), torch.randn(2, 4))


def test_a_model_that_raises_is_one_model_error_naming_the_module() -> None:
    """As a detection model does without targets in training mode: the model's own
    error, where it was raised, not a bug in hookscope."""

    class NeedsTargets(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
            if self.training and targets is None:
                raise ValueError("targets should not be none when in training mode")
            return self.head(x)

    model = NeedsTargets()
    before = snapshot_state(model)
    with pytest.raises(hookscope.ModelRunError, match=r"root module.*targets should not be "
                       r"none.*--inference") as raised:
        hookscope.memory_plan(model, torch.randn(2, 4))
    assert raised.value.path == "" and raised.value.trace is None
    assert_state_unchanged(before, model)
    assert hookscope.memory_plan(model, torch.randn(2, 4), training=False).peak_bytes > 0


def test_a_fake_kernel_s_failure_is_raised_once_not_logged(
        capfd: pytest.CaptureFixture[str]) -> None:
    """A float32 Mixtral's experts call ``torch._grouped_mm``, whose fake kernel takes
    only bfloat16 on the CPU: FakeTensorMode logs such a failure with its traceback
    before it raises; the plan raises it as the model's error and nothing is logged."""
    transformers = pytest.importorskip("transformers")
    config = transformers.MixtralConfig(
        num_hidden_layers=1, hidden_size=64, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=4, vocab_size=128)
    model = transformers.MixtralModel(config)
    tokens = torch.randint(0, 128, (1, 8))
    try:
        plan = hookscope.memory_plan(model, tokens)
    except hookscope.ModelRunError as e:
        assert e.path is not None and "experts" in e.path
    else:  # a torch whose kernel takes float32 plans it
        assert plan.peak_bytes > 0
    assert "Traceback" not in capfd.readouterr().err


def test_tensors_held_in_a_list_attribute_are_faked_too() -> None:
    """torchvision's AnchorGenerator keeps its anchors in a plain list: the plan copies
    them onto fake tensors like parameters and buffers, and counts none of their bytes
    as the model's."""

    class Anchored(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(4, 4)
            self.anchors = [torch.randn(4), torch.randn(4)]

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.proj(x) + self.anchors[0] * self.anchors[1]

    model, x = Anchored(), torch.randn(3, 4)
    plan = hookscope.memory_plan(model, x, optimizer="sgd")
    assert plan.peak_bytes == pytest.approx(measured_peak(model, (x,), torch.optim.SGD),
                                            rel=0.05)
    assert plan.modules[0].parameters == 4 * (16 + 4)  # the Linear's, not the anchors


def test_a_model_without_trainable_output_asks_for_inference() -> None:
    model = nn.Linear(4, 4).requires_grad_(False)
    with pytest.raises(hookscope.SpecError, match="training=False"):
        hookscope.memory_plan(model, torch.randn(2, 4))


@pytest.mark.slow
def test_llama_70b_is_planned_on_meta_without_allocating_it() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                         num_attention_heads=64, num_key_value_heads=8, vocab_size=32000)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    tokens = torch.randint(0, 32000, (1, 512), device="meta")
    plan = hookscope.memory_plan(model, tokens, dtype="bf16", optimizer="adamw")
    params = _param_bytes(model, itemsize=2)
    assert 68e9 < params / 2 < 70e9  # Llama 2 70B: 68.98 B parameters
    assert plan.modules[0].parameters == params
    assert plan.at_peak["gradients"] == params
    assert plan.modules[0].optimizer_states == 2 * params + 4 * len(list(model.parameters()))
    assert plan.peak_bytes > 4 * params


def test_autocast_saves_bf16_activations_and_weight_copies() -> None:
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512))
    plan = hookscope.memory_plan(mlp, torch.randn(64, 512), autocast="bf16")
    saved = {m.path: m.saved_activations for m in plan.modules}
    assert saved["1"] == 64 * 2048 * 2  # GELU's bf16 output, saved by the next Linear
    assert saved["2"] == 2048 * 512 * 2  # autocast's bf16 copy of its weight
    assert plan.autocast == "bfloat16"


def test_to_dataframe_has_one_row_per_module() -> None:
    pytest.importorskip("pandas")
    model = _mlp()
    frame = hookscope.memory_plan(model, torch.randn(8, 64)).to_dataframe()
    assert list(frame["path"]) == [p for p, _ in model.named_modules()]
    assert frame.loc[0, "parameters"] == _param_bytes(model)


@pytest.mark.parametrize("cls", zoo.ALL_ZOO, ids=lambda c: c.__name__)
def test_every_zoo_model_is_planned_or_refused_and_left_unchanged(cls: type[zoo.ZooModel]) -> None:
    torch.manual_seed(0)
    model = cls()
    args, kwargs = cls.example_inputs()
    before = snapshot_state(model)
    hooks = total_hooks(model)
    try:
        plan = hookscope.memory_plan(model, *args, kwargs=kwargs, optimizer="sgd")
    except Exception as e:  # the model's own failure, or one a fake tensor cannot run
        assert cls.RAISES or isinstance(e, hookscope.SpecError), repr(e)
        if cls.FAILING_PATH is not None and not isinstance(e, hookscope.SpecError):
            assert isinstance(e, hookscope.ModelRunError), repr(e)
            assert e.path == cls.FAILING_PATH and repr(cls.FAILING_PATH) in str(e)
    else:
        assert not cls.RAISES
        assert plan.peak_bytes >= sum(p.numel() * p.element_size() for p in model.parameters())
    assert_state_unchanged(before, model)
    assert total_hooks(model) == hooks


def test_an_inference_table_has_no_training_columns() -> None:
    text = hookscope.memory_plan(_mlp(), torch.randn(8, 64), training=False).table().to_text()
    assert "Params" in text and "Grads" not in text and "Saved" not in text


class _Wide(nn.Module):
    """A block whose backward allocates the most: the gradients of a wide tanh."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x.repeat(1, 8)).reshape(x.shape[0], 8, -1).sum(1)


def test_the_backward_peak_is_in_the_module_whose_backward_runs_then() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 1024), _Wide(), nn.Linear(1024, 4))
    x = torch.randn(256, 32, requires_grad=True)  # so the first module's hooks bracket it
    plan = hookscope.memory_plan(model, x, optimizer=None)
    # the oracle: module backward hooks mark which module's backward runs while a
    # dispatch mode counts live storages on a real step
    running: list[str] = []
    live = LiveStorages()

    def enter(name: str) -> None:
        running.append(name)

    def leave() -> None:
        running.pop()

    for name, module in model.named_children():
        module.register_full_backward_pre_hook(lambda m, g, name=name: enter(name))
        module.register_full_backward_hook(lambda m, gi, go: leave())
    peaks: list[tuple[int, str]] = []
    original = live.add

    def add(t: torch.Tensor) -> None:
        original(t)
        peaks.append((live.now, running[-1] if running else ""))

    live.add = add  # type: ignore[method-assign]
    with live:
        for t in [*model.parameters(), x]:
            live.add(t)
        out = model(x)
        out.sum().backward()
    measured_module = max(peaks, key=lambda p: p[0])[1]
    assert plan.peak_phase == "backward"
    assert plan.peak_module == measured_module == "1"
