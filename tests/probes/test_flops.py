"""FLOP totals against ``torch.utils.flop_counter.FlopCounterMode`` (the oracle).

Where FlopCounterMode's registry covers every op that does matmul-like work (resnets,
and ViT/GPT-2/BERT with explicit-matmul attention), hookscope's totals must equal its
totals exactly, forward and backward, and its per-module forward counts. Where the CPU
dispatches to fused attention kernels FlopCounterMode cannot count, hookscope must
count them: its totals equal FlopCounterMode's on the same weights with explicit
matmuls (eager attention, or ``scaled_dot_product_attention``'s math backend).
Backward FLOPs per layer are checked against FlopCounterMode on the layer alone.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import hookscope
from flop_oracles import (
    FlopOracle,
    assert_per_module_equal,
    count_flops,
    hf_model,
    hookscope_per_module,
    math_attention,
)

torchvision = pytest.importorskip("torchvision")
pytest.importorskip("transformers")

OPS_ONLY = {"ops": True, "time": False, "stats": False, "memory": False}


def _trace(model: nn.Module, *args: Any, backward: bool = False) -> hookscope.Trace:
    return hookscope.trace(model, *args, backward=backward, **OPS_ONLY)


def _vision(name: str, **kwargs: Any) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return torchvision.models.get_model(name, weights=None, **kwargs)


def _op_names(trace: hookscope.Trace) -> set[str]:
    return {op.name for op in trace.ops}


def _assert_equals_oracle(model: nn.Module, *args: Any, backward: bool = True) -> hookscope.Trace:
    oracle = count_flops(model, *args, backward=backward)
    trace = _trace(model, *args, backward=backward)
    total = trace.totals_flops
    assert total is not None and not total.partial, trace.uncounted_ops
    assert (total.forward, total.backward) == (oracle.forward, oracle.backward)
    assert_per_module_equal(hookscope_per_module(trace), oracle.per_module)
    return trace


# -- FlopCounterMode covers every arithmetic op: equal totals ------------------------


def test_resnet18_totals_and_per_module_equal_flop_counter() -> None:
    trace = _assert_equals_oracle(_vision("resnet18"), torch.randn(2, 3, 64, 64))
    assert trace.totals_flops is not None and trace.totals_flops.backward > 0
    assert trace.uncounted_ops == {}


@pytest.mark.slow
def test_resnet50_totals_and_per_module_equal_flop_counter() -> None:
    _assert_equals_oracle(_vision("resnet50"), torch.randn(1, 3, 224, 224))


@pytest.mark.parametrize("model_type, overrides", [
    ("gpt2", {"n_layer": 2}),
    ("bert", {"num_hidden_layers": 2}),
])
def test_transformers_eager_attention_totals_equal_flop_counter(
    model_type: str, overrides: dict[str, int]
) -> None:
    model = hf_model(model_type, "eager", **overrides)
    ids = torch.randint(0, 1000, (1, 128), generator=torch.Generator().manual_seed(0))
    trace = _assert_equals_oracle(model, ids)
    assert "aten.bmm.default" in _op_names(trace)  # attention ran as explicit matmuls


def test_vit_b_16_with_math_attention_equals_flop_counter() -> None:
    model = _vision("vit_b_16", image_size=64).eval()
    with math_attention():
        _assert_equals_oracle(model, torch.randn(1, 3, 64, 64))


# -- fused kernels FlopCounterMode misses: hookscope equals the explicit-matmul count --


@pytest.mark.parametrize("model_type, overrides", [
    ("gpt2", {"n_layer": 2}),
    ("bert", {"num_hidden_layers": 2}),
    ("llama", {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 512,
               "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000}),
])
def test_sdpa_cpu_flash_kernel_counted_like_eager_attention(
    model_type: str, overrides: dict[str, int]
) -> None:
    sdpa = hf_model(model_type, "sdpa", **overrides)
    eager = hf_model(model_type, "eager", **overrides)
    eager.load_state_dict(sdpa.state_dict())
    ids = torch.randint(0, 1000, (1, 128), generator=torch.Generator().manual_seed(0))
    oracle = count_flops(eager, ids, backward=True)
    undercount = count_flops(sdpa, ids, backward=True)
    assert undercount.forward < oracle.forward  # FlopCounterMode misses the fused kernel
    trace = _trace(sdpa, ids, backward=True)
    assert {
        "aten._scaled_dot_product_flash_attention_for_cpu.default",
        "aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
    } <= _op_names(trace)
    total = trace.totals_flops
    assert total is not None and not total.partial
    assert (total.forward, total.backward) == (oracle.forward, oracle.backward)


def test_vit_b_16_fused_multi_head_attention_counted_at_224() -> None:
    """ViT-B/16 in eval mode without grad runs ``_native_multi_head_attention``:
    FlopCounterMode counts 22.5 G, the explicit-matmul count is 35.1 G."""
    model = _vision("vit_b_16").eval()
    x = torch.randn(1, 3, 224, 224)
    undercount = count_flops(model, x)
    with torch.enable_grad(), math_attention(), torch.utils.flop_counter.FlopCounterMode(
        display=False
    ) as eager:
        model(x)  # grad mode: nn.MultiheadAttention takes its explicit-matmul path
    trace = _trace(model, x)
    assert "aten._native_multi_head_attention.default" in _op_names(trace)
    total = trace.totals_flops
    assert total is not None and not total.partial
    assert total.forward == eager.get_total_flops()
    assert round(total.forward / 1e9, 1) == 35.1
    assert round(undercount.forward / 1e9, 1) == 22.5


def test_transformer_encoder_layer_fast_path_counted() -> None:
    """``nn.TransformerEncoderLayer`` skips its fused path when it has forward hooks, so
    only the wrapper is observed (``select``) and the layer runs its fast path."""
    layer = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, batch_first=True)
    model = nn.Sequential(layer).eval()
    x = torch.randn(2, 10, 64)
    with torch.enable_grad(), math_attention():
        oracle = count_flops(model, x, backward=True).forward
    trace = hookscope.trace(model, x, select="", **OPS_ONLY)
    assert "aten._transformer_encoder_layer_fwd.default" in _op_names(trace)
    assert trace.totals_flops is not None
    assert trace.totals_flops.forward == oracle
    assert not trace.totals_flops.partial


def test_cpu_rnn_kernel_counted_like_its_explicit_matmuls() -> None:
    """On the CPU ``nn.LSTM`` runs ``mkldnn_rnn_layer`` (FlopCounterMode: 0); on the meta
    device it runs per-step ``addmm``s, which FlopCounterMode counts."""
    torch.manual_seed(0)
    lstm = nn.LSTM(5, 7, num_layers=2, bidirectional=True, batch_first=True)
    with torch.device("meta"):
        twin = nn.LSTM(5, 7, num_layers=2, bidirectional=True, batch_first=True)
    # every input needs a gradient: the CPU kernel's backward computes them all, the
    # meta device's per-step matmuls only those needed
    x = torch.randn(3, 6, 5, requires_grad=True)
    state = tuple(torch.zeros(4, 3, 7, requires_grad=True) for _ in range(2))
    cpu = count_flops(lstm, x, state, backward=True)
    assert (cpu.forward, cpu.backward) == (0, 0)
    inputs = [t.detach().to("meta").requires_grad_() for t in (x, *state)]
    with FlopCounterMode(display=False) as forward:
        out, _ = twin(inputs[0], tuple(inputs[1:]))
    with FlopCounterMode(display=False) as backward:
        torch.autograd.grad(out, [*twin.parameters(), *inputs], torch.ones_like(out))
    oracle = FlopOracle(forward.get_total_flops(), backward.get_total_flops(), {})
    trace = _trace(lstm, x, state, backward=True)
    assert {"aten.mkldnn_rnn_layer.default", "aten.mkldnn_rnn_layer_backward.default"} <= \
        _op_names(trace)
    assert trace.totals_flops is not None and not trace.totals_flops.partial
    assert trace.totals_flops.forward == oracle.forward > 0
    assert trace.totals_flops.backward == oracle.backward > 0  # was 0: "data movement"


@pytest.mark.slow
def test_full_gpt2_at_128_tokens_sdpa_equals_eager() -> None:
    sdpa = hf_model("gpt2", "sdpa", causal_lm=True)
    eager = hf_model("gpt2", "eager", causal_lm=True)
    eager.load_state_dict(sdpa.state_dict())
    ids = torch.randint(0, 1000, (1, 128), generator=torch.Generator().manual_seed(0))
    oracle = count_flops(eager, ids, backward=True)
    assert round(count_flops(sdpa, ids).forward / 1e9, 1) == 31.6
    trace = _trace(sdpa, ids, backward=True)
    assert trace.totals_flops is not None
    assert (trace.totals_flops.forward, trace.totals_flops.backward) == (
        oracle.forward, oracle.backward,
    )
    assert round(trace.totals_flops.forward / 1e9, 1) == 32.2


@pytest.mark.slow
def test_full_vit_b_16_backward_equals_math_attention() -> None:
    model = _vision("vit_b_16").eval()
    x = torch.randn(1, 3, 224, 224)
    with math_attention():
        oracle = count_flops(model, x, backward=True)
    trace = _trace(model, x, backward=True)
    assert trace.totals_flops is not None
    assert (trace.totals_flops.forward, trace.totals_flops.backward) == (
        oracle.forward, oracle.backward,
    )


# -- backward FLOPs per layer: FlopCounterMode on the layer alone ---------------------


def _isolated_backward_flops(module: nn.Module, call: hookscope.Call) -> int:
    """FLOPs of ``module``'s backward alone, with inputs shaped and flagged like the call's."""
    meta = call.inputs[0]
    x = torch.randn(meta.shape, requires_grad=meta.requires_grad)
    out = module(x)
    params = [p for p in module.parameters() if p.requires_grad]
    inputs = [x] if x.requires_grad else []
    with torch.utils.flop_counter.FlopCounterMode(display=False) as counter:
        torch.autograd.grad(out, params + inputs, torch.ones_like(out))
    return counter.get_total_flops()


@pytest.mark.parametrize("build, shape", [
    (lambda: _vision("resnet18"), (2, 3, 64, 64)),
    (lambda: hf_model("gpt2", "eager", n_layer=1), None),
])
def test_backward_flops_attributed_to_the_layer_that_made_them(
    build: Any, shape: tuple[int, ...] | None
) -> None:
    model = build()
    x = torch.randn(shape) if shape else torch.randint(0, 1000, (1, 32))
    trace = _trace(model, x, backward=True)
    leaves = [
        (path, m) for path, m in model.named_modules()
        if isinstance(m, (nn.Conv2d, nn.Linear)) or type(m).__name__ == "Conv1D"
    ]
    assert leaves
    for path, module in leaves:
        call = trace.find(path)
        assert call.flops is not None
        assert call.flops.backward == _isolated_backward_flops(module, call), path
    total = trace.totals_flops
    assert total is not None
    assert sum(c.self_flops.backward for c in trace.calls if c.self_flops) == total.backward


def test_inference_mode_decomposes_like_flop_counter() -> None:
    """Under ``inference_mode`` composite ops (``conv2d``, ``linear``) reach the dispatch
    mode; they are decomposed as FlopCounterMode does, and outputs stay identical."""
    model = _vision("resnet18").eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.inference_mode():
        expected = model(x)
        with torch.utils.flop_counter.FlopCounterMode(display=False) as counter:
            model(x)
        with hookscope.Tracer(model, ops=True) as tracer:
            observed = model(x)
    assert torch.equal(expected, observed)
    trace = tracer.trace
    assert trace is not None and trace.totals_flops is not None
    assert trace.totals_flops.forward == counter.get_total_flops()
    assert "aten.convolution.default" in _op_names(trace)


def test_the_footer_totals_the_rows_shown_with_select() -> None:
    """With ``select=``, the footer's FLOPs were the whole run's (the classifier's too,
    which no row shows), while its time was the shown rows'."""
    from torch.utils.flop_counter import FlopCounterMode

    from hookscope.render.trace_table import render_trace

    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v3_small().eval()
    x = torch.randn(1, 3, 64, 64)
    t = hookscope.trace(model, x, select="features.*", ops=True, time=False, stats=False,
                        memory=False)
    with FlopCounterMode(display=False) as oracle, torch.no_grad():
        model.features(x)
    footer = render_trace(t, columns=["layer", "flops_fwd"], width=200).splitlines()[-2]
    assert footer.split() == ["Total", f"{oracle.get_total_flops():,}"]
    assert t.facts["totals_flops"].forward > oracle.get_total_flops()  # the whole run's
