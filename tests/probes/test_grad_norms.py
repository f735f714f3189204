"""The gradients probe's measurements against float64 oracles computed independently
(``tensor.double()``): large, odd-sized, strided, low-precision, huge and non-finite
gradients, and the parameter statistics of a real trace."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from hookscope.probes.grad_norms import _ROW, _flat, grad_stats, joint_norm, l2_norm


def oracle_norm(t: torch.Tensor) -> float:
    return float(t.double().pow(2).sum().sqrt())


def test_a_large_float32_norm_is_exact() -> None:
    torch.manual_seed(0)
    g = torch.randn(3_000_017) * 3 + 1  # not a multiple of the row: a remainder row
    got = l2_norm(g)
    assert got.dtype == torch.float64 and got.dim() == 0
    assert float(got) == pytest.approx(oracle_norm(g), rel=1e-7)
    same = torch.full((3_000_017,), 0.1)  # equal values: the worst case of a float32 sum
    assert float(l2_norm(same)) == pytest.approx(oracle_norm(same), rel=1e-6)


@pytest.mark.parametrize("shape", [(7,), (_ROW,), (2 * _ROW,), (2 * _ROW + 1,), (3, 5, 700)])
def test_norm_of_every_size_matches_float64(shape: tuple[int, ...]) -> None:
    torch.manual_seed(1)
    g = torch.randn(shape)
    assert float(l2_norm(g)) == pytest.approx(oracle_norm(g), rel=1e-6)


def test_strided_and_expanded_gradients_are_as_exact_as_contiguous_ones() -> None:
    torch.manual_seed(2)
    base = torch.randn(3000, 2000) + 0.5
    conv = torch.randn(256, 128, 3, 3).to(memory_format=torch.channels_last)
    cases = [
        base.t(),  # a view in another order: read in memory order, no copy
        conv,
        base[:, ::3],  # gapped memory: copied
        torch.full((), 0.1).expand(3000, 4000),  # the gradient of a sum, stride 0
        torch.randn(1, 4000).expand(3000, 4000).t(),
        torch.randn(()).expand(()),
    ]
    for g in cases:
        assert float(l2_norm(g)) == pytest.approx(oracle_norm(g), rel=1e-6)
        norm, max_abs, mean, nans, infs = grad_stats(g).tolist()
        assert norm == pytest.approx(oracle_norm(g), rel=1e-6)
        assert max_abs == float(g.abs().max())
        assert mean == pytest.approx(float(g.double().mean()), rel=1e-5, abs=1e-9)
        assert (nans, infs) == (0.0, 0.0)


def test_gradients_in_another_memory_order_or_broadcast_are_read_without_a_copy() -> None:
    """No copy of a large gradient: a transposed or ``channels_last`` one is read in
    memory order, a broadcast one (the gradient of a ``sum``) once per stored value."""
    base = torch.randn(300, 200)
    conv = torch.randn(64, 32, 3, 3).to(memory_format=torch.channels_last)
    row = torch.randn(1, 200)
    for g, repeat in ((base.t(), 1), (conv, 1), (row.expand(300, 200), 300),
                      (torch.ones(()).expand(7, 5), 35)):
        flat, k = _flat(g)
        assert flat.data_ptr() == g.data_ptr() and flat.is_contiguous() and flat.dim() == 1
        assert k == repeat and flat.numel() * k == g.numel()
    gapped = base[:, ::3]  # no flat view of it exists: copied
    flat, k = _flat(gapped)
    assert k == 1 and torch.equal(flat.sort().values, gapped.reshape(-1).sort().values)


def test_non_finite_values_of_an_expanded_gradient_are_counted_once_per_element() -> None:
    g = torch.tensor([1.0, math.nan, math.inf]).expand(5, 3)
    assert grad_stats(g).tolist()[3:] == [5.0, 5.0]


def test_nothing_waits_for_a_device_that_is_not_the_cpu() -> None:
    """Off the CPU no value is read back (``.item()`` on a meta tensor raises, as it
    would synchronise an accelerator): the results stay on the tensor's device."""
    g = torch.empty(3 * _ROW + 1, device="meta")
    assert l2_norm(g).device.type == "meta"
    assert grad_stats(g).device.type == "meta"
    assert joint_norm([g, g[:7]]).device.type == "meta"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_precisions_match_float64(dtype: torch.dtype) -> None:
    torch.manual_seed(3)
    g = (torch.randn(3 * _ROW + 5) * 100).to(dtype)  # squares beyond float16's range
    got = l2_norm(g)
    assert got.dtype == torch.float64
    assert math.isfinite(float(got))
    assert float(got) == pytest.approx(oracle_norm(g), rel=1e-6)


def test_a_huge_but_finite_gradient_has_a_finite_norm_on_the_cpu() -> None:
    g = torch.full((3 * _ROW,), 1e30)  # its float32 squares overflow
    assert float(l2_norm(g)) == pytest.approx(oracle_norm(g), rel=1e-6)
    stats = grad_stats(g).tolist()
    assert stats[0] == pytest.approx(oracle_norm(g), rel=1e-6)
    assert stats[3:] == [0.0, 0.0]


@pytest.mark.parametrize("scale", [1e-22, 1e-30, 1e-40, 0.0])
def test_tiny_gradients_are_exact_where_float32_squares_underflow(scale: float) -> None:
    """A vanishing gradient is what the probe is for: squares below float32's normal
    range (elements under about 1e-19) lose precision, under 4e-23 they are 0."""
    torch.manual_seed(7)
    g = torch.randn(5 * _ROW + 3) * scale
    norm, max_abs, mean, nans, infs = grad_stats(g).tolist()
    d = g.double()
    assert float(l2_norm(g)) == pytest.approx(oracle_norm(g), rel=1e-9, abs=0.0)
    assert norm == pytest.approx(oracle_norm(g), rel=1e-9, abs=0.0)
    assert (norm > 0) == (scale > 0)
    assert max_abs == float(d.abs().max())
    assert mean == pytest.approx(float(d.mean()), rel=1e-9, abs=0.0)
    assert (nans, infs) == (0.0, 0.0)


def test_non_finite_gradients_are_counted() -> None:
    g = torch.randn(2 * _ROW + 3)
    g[5], g[_ROW + 7], g[-1] = math.nan, math.inf, -math.inf
    norm, max_abs, mean, nans, infs = grad_stats(g).tolist()
    assert math.isnan(norm) and math.isnan(max_abs) and math.isnan(mean)
    assert (nans, infs) == (1.0, 2.0)
    h = torch.randn(100)
    h[3] = -math.inf
    norm, max_abs, mean, nans, infs = grad_stats(h).tolist()
    assert math.isinf(norm) and max_abs == math.inf and (nans, infs) == (0.0, 1.0)


def test_statistics_match_float64() -> None:
    torch.manual_seed(4)
    g = torch.randn(5 * _ROW + 11) - 0.5
    g[17] = -40.0  # the largest magnitude is negative
    norm, max_abs, mean, nans, infs = grad_stats(g).tolist()
    d = g.double()
    assert norm == pytest.approx(oracle_norm(g), rel=1e-6)
    assert max_abs == 40.0
    assert mean == pytest.approx(float(d.mean()), rel=1e-6)
    assert (nans, infs) == (0.0, 0.0)


def test_joint_norm_is_the_norm_of_all_tensors_together() -> None:
    torch.manual_seed(5)
    parts = [torch.randn(3, 4), torch.randn(2 * _ROW + 1), torch.randn(()).double()]
    together = torch.cat([p.double().reshape(-1) for p in parts])
    assert float(joint_norm(parts)) == pytest.approx(oracle_norm(together), rel=1e-6)


def test_a_traced_large_layer_reports_exact_gradient_statistics() -> None:
    torch.manual_seed(6)
    model = nn.Sequential(nn.Linear(512, 2048), nn.Tanh(), nn.Linear(2048, 64))
    x = torch.randn(32, 512)
    trace = hookscope.trace(model, x, backward=True, loss=lambda out: out.pow(2).mean())
    twin = nn.Sequential(nn.Linear(512, 2048), nn.Tanh(), nn.Linear(2048, 64))
    twin.load_state_dict(model.state_dict())
    h = twin[1](twin[0](x))
    out = twin[2](h)
    g_h, = torch.autograd.grad(out.pow(2).mean(), [h], retain_graph=True)
    out.pow(2).mean().backward()
    by_path = {s.path: s for s in trace.param_grads}
    for path, p in twin.named_parameters():
        assert p.grad is not None
        s = by_path[path]
        assert s.norm == pytest.approx(oracle_norm(p.grad), rel=1e-6)
        assert s.max_abs == float(p.grad.abs().max())
        assert s.mean == pytest.approx(float(p.grad.double().mean()), rel=1e-5, abs=1e-12)
    assert trace["1"].grad_output_norm == pytest.approx(oracle_norm(g_h), rel=1e-6)


def test_adversarial_rows_stay_within_the_claim() -> None:
    """Equal values (a float32 sum's worst case), and one large element per row with
    small ones beside it (the weight gradient of an outlier feature)."""
    equal = torch.full((51_200,), 0.9489715695381165)
    outlier = torch.full((51_200,), 2.4e-4)
    outlier[::1024] = 1.0
    for g in (equal, outlier):
        assert float(l2_norm(g)) == pytest.approx(oracle_norm(g), rel=1e-6)


def test_a_mean_of_cancelling_values_is_as_exact_as_torch_s_float32_mean() -> None:
    """The documented bound: an absolute error of about 1e-7 of the mean magnitude."""
    torch.manual_seed(8)
    for g in (torch.tensor([1e8, 1.0, -1e8, 0.0] * 300), torch.randn(1_000_000)):
        g = g - g.mean() if g.numel() > 10_000 else g
        mean = grad_stats(g).tolist()[2]
        d = g.double()
        assert abs(mean - float(d.mean())) <= 1e-6 * float(d.abs().mean())


def test_a_broadcast_gradient_is_measured_from_its_stored_values() -> None:
    """Billions of elements, a few thousand stored: exact, and nothing materialised."""
    torch.manual_seed(9)
    x = torch.randn(2000) * 1e-21  # stored squares subnormal in float32: exact path,
    g = x.unsqueeze(0).expand(10**15, 2000)  # though the whole norm is above 1e-13
    exact = float(x.double().norm()) * math.sqrt(1e15)
    assert exact > 1e-13
    assert float(l2_norm(g)) == pytest.approx(exact, rel=1e-9, abs=0.0)
    norm, max_abs, mean, nans, infs = grad_stats(g).tolist()
    assert norm == pytest.approx(exact, rel=1e-9, abs=0.0)
    assert max_abs == float(x.abs().max())
    assert mean == pytest.approx(float(x.double().mean()), rel=1e-9, abs=0.0)
    assert (nans, infs) == (0.0, 0.0)
    bad = torch.tensor([math.nan, 1.0, math.inf]).expand(10**9, 3)
    assert grad_stats(bad).tolist()[3:] == [1e9, 1e9]


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("layout", ["coo", "csr", "empty"])
def test_sparse_gradients_count_their_implicit_zeros(layout: str) -> None:
    torch.manual_seed(10)
    dense = torch.randn(40, 30) * (torch.rand(40, 30) < 0.1)
    if layout == "empty":
        dense = torch.zeros(40, 30)
    sparse = dense.to_sparse_csr() if layout == "csr" else dense.to_sparse()
    norm, max_abs, mean, nans, infs = grad_stats(sparse).tolist()
    d = dense.double()
    assert norm == pytest.approx(float(d.norm()), rel=1e-7, abs=0.0)
    assert max_abs == float(d.abs().max())
    assert mean == pytest.approx(float(d.mean()), rel=1e-6, abs=1e-12)
    assert (nans, infs) == (0.0, 0.0)
    assert float(l2_norm(sparse)) == pytest.approx(float(d.norm()), rel=1e-7, abs=0.0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float8_e4m3fn])
def test_low_precision_statistics_match_float64(dtype: torch.dtype) -> None:
    torch.manual_seed(11)
    g = (torch.randn(3 * _ROW + 5) * 4).to(dtype)
    d = g.double()
    norm, max_abs, mean, nans, infs = grad_stats(g).tolist()
    assert norm == pytest.approx(oracle_norm(g), rel=1e-6)
    assert max_abs == float(d.abs().max())
    assert abs(mean - float(d.mean())) <= 1e-6 * float(d.abs().mean())
    assert (nans, infs) == (0.0, 0.0)


def test_an_ordinary_cpu_gradient_takes_the_float32_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The accuracy tests would pass on the float64 path too: check which path runs."""
    import hookscope.probes.grad_norms as grad_norms

    exact: list[int] = []
    real = grad_norms._exact_stats

    def counted(*args: Any) -> torch.Tensor:
        exact.append(1)
        return real(*args)

    monkeypatch.setattr(grad_norms, "_exact_stats", counted)
    torch.manual_seed(12)
    grad_stats(torch.randn(10_000))
    grad_stats(torch.randn(300, 200).t())
    assert exact == []
    grad_stats(torch.randn(10_000) * 1e-20)  # tiny: float32 squares underflow
    grad_stats(torch.tensor([1.0, math.nan]))
    assert exact == [1, 1]


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_gradients_are_measured_by_their_magnitudes(dtype: torch.dtype) -> None:
    torch.manual_seed(13)
    g = torch.randn(3 * _ROW + 7, dtype=dtype)
    norm, max_abs, mean, nans, infs = grad_stats(g).tolist()
    magnitudes = g.cdouble().abs()
    assert norm == pytest.approx(float(torch.linalg.vector_norm(g.cdouble())), rel=1e-6, abs=0.0)
    assert max_abs == pytest.approx(float(magnitudes.max()), rel=1e-6, abs=0.0)
    assert mean == pytest.approx(float(magnitudes.mean()), rel=1e-6, abs=0.0)
    assert (nans, infs) == (0.0, 0.0)
    g[3] = complex(1.0, math.nan)
    g[5] = complex(math.inf, 0.0)
    assert grad_stats(g).tolist()[3:] == [1.0, 1.0]
    huge = torch.tensor([complex(3e38, 3e38), complex(1.0, 0.0)], dtype=dtype)  # finite
    norm, max_abs, _, nans, infs = grad_stats(huge).tolist()
    assert norm == pytest.approx(math.hypot(3e38, 3e38), rel=1e-6) and math.isfinite(max_abs)
    assert (nans, infs) == (0.0, 0.0)


def test_a_complex_parameter_gets_its_gradient_statistics_in_a_trace() -> None:
    """A complex parameter's gradient was counted as zero, which reads as vanishing."""

    class Mix(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(8, 8, dtype=torch.complex64))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.to(torch.complex64) @ self.w

    class Spectral(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin, self.mix = nn.Linear(8, 8), Mix()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            z = self.mix(self.lin(x))
            self.z = z
            return z.abs()

    torch.manual_seed(14)
    model, x = Spectral(), torch.randn(4, 8)
    trace = hookscope.trace(model, x, backward=True)
    assert model.mix.w.grad is None
    model(x).sum().backward()
    w = model.mix.w
    assert w.grad is not None
    z = model.z
    del model.z
    g_z, = torch.autograd.grad(z.abs().sum(), [z])
    assert trace["mix"].grad_output_norm == pytest.approx(
        float(g_z.cdouble().norm()), rel=1e-6, abs=0.0)
    stats = {s.path: s for s in trace.param_grads}["mix.w"]
    assert stats.status == "ok"
    assert stats.norm == pytest.approx(float(w.grad.cdouble().norm()), rel=1e-6, abs=0.0)
    assert stats.max_abs == pytest.approx(float(w.grad.abs().max()), rel=1e-6, abs=0.0)


def test_a_backward_inside_vmap_records_no_norm_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Per-sample gradients (``vmap(grad(f))``): each gradient there is a batch, whose
    norm cannot be one number; reading one raised a ProbeError and stopped the run."""
    from torch.func import functional_call, grad, vmap

    import hookscope.probes.grad_values as grad_values

    monkeypatch.setattr(grad_values, "_VMAP_WARNED", [])
    torch.manual_seed(15)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return functional_call(model, p, (x.unsqueeze(0),)).sum()

    x = torch.randn(5, 4)
    plain = vmap(grad(loss), in_dims=(None, 0))(params, x)
    said = "not recorded for a backward inside torch.func.vmap"
    with pytest.warns(UserWarning, match=said), hookscope.Tracer(model, grads=True) as tracer:
        traced = vmap(grad(loss), in_dims=(None, 0))(params, x)
    assert all(torch.equal(plain[k], traced[k]) for k in plain)
    assert tracer.trace is not None
    assert [c.path for c in tracer.trace.calls] == ["", "0", "1", "2"]
    assert all(c.facts.get("grad_output_norm") is None for c in tracer.trace.calls)
    with hookscope.Tracer(model, grads=True) as tracer:  # grad alone: norms as usual
        grad(lambda p: loss(p, x[0]))(params)
    assert tracer.trace is not None
    assert tracer.trace[""].grad_output_norm == pytest.approx(1.0, rel=1e-9)


def test_batched_gradients_of_the_older_vmap_record_no_norm_and_say_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``torch.autograd.grad(..., is_grads_batched=True)`` (what ``jacobian(vectorize=
    True)`` runs): each gradient is a batch. A parameter's one stopped the run with a
    ProbeError (``detach`` has no batching rule there); the calls' were left out
    without a word."""
    import hookscope.probes.grad_values as grad_values

    monkeypatch.setattr(grad_values, "_BATCHED_WARNED", [])
    torch.manual_seed(16)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    x = torch.randn(3)
    params = list(model.parameters())
    plain = torch.autograd.grad(model(x), params, torch.eye(2), is_grads_batched=True)
    said = "not recorded for batched gradients"
    with pytest.warns(UserWarning, match=said), hookscope.Tracer(model, grads=True) as tracer:
        traced = torch.autograd.grad(model(x), params, torch.eye(2), is_grads_batched=True)
    assert all(torch.equal(a, b) for a, b in zip(plain, traced, strict=True))
    assert tracer.trace is not None
    stats = tracer.trace.param_grads
    assert [s.status for s in stats] == ["ok"] * 4 and all(s.norm is None for s in stats)
    assert all(c.facts.get("grad_output_norm") is None for c in tracer.trace.calls)
    monkeypatch.setattr(grad_values, "_BATCHED_WARNED", [])
    with pytest.warns(UserWarning, match=said), hookscope.Tracer(model, grads=True):
        jac = torch.autograd.functional.jacobian(model, x, vectorize=True)
    assert torch.equal(jac, torch.autograd.functional.jacobian(model, x, vectorize=True))


def test_a_backward_for_the_inputs_only_does_not_call_parameters_unused() -> None:
    """A saliency map (``torch.autograd.grad(out, x)``) computes no parameter gradient:
    every parameter was reported ``unused``, DDP's word for not being in the graph."""
    torch.manual_seed(17)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    x = torch.randn(3, 4, requires_grad=True)
    with hookscope.Tracer(model, grads=True) as tracer:
        saliency, = torch.autograd.grad(model(x).sum(), x)
    assert tracer.trace is not None and saliency.shape == x.shape
    assert [s.status for s in tracer.trace.param_grads] == ["no_backward"] * 4
    assert tracer.trace["0"].grad_output_norm is not None  # the backward itself was seen
    model[0].add_module("spare", nn.Linear(2, 2))  # never called: unused once others get one
    with hookscope.Tracer(model, grads=True) as tracer:
        model(x).sum().backward()
    assert tracer.trace is not None
    status = {s.path: s.status for s in tracer.trace.param_grads}
    assert status["0.spare.weight"] == "unused" and status["0.weight"] == "ok"


def test_a_batched_gradient_after_a_real_one_leaves_its_numbers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import hookscope.probes.grad_values as grad_values

    monkeypatch.setattr(grad_values, "_BATCHED_WARNED", [True])  # said already
    torch.manual_seed(19)
    model = nn.Linear(3, 2)
    x = torch.randn(4, 3)
    with hookscope.Tracer(model, grads=True) as tracer:
        model(x).sum().backward()
        torch.autograd.grad(model(x), [model.weight], torch.ones(5, 4, 2),
                            is_grads_batched=True)
    assert tracer.trace is not None and model.weight.grad is not None
    stats = {s.path: s for s in tracer.trace.param_grads}["weight"]
    assert stats.norm == pytest.approx(float(model.weight.grad.double().norm()),
                                       rel=1e-6, abs=0.0)
