"""``GradientMonitor(histograms=N)``: histograms of the gradients and weights, against
``torch.histc`` of ``.grad`` and of the weights read by hand, in the history, in a
TensorBoard event file (read back with tensorboard's ``EventAccumulator``) and as a
plot (its matplotlib artists)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import hookscope


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def _train(model: nn.Module, **options: object) -> tuple[hookscope.GradientMonitor,
                                                         list[dict[str, torch.Tensor]]]:
    """Five steps with ``mon.step()``; the gradients and weights at each step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen: list[dict[str, torch.Tensor]] = []
    with hookscope.GradientMonitor(model, optimizer=opt, update_band=None,
                                   **options) as mon:  # type: ignore[arg-type]
        for _ in range(5):
            model(torch.randn(6, 4)).pow(2).sum().backward()
            seen.append({**{f"grad/{n}": p.grad.clone() for n, p in model.named_parameters()},
                         **{f"weight/{n}": p.detach().clone()
                            for n, p in model.named_parameters()}})
            mon.step()
            opt.step()
            opt.zero_grad()
    return mon, seen


def test_histograms_every_n_steps_equal_torch_histc_of_the_grads_and_weights() -> None:
    model = _model()
    mon, seen = _train(model, histograms=2, bins=10)
    h = mon.history
    assert h.histogram_steps == [0, 2, 4]
    for row, step in enumerate(h.histogram_steps):
        for i, name in enumerate(h.names):
            for kind, found in (("grad", h.grad_histograms), ("weight", h.weight_histograms)):
                t = seen[step][f"{kind}/{name}"]
                got = found[row][i]
                assert got is not None
                assert (got.low, got.high) == (float(t.min()), float(t.max()))
                oracle = torch.histc(t, 10, float(t.min()), float(t.max()))
                assert got.counts == oracle.tolist()
                assert got.total == t.numel() and sum(got.counts) == t.numel()
                assert got.sum == pytest.approx(float(t.sum()), rel=1e-5, abs=1e-6)


def test_no_histograms_unless_asked() -> None:
    mon, _ = _train(_model())
    assert mon.history.histogram_steps == [] and mon.history.grad_histograms == []
    with pytest.raises(hookscope.SpecError, match="plot_histograms needs"):
        mon.plot_histograms("never.png")


@pytest.mark.parametrize("options, match", [
    ({"histograms": -1}, "histograms= must be True, False or every how many steps"),
    ({"histograms": "often"}, "histograms= must be"),
    ({"histograms": 1, "bins": 0}, "bins= must be a positive integer"),
])
def test_bad_histogram_options_are_spec_errors(options: dict[str, object], match: str) -> None:
    with pytest.raises(hookscope.SpecError, match=match):
        hookscope.GradientMonitor(_model(), **options)  # type: ignore[arg-type]


def test_tensorboard_gets_histograms_and_update_ratios(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    model = _model()
    mon, seen = _train(model, histograms=True, bins=8, updates=True, writer=str(tmp_path))
    events = EventAccumulator(str(tmp_path), size_guidance={"histograms": 0, "scalars": 0})
    events.Reload()
    tags = events.Tags()
    assert {"grad/0.weight", "weight/2.bias"} <= set(tags["histograms"])
    assert {"update_ratio/0.weight", "weight_norm/0.weight"} <= set(tags["scalars"])
    grads = events.Histograms("grad/0.weight")
    assert [e.step for e in grads] == [0, 1, 2, 3, 4]
    oracle = seen[3]["grad/0.weight"]
    assert grads[3].histogram_value.num == oracle.numel()
    assert grads[3].histogram_value.min == pytest.approx(float(oracle.min()))
    assert list(grads[3].histogram_value.bucket) == torch.histc(
        oracle, 8, float(oracle.min()), float(oracle.max())).tolist()
    ratios = [e.value for e in events.Scalars("update_ratio/2.weight")]
    assert ratios == pytest.approx([r[2] for r in mon.history.update_ratio], rel=1e-6)


def test_the_histogram_plot_has_a_panel_per_parameter_with_a_count_colorbar(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    from hookscope.monitor import plots

    made: list[object] = []
    make = plots._figure
    monkeypatch.setattr(plots, "_figure", lambda *a: made.append(make(*a)) or made[-1])
    mon, _ = _train(_model(), histograms=1, bins=8)
    mon.plot_histograms(tmp_path / "w.png", of="weight", names=["0.weight", "2.bias"])
    fig = made[0]
    panels = [ax for ax in fig.axes if ax.get_title()]  # type: ignore[attr-defined]
    assert [ax.get_title() for ax in panels] == ["0.weight", "2.bias"]
    assert {ax.get_xlabel() for ax in panels} == {"step"}
    assert {ax.get_ylabel() for ax in panels} == {"weight value"}
    colorbars = [ax for ax in fig.axes if ax.get_ylabel() == "count"]  # type: ignore[attr-defined]
    assert len(colorbars) == 2
    assert (tmp_path / "w.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(hookscope.SpecError, match="names= must name watched parameters"):
        mon.plot_histograms(tmp_path / "x.png", names=["nope"])
