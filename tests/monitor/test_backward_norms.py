"""GradientMonitor reads gradients as backward made them, before the loop's own code
changes them: oracles are ``torch.nn.utils.get_total_norm`` and ``.grad`` read right
after ``backward()``, by the test, before its ``clip_grad_norm_``."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import hookscope
from helpers import count_hooks, total_hooks
from hookscope.monitor import GradientAnomalyWarning


def _issue_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))


def test_an_explosion_the_loops_clip_hides_is_recorded_and_flagged() -> None:
    model = _issue_model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    before = count_hooks(model)
    after_backward: list[float] = []  # the oracle
    with pytest.warns(GradientAnomalyWarning) as explode, \
            pytest.warns(UserWarning, match="the loop changed the gradients") as record, \
            hookscope.GradientMonitor(model, optimizer=opt, explode_above=1e3) as mon:
        for step in range(5):
            x = torch.randn(8, 4) * (1e4 if step == 3 else 1.0)  # the planted explosion
            model(x).pow(2).sum().backward()
            after_backward.append(float(nn.utils.get_total_norm(
                [p.grad for p in model.parameters() if p.grad is not None])))
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
    assert after_backward[3] > 1e6
    assert mon.history.total == pytest.approx(after_backward, rel=1e-5)
    assert mon.history.step_total == pytest.approx([1.0] * 5, rel=1e-4)  # what the step got
    assert mon.history.changed == [True] * 5
    assert {a.step for a in mon.anomalies} == {3}
    assert sum("the loop changed" in str(w.message) for w in record) == 1  # said once
    assert [str(w.message)[:43] for w in explode] == [
        "hookscope: step 3: 4 gradient anomalies, wo"]  # one warning for the step
    assert count_hooks(model) == before


def test_gradient_accumulation_records_the_summed_gradient_of_the_last_micro_batch() -> None:
    model = _issue_model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    accumulated: list[list[float]] = []  # the oracle: .grad after the second backward
    g = torch.Generator().manual_seed(3)
    with warnings_as_expected(), hookscope.GradientMonitor(model, optimizer=opt) as mon:
        for _ in range(3):
            for _ in range(2):  # two micro-batches
                model(torch.randn(4, 4, generator=g)).pow(2).mean().backward()
            accumulated.append([float(p.grad.norm()) for p in model.parameters()])
            nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
            opt.step()
            opt.zero_grad()
    assert len(mon.history.norms) == 3
    for row, oracle in zip(mon.history.norms, accumulated, strict=True):
        assert row == pytest.approx(oracle, rel=1e-6)


def warnings_as_expected() -> pytest.WarningsRecorder:
    return pytest.warns(UserWarning, match="the loop changed the gradients")


def test_an_amp_loop_that_unscales_and_clips_itself_gets_unscaled_backward_norms() -> None:
    """The AMP recipe: ``scaler.unscale_(opt)``, ``clip_grad_norm_``, ``scaler.step``;
    backward's gradients carry the loss scale, which the recorded norms leave out."""
    model = _issue_model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    unscaled: list[float] = []  # the oracle: after unscale_, before the clip
    with warnings_as_expected(), hookscope.GradientMonitor(
            model, optimizer=opt, scaler=scaler) as mon:
        for _ in range(2):
            scaler.scale(model(torch.randn(8, 4)).pow(2).sum()).backward()
            scaler.unscale_(opt)
            unscaled.append(float(nn.utils.get_total_norm([p.grad for p in model.parameters()])))
            nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            mon.step()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
    assert mon.history.total == pytest.approx(unscaled, rel=1e-5)
    assert mon.history.step_total == pytest.approx([0.1, 0.1], rel=1e-4)


def test_a_loop_that_leaves_its_gradients_alone_says_nothing_and_trains_identically() -> None:
    plain, watched = _issue_model(), _issue_model()
    opts = [torch.optim.Adam(m.parameters(), lr=1e-2) for m in (plain, watched)]
    norms: list[float] = []  # the oracle: torch's total norm of the gradients stepped on
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with hookscope.GradientMonitor(watched, optimizer=opts[1]) as mon:
            for _ in range(3):
                x = torch.randn(8, 4)
                for m, opt in zip((plain, watched), opts, strict=True):
                    m(x).pow(2).sum().backward()
                    if m is watched:
                        grads = [p.grad for p in m.parameters() if p.grad is not None]
                        norms.append(float(torch.nn.utils.get_total_norm(grads)))
                    opt.step()
                    opt.zero_grad()
    assert [str(w.message) for w in record] == []
    assert mon.history.changed == [False] * 3
    assert mon.history.total == pytest.approx(norms, rel=1e-6)
    assert mon.history.step_total == pytest.approx(norms, rel=1e-6)
    for a, b in zip(plain.parameters(), watched.parameters(), strict=True):
        assert torch.equal(a, b)


def test_after_a_backward_that_raised_the_next_backward_is_still_read() -> None:
    """A pass that raises never runs its end-of-backward callback: the next pass must
    queue its own (else its norms would be taken at the step, after the loop's clip)."""
    torch.manual_seed(0)
    model = nn.Linear(3, 1)

    def planted(p: torch.Tensor) -> None:  # runs after the monitor's hook: it raises
        raise RuntimeError("planted")

    with hookscope.GradientMonitor(model) as mon:
        handle = model.weight.register_post_accumulate_grad_hook(planted)
        with pytest.raises(RuntimeError, match="planted"):
            model(torch.ones(1, 3)).sum().backward()
        handle.remove()
        model.zero_grad()
        model(torch.full((1, 3), 2.0)).sum().backward()
        oracle = float(model.weight.grad.norm())
        with torch.no_grad():
            model.weight.grad.mul_(0.5)  # the loop's own change after backward
        with pytest.warns(UserWarning, match="the loop changed"):
            mon.step()
    assert mon.history.norms[0][0] == pytest.approx(oracle, rel=1e-6)
    assert total_hooks(model) == 0


def test_the_monitors_hooks_are_listed_as_hookscopes_and_gone_after_close() -> None:
    model = _issue_model()
    mon = hookscope.GradientMonitor(model)
    assert len(hookscope.hooks(model).records) == 0  # not the user's hooks
    own = hookscope.hooks(model, include_hookscope=True).records
    assert [r.kind.value for r in own] == ["post_accumulate_grad"] * 4
    assert {r.registered_by for r in own} == {"hookscope"}
    mon.close()
    assert len(hookscope.hooks(model, include_hookscope=True).records) == 0
    assert total_hooks(model) == 0
