"""Statistics probe: every number is checked against torch's own reductions on the
real outputs, captured in the same run by a plain forward hook of the test's own."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from hookscope.core.records.tensor_paths import iter_tensors
from hookscope.probes.moments import (
    _bool_moments,
    _cpu_float,
    _device_float,
    _int_moments,
    make_stats,
    to_host,
)

Captured = dict[tuple[str, int], list[tuple[str, torch.Tensor]]]


@contextmanager
def capture_outputs(model: nn.Module) -> Iterator[Captured]:
    """Clones of every output tensor of every call, keyed by (path, call index)."""
    found: Captured = {}
    counts: dict[str, int] = {}

    def make(path: str) -> Any:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            n = counts.get(path, 0)
            counts[path] = n + 1
            found[(path, n)] = [(p, t.detach().clone()) for p, t in iter_tensors(output, "out")]

        return hook

    handles = [m.register_forward_hook(make(p)) for p, m in model.named_modules()]
    try:
        yield found
    finally:
        for h in handles:
            h.remove()


def close(a: float | None, b: float, *, rel: float = 1e-4, scale: float = 1.0) -> bool:
    assert a is not None
    if math.isnan(b):
        return math.isnan(a)
    return math.isclose(a, b, rel_tol=rel, abs_tol=rel * scale)


def same(a: float | None, b: float) -> bool:
    """Exactly equal, NaN equal to NaN."""
    return a is not None and (a == b or (math.isnan(a) and math.isnan(b)))


def assert_float_stats(s: hookscope.TensorStats, t: torch.Tensor, *, rel: float = 1e-4) -> None:
    """``s`` against torch's reductions of ``t`` (a real floating tensor)."""
    scale = t.abs().float().mean().item() + 1e-12
    assert s.numel == t.numel()
    assert close(s.mean, t.mean().item(), rel=rel, scale=scale)
    if t.numel() > 1:
        assert close(s.std, t.std().item(), rel=rel, scale=scale)
    assert same(s.min, t.min().item())
    assert same(s.max, t.max().item())
    assert same(s.absmax, t.abs().max().item())
    assert s.zero_fraction == pytest.approx((t == 0).double().mean().item(), abs=1e-12)
    assert s.nan_count == int(torch.isnan(t).sum())
    assert s.inf_count == int(torch.isinf(t).sum())


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
            nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1), nn.GELU(),
        )
        self.head = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def test_stats_equal_torch_reductions_on_every_output() -> None:
    model = SmallCNN().eval()
    x = torch.randn(2, 3, 16, 16)
    with capture_outputs(model) as captured:
        trace = hookscope.trace(model, x)
    assert len(trace) == len(captured) == 9
    for call in trace:
        tensors = captured[(call.path, call.call_index)]
        assert call.stats is not None and [s.path for s in call.stats] == [p for p, _ in tensors]
        for s, (_, t) in zip(call.stats, tensors, strict=True):
            assert_float_stats(s, t)
    # The in-place ReLU overwrote the BatchNorm's output later: its stats are of the
    # values it returned, which differ from the ReLU's.
    assert trace.find("features.1").stats[0].min < 0 <= trace.find("features.2").stats[0].min


def test_stats_of_a_transformer_with_tuple_outputs() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(
        "gpt2", n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16,
        bos_token_id=0, eos_token_id=0,
    )
    model = transformers.AutoModel.from_config(config).eval()
    ids = torch.randint(0, 64, (2, 16))
    with capture_outputs(model) as captured:
        trace = hookscope.trace(model, ids)
    checked = 0
    for call in trace:
        tensors = captured[(call.path, call.call_index)]
        assert call.stats is not None and len(call.stats) == len(tensors)
        for s, (path, t) in zip(call.stats, tensors, strict=True):
            assert s.path == path
            if t.is_floating_point():
                assert_float_stats(s, t)
                checked += 1
    assert checked > 20
    emb = trace.find("wte").stats[0]
    assert emb.numel == 2 * 16 * 32


def test_nan_and_inf_counts_and_propagation() -> None:
    class Log(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.log(x)  # NaN for x < 0, -inf for x == 0

    x = torch.tensor([[-1.0, 0.0, 1.0, 2.0], [0.0, 3.0, -2.0, 4.0]])
    with capture_outputs(m := Log()) as captured:
        trace = hookscope.trace(m, x)
    s = trace.find("").stats[0]
    out = captured[("", 0)][0][1]
    assert (s.nan_count, s.inf_count) == (int(torch.isnan(out).sum()), int(torch.isinf(out).sum()))
    assert (s.nan_count, s.inf_count) == (2, 2)
    assert math.isnan(s.mean) and math.isnan(out.mean().item())
    assert math.isnan(s.min) and math.isnan(s.max) and math.isnan(s.absmax)

    only_inf = hookscope.trace(m, torch.tensor([0.0, 1.0, math.e]))
    s = only_inf.find("").stats[0]
    assert (s.nan_count, s.inf_count, s.min, s.mean) == (0, 1, -math.inf, -math.inf)


class ManyKinds(nn.Module):
    """Returns one output of every kind the statistics must cope with."""

    def forward(self, x: torch.Tensor) -> dict[str, Any]:
        return {
            "int": (x * 10).long(),
            "bool": x > 0,
            "complex": torch.complex(x, 2 * x),
            "half": x.half(),
            "one": x.flatten()[:1] * 1,
            "empty": x[:0],
            "sparse": x.to_sparse(),
            "none": None,
            "text": "not a tensor",
            "number": 3,
        }


@pytest.mark.parametrize("inference", [False, True], ids=["grad", "inference_mode"])
def test_statistics_fit_each_dtype(inference: bool) -> None:
    model = ManyKinds()
    x = torch.randn(3, 4)
    with capture_outputs(model) as captured:
        if inference:
            with torch.inference_mode():
                trace = hookscope.trace(model, x)
        else:
            trace = hookscope.trace(model, x)
    out = dict(captured[("", 0)])
    stats = {s.path: s for s in trace.find("").stats}
    assert set(stats) == set(out)

    ints, s = out['out["int"]'], stats['out["int"]']
    assert s.mean == pytest.approx(ints.double().mean().item(), rel=1e-12)
    assert s.std == pytest.approx(ints.double().std().item(), rel=1e-12)
    assert (s.min, s.max) == (ints.min().item(), ints.max().item())
    assert s.zero_fraction == (ints == 0).double().mean().item()

    bools, s = out['out["bool"]'], stats['out["bool"]']
    assert s.mean == pytest.approx(bools.double().mean().item())
    assert s.std is None
    assert (s.min, s.max) == (float(bools.all()), float(bools.any()))
    assert s.zero_fraction == pytest.approx(1 - bools.double().mean().item())

    assert_float_stats(stats['out["complex"]'], out['out["complex"]'].abs())
    assert_float_stats(stats['out["half"]'], out['out["half"]'].float(), rel=1e-3)

    one = stats['out["one"]']
    assert one.std is None and one.mean == one.min == one.max == out['out["one"]'].item()

    empty = stats['out["empty"]']
    assert (empty.numel, empty.mean, empty.min, empty.nan_count, empty.inf_count) == (
        0, None, None, 0, 0,
    )
    sparse = stats['out["sparse"]']
    assert sparse.numel == 12
    assert (sparse.mean, sparse.zero_fraction, sparse.nan_count) == (None, None, None)


def test_negative_zero_is_an_exact_zero() -> None:
    class Fixed(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * torch.tensor([0.0, -0.0, -0.0, 1.0, -1.0, 0.0])

    x = torch.tensor([2.0, 3.0, 1.0, 4.0, 5.0, -1.0])  # last: -1 * 0.0 = -0.0
    with capture_outputs(m := Fixed()) as captured:
        s = hookscope.trace(m, x).find("").stats[0]
    out = captured[("", 0)][0][1]
    assert int(torch.signbit(out).sum()) >= 3  # there really are negative zeros
    assert s.zero_fraction == (out == 0).double().mean().item() == 4 / 6


@pytest.mark.parametrize("offset", [0.0, 3.0, 1e4])
def test_std_stays_precise_when_the_mean_is_large(offset: float) -> None:
    model = nn.Identity()
    x = offset + torch.randn(64, 1024)
    s = hookscope.trace(model, x).find("").stats[0]
    assert s.std == pytest.approx(x.double().std().item(), rel=1e-4)
    assert s.mean == pytest.approx(x.double().mean().item(), rel=1e-6)
    const = hookscope.trace(model, torch.full((5, 5), 7.25)).find("").stats[0]
    assert const.std == 0.0 and const.mean == 7.25


def test_a_tensor_returned_again_is_not_measured_twice_unless_changed() -> None:
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.act = nn.ReLU(inplace=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.act(self.fc(x))  # the act output *is* the fc output, changed

    model = nn.Sequential(Block())
    with capture_outputs(model) as captured:
        trace = hookscope.trace(model, torch.randn(8, 4))
    for call in trace:
        assert_float_stats(call.stats[0], captured[(call.path, 0)][0][1])
    assert trace.find("0.fc").stats[0] != trace.find("0.act").stats[0]
    assert trace.find("").stats[0] == trace.find("0.act").stats[0]


def test_meta_tensors_have_no_statistics() -> None:
    model = nn.Linear(4, 2, device="meta")
    with hookscope.Tracer(model, stats=True) as tracer:
        model(torch.empty(3, 4, device="meta"))
    s = tracer.trace.find("").stats[0]
    assert s.numel == 6
    assert (s.mean, s.std, s.min, s.nan_count, s.inf_count) == (None, None, None, None, None)


def test_failure_reports_the_failing_calls_input_statistics() -> None:
    class Stem(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cat([x, x.new_full((2, 1), math.nan)], dim=1)

    model = nn.Sequential(Stem(), nn.Linear(3, 2))  # Linear(3, 2) gets 4 features
    x = torch.randn(2, 3)
    with pytest.raises(hookscope.ModelRunError) as info:
        hookscope.trace(model, x)
    err = info.value
    assert err.path == "1"
    message = str(err)
    assert "'1'" in message and "[2, 4]" in message and "nan=2" in message
    inputs = err.trace.find("1").input_stats
    assert inputs is not None and len(inputs) == 1
    sent = torch.cat([x, torch.full((2, 1), math.nan)], dim=1)
    assert_float_stats(inputs[0], sent)
    assert inputs[0].path == "args[0]"
    assert err.trace.find("0").input_stats is None  # only failing calls carry them


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_device_path_gives_the_same_numbers_as_the_cpu_path(dtype: torch.dtype) -> None:
    """The accelerator code path (no host reads) run on the CPU against the CPU path."""
    x = torch.randn(5, 7).to(dtype)
    x[0, 0], x[1, 1] = 0.0, -0.0
    y = x.clone()
    y[2, 2] = math.nan
    y[3, 3] = math.inf
    for t in (x, y):
        host = to_host([_device_float(t), _cpu_float(t)])
        assert host[0] is not None and host[1] is not None
        a = make_stats("out", t.numel(), "float", host[0])
        b = make_stats("out", t.numel(), "float", host[1])
        for field in ("mean", "std", "min", "max", "absmax", "zero_fraction"):
            va, vb = getattr(a, field), getattr(b, field)
            assert (math.isnan(va) and math.isnan(vb)) or va == pytest.approx(vb, rel=1e-5)
        assert (a.nan_count, a.inf_count) == (b.nan_count, b.inf_count)


def test_device_path_for_integers_and_bools() -> None:
    ints = torch.tensor([[3, 0, -2], [7, 0, 1]])
    bools = ints > 0
    for kind, fn, t in (("int", _int_moments, ints), ("bool", _bool_moments, bools)):
        dev, cpu = to_host([fn(t, False), fn(t, True)])
        assert dev is not None and cpu is not None
        assert make_stats("out", 6, kind, dev) == make_stats("out", 6, kind, cpu)
    s = make_stats("out", 6, "int", to_host([_int_moments(ints, False)])[0])
    assert (s.mean, s.min, s.max, s.zero_fraction) == (1.5, -2, 7, 2 / 6)
    assert s.std == pytest.approx(ints.double().std().item())


def test_non_contiguous_outputs() -> None:
    class Layouts(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            last = (x * 2).contiguous(memory_format=torch.channels_last)
            return last, x.transpose(1, 3), x[:, :, ::2], x[:1].expand(3, 4, 5, 6)

    x = 5 + torch.randn(2, 4, 5, 6)  # mean 5, std 1: exercises the precise std too
    with capture_outputs(m := Layouts()) as captured:
        trace = hookscope.trace(m, x)
    tensors = captured[("", 0)]
    assert tensors[0][1].is_contiguous(memory_format=torch.channels_last)
    for s, (_, t) in zip(trace.find("").stats, tensors, strict=True):
        assert_float_stats(s, t)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize(
    "values",
    [
        [0.0, 1.5, 3.0, 0.0],  # ReLU-like: the integer-view range path, zeros counted
        [0.25, 1.5, 3.0, 7.0],  # all positive: no zero to count
        [0.0, 2.0, math.inf, 1.0],  # +inf is the largest bit pattern
        [0.0, 2.0, math.nan, 1.0],  # a NaN makes min and max NaN, as torch.aminmax does
        [-0.0, 2.0, 1.0, 0.0],  # -0.0 has the sign bit: the float path
        [-0.0, -0.0, -0.0, -0.0],
        [-3.0, -0.5, -1.0, -2.0],  # all negative
        [-3.0, 0.0, 2.0, -0.0],
        [-3.0, -math.inf, -1.0, -0.5],  # all negative: -inf is the largest integer
        [-1.0, -0.0, -2.0, -0.5],  # all with the sign bit, -0.0 the maximum
        [-1.0, -math.nan, -2.0, -0.5],  # a NaN with the sign bit, all negative
        [2.0, -math.nan, -1.0, 0.0],  # ... among mixed signs: amin sees it
        [2.0, -1.0, 0.5, -7.0],  # mixed, no zero: the integer maximum, a float amin
    ],
)
def test_range_and_zeros_for_every_sign_pattern(values: list[float], dtype: torch.dtype) -> None:
    t = torch.tensor(values, dtype=dtype)
    s = make_stats("out", t.numel(), "float", _cpu_float(t))
    assert_float_stats(s, t.float())
    strided = torch.tensor([values, values], dtype=dtype).t()  # not contiguous
    assert_float_stats(make_stats("out", 8, "float", _cpu_float(strided)), strided.float())


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> int:
    """Blocks of 8 elements: every tensor of 32 or more is swept block by block."""
    import hookscope.probes.moments as moments_module

    monkeypatch.setattr(moments_module, "_BLOCK", 8)
    return 8


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "place",
    [
        {},  # random values only
        {3: 0.0, 17: -0.0, 40: 0.0},  # zeros of both signs in different blocks
        {5: -0.0},  # -0.0 alone, in a block of positive values
        {33: math.nan},  # a NaN in one block makes both ends NaN
        {2: -math.nan},  # a NaN with the sign bit
        {9: math.inf, 20: -math.inf},  # infinities in two blocks
        {44: 1e30, 12: -1e30},  # the extremes in the last (partial) and an early block
    ],
    ids=["random", "zeros", "negative-zero", "nan", "negative-nan", "inf", "extremes"],
)
def test_block_sweep_equals_torch_reductions(
    small_blocks: int, place: dict[int, float], dtype: torch.dtype
) -> None:
    """A tensor of several blocks (the last one partial) with special values placed in
    different blocks: every statistic equals torch's reductions of the whole tensor."""
    g = torch.Generator().manual_seed(0)
    for t in (torch.randn(45, generator=g, dtype=dtype),
              torch.rand(45, generator=g, dtype=dtype)):  # mixed signs; non-negative
        for i, v in place.items():
            t[i] = v
        assert t.numel() >= 4 * small_blocks
        s = make_stats("out", t.numel(), "float", _cpu_float(t))
        assert_float_stats(s, t, rel=1e-6)
        strided = torch.stack([t, t]).t()  # the non-contiguous form, flattened first
        s2 = make_stats("out", 90, "float", _cpu_float(strided))
        assert_float_stats(s2, strided, rel=1e-6)


def test_block_sweep_sum_overflow_falls_back_to_float64(small_blocks: int) -> None:
    """Finite float32 values whose sum overflows float32: summed again in float64."""
    t = torch.full((40,), 3e38)
    t[::2] = 1.0
    s = make_stats("out", 40, "float", _cpu_float(t))
    expected = t.double()
    assert s.mean == pytest.approx(expected.mean().item(), rel=1e-12)
    assert s.std == pytest.approx(expected.std().item(), rel=1e-6)
    assert (s.min, s.max, s.nan_count, s.inf_count) == (1.0, t.max().item(), 0, 0)


def test_block_sweep_on_a_real_model_output(small_blocks: int) -> None:
    """Stats of a CNN's outputs (ReLU zeros, BatchNorm signs), swept in small blocks."""
    torch.manual_seed(0)
    model = SmallCNN().eval()
    with capture_outputs(model) as captured:
        trace = hookscope.trace(model, torch.randn(2, 3, 16, 16))
    for call in trace:
        for s, (_, t) in zip(call.stats or [], captured[(call.path, call.call_index)],
                             strict=True):
            assert_float_stats(s, t, rel=1e-5)
