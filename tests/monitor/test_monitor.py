"""GradientMonitor in real training loops, against independent oracles: recorded norms
equal ``param.grad.norm()``; clipping bounds the norm the optimizer sees; an exploding
model and an injected NaN are flagged at the right step and parameter; training with
the monitor is bit-identical to training without it; no hook is left."""

from __future__ import annotations

import copy
import math
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import hookscope
from helpers import count_hooks, total_hooks
from hookscope.monitor import GradientAnomalyWarning


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 2))


def batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)) for _ in range(n)]


def test_recorded_norms_equal_param_grad_norm() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen: list[dict[str, float]] = []
    with hookscope.GradientMonitor(model) as mon:
        for x, y in batches(3):
            nn.functional.mse_loss(model(x), y).backward()
            mon.step()
            seen.append({n: float(p.grad.norm()) for n, p in model.named_parameters()})
            opt.step()
            opt.zero_grad()
    assert mon.history.steps == [0, 1, 2]
    for step, oracle in enumerate(seen):
        for name, value in oracle.items():
            assert mon.history.column(name)[step] == pytest.approx(value, rel=1e-6)
    frame = mon.history.to_dataframe()
    assert frame.shape == (3, len(seen[0]) + 1)
    assert frame.loc[1, "2.weight"] == pytest.approx(seen[1]["2.weight"], rel=1e-6)
    modules = mon.history.modules()
    w, b = seen[0]["0.weight"], seen[0]["0.bias"]
    assert modules["0"][0] == pytest.approx(math.hypot(w, b), rel=1e-6)


def test_the_optimizer_hook_records_after_accumulation_and_sees_clipped_gradients() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = count_hooks(model)
    captured: list[float] = []
    mon = hookscope.GradientMonitor(model, optimizer=opt, clip={"4.*": 0.01})
    handle = opt.register_step_pre_hook(  # registered after the monitor's: runs after it
        lambda o, a, k: captured.append(float(model[4].weight.grad.norm())))
    raw: list[float] = []
    for x, y in batches(2):
        for part_x, part_y in ((x[:4], y[:4]), (x[4:], y[4:])):  # gradient accumulation
            nn.functional.mse_loss(model(part_x), part_y).backward()
        raw.append(float(model[4].weight.grad.norm()))
        opt.step()
        opt.zero_grad()
    handle.remove()
    mon.close()
    assert mon.history.column("4.weight") == pytest.approx(raw, rel=1e-6)  # before clipping
    assert all(n <= 0.01 + 1e-7 for n in captured) and raw[0] > 0.01  # optimizer saw clipped
    assert count_hooks(model) == before
    assert not opt._optimizer_step_pre_hooks  # the monitor's hook is gone too


def test_value_clipping_clamps_every_element() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = batches(1)[0]
    with hookscope.GradientMonitor(model, optimizer=opt, clip={"**": 1e-3},
                                   clip_mode="value"):
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    assert all(float(p.grad.abs().max()) <= 1e-3 * (1 + 1e-6) for p in model.parameters())
    assert any(float(p.grad.abs().max()) == pytest.approx(1e-3) for p in model.parameters())


class ComplexMix(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.lin = nn.Linear(4, 4)
        self.w = nn.Parameter(torch.randn(4, 4, dtype=torch.complex64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.lin(x).to(torch.complex64) @ self.w).abs()


def test_complex_parameters_get_their_norms_and_norm_clipping() -> None:
    model, x = ComplexMix(), torch.randn(8, 4)
    with hookscope.GradientMonitor(model, clip={"w": 1e-3}, flow=True) as mon:
        model(x).sum().backward()
        raw = float(model.w.grad.cdouble().norm())
        mon.step()
    assert mon.history.column("w")[0] == pytest.approx(raw, rel=1e-6)
    assert raw > 1e-3
    assert float(model.w.grad.norm()) == pytest.approx(1e-3, rel=1e-4)  # clipped
    with pytest.raises(hookscope.SpecError, match="'w' is complex; use clip_mode='norm'"):
        hookscope.GradientMonitor(model, clip={"w": 1.0}, clip_mode="value")
    hookscope.GradientMonitor(model, clip={"lin.*": 1.0}, clip_mode="value").close()


def test_monitored_training_is_bit_identical_to_unmonitored_training() -> None:
    plain, watched = mlp(), mlp()
    opts = [torch.optim.Adam(m.parameters(), lr=1e-2) for m in (plain, watched)]
    with hookscope.GradientMonitor(watched, optimizer=opts[1], flow=True, log_every=2):
        for x, y in batches(5):
            for m, opt in zip((plain, watched), opts, strict=True):
                nn.functional.mse_loss(m(x), y).backward()
                opt.step()
                opt.zero_grad()
    for a, b in zip(plain.parameters(), watched.parameters(), strict=True):
        assert torch.equal(a, b)


class Scaled(nn.Module):
    """A chain whose gradient grows by ``gain`` per step (the weights are scaled)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 1)


def test_an_exploding_model_is_flagged_at_the_right_step() -> None:
    model = Scaled()
    x = torch.randn(8, 4)
    found: list[hookscope.GradAnomaly] = []
    with hookscope.GradientMonitor(model, explode_above=10.0, relative=True,
                                   on_anomaly=found.append) as mon:
        for step in range(8):
            if step == 5:
                with torch.no_grad():
                    model.b.weight.mul_(1000.0)  # from now on a's gradient is 1000x
            model.zero_grad()
            model.b(model.a(x)).sum().backward()
            mon.step()
    flagged = {(a.path, a.kind) for a in found if a.step == 5}
    assert ("a.weight", "explode") in flagged
    assert all(a.step >= 5 for a in found)  # nothing before the jump
    assert found == mon.anomalies


def test_a_nan_injected_at_a_known_step_is_reported_with_its_parameter() -> None:
    """A NaN the loop puts in a gradient after backward (the oracle: this test plants
    it) is one the optimizer steps with: flagged, though backward made a finite one."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.warns(GradientAnomalyWarning, match=r"step 3: 2\.bias") as record, \
            pytest.warns(UserWarning, match="the loop changed the gradients"), \
            hookscope.GradientMonitor(model) as mon:
        for step, (x, y) in enumerate(batches(6)):
            nn.functional.mse_loss(model(x), y).backward()
            if step in (3, 4):
                model[2].bias.grad[0] = math.nan
            mon.step()
            torch.nan_to_num_(model[2].bias.grad)  # keep the weights finite
            opt.step()
            opt.zero_grad()
    assert [(a.step, a.path, a.kind) for a in mon.anomalies] == [
        (3, "2.bias", "nonfinite"), (4, "2.bias", "nonfinite")]
    assert len([w for w in record if "2.bias" in str(w.message)]) == 1  # warned once
    assert mon.history.changed == [False, False, False, True, True, False]
    column = mon.names.index("2.bias")
    assert math.isfinite(mon.history.norms[3][column])  # as backward made it
    assert math.isnan(mon.history.step_norms[3][column])  # as the optimizer got it


def test_raise_stops_before_the_optimizer_step() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = batches(1)[0]
    nn.functional.mse_loss(model(x), y).backward()
    model[0].weight.grad[0, 0] = math.inf
    kept = copy.deepcopy(model.state_dict())
    with hookscope.GradientMonitor(model, optimizer=opt, on_anomaly="raise"), \
            pytest.raises(hookscope.GradientAnomalyError, match=r"0\.weight"):
        opt.step()
    assert all(torch.equal(kept[k], v) for k, v in model.state_dict().items())


def test_no_grad_evaluation_between_steps_records_nothing() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with hookscope.GradientMonitor(model, optimizer=opt) as mon:
        for x, y in batches(2):
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            with torch.no_grad():
                model(x)
    assert mon.step_count == 2


def test_grad_scaler_norms_are_unscaled_and_an_overflow_step_is_marked_skipped() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    unscaled: list[float] = []
    with hookscope.GradientMonitor(model, optimizer=opt, scaler=scaler) as mon:
        for step, (x, y) in enumerate(batches(3)):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = nn.functional.mse_loss(model(x).float(), y)
            scaler.scale(loss).backward()
            if step == 1:
                model[0].bias.grad[0] = math.inf  # the scaler will skip this step
                with pytest.warns(UserWarning, match="the loop changed the gradients"):
                    mon.step()
            else:
                mon.step()
            unscaled.append(float(model[2].weight.grad.norm()))
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
    assert mon.history.skipped == [False, True, False]
    assert mon.history.column("2.weight")[0] == pytest.approx(unscaled[0], rel=1e-5)
    assert mon.history.column("2.weight")[0] < 1024 * unscaled[0] / 10
    assert [a.step for a in mon.anomalies] == [1] and mon.anomalies[0].skipped


def _scaled_steps(mon_step: bool, *, micro: int = 1, overflow: bool = True) -> tuple[
        hookscope.GradientMonitor, list[warnings.WarningMessage], list[float]]:
    """Two GradScaler steps without (or with) mon.step(), the first overflowing."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    scales: list[float] = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with hookscope.GradientMonitor(model, optimizer=opt, scaler=scaler,
                                       on_anomaly=lambda a: None) as mon:
            for step, (x, y) in enumerate(batches(2)):
                for _ in range(micro):
                    loss = nn.functional.mse_loss(model(x), y)
                    scaler.scale(loss * (math.inf if overflow and step == 0 else 1)).backward()
                if mon_step:
                    mon.step()
                scaler.step(opt)
                scaler.update()
                scales.append(scaler.get_scale())
                opt.zero_grad()
    return mon, [w for w in seen if "GradScaler skipped" in str(w.message)], scales


def test_a_step_the_scaler_skips_without_mon_step_is_warned_about_once() -> None:
    mon, warned, scales = _scaled_steps(mon_step=False)
    assert scales[0] < 1024.0  # the oracle: the scaler backed off, it skipped step 0
    assert mon.history.steps == [0]  # the pre-hook saw one optimizer.step()
    assert len(warned) == 1 and "call mon.step() before scaler.step" in str(warned[0].message)


def test_a_skipped_last_step_is_warned_about_at_close() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    x, y = batches(1)[0]
    with pytest.warns(UserWarning, match="GradScaler skipped a step"), \
            hookscope.GradientMonitor(model, optimizer=opt, scaler=scaler,
                                      on_anomaly=lambda a: None):
        scaler.scale(nn.functional.mse_loss(model(x), y) * math.inf).backward()
        scaler.step(opt)
        scaler.update()
    assert scaler.get_scale() < 1024.0  # the oracle: the scaler skipped it


def test_mon_step_records_the_skipped_step_and_nothing_is_warned() -> None:
    mon, warned, _ = _scaled_steps(mon_step=True)
    assert mon.history.skipped == [True, False] and warned == []


def test_accumulated_micro_batches_under_a_scaler_are_not_taken_for_a_skipped_step() -> None:
    mon, warned, scales = _scaled_steps(mon_step=False, micro=2, overflow=False)
    assert scales == [1024.0, 1024.0]  # the oracle: no step skipped
    assert mon.history.steps == [0, 1] and warned == []


def test_resnet18_and_gpt2_training_steps_leave_no_hook_and_train_identically() -> None:
    torchvision = pytest.importorskip("torchvision")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    resnet = torchvision.models.resnet18(num_classes=10)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100,
                                     n_positions=32)
    gpt2 = transformers.GPT2LMHeadModel(config)
    images, labels = torch.randn(2, 3, 64, 64), torch.tensor([1, 3])
    ids = torch.randint(0, 100, (2, 16))
    cases = [
        (resnet, lambda m: nn.functional.cross_entropy(m(images), labels)),
        (gpt2, lambda m: m(ids, labels=ids).loss),
    ]
    for model, loss_of in cases:
        twin = copy.deepcopy(model)
        before = count_hooks(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        twin_opt = torch.optim.SGD(twin.parameters(), lr=0.01)
        with hookscope.GradientMonitor(model, optimizer=opt) as mon:
            for step in range(2):
                for m, o in ((model, opt), (twin, twin_opt)):
                    torch.manual_seed(step)  # the same dropout masks
                    loss_of(m).backward()
                    o.step()
                    o.zero_grad()
        assert count_hooks(model) == before
        assert mon.step_count == 2 and not mon.anomalies
        for a, b in zip(model.parameters(), twin.parameters(), strict=True):
            assert torch.equal(a, b)


def test_plots_are_written(tmp_path: object) -> None:
    pytest.importorskip("matplotlib")
    from pathlib import Path

    model = mlp()
    with hookscope.GradientMonitor(model, flow=True, explode_above=1e-3,
                                   on_anomaly=lambda a: None) as mon:
        for x, y in batches(3):
            model.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            mon.step()
    out = Path(str(tmp_path))
    mon.plot(out / "h.png")
    mon.plot_flow(out / "f.png")
    assert (out / "h.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "f.png").stat().st_size > 1000


def test_missing_matplotlib_and_tensorboard_are_clear_errors(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    model = mlp()
    mon = hookscope.GradientMonitor(model)
    model(torch.randn(2, 4)).sum().backward()
    mon.step()
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(hookscope.MissingDependencyError, match=r"hookscope\[plot\]"):
        mon.plot("x.png")
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(hookscope.MissingDependencyError, match=r"hookscope\[tensorboard\]"):
        mon.to_tensorboard(str(tmp_path))


def test_tensorboard_gets_one_scalar_per_parameter_and_step() -> None:
    class Writer:
        def __init__(self) -> None:
            self.scalars: list[tuple[str, float, int]] = []

        def add_scalar(self, tag: str, value: float, step: int) -> None:
            self.scalars.append((tag, value, step))

        def flush(self) -> None:
            pass

    model, writer = mlp(), Writer()
    with hookscope.GradientMonitor(model, writer=writer, log_every=2) as mon:
        for x, y in batches(3):
            model.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            mon.step()
    tags = {t for t, _, s in writer.scalars if s == 2}
    assert tags == {f"grad_norm/{n}" for n in mon.names} | {"grad_norm/total"}
    value = next(v for t, v, s in writer.scalars if t == "grad_norm/0.weight" and s == 1)
    assert value == mon.history.column("0.weight")[1]


def test_a_writer_opened_from_a_log_directory_is_closed_and_a_passed_one_is_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    import hookscope.monitor.history_output as history_output

    class Writer:
        def __init__(self, logdir: object = None) -> None:
            self.closed = 0

        def add_scalar(self, tag: str, value: float, step: int) -> None:
            pass

        def flush(self) -> None:
            pass

        def close(self) -> None:
            self.closed += 1

    opened: list[Writer] = []
    monkeypatch.setattr(history_output, "summary_writer",
                        lambda logdir: opened.append(Writer(logdir)) or opened[-1])
    model, passed = mlp(), Writer()
    with hookscope.GradientMonitor(model, writer=str(tmp_path)) as mon:
        for x, y in batches(2):
            model.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            mon.step()
        assert opened[0].closed == 0  # still logging inside the block
    mon.to_tensorboard(str(tmp_path))
    mon.to_tensorboard(passed)
    assert [w.closed for w in opened] == [1, 1]
    assert passed.closed == 0


@pytest.mark.parametrize("options, match", [
    ({"clip": {"nothing.*": 1.0}}, "matches no watched parameter"),
    ({"clip": {"*": -1}}, "positive"),
    ({"explode_above": "big"}, "explode_above"),
    ({"on_anomaly": "shout"}, "on_anomaly"),
    ({"log_every": 0}, "log_every"),
    ({"scaler": object()}, "optimizer"),
    ({"clip_mode": "l1"}, "clip_mode"),
    ({"writer": 123}, "writer= must be a TensorBoard SummaryWriter"),
    # checked when the monitor is made (they raised AttributeError at the first step)
    ({"optimizer": nn.Linear(2, 2)}, "optimizer= must be a torch.optim.Optimizer"),
    ({"optimizer": []}, "optimizer= must be a torch.optim.Optimizer instance.*a list"),
    ({"optimizer": torch.optim.SGD}, "optimizer=.*the class SGD; pass an instance"),
    ({"optimizer": "opt", "scaler": None}, "optimizer=.*got a str"),
    ({"relative": "no"}, "relative= must be True or False, got 'no'"),
    ({"flow": 1}, "flow= must be True or False, got 1"),
])
def test_bad_options_are_spec_errors(
    options: dict[str, object], match: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # writer=123 made a log directory "123" here
    with warnings.catch_warnings(), pytest.raises(hookscope.SpecError, match=match):
        hookscope.GradientMonitor(mlp(), **options)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_a_step_no_line_reaches_is_drawn_as_a_point(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    """A one-step history (or a step between two missing ones) drew an empty plot: a
    line needs two points."""
    pytest.importorskip("matplotlib")
    from hookscope.monitor import plots as output

    figures: list[object] = []
    make = output._figure
    monkeypatch.setattr(output, "_figure", lambda *a: figures.append(make(*a)) or figures[-1])
    model = mlp()
    mon = hookscope.GradientMonitor(model)
    model(torch.randn(2, 4)).sum().backward()
    mon.step()
    mon.close()
    mon.plot(tmp_path / "one.png")
    lines = figures[0].axes[0].lines  # type: ignore[attr-defined]
    points = [ln for ln in lines if ln.get_marker() == "o"]
    modules = mon.history.modules()
    assert len(points) == len(modules)
    assert sorted(float(ln.get_ydata()[0]) for ln in points) == sorted(
        v[0] for v in modules.values())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_norms_keep_the_range_and_digits_of_their_gradients(dtype: torch.dtype) -> None:
    """float16 gradients of finite values whose norm exceeds 65504 were recorded as Inf
    and flagged non-finite; float64 norms were rounded to float32 (and 1e100 was Inf)."""
    model = nn.Linear(100, 100, bias=False).to(dtype)
    value = 1e98 if dtype == torch.float64 else 1000.0
    mon = hookscope.GradientMonitor(model)
    model.weight.grad = torch.full_like(model.weight, value)
    if dtype == torch.float64:
        model.weight.grad[0, 0] = math.pi
    mon.step()
    mon.close()
    oracle = float(model.weight.grad.double().norm())
    assert math.isfinite(oracle) and mon.anomalies == []
    rel = 1e-15 if dtype == torch.float64 else 1e-5
    assert mon.history.norms[0][0] == pytest.approx(oracle, rel=rel, abs=0.0)


@pytest.mark.parametrize("how", ["raise", "function"])
def test_an_anomaly_raised_at_a_flush_keeps_every_step_of_it(how: str) -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)

    def stop(anomaly: object) -> None:
        raise RuntimeError("stop")

    mon = hookscope.GradientMonitor(model, optimizer=opt, log_every=4,
                                    on_anomaly="raise" if how == "raise" else stop)
    raised = []
    for step in range(8):
        x = torch.randn(2, 4)
        if step == 1:
            x[0, 0] = math.nan
        model(x).sum().backward()
        try:
            opt.step()
        except (hookscope.GradientAnomalyError, RuntimeError):
            raised.append(step)
        opt.zero_grad()
    mon.close()
    assert raised == [3]  # the flush of steps 0-3
    assert mon.history.steps == list(range(8))
    assert [(a.step, a.path) for a in mon.anomalies] == [(1, "weight")]


def test_a_loop_that_raises_inside_the_block_keeps_its_last_steps() -> None:
    """The NaN that made the loop raise is what the user wants to inspect; it was
    dropped with the rest of the unflushed steps."""
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with pytest.raises(FloatingPointError), hookscope.GradientMonitor(
            model, optimizer=opt, log_every=10, on_anomaly="raise") as mon:
        for step in range(4):
            x = torch.ones(2, 4) * (math.nan if step == 3 else 1.0)
            loss = model(x).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
            if not torch.isfinite(loss):
                raise FloatingPointError("loss is nan")
    assert mon.history.steps == [0, 1, 2, 3]
    assert [(a.step, a.path, a.kind) for a in mon.anomalies] == [(3, "weight", "nonfinite")]


def test_a_nan_gradient_is_not_taken_for_a_missing_one() -> None:
    """A NaN norm and "no gradient" were both NaN: the module's joint norm left the NaN
    weight out (4.0, the bias alone), TensorBoard dropped its scalar, and the table
    showed an unused parameter as ``nan``."""

    class Writer:
        def __init__(self) -> None:
            self.scalars: dict[str, float] = {}

        def add_scalar(self, tag: str, value: float, step: int) -> None:
            self.scalars[tag] = value

    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    writer = Writer()
    mon = hookscope.GradientMonitor(model, writer=writer)
    model[0].weight.grad = torch.full((2, 2), math.nan)
    model[0].bias.grad = torch.tensor([0.0, 4.0])
    with pytest.warns(GradientAnomalyWarning) as record:
        mon.step()  # model[1] has no gradient
    assert [str(w.message).split(";")[0] for w in record] == [
        "hookscope: step 0: 0.weight gradient norm nan (non-finite)"]
    mon.close()
    assert mon.history.present == [[True, True, False, False]]
    modules = mon.history.modules()
    assert math.isnan(modules["0"][0]) and math.isnan(modules["1"][0])
    assert math.isnan(writer.scalars["grad_norm/0.weight"])
    assert math.isnan(writer.scalars["grad_norm/total"])
    assert "grad_norm/1.weight" not in writer.scalars
    from hookscope.render.grads_table import grads_table

    text = grads_table(mon.history, mon.anomalies, ascii=True).to_text(width=120)
    rows = {line.split()[0]: line for line in text.splitlines() if line[:1] in "01"}
    assert "nan" in rows["0.weight"] and "nonfinite" in rows["0.weight"]
    assert "nan" not in rows["1.weight"] and "no gradient" in rows["1.weight"]


def test_the_loops_own_exception_is_the_one_raised_from_the_block() -> None:
    """Recording the last steps when the loop raised could fail too (a full disk under
    the writer), and that error replaced the loop's."""

    class BadWriter:
        def add_scalar(self, tag: str, value: float, step: int) -> None:
            raise OSError("disk full")

    model = nn.Linear(2, 1)
    with pytest.raises(KeyError, match="the loop's own"), \
            pytest.warns(UserWarning, match="could not record the monitor's last steps"), \
            hookscope.GradientMonitor(model, writer=BadWriter(), log_every=10) as mon:
        model(torch.ones(1, 2)).sum().backward()
        mon.step()
        raise KeyError("the loop's own error")


def test_a_monitor_in_its_block_or_closed_cannot_be_entered_again() -> None:
    """A second ``with mon:`` inside the first closed the monitor under it: the outer
    block's later steps were neither recorded nor clipped."""
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = hookscope.GradientMonitor(model, optimizer=opt)
    with mon:
        with pytest.raises(hookscope.HookscopeError, match="already in a with block"), mon:
            pass
        for _ in range(2):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
    assert mon.step_count == 2
    assert len(opt._optimizer_step_pre_hooks) == 0
    with pytest.raises(hookscope.HookscopeError, match="is closed"), mon:
        pass


class _TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body, self.head_a, self.head_b = nn.Linear(4, 4), nn.Linear(4, 1), nn.Linear(4, 1)

    def forward(self, x: torch.Tensor, task: str) -> torch.Tensor:
        return (self.head_a if task == "a" else self.head_b)(self.body(x))


@pytest.mark.parametrize("flow", [False, True])
def test_a_step_without_gradients_inside_a_log_window_shifts_no_later_step(flow: bool) -> None:
    torch.manual_seed(0)
    model = _TwoHeads()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    expected: list[float] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", GradientAnomalyWarning)
        with hookscope.GradientMonitor(model, optimizer=opt, select="head_a.*", log_every=4,
                                       flow=flow) as mon:
            for i, task in enumerate(["b", "a", "b", "a", "a"]):  # head_a idle in 0 and 2
                model(torch.randn(3, 4) * (i + 1), task).pow(2).sum().backward()
                g = model.head_a.weight.grad
                expected.append(math.nan if g is None else g.norm().item())
                opt.step()
                opt.zero_grad(set_to_none=True)
    column = mon.names.index("head_a.weight")
    recorded = [row[column] for row in mon.history.norms]
    assert [math.isnan(v) for v in recorded] == [math.isnan(v) for v in expected]
    assert [v for v in recorded if not math.isnan(v)] == pytest.approx(
        [v for v in expected if not math.isnan(v)], rel=1e-6)
    assert [p[column] for p in mon.history.present] == [False, True, False, True, True]
    assert mon.anomalies == []


def test_flow_statistics_are_of_the_gradient_before_the_clip() -> None:
    torch.manual_seed(0)
    model = nn.Linear(64, 1)
    model(torch.randn(8, 64) * 100).sum().backward()
    assert model.weight.grad is not None
    g = model.weight.grad.clone()
    with hookscope.GradientMonitor(model, clip={"weight": 1.0}, flow=True) as mon:
        mon.step()
    i = mon.names.index("weight")
    assert mon.history.norms[0][i] == pytest.approx(g.norm().item(), rel=1e-6)
    assert mon.history.max_abs[0][i] == pytest.approx(g.abs().max().item(), rel=1e-6)
    assert mon.history.mean_abs[0][i] == pytest.approx(g.abs().mean().item(), rel=1e-6)
    assert model.weight.grad.norm().item() == pytest.approx(1.0, rel=1e-4)  # clipped still


class _Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.head = nn.Linear(8, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids))


def test_a_tied_weight_is_selected_and_clipped_by_any_of_its_paths() -> None:
    torch.manual_seed(0)
    model = _Tied()
    model(torch.tensor([[1, 2, 3]])).pow(2).sum().mul(100).backward()
    assert model.embed.weight.grad is not None
    before = model.embed.weight.grad.norm().item()
    assert before > 1.0
    with hookscope.GradientMonitor(model, select="head.*", clip={"head.weight": 1.0}) as mon:
        mon.step()
    assert mon.names == ["embed.weight"]  # watched once, by its first path
    assert mon.history.norms[0] == pytest.approx([before], rel=1e-6)
    assert model.embed.weight.grad.norm().item() == pytest.approx(1.0, rel=1e-4)


def test_value_clipping_a_sparse_gradient_is_a_spec_error_not_a_dispatch_error() -> None:
    class Sparse(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # NB: the dense one first: clipped before the sparse one is met
            self.out, self.e = nn.Linear(4, 1), nn.Embedding(10, 4, sparse=True)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.out(self.e(ids))

    torch.manual_seed(0)
    model = Sparse()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.e.weight.detach().clone()
    grads: dict[str, torch.Tensor] = {}
    with pytest.raises(hookscope.SpecError, match=r"cannot clamp the sparse gradient of "
                                                  r"'e.weight'.*clip_mode='norm'"), \
            hookscope.GradientMonitor(model, optimizer=opt, clip={"**": 0.01},
                                      clip_mode="value"):
        model(torch.tensor([1, 2, 3])).sum().backward()
        assert model.out.weight.grad is not None
        grads["out"] = model.out.weight.grad.clone()
        opt.step()
    assert torch.equal(model.e.weight, before)  # refused before the optimizer stepped
    assert torch.equal(model.out.weight.grad, grads["out"])  # and before any clamp
    assert total_hooks(model) == 0


def test_flow_rows_stay_aligned_with_a_step_without_gradients(tmp_path: Path) -> None:
    """A step where no watched parameter had a gradient added a norms row but no
    max/mean row: plot_flow() raised IndexError, and step 0 drew step 1's values."""
    pytest.importorskip("matplotlib")
    torch.manual_seed(0)
    model = nn.ModuleDict({"backbone": nn.Linear(4, 8), "head": nn.Linear(8, 2)})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    expected: list[float] = []  # the oracle: max |grad| of backbone.weight, per step
    with hookscope.GradientMonitor(model, optimizer=opt, select="backbone.*", flow=True) as mon:
        for step in range(3):
            x = torch.randn(3, 4)
            with torch.set_grad_enabled(step > 0):  # a warm-up step: backbone frozen
                feats = model["backbone"](x)
            model["head"](feats).sum().backward()
            g = model["backbone"].weight.grad
            expected.append(math.nan if g is None else float(g.abs().max()))
            opt.step()
            opt.zero_grad()
    h = mon.history
    assert len(h.norms) == len(h.max_abs) == len(h.mean_abs) == 3
    col = h.names.index("backbone.weight")
    assert math.isnan(h.max_abs[0][col])
    assert [row[col] for row in h.max_abs[1:]] == pytest.approx(expected[1:])
    mon.plot_flow(tmp_path / "flow.png")
    assert (tmp_path / "flow.png").read_bytes()[:4] == b"\x89PNG"


def test_relative_thresholds_wait_while_the_median_is_zero() -> None:
    """With a running median of 0 (an expert with zero gradients for a while), any
    gradient was flagged ``explode``: an infinite factor of 0."""
    expert = nn.Linear(4, 4)
    opt = torch.optim.SGD(expert.parameters(), lr=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no anomaly warning
        with hookscope.GradientMonitor(expert, optimizer=opt, relative=True,
                                       explode_above=10.0) as mon:
            for step in range(6):
                scale = 1.0 if step in (0, 5) else 0.0
                (expert(torch.randn(2, 4)).sum() * scale).backward()
                opt.step()
                opt.zero_grad(set_to_none=False)
    assert mon.anomalies == []


class _AuxOverflow(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body, self.head = nn.Linear(4, 4), nn.Linear(4, 1)

    def forward(self, x: torch.Tensor, overflow: bool = False) -> torch.Tensor:
        h = self.body(x)
        out = self.head(h).sum()
        return out + h.sum() * float("inf") if overflow else out


def test_a_step_the_scaler_skipped_is_marked_also_outside_select() -> None:
    """The skip was judged from the selected norms: an overflow in the body's gradient
    (the head selected) left ``skipped`` False on a step the optimizer never took."""
    torch.manual_seed(0)
    model = _AuxOverflow()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    stepped: list[bool] = []  # the oracle: did the optimizer change the head?
    with hookscope.GradientMonitor(model, optimizer=opt, scaler=scaler, select="head.*") as mon:
        for step in range(3):
            before = model.head.weight.detach().clone()
            scaler.scale(model(torch.randn(2, 4), overflow=step == 1)).backward()
            mon.step()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            stepped.append(not torch.equal(before, model.head.weight))
    assert stepped == [True, False, True]
    assert mon.history.skipped == [not s for s in stepped]


@pytest.mark.parametrize("as_keyword", [False, True])
def test_an_optimizer_stepped_with_a_closure_records_and_clips_its_gradients(
    as_keyword: bool,
) -> None:
    """LBFGS computes the gradients inside step(): the monitor recorded the previous
    step's, and clipped gradients the closure then overwrote."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=3)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    first: list[float] = []  # the oracle: the first closure call's norm in each step
    calls = [0]

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        if calls[0] == 0:
            first.append(float(model[0].weight.grad.norm()))
        calls[0] += 1
        return loss

    with hookscope.GradientMonitor(model, optimizer=opt, clip={"0.weight": 1e-3}) as mon:
        for _ in range(3):
            calls[0] = 0
            opt.step(closure=closure) if as_keyword else opt.step(closure)
            assert float(model[0].weight.grad.norm()) <= 1e-3 * (1 + 1e-5)  # clipped
    assert mon.history.column("0.weight") == pytest.approx(first)
    assert total_hooks(model) == 0


@pytest.mark.parametrize("scaler, match", [
    ("cpu", "scaler= must be a torch.amp.GradScaler instance, got a str"),
    (torch.amp.GradScaler, "scaler=.*the class GradScaler; pass an instance"),
])
def test_a_scaler_that_is_not_one_is_refused_when_the_monitor_is_made(
    scaler: object, match: str
) -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(hookscope.SpecError, match=match):
        hookscope.GradientMonitor(model, optimizer=opt, scaler=scaler)
    assert not opt._optimizer_step_pre_hooks  # nothing left on the optimizer
