"""Regressions found by reviewing the engine rewrite (issue 8), each checked against
what the engine must guarantee whatever the model or its backward does."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import hookscope
from helpers import count_hooks


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_a_backward_that_raised_does_not_silence_the_next_ones() -> None:
    """autograd runs end-of-backward callbacks only after a pass that succeeded."""
    model, x = _mlp(), torch.randn(3, 4)
    with hookscope.Tracer(model, grads=True) as tracer:
        y = model(x)
        handle = y.register_hook(lambda g: (_ for _ in ()).throw(ValueError("boom")))
        with pytest.raises(ValueError, match="boom"):
            y.sum().backward()
        handle.remove()
        torch.autograd.grad(model(x).sum(), list(model.parameters()))
    assert tracer.trace is not None
    statuses = {s.path: s.status for s in tracer.trace.param_grads}
    assert set(statuses.values()) == {"ok"}, statuses
    first_layer = [c for c in tracer.trace.calls if c.path == "0"][-1]
    assert first_layer.backward_ns is not None  # its backward ended with the pass


class BrokenFinalize(hookscope.Probe):
    name = "broken_finalize_test"

    def finalize(self, trace: Any) -> None:
        raise ValueError("probe bug in finalize")


class Boom(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("model bug")


def test_the_models_failure_wins_over_a_probe_failing_in_finalize() -> None:
    model = nn.Sequential(nn.Linear(4, 4), Boom())
    with pytest.raises(hookscope.ModelRunError, match="model bug") as info:
        hookscope.trace(model, torch.randn(2, 4), probes=[BrokenFinalize()])
    assert info.value.path == "1"
    assert sum(count_hooks(model).values()) == 0


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.b, self.a(x), use_reentrant=True)


def test_backward_true_on_a_reentrant_checkpoint_is_a_spec_error() -> None:
    """torch.autograd.grad refuses reentrant checkpoints: hookscope's choice, not a
    failure of the model, and the message says what to do instead."""
    model = Checkpointed()
    with pytest.raises(hookscope.SpecError, match=r"use_reentrant=True.*Tracer"):
        hookscope.trace(model, torch.randn(2, 4, requires_grad=True), backward=True)
    assert sum(count_hooks(model).values()) == 0


def test_another_thread_running_the_same_model_is_not_recorded() -> None:
    model = nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.ReLU()) for _ in range(4)])
    x = torch.randn(2, 16)
    stop = threading.Event()

    def other() -> None:
        while not stop.is_set():
            with torch.no_grad():
                model(x)

    worker = threading.Thread(target=other)
    worker.start()
    try:
        counts = {len(hookscope.summary(model, x).trace.calls) for _ in range(30)}
    finally:
        stop.set()
        worker.join()
    assert counts == {1 + 4 * 3}


class ReentrantCheckpointed(nn.Module):
    """``stem`` -> ``block`` under a reentrant checkpoint -> ``head``: the checkpoint's
    backward runs a backward pass of its own inside the model's."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.head = nn.Linear(4, 4), nn.Linear(4, 2)
        self.block = nn.Sequential(nn.Linear(4, 4), nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = checkpoint(self.block, self.stem(x), use_reentrant=True)
        return self.head(h)


def test_a_reentrant_checkpoints_own_backward_pass_does_not_end_the_models() -> None:
    """The nested pass ended every open call (the root's backward had no end) and the
    calls after it (``stem``) lost their own ends."""
    torch.manual_seed(0)
    model, x = ReentrantCheckpointed(), torch.randn(3, 4, requires_grad=True)
    seen: dict[str, float] = {}  # the oracle: gradients of the calls' outputs
    handles = [
        m.register_full_backward_hook(
            lambda m, gi, go, name=name: seen.__setitem__(name, float(go[0].norm())))
        for name, m in [("stem", model.stem), ("head", model.head)]
    ]
    with hookscope.Tracer(model, grads=True) as tracer:
        model(x).sum().backward()
    for handle in handles:
        handle.remove()
    trace = tracer.trace
    assert trace is not None
    root, stem, head = trace[""], trace["stem"], trace["head"]
    for name, call in [("stem", stem), ("head", head)]:
        assert call.grad_output_norm == pytest.approx(seen[name], rel=1e-6)
    assert root.backward_ns is not None and stem.backward_ns is not None
    # the root's backward holds the nested pass and stem's, which ran after it
    assert root.backward_ns >= stem.backward_ns + head.backward_ns
    statuses = {s.path: s.status for s in trace.param_grads}
    assert set(statuses.values()) == {"ok"}, statuses  # block's came in the nested pass
    assert sum(count_hooks(model).values()) == 0


def test_the_calls_inside_a_reentrant_checkpoint_get_their_backward_events() -> None:
    """Their forward ran under no_grad (no hooks then); the recompute, which builds the
    graph the checkpoint's backward runs, hooks them. The oracle: torch's full backward
    hooks on the same modules, on a run without hookscope."""
    torch.manual_seed(0)
    model, x = ReentrantCheckpointed(), torch.randn(3, 4, requires_grad=True)
    seen: dict[str, tuple[float, float]] = {}  # path -> |grad out|, |grad in|
    handles = [
        m.register_full_backward_hook(lambda m, gi, go, name=name: seen.__setitem__(
            name, (float(go[0].norm()), float(gi[0].norm()))))
        for name, m in [("block.0", model.block[0]), ("block.1", model.block[1])]
    ]
    model(x).sum().backward()
    for handle in handles:
        handle.remove()
    with hookscope.Tracer(model, grads=True) as tracer:
        model(x).sum().backward()
    trace = tracer.trace
    assert trace is not None
    for path in ("block", "block.0", "block.1"):
        assert trace[path].backward_ns is not None, path
    for path, (out_norm, in_norm) in seen.items():
        assert trace[path].grad_output_norm == pytest.approx(out_norm, rel=1e-6), path
        assert trace[path].grad_input_norm == pytest.approx(in_norm, rel=1e-6), path
    # the recorded calls are the forward's, once each: the recompute adds none
    assert [c.path for c in trace.calls].count("block.0") == 1
    assert sum(count_hooks(model).values()) == 0


class TwiceInside(nn.Module):
    """A module called twice inside a reentrant checkpoint: a recompute does not say
    which call it repeats."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def run(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(torch.tanh(self.lin(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = checkpoint(self.run, x, use_reentrant=True)
        return out


def test_a_module_called_twice_in_a_reentrant_checkpoint_gets_no_backward_events() -> None:
    model, x = TwiceInside(), torch.randn(3, 4, requires_grad=True)
    with hookscope.Tracer(model, grads=True) as tracer:
        model(x).sum().backward()
    trace = tracer.trace
    assert trace is not None
    assert [c.backward_ns for c in trace.calls if c.path == "lin"] == [None, None]
    assert trace[""].backward_ns is not None
    assert {s.status for s in trace.param_grads} == {"ok"}
    assert sum(count_hooks(model).values()) == 0


class FailsOnce(torch.autograd.Function):
    """Identity whose backward raises the first time."""

    failed = False

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        if not FailsOnce.failed:
            FailsOnce.failed = True
            raise ValueError("boom")
        return grad


class FailingMiddle(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(FailsOnce.apply(self.a(x)))


def test_a_pass_retried_over_a_retained_graph_after_a_failure_is_whole() -> None:
    """What the failed pass left open (``b``'s backward had started) must not be closed
    by, nor mixed into, the retry."""
    torch.manual_seed(0)
    model, x = FailingMiddle(), torch.randn(3, 4)
    FailsOnce.failed = False
    with hookscope.Tracer(model, grads=True) as tracer:
        loss = model(x).sum()
        with pytest.raises(ValueError, match="boom"):
            loss.backward(retain_graph=True)
        loss.backward()
    trace = tracer.trace
    assert trace is not None
    for path in ("", "a", "b"):
        assert trace[path].backward_ns is not None, path
    a_out = model.b.weight.detach().t() @ torch.ones(2)  # d(sum)/d(a's output), one row
    assert trace["a"].grad_output_norm == pytest.approx(
        float(a_out.norm() * 3 ** 0.5), rel=1e-6)
    assert {s.status for s in trace.param_grads} == {"ok"}


class CheckpointedBlock(nn.Module):
    def __init__(self, reentrant: bool, twice: bool = False) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4))
        self.reentrant, self.twice = reentrant, twice

    def run(self, x: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = self.block(x)
        return self.block(h) if self.twice else h

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = checkpoint(self.run, x, use_reentrant=self.reentrant)
        return out


def _grads(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    model(x).pow(2).sum().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_patch_replaces_values_again_when_checkpointing_recomputes(reentrant: bool) -> None:
    """The gradients are those of the recomputed forward: a patch skipped there gave
    the gradients of the unpatched network (the oracle: torch's own hooks, which run in
    the recompute too)."""
    torch.manual_seed(0)
    model, x = CheckpointedBlock(reentrant), torch.randn(3, 4, requires_grad=True)
    handles = [
        model.block[0].register_forward_hook(lambda m, a, out: out * 3),
        model.block[2].register_forward_pre_hook(lambda m, a: (a[0] + 1,)),
    ]
    expected = _grads(model, x)
    for handle in handles:
        handle.remove()
    assert sum(count_hooks(model).values()) == 0
    with hookscope.patch(model, {"block.0": lambda m, a, out: out * 3}), \
            hookscope.patch_inputs(model, {"block.2": lambda m, a, kw: (a[0] + 1,)}):
        got = _grads(model, x)
    assert got.keys() == expected.keys()
    for name, grad in expected.items():
        torch.testing.assert_close(got[name], grad, rtol=1e-6, atol=1e-7, msg=name)
    assert sum(count_hooks(model).values()) == 0


def test_a_patched_module_called_twice_and_recomputed_is_a_clear_error() -> None:
    """Which of its calls a recompute repeats is not known: no silent guess."""
    model, x = CheckpointedBlock(False, twice=True), torch.randn(3, 4)
    with hookscope.patch(model, {"block.0": lambda m, a, out: out * 3}):
        loss = model(x).sum()
        with pytest.raises(hookscope.SpecError, match=r"'block.0'.*called 2 times"):
            loss.backward()
    assert sum(count_hooks(model).values()) == 0


class RecomputedBlock(nn.Module):
    """A block under non-reentrant activation checkpointing: its forward runs again
    inside the backward pass, to recompute what it did not save."""

    def __init__(self, checkpointed: bool) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.block = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
        self.checkpointed = checkpointed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.a(x)
        if self.checkpointed:
            out: torch.Tensor = checkpoint(self.block, x, use_reentrant=False)
            return out
        return self.block(x)


def _calls(trace: hookscope.Trace) -> list[tuple[str, int, int, int | None]]:
    return [(c.path, c.call_index, c.depth, c.parent) for c in trace.calls]


def test_a_forward_recomputed_by_checkpointing_is_not_recorded_again() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 4)
    plain, checkpointed = RecomputedBlock(False), RecomputedBlock(True)
    checkpointed.load_state_dict(plain.state_dict())
    expected = hookscope.trace(plain, x, backward=True)
    traced = hookscope.trace(checkpointed, x, backward=True)
    assert _calls(traced) == _calls(expected)  # no extra root calls from the recompute
    assert traced["block.0"].grad_output_norm == pytest.approx(
        expected["block.0"].grad_output_norm)
    with hookscope.Tracer(checkpointed) as tracer:  # a user's training step
        checkpointed(x).sum().backward()
    assert tracer.trace is not None and _calls(tracer.trace) == _calls(expected)
    assert sum(count_hooks(checkpointed).values()) == 0


class UnusedBranch(nn.Module):
    """``side``'s output is thrown away; its input feeds ``main`` too."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(4, 4)
        self.side = nn.Linear(4, 4)
        self.main = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        self.side(h)  # unused: no gradient reaches it
        return self.main(h)


class BackwardOrder(hookscope.Probe):
    name = ""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def on_backward_enter(self, call: Any, grad_outputs: Any) -> None:
        self.events.append(("enter", call.path))

    def on_backward_exit(self, call: Any, grad_inputs: Any) -> None:
        self.events.append(("exit", call.path))


def test_a_call_whose_output_gets_no_gradient_has_no_backward_events() -> None:
    probe = BackwardOrder()
    hookscope.trace(UnusedBranch(), torch.randn(2, 4), backward=True, probes=[probe],
                    time=False, stats=False, memory=False)
    paths = {path for _, path in probe.events}
    assert "side" not in paths and {"", "main", "stem"} <= paths
    for path in paths:  # every exit follows its enter
        kinds = [kind for kind, p in probe.events if p == path]
        assert kinds == ["enter", "exit"], (path, kinds)


def test_a_call_that_returns_its_input_gets_its_input_gradient() -> None:
    # nn.Identity's input hook and output hook sit on one tensor: the exit fires first
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Identity(), nn.Linear(4, 1))
    probe = BackwardOrder()
    trace = hookscope.trace(model, torch.randn(2, 4), backward=True, probes=[probe],
                            time=False, stats=False, memory=False)
    assert [k for k, p in probe.events if p == "1"] == ["enter", "exit"]
    identity = trace["1"]
    assert identity.grad_input_norm is not None
    assert identity.grad_input_norm == pytest.approx(identity.grad_output_norm)


class ReturnsItsParameter(nn.Module):
    """A learned positional embedding: returns its parameter, a leaf, as it is."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(2, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight


class WithPositions(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pos, self.fc = ReturnsItsParameter(), nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc(x + self.pos(x))
        return out


def test_a_call_that_returns_a_leaf_as_it_is_has_its_backward() -> None:
    """A pass-through first layer (eval Dropout, Identity) on an input that requires
    grad (a saliency map), and a module returning its parameter, got no gradients: their
    outputs are leaves, which autograd's multi-grad hook cannot watch."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Dropout(0.5), nn.Linear(4, 3), nn.Linear(3, 1)).eval()
    x = torch.randn(2, 4, requires_grad=True)
    trace = hookscope.trace(model, x, backward=True)
    (grad,) = torch.autograd.grad(model(x).sum(), x)  # the oracle: d(out)/d(input)
    dropout = trace["0"]
    assert dropout.grad_output_norm == pytest.approx(float(grad.norm()), rel=1e-6)
    assert dropout.grad_input_norm == pytest.approx(float(grad.norm()), rel=1e-6)
    positions = WithPositions()
    with hookscope.Tracer(positions, grads=True) as tracer:
        for _ in range(3):  # its hook goes after each step: none pile up on the weight
            positions.zero_grad()
            positions(torch.randn(2, 4)).pow(2).sum().backward()
            assert len(positions.pos.weight._backward_hooks or {}) == 1  # the param watch
    assert tracer.trace is not None
    calls = [c for c in tracer.trace.calls if c.path == "pos"]
    assert positions.pos.weight.grad is not None
    assert len(calls) == 3 and calls[-1].grad_output_norm == pytest.approx(
        float(positions.pos.weight.grad.norm()), rel=1e-6)
    assert sum(count_hooks(positions).values()) == 0


def test_hookscope_s_own_failure_on_leaving_a_run_is_not_called_the_model_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It was 'the model raised no failure recorded', a ModelRunError."""
    from hookscope.core.engine.handles import HandleGroup

    removing = HandleGroup.remove

    def broken(self: HandleGroup) -> None:
        removing(self)
        raise LookupError("hookscope's own bug")

    monkeypatch.setattr(HandleGroup, "remove", broken)
    with pytest.raises(LookupError, match="hookscope's own bug"):
        hookscope.trace(_mlp(), torch.randn(2, 4))


def test_a_patch_replaces_values_again_in_a_backward_run_inside_an_except_block() -> None:
    """A recompute that runs while an exception is being handled (the user's backward in
    an ``except`` block) did not raise itself: the patch still applies there."""
    torch.manual_seed(0)
    model, x = CheckpointedBlock(False), torch.randn(3, 4, requires_grad=True)
    triple = {"block.0": lambda m, a, out: out * 3}
    with hookscope.patch(model, triple):
        expected = _grads(model, x)
    try:
        raise KeyError("handled by the user")
    except KeyError:
        with hookscope.patch(model, triple):
            got = _grads(model, x)
    unpatched = _grads(model, x)
    for name, grad in expected.items():
        torch.testing.assert_close(got[name], grad, rtol=1e-6, atol=1e-7, msg=name)
    assert not torch.allclose(unpatched["block.0.weight"], expected["block.0.weight"])
    assert sum(count_hooks(model).values()) == 0


class ReturnsItsLoss(nn.Module):
    """A model that returns its loss (as transformers models do with labels)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).pow(2).mean()


def test_the_call_whose_output_the_backward_starts_from_gets_its_events() -> None:
    """``register_multi_grad_hook`` never fires for a tensor the backward starts from
    (torch counts no gradient to wait for on that root): the root call of a model
    returning its loss, or of ``out.backward(g)``, had no backward events."""
    torch.manual_seed(0)
    model, x = ReturnsItsLoss(), torch.randn(3, 4)
    with hookscope.Tracer(model, grads=True) as tracer:
        model(x).backward()
    trace = tracer.trace
    assert trace is not None
    assert trace[""].grad_output_norm == pytest.approx(1.0)  # d loss / d loss
    assert trace[""].backward_ns is not None
    seq = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    grad = torch.randn(3, 4)
    with hookscope.Tracer(seq, grads=True) as tracer:
        seq(x).backward(grad)
    trace = tracer.trace
    assert trace is not None
    for path in ("", "1"):  # both returned the tensor the backward starts from
        assert trace[path].grad_output_norm == pytest.approx(float(grad.norm()), rel=1e-6)
        assert trace[path].backward_ns is not None
    assert sum(count_hooks(model).values()) + sum(count_hooks(seq).values()) == 0


class LossAndLogits(nn.Module):
    """Returns ``(loss, logits)``, as a transformers model with labels does."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.lin(x)
        return logits.pow(2).mean(), logits


def test_a_call_returning_the_loss_and_what_it_came_from_starts_its_backward_once() -> None:
    """torch's multi-grad hook fired twice for such a call (once for the loss, which it
    never counts, once for the logits), each time with one of the two gradients."""
    torch.manual_seed(0)
    model, x = LossAndLogits(), torch.randn(2, 4)
    loss, logits = model(x)
    (d_logits,) = torch.autograd.grad(loss, logits)  # the oracle: the logits' gradient
    started: list[str] = []

    class Starts(hookscope.Probe):
        name = "starts_for_test"

        def on_backward_enter(self, call: Any, grad_outputs: tuple[Any, ...]) -> None:
            started.append(call.path)

    with hookscope.Tracer(model, grads=True, probes=[Starts()]) as tracer:
        loss, _ = model(x)
        loss.backward()
    trace = tracer.trace
    assert trace is not None
    assert sorted(started) == ["", "lin"]
    assert trace[""].grad_output_norm == pytest.approx(
        float((1 + d_logits.norm() ** 2) ** 0.5), rel=1e-6)  # d loss/d loss is 1
    assert trace["lin"].grad_output_norm == pytest.approx(float(d_logits.norm()), rel=1e-6)
    assert sum(count_hooks(model).values()) == 0


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_patch_and_a_tracer_span_several_training_steps_with_checkpointing(
    reentrant: bool,
) -> None:
    """A module called once per forward is called once in each step's forward: the
    count that tells which call a recompute repeats starts anew with each forward of
    the model (it said "called 2 times" at the second step)."""
    torch.manual_seed(0)
    model, x = CheckpointedBlock(reentrant), torch.randn(3, 4, requires_grad=True)
    handle = model.block[0].register_forward_hook(lambda m, a, out: out * 3)
    expected = _grads(model, x)  # the oracle: torch's own hook, run in the recompute too
    handle.remove()
    with hookscope.patch(model, {"block.0": lambda m, a, out: out * 3}):
        for _ in range(2):
            got = _grads(model, x)
            for name, grad in expected.items():
                torch.testing.assert_close(got[name], grad, rtol=1e-6, atol=1e-7, msg=name)
    with hookscope.Tracer(model, grads=True) as tracer:
        for _ in range(2):
            model(x).pow(2).sum().backward()
    trace = tracer.trace
    assert trace is not None
    inner = [c for c in trace.calls if c.path == "block.1"]
    assert len(inner) == 2
    assert all(c.grad_output_norm is not None for c in inner)
    assert inner[0].grad_output_norm == pytest.approx(inner[1].grad_output_norm, rel=1e-6)
    assert sum(count_hooks(model).values()) == 0


@pytest.mark.parametrize("reentrant", [False, True])
def test_gradient_accumulation_over_a_checkpoint_never_gives_a_call_anothers_numbers(
    reentrant: bool,
) -> None:
    """Two forwards, then one backward: a reentrant checkpoint's recompute does not say
    which forward it repeats, so its calls get no backward events (they got the other
    forward's gradient); with ``use_reentrant=False`` each call has its own. The
    oracle: ``retain_grad`` on the inner module's outputs in the same network run
    without a checkpoint and without hookscope. A step after it (forward, backward)
    has its events again."""
    torch.manual_seed(0)
    model = CheckpointedBlock(reentrant)
    x1, x2 = torch.randn(3, 4, requires_grad=True), torch.randn(3, 4, requires_grad=True)
    outs: list[torch.Tensor] = []

    def keep(m: nn.Module, a: Any, out: torch.Tensor) -> None:
        out.retain_grad()
        outs.append(out)

    handle = model.block[1].register_forward_hook(keep)
    (model.run(x1).sum() + 3 * model.run(x2).sum()).backward()
    handle.remove()
    expected = [float(o.grad.norm()) for o in outs]  # type: ignore[union-attr]
    assert len(expected) == 2 and expected[1] != pytest.approx(expected[0], rel=1e-3)
    model.zero_grad()
    with hookscope.Tracer(model, grads=True) as tracer:
        (model(x1).sum() + 3 * model(x2).sum()).backward()
        model(x1).sum().backward()  # a plain step after it
    trace = tracer.trace
    assert trace is not None
    inner = [c.grad_output_norm for c in trace.calls if c.path == "block.1"]
    if reentrant:
        assert inner[:2] == [None, None]
    else:
        assert inner[:2] == pytest.approx(expected, rel=1e-6)
    assert inner[2] == pytest.approx(expected[0], rel=1e-6)
    assert sum(count_hooks(model).values()) == 0
