"""``GradientMonitor(updates=True)``: each optimizer step's update-to-weight ratio and
weight norms, against ``(w_after - w_before).norm() / w_before.norm()`` by hand."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn

import hookscope
from helpers import total_hooks
from hookscope.monitor import GradientAnomalyWarning


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))


def test_update_ratios_and_weight_norms_equal_a_hand_computation() -> None:
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ratios: list[list[float]] = []
    weights: list[list[float]] = []
    with hookscope.GradientMonitor(model, optimizer=opt, updates=True, update_band=None,
                                   log_every=2) as mon:
        for _ in range(3):
            model(torch.randn(4, 4)).pow(2).sum().backward()
            before = [p.detach().clone() for p in model.parameters()]
            opt.step()
            ratios.append([float((p.detach() - b).norm() / b.norm())
                           for p, b in zip(model.parameters(), before, strict=True)])
            weights.append([float(b.norm()) for b in before])
            opt.zero_grad()
    h = mon.history
    assert h.update_steps == [0, 1, 2]
    for got, oracle in zip(h.update_ratio, ratios, strict=True):
        assert got == pytest.approx(oracle, rel=1e-5)
    for got, oracle in zip(h.weight_norms, weights, strict=True):
        assert got == pytest.approx(oracle, rel=1e-6)
    assert mon.anomalies == []
    assert total_hooks(model) == 0 and not opt._optimizer_step_post_hooks


def test_a_learning_rate_far_too_large_is_flagged_by_the_band() -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=10.0)  # the planted fault
    with pytest.warns(GradientAnomalyWarning, match=r"update/weight ratio .* > 0\.1 "
                                                    r"\(update_large\)") as record, \
            hookscope.GradientMonitor(model, optimizer=opt, updates=True) as mon:
        for _ in range(2):
            model(torch.randn(4, 4)).pow(2).sum().backward()
            before = {n: p.detach().clone() for n, p in model.named_parameters()}
            opt.step()
            opt.zero_grad()
        oracle = {n: float((p.detach() - before[n]).norm() / before[n].norm())
                  for n, p in model.named_parameters()}
    large = {a.path for a in mon.anomalies if a.kind == "update_large" and a.step == 1}
    matrices = {n for n, p in model.named_parameters() if p.dim() >= 2}
    assert large == {n for n, r in oracle.items() if r > 0.1 and n in matrices}
    assert large  # the planted fault is found
    assert len(record) == 1  # one warning for the first step; step 1 repeats it


def test_a_step_the_scaler_skips_has_no_update() -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the planted overflow
        with hookscope.GradientMonitor(model, optimizer=opt, scaler=scaler, updates=True,
                                       update_band=None) as mon:
            for step in range(3):
                scaler.scale(model(torch.randn(4, 4)).sum()).backward()
                if step == 1:
                    with torch.no_grad():
                        model[0].bias.grad[0] = float("inf")
                mon.step()
                scaler.step(opt)
                scaler.update()
                opt.zero_grad()
    assert mon.history.skipped == [False, True, False]
    assert mon.history.update_steps == [0, 2]


@pytest.mark.parametrize("options, match", [
    ({"updates": True}, "updates=True needs optimizer="),
    ({"updates": 1}, "updates= must be True or False"),
    ({"update_band": (0.1, 0.01)}, r"update_band= must be \(low, high\)"),
    ({"update_band": 1e-3}, r"update_band= must be \(low, high\)"),
])
def test_bad_update_options_are_spec_errors(options: dict[str, object], match: str) -> None:
    with pytest.raises(hookscope.SpecError, match=match):
        hookscope.GradientMonitor(_model(), **options)  # type: ignore[arg-type]


def test_a_zero_bias_has_no_ratio_and_vectors_are_left_out_of_the_band() -> None:
    """A bias initialised to 0 had an infinite ratio (flagged on every model with
    BatchNorm); a bias's or a norm scale's ratio is far from 1e-3 in a healthy run."""
    model = _model()
    nn.init.zeros_(model[0].bias)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GradientAnomalyWarning)
        with hookscope.GradientMonitor(model, optimizer=opt, updates=True,
                                       update_band=(1e-9, 1e-8)) as mon:
            model(torch.randn(4, 4)).pow(2).sum().backward()
            with pytest.raises(GradientAnomalyWarning):
                opt.step()
                mon.flush()
    ratios = dict(zip(mon.names, mon.history.update_ratio[0], strict=True))
    assert math.isnan(ratios["0.bias"])
    assert {a.path for a in mon.anomalies} == {"0.weight", "2.weight"}


def test_parameters_the_optimizer_does_not_hold_have_no_ratio_and_no_anomaly() -> None:
    """An optimizer over the head only (fine-tuning) left the body's weights where they
    were: their ratio was 0 and each step flagged them ``update_small``. The optimizer
    never moves them, so there is no update to measure: NaN, as for a zero weight; the
    head's ratios are still those of a hand computation."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.SGD(model[2].parameters(), lr=0.01)
    data = [torch.randn(2, 4) for _ in range(3)]
    want = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", GradientAnomalyWarning)
        with hookscope.GradientMonitor(model, optimizer=opt, updates=True) as mon:
            for x in data:
                model(x).pow(2).sum().backward()
                before = model[2].weight.detach().clone()
                opt.step()
                want.append(((model[2].weight - before).norm() / before.norm()).item())
                opt.zero_grad()
    assert mon.anomalies == []
    names = list(mon.names)
    for row, expected in zip(mon.history.update_ratio, want, strict=True):
        assert math.isnan(row[names.index("0.weight")]) and math.isnan(row[names.index("0.bias")])
        assert row[names.index("2.weight")] == pytest.approx(expected, rel=1e-5)
    assert total_hooks(model) == 0
