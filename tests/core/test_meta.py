"""Analysis on the meta device: the same shapes, parameters and FLOPs, no real memory.

Oracles: the real-device trace of the same model (shapes, dtypes, parameter counts,
FLOPs per call must be equal), ``FlopCounterMode`` on a model built on meta, plain
``named_parameters``/``data_ptr`` checks for "the user's model is untouched", and
tied weights staying one tensor.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
import zoo
from flop_oracles import hf_model
from helpers import assert_state_unchanged, snapshot_state, total_hooks
from hookscope.core.meta import inputs_to_meta, is_on_meta, meta_copy

transformers = pytest.importorskip("transformers")
torchvision = pytest.importorskip("torchvision")

OPS_ONLY = {"ops": True, "time": False, "stats": False, "memory": False}


def _call_rows(trace: hookscope.Trace) -> list[tuple[Any, ...]]:
    """Everything about the calls that must not depend on the device."""
    return [
        (
            c.path, c.call_index, c.parent, c.depth, c.module_class,
            [(m.path, m.shape, m.dtype, m.requires_grad) for m in c.inputs],
            [(m.path, m.shape, m.dtype, m.requires_grad) for m in c.outputs],
            c.flops, c.self_flops,
        )
        for c in trace.calls
    ]


def _assert_meta_equals_real(model: nn.Module, *args: Any, backward: bool = False) -> None:
    real = hookscope.trace(model, *args, backward=backward, **OPS_ONLY)
    before = snapshot_state(model)  # after the real run: train-mode BatchNorm updates stats
    meta = hookscope.trace(model, *args, backward=backward, device="meta", **OPS_ONLY)
    assert_state_unchanged(before, model)
    assert meta.meta["device"] == "meta"
    # tensors are on meta; objects that hold none (the KV cache) show their type only
    assert {m.device for c in meta.calls for m in c.outputs if m.layout != "object"} <= {"meta"}
    assert _call_rows(meta) == _call_rows(real)
    assert meta.model == real.model and meta.modules == real.modules
    assert meta.totals_flops == real.totals_flops
    assert meta.uncounted_ops == real.uncounted_ops
    assert [o.shape for o in meta.outputs] == [o.shape for o in real.outputs]


def test_meta_copy_leaves_the_model_alone_and_keeps_ties() -> None:
    model = zoo.build(zoo.TiedWeights)
    before = snapshot_state(model)
    pointers = [p.data_ptr() for p in model.parameters()]
    copy = meta_copy(model)
    assert copy is not model and is_on_meta(copy) and not is_on_meta(model)
    assert_state_unchanged(before, model)
    assert [p.data_ptr() for p in model.parameters()] == pointers
    assert [n for n, _ in copy.named_modules()] == [n for n, _ in model.named_modules()]
    real = dict(model.named_parameters(remove_duplicate=False))
    fake = dict(copy.named_parameters(remove_duplicate=False))
    assert real.keys() == fake.keys()
    for name, p in real.items():
        assert (fake[name].shape, fake[name].dtype) == (p.shape, p.dtype)
        assert fake[name].requires_grad == p.requires_grad
        assert isinstance(fake[name], nn.Parameter)
    groups_real = {n: id(p) for n, p in real.items()}
    groups_fake = {n: id(p) for n, p in fake.items()}
    # the same names share one tensor in both
    assert {frozenset(n for n in real if groups_real[n] == i) for i in groups_real.values()} == {
        frozenset(n for n in fake if groups_fake[n] == i) for i in groups_fake.values()
    }
    assert sum(1 for _ in copy.parameters()) == sum(1 for _ in model.parameters())


def test_a_model_already_on_meta_is_used_as_it_is() -> None:
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    assert is_on_meta(model) and meta_copy(model) is model
    hooks = total_hooks(model)
    trace = hookscope.trace(model, torch.randn(2, 4), **OPS_ONLY)  # real input: moved to meta
    assert trace.meta["device"] == "meta"
    assert trace.totals_flops is not None and trace.totals_flops.forward == 2 * 2 * 4 * 8
    assert total_hooks(model) == hooks


def test_inputs_to_meta_keeps_structure_dtype_and_grad_flags() -> None:
    x = torch.randn(2, 3, requires_grad=True)
    out = inputs_to_meta({"a": (x, torch.arange(4)), "b": None, "c": 3})
    a, ids = out["a"]
    assert (a.device.type, a.shape, a.requires_grad) == ("meta", x.shape, True)
    assert (ids.device.type, ids.dtype) == ("meta", torch.int64)
    assert out["b"] is None and out["c"] == 3


@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_a_packed_sequence_input_runs_on_meta_as_on_the_cpu(enforce_sorted: bool) -> None:
    """A PackedSequence refuses batch_sizes off the CPU: converting it whole failed."""
    lstm = nn.LSTM(8, 16, batch_first=True)
    packed = nn.utils.rnn.pack_padded_sequence(
        torch.randn(3, 5, 8), [5, 3, 1] if enforce_sorted else [3, 5, 1], batch_first=True,
        enforce_sorted=enforce_sorted)
    real = hookscope.trace(lstm, packed, **OPS_ONLY)
    meta = hookscope.trace(lstm, packed, device="meta", **OPS_ONLY)
    assert _call_rows(meta) == _call_rows(real)
    assert real.totals_flops is not None and meta.totals_flops == real.totals_flops
    assert packed.data.device.type == "cpu"  # the caller's input is left as it was


@pytest.mark.parametrize("cls", zoo.RUNNING_ZOO, ids=lambda c: c.__name__)
def test_zoo_models_on_meta_equal_real(cls: type[zoo.ZooModel]) -> None:
    """Including an LSTM (a fused CPU kernel, explicit matmuls on meta), a lazy module
    and submodules kept in a plain list."""
    model = zoo.build(cls)  # a fresh one: a real run materialises lazy parameters
    args, kwargs = cls.example_inputs()
    real = hookscope.trace(zoo.build(cls), *args, kwargs=kwargs, **OPS_ONLY)
    before = snapshot_state(model)
    meta = hookscope.trace(model, *args, kwargs=kwargs, device="meta", **OPS_ONLY)
    assert_state_unchanged(before, model)
    assert _call_rows(meta) == _call_rows(real)


def test_lazy_model_stays_uninitialized_after_a_meta_run() -> None:
    model = zoo.build(zoo.LazyModel)
    args, kwargs = zoo.LazyModel.example_inputs()
    trace = hookscope.trace(model, *args, kwargs=kwargs, device="meta", **OPS_ONLY)
    assert trace.totals_flops is not None and trace.totals_flops.forward > 0
    assert any(isinstance(p, nn.parameter.UninitializedParameter) for p in model.parameters())


def test_resnet18_forward_and_backward_on_meta_equal_real() -> None:
    torch.manual_seed(0)
    _assert_meta_equals_real(
        torchvision.models.resnet18(weights=None), torch.randn(1, 3, 64, 64), backward=True
    )


def test_gpt2_on_meta_equals_real_with_sdpa_and_backward() -> None:
    """On CPU attention runs the fused flash kernel; on meta it runs as explicit matmuls:
    hookscope counts both the same."""
    model = hf_model("gpt2", "sdpa", n_layer=2)
    ids = torch.randint(0, 1000, (1, 64), generator=torch.Generator().manual_seed(0))
    _assert_meta_equals_real(model, ids, backward=True)


def test_summary_with_input_size_on_meta() -> None:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None)
    real = hookscope.summary(model, input_size=(1, 3, 64, 64), ops=True)
    meta = hookscope.summary(model, input_size=(1, 3, 64, 64), ops=True, device="meta")
    assert _call_rows(meta.trace) == _call_rows(real.trace)
    assert next(model.parameters()).device.type == "cpu"


def _llama_on_meta(**overrides: int) -> nn.Module:
    config = transformers.AutoConfig.for_model("llama", **overrides)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config)


def test_llama_7b_config_on_meta_in_seconds_equals_flop_counter() -> None:
    model = _llama_on_meta(
        hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
        intermediate_size=11008, vocab_size=32000,
    )
    ids = torch.zeros(1, 128, dtype=torch.long, device="meta")
    counter_seconds, elapsed = [], []  # interleaved: a busy machine slows both alike
    for _ in range(2):
        start = time.perf_counter()
        with torch.no_grad(), torch.utils.flop_counter.FlopCounterMode(
            display=False
        ) as counter:
            model(ids)
        counter_seconds.append(time.perf_counter() - start)
        start = time.perf_counter()
        result = hookscope.summary(model, ids, ops=True)
        elapsed.append(time.perf_counter() - start)
    trace = result.trace
    assert trace.model.params_total == sum(p.numel() for p in model.parameters())
    assert trace.totals_flops is not None and not trace.totals_flops.partial
    assert trace.totals_flops.forward == counter.get_total_flops()
    assert trace.find("lm_head").outputs[0].shape == (1, 128, 32000)
    # the whole summary costs about what counting the FLOPs alone costs (the baseline,
    # measured in this test: a loaded machine slows both)
    assert min(elapsed) < 3 * min(counter_seconds), (elapsed, counter_seconds)


@pytest.mark.slow
def test_llama_70b_config_on_meta() -> None:
    model = _llama_on_meta(
        hidden_size=8192, num_hidden_layers=80, num_attention_heads=64,
        num_key_value_heads=8, intermediate_size=28672, vocab_size=32000,
    )
    ids = torch.zeros(1, 128, dtype=torch.long, device="meta")
    result = hookscope.summary(model, ids, ops=True)
    with torch.no_grad(), torch.utils.flop_counter.FlopCounterMode(display=False) as counter:
        model(ids)
    assert result.trace.totals_flops is not None
    assert result.trace.totals_flops.forward == counter.get_total_flops()


def test_model_that_reads_values_fails_clearly_on_meta() -> None:
    class DataDependent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate = nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x if self.gate(x).sum().item() > 0 else -x

    model = nn.Sequential(DataDependent())
    with pytest.raises(hookscope.ModelRunError, match="meta") as info:
        hookscope.trace(model, torch.randn(2, 4), device="meta", **OPS_ONLY)
    assert info.value.path == "0"
    assert next(model.parameters()).device.type == "cpu"


class _HeldInAList(nn.Module):
    """Its only tensors are a plain attribute and an unregistered module's buffer."""

    def __init__(self, device: str) -> None:
        super().__init__()
        self.table = torch.zeros(3, 4, device=device)  # a tensor attribute, not a buffer
        self.hidden = [nn.BatchNorm1d(4, affine=False).to(device)]  # unregistered

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.hidden[0](x) + self.table.sum()


def test_is_on_meta_reads_tensor_attributes_and_modules_kept_in_lists() -> None:
    assert is_on_meta(_HeldInAList("meta"))
    assert not is_on_meta(_HeldInAList("cpu"))  # a multi-element attribute: no bool() of it
    mixed = _HeldInAList("meta")
    mixed.hidden[0].running_mean = torch.zeros(4)  # one real tensor, in the hidden module
    assert not is_on_meta(mixed)
    assert not is_on_meta(nn.Sequential(nn.ReLU(), nn.Tanh()))  # no tensor: runs anywhere
    hooked = _HeldInAList("meta")
    hooked.register_forward_hook(nn.Linear(4, 4))  # a module used as a hook runs too
    assert not is_on_meta(hooked)


def test_autocast_around_a_meta_analysis_is_said_to_be_ignored() -> None:
    model, x = nn.Sequential(nn.Linear(8, 8)), torch.randn(2, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        real = hookscope.summary(model, x)
        with pytest.warns(UserWarning, match=r"autocast\('cpu'\) does not apply on the meta"):
            meta = hookscope.summary(model, x, device="meta")
    assert real.trace.calls[0].outputs[0].dtype == "bfloat16"  # what the warning is about
    assert meta.trace.calls[0].outputs[0].dtype == "float32"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hookscope.summary(model, x, device="meta")  # no autocast: no warning
