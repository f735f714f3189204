"""What a GradientMonitor tells the user: one warning per step naming the worst
parameters (the oracle: ``.grad`` norms over the threshold, ranked by hand), and
``print(monitor)`` / ``print(monitor.history)`` as tables."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from hookscope.monitor import GradientAnomalyWarning


def _gpt2() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=100,
                                     n_positions=32)
    return transformers.GPT2LMHeadModel(config)


def test_gpt2_gets_one_warning_per_step_naming_its_worst_parameter() -> None:
    model = _gpt2()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    ids = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(1))
    limit = 1e-4  # every parameter is over it
    oracle: list[str] = []
    with pytest.warns(GradientAnomalyWarning) as record, \
            hookscope.GradientMonitor(model, optimizer=opt, explode_above=limit) as mon:
        for _ in range(2):
            model(ids, labels=ids).loss.backward()
            norms = {n: float(p.grad.norm()) for n, p in model.named_parameters()
                     if p.grad is not None}
            oracle.append(max(norms, key=norms.__getitem__))
            opt.step()
            opt.zero_grad()
    assert len(mon.anomalies) > 2 * 20  # many parameters each step...
    messages = [str(w.message) for w in record]
    assert len(messages) == 1  # ...one warning, and step 1 repeats step 0's parameters
    assert messages[0].startswith(f"hookscope: step 0: {len(norms)} gradient anomalies, "
                                  f"worst first: {oracle[0]} gradient norm ")


def test_a_non_finite_gradient_is_named_before_any_explosion() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    mon = hookscope.GradientMonitor(model, explode_above=1.0)
    model[0].weight.grad = torch.full((2, 2), 1e6)
    model[1].bias.grad = torch.tensor([math.inf, 0.0])
    with pytest.warns(GradientAnomalyWarning) as record:
        mon.step()
    mon.close()
    assert str(record[0].message).startswith(
        "hookscope: step 0: 2 gradient anomalies, worst first: 1.bias gradient norm inf")


def test_print_monitor_and_history_are_tables() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    oracle = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GradientAnomalyWarning)
        with hookscope.GradientMonitor(model, explode_above=1e9) as mon:
            for _ in range(2):
                model.zero_grad()
                model(torch.randn(4, 4)).sum().backward()
                oracle.append(float(model[2].weight.grad.norm()))
                mon.step()
    text = str(mon)
    lines = text.splitlines()
    assert lines[0].startswith("GradientMonitor: 4 parameters, 2 steps, 0 anomalies")
    header = next(line for line in lines if line.startswith("Parameter"))
    assert header.split() == ["Parameter", "Last", "Median", "Min", "Max", "Anomalies"]
    row = next(line for line in lines if line.startswith("2.weight")).split()
    assert float(row[1]) == pytest.approx(oracle[-1], rel=1e-3)  # last
    assert float(row[3]) == pytest.approx(min(oracle), rel=1e-3)  # min
    history = str(mon.history)
    assert "Gradient norms over 2 steps" in history
    assert [line.split()[0] for line in history.splitlines()[3:]] == [
        n for n, _ in model.named_parameters()]


def _figures(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    pytest.importorskip("matplotlib")
    from hookscope.monitor import plots

    made: list[object] = []
    make = plots._figure
    monkeypatch.setattr(plots, "_figure", lambda *a: made.append(make(*a)) or made[-1])
    return made


def test_a_plot_of_many_lines_names_the_worst_and_greys_the_rest(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    from matplotlib.colors import to_rgba

    from hookscope.monitor.plots import GREY

    figures = _figures(monkeypatch)
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(6, 6) for _ in range(10)])  # 20 parameters
    planted = "7.weight"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GradientAnomalyWarning)
        with hookscope.GradientMonitor(model, explode_above=1e3) as mon:
            for step in range(4):
                model.zero_grad()
                gain = 1e6 if step == 2 else 1.0
                planted_hook = model[7].weight.register_hook(
                    lambda g, gain=gain: g * gain)  # in backward: planted
                model(torch.randn(3, 6)).sum().backward()
                planted_hook.remove()
                mon.step()
    mon.plot(f"{tmp_path}/p.png", by="parameter")
    ax = figures[0].axes[0]  # type: ignore[attr-defined]
    named = [ln.get_label() for ln in ax.lines if not ln.get_label().startswith("_")]
    assert named[0] == planted and len(named) == 8 + 1  # the 8 worst, and "12 other"
    assert named[-1] == "12 other parameters"
    greys = [ln for ln in ax.lines if ln.get_label().startswith("_")]
    assert greys and all(to_rgba(ln.get_color()) == to_rgba(GREY) for ln in greys)
    assert all(to_rgba(ln.get_color()) != to_rgba(GREY) for ln in ax.lines
               if ln.get_label() in named[:-1])
    notes = [t.get_text() for t in ax.texts]
    assert notes == [f"{planted} explode"]  # the mark is named
    assert ax.get_xlabel() == "step" and ax.get_ylabel() == "gradient L2 norm"


def test_a_plot_of_one_step_has_only_whole_steps_on_its_axis(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    """A single recorded step gave ticks at -0.045 ... 0.045: steps that are not there.
    Every tick is a step ``history.steps`` holds (the oracle: the steps recorded)."""
    figures = _figures(monkeypatch)
    model = nn.Linear(3, 2)
    for steps in (1, 3):
        with hookscope.GradientMonitor(model) as mon:
            for _ in range(steps):
                model(torch.randn(2, 3)).sum().backward()
                mon.step()
        mon.plot(f"{tmp_path}/p{steps}.png")
        ax = figures[-1].axes[0]  # type: ignore[attr-defined]
        ax.figure.canvas.draw()
        low, high = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        assert ticks and set(ticks) <= set(mon.history.steps), (steps, ticks)


def test_a_plot_says_which_lines_have_no_gradient_to_draw(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    """A module whose parameters got no gradient had a legend entry like any other,
    with nothing drawn for it; the legend says why (oracle: its ``param.grad``)."""
    figures = _figures(monkeypatch)
    torch.manual_seed(0)
    model = nn.ModuleDict({"used": nn.Linear(3, 2), "unused": nn.Linear(3, 2)})
    with hookscope.GradientMonitor(model) as mon:
        for _ in range(2):
            model["used"](torch.randn(2, 3)).sum().backward()
            mon.step()
    assert model["unused"].weight.grad is None and model["used"].weight.grad is not None
    mon.plot(f"{tmp_path}/p.png")
    ax = figures[0].axes[0]  # type: ignore[attr-defined]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["used", "unused (no gradient)"], labels



def test_every_layer_a_red_label_names_is_drawn_in_colour_and_in_the_legend(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_rgba

    from hookscope.monitor import GradAnomaly, plots

    made: list[Any] = []
    make = plots._figure
    monkeypatch.setattr(plots, "_figure", lambda *a: made.append(make(*a)) or made[-1])
    model = _gpt2()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(1))
    with hookscope.GradientMonitor(model, optimizer=opt) as mon:
        for _ in range(3):
            model(ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad()
    # planted: 8 layers with a flagged weight and bias at step 0, and the step's worst
    # anomaly on a layer with one flagged parameter (transformer.wte)
    doubles = [n for n, m in model.named_modules() if hasattr(m, "bias")
               and isinstance(m.bias, nn.Parameter)][:8]
    assert len(doubles) == 8 and len(dict(model.named_modules())) > 12
    planted = [GradAnomaly(0, f"{layer}.{p}", "explode", 1.0, 0.5)
               for layer in doubles for p in ("weight", "bias")]
    planted.append(GradAnomaly(0, "transformer.wte.weight", "explode", 1e6, 0.5))
    plots.plot_history(mon.history, planted, tmp_path / "h.png")
    ax = made[0].axes[0]
    red = to_rgba("red")
    labels = [t.get_text() for t in ax.texts if to_rgba(t.get_color()) == red]
    assert [text.split()[0] for text in labels] == ["transformer.wte.weight"]
    legend = {t.get_text() for t in ax.get_legend().get_texts()}
    coloured = {line.get_label() for line in ax.get_lines()
                if not line.get_label().startswith("_")
                and to_rgba(line.get_color()) != to_rgba(plots.GREY)}
    assert "transformer.wte" in legend and "transformer.wte" in coloured
    assert coloured <= legend
