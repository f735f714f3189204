"""The grads probe against autograd oracles: parameter gradients equal ``param.grad``
computed independently, per-call output-gradient norms equal ``torch.autograd.grad`` on
the captured output; unused, frozen and tied parameters; JSON/CSV/DataFrame/table."""

from __future__ import annotations

import copy
import math
import time
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from helpers import (
    FailsInBackward,
    assert_state_unchanged,
    count_hooks,
    snapshot_state,
    total_hooks,
)
from hookscope.render.trace_table import render_trace


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=True), nn.Linear(8, 3))


def test_parameter_statistics_equal_param_grad_computed_independently() -> None:
    model, x = mlp(), torch.randn(5, 4)
    loss = lambda out: out.pow(2).mean()  # noqa: E731
    trace = hookscope.trace(model, x, backward=True, loss=loss)
    twin = copy.deepcopy(model)
    loss(twin(x)).backward()
    by_path = {s.path: s for s in trace.param_grads}
    for path, p in twin.named_parameters():
        s = by_path[path]
        assert s.status == "ok"
        assert s.norm == pytest.approx(float(p.grad.norm()), rel=1e-6)
        assert s.max_abs == pytest.approx(float(p.grad.abs().max()), rel=1e-6)
        assert s.mean == pytest.approx(float(p.grad.mean()), rel=1e-5, abs=1e-9)
        assert s.nan_count == 0 and s.inf_count == 0
    assert all(p.grad is None for p in model.parameters())  # autograd.grad: no .grad


def test_call_output_gradient_norms_equal_autograd_grad_on_the_captured_output() -> None:
    model, x = mlp(), torch.randn(5, 4)
    trace = hookscope.trace(model, x, backward=True, loss=lambda out: out.pow(2).sum())
    twin = copy.deepcopy(model)
    h0 = twin[0](x)
    h1 = twin[1](h0.clone())
    out = twin[2](h1)
    g_out, g_h1 = torch.autograd.grad(out.pow(2).sum(), [out, h1])
    assert trace[""].grad_output_norm == pytest.approx(float(g_out.norm()), rel=1e-6)
    assert trace["2"].grad_output_norm == pytest.approx(float(g_out.norm()), rel=1e-6)
    assert trace["2"].grad_input_norm == pytest.approx(float(g_h1.norm()), rel=1e-6)
    assert trace["1"].grad_output_norm == pytest.approx(float(g_h1.norm()), rel=1e-6)
    for call in trace.calls:
        assert call.backward_ns is not None and call.backward_ns >= 0
        assert call.backward_self_ns is not None and call.backward_self_ns <= call.backward_ns


class Branches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(3, 3)
        self.unused = nn.Linear(3, 3)
        self.frozen = nn.Linear(3, 3)
        self.frozen.requires_grad_(False)
        self.head = nn.Linear(3, 3)
        self.tail = nn.Linear(3, 3, bias=False)
        self.tail.weight = self.head.weight  # tied

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tail(self.head(self.frozen(self.used(x))))


class TwoLeaves(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * y


def test_calls_whose_inputs_are_the_users_leaves_get_their_input_gradient_norm() -> None:
    """The model's own input with requires_grad=True (saliency, adversarial inputs): the
    root and its first layer take leaves, which a multi-grad hook cannot watch."""
    model = mlp()
    x = torch.randn(5, 4, requires_grad=True)
    trace = hookscope.trace(model, x, backward=True)
    g_x, = torch.autograd.grad(model(x).sum(), [x])
    oracle = float(g_x.double().norm())
    assert trace[""].grad_input_norm == pytest.approx(oracle, rel=1e-6)
    assert trace["0"].grad_input_norm == pytest.approx(oracle, rel=1e-6)
    assert x.grad is None and not x._backward_hooks  # nothing left on the user's tensor
    two, y = TwoLeaves(), torch.randn(5, 3, requires_grad=True)
    with hookscope.Tracer(two, grads=True) as tracer:
        for _ in range(3):  # a long block: the hooks on the leaves do not pile up
            two(x, y).sum().backward()
            assert not x._backward_hooks and not y._backward_hooks
    assert tracer.trace is not None
    g = torch.autograd.grad(two(x, y).sum(), [x, y])
    both = float(torch.cat([t.reshape(-1) for t in g]).double().norm())
    roots = [c for c in tracer.trace.calls if c.path == ""]
    assert [c.grad_input_norm for c in roots] == pytest.approx([both] * 3, rel=1e-6)


def test_unused_frozen_and_tied_parameters_are_said_so() -> None:
    model = Branches()
    trace = hookscope.trace(model, torch.randn(2, 3), backward=True)
    by_path = {s.path: s for s in trace.param_grads}
    assert by_path["unused.weight"].status == "unused"
    assert by_path["unused.weight"].module == "unused"
    assert by_path["unused.weight"].norm is None  # no gradient: not zero
    assert by_path["used.weight"].status == "ok"
    assert by_path["frozen.weight"].status == "frozen" and by_path["frozen.weight"].norm is None
    assert by_path["head.weight"].aliases == ("tail.weight",)
    assert "tail.weight" not in by_path  # reported once


def test_a_block_without_a_backward_says_so_instead_of_ok() -> None:
    model = Branches()
    with hookscope.Tracer(model, grads=True) as tracer:
        model(torch.randn(2, 3))
    assert tracer.trace is not None
    by_path = {s.path: s for s in tracer.trace.param_grads}
    assert by_path["used.weight"].status == "no_backward"
    assert by_path["used.weight"].norm is None and by_path["used.weight"].events == 0
    assert by_path["frozen.weight"].status == "frozen"


def test_a_backward_asking_for_some_parameters_leaves_the_others_no_backward() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    with hookscope.Tracer(model, grads=True) as tracer:
        loss = model(torch.randn(3, 4)).pow(2).sum()
        (g,) = torch.autograd.grad(loss, [model[2].weight])
    assert tracer.trace is not None
    status = {s.path: s.status for s in tracer.trace.param_grads}
    assert status == {"0.weight": "no_backward", "0.bias": "no_backward",
                      "2.weight": "ok", "2.bias": "no_backward"}
    (recorded,) = [s for s in tracer.trace.param_grads if s.path == "2.weight"]
    assert recorded.norm == pytest.approx(g.norm().item(), rel=1e-6)
    # a parameter the outputs do not depend on is unused, also with .backward()
    branches = Branches()
    with hookscope.Tracer(branches, grads=True) as tracer:
        branches(torch.randn(2, 3)).sum().backward()
    assert tracer.trace is not None
    by_path = {s.path: s.status for s in tracer.trace.param_grads}
    assert by_path["unused.weight"] == "unused" and by_path["used.weight"] == "ok"


def test_tied_gradient_is_the_sum_of_both_uses() -> None:
    model, x = Branches(), torch.randn(2, 3)
    trace = hookscope.trace(model, x, backward=True)
    twin = copy.deepcopy(model)
    twin(x).sum().backward()
    (tied,) = [s for s in trace.param_grads if s.path == "head.weight"]
    assert tied.norm == pytest.approx(float(twin.head.weight.grad.norm()), rel=1e-6)


def test_nan_gradients_are_counted() -> None:
    model, x = mlp(), torch.randn(5, 4)
    with torch.no_grad():
        model[2].weight[0, 0] = math.nan
    trace = hookscope.trace(model, x, backward=True)
    by_path = {s.path: s for s in trace.param_grads}
    assert by_path["0.weight"].nan_count > 0 and math.isnan(by_path["0.weight"].norm)
    assert by_path["2.weight"].nan_count == 0  # d(out)/d(W2) = h: finite


def test_backward_facts_reach_json_csv_dataframe_and_the_table() -> None:
    trace = hookscope.trace(mlp(), torch.randn(5, 4), backward=True)
    assert hookscope.Trace.from_json(trace.to_json()) == trace
    header = trace.to_csv().splitlines()[0].split(",")
    assert {"grad_output_norm", "grad_input_norm", "backward_ns"} <= set(header)
    frame = trace.to_dataframe()
    assert frame["grad_output_norm"].iloc[0] == pytest.approx(trace[""].grad_output_norm)
    text = render_trace(trace, columns=["layer", "grad_out", "grad_in", "bwd_time"])
    assert "|grad out|" in text and "Bwd time" in text
    assert "|grad" in str(trace) and "out|" in str(trace)  # default table (headers wrap)


def test_a_tracer_around_the_users_backward_records_gradients() -> None:
    model, x = mlp(), torch.randn(5, 4)
    before = count_hooks(model)
    with hookscope.Tracer(model, grads=True) as tracer:
        model(x).sum().backward()
    assert count_hooks(model) == before
    assert tracer.trace is not None
    by_path = {s.path: s for s in tracer.trace.param_grads}
    assert by_path["0.weight"].norm == pytest.approx(float(model[0].weight.grad.norm()))


def test_resnet_with_in_place_relu_gets_every_backward_fact() -> None:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    before = count_hooks(model)
    trace = hookscope.trace(model, torch.randn(1, 3, 64, 64), backward=True,
                            stats=False, memory=False)
    assert count_hooks(model) == before
    assert trace["relu"].grad_output_norm is not None  # in-place ReLU
    assert all(s.status == "ok" for s in trace.param_grads)
    assert len(trace.param_grads) == len(list(model.parameters()))


def test_bad_loss_options_are_spec_errors() -> None:
    model, x = mlp(), torch.randn(5, 4)
    with pytest.raises(hookscope.SpecError, match="backward=True"):
        hookscope.trace(model, x, loss=lambda o: o.sum())
    with pytest.raises(hookscope.SpecError, match="scalar"):
        hookscope.trace(model, x, backward=True, loss=lambda o: o)
    with pytest.raises(hookscope.SpecError, match="function"):
        hookscope.trace(model, x, backward=True, loss=3)  # type: ignore[arg-type]
    before = snapshot_state(model)
    with pytest.raises(hookscope.SpecError, match=r"loss= raised KeyError: 'logits' on the "
                       r"model's output \(a tensor of shape \[5, 3\]\)"):
        hookscope.trace(model, x, backward=True, loss=lambda o: {}["logits"])  # not the model's
    assert_state_unchanged(before, model)


class SlowBackwardProbe(hookscope.Probe):
    """20 ms of work in every backward event of every call: hookscope's, not the
    model's backward time. It measures its own work per call (``spent_ns``)."""

    name = "slow_backward_for_tests"

    def __init__(self) -> None:
        self.spent_ns: dict[str, int] = {}

    def _work(self, call: Any) -> None:
        start = time.perf_counter_ns()
        time.sleep(0.02)
        self.spent_ns[call.path] = self.spent_ns.get(call.path, 0) + (
            time.perf_counter_ns() - start
        )

    def on_backward_enter(self, call: Any, grad_outputs: tuple[Any, ...]) -> None:
        self._work(call)

    def on_backward_exit(self, call: Any, grad_inputs: tuple[Any, ...]) -> None:
        self._work(call)


def test_backward_times_leave_out_every_probes_work() -> None:
    """Counted, the root's backward would hold its three children's 6 x 20 ms: the
    root's backward and the children's probe work are disjoint spans of the run."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
    x = torch.randn(3, 4, requires_grad=True)
    probe = SlowBackwardProbe()
    start = time.perf_counter_ns()
    trace = hookscope.trace(model, x, backward=True, probes=[probe],
                            time=False, stats=False, memory=False)
    wall = time.perf_counter_ns() - start
    children_work = sum(ns for path, ns in probe.spent_ns.items() if path)
    assert children_work >= 6 * 20_000_000  # the probe did its work for every child
    root = trace.find("")
    assert root.backward_ns is not None and root.backward_ns <= wall - children_work
    assert all(c.backward_ns is not None for c in trace.calls)


class _SleepsInBackward(torch.autograd.Function):
    """Doubles its input; its backward sleeps: a known slow node."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    slept_ns: list[int] = []  # noqa: RUF012 (the oracle: each backward's measured sleep)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter_ns()
        time.sleep(0.2)
        _SleepsInBackward.slept_ns.append(time.perf_counter_ns() - start)
        return grad * 2


class _Slow(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _SleepsInBackward.apply(x)


class _Branches(nn.Module):
    """Two branches from one input, the fast one made last: autograd runs it first."""

    def __init__(self) -> None:
        super().__init__()
        self.slow, self.fast = _Slow(), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        slow = self.slow(x)
        return slow + self.fast(x)


class _FirstLayerBeforeSlowWork(nn.Module):
    """``first`` takes the image (no gradient) and is made last, so its backward runs
    first; then 200 ms of another branch's backward."""

    def __init__(self) -> None:
        super().__init__()
        self.other, self.slow, self.first = nn.Linear(4, 4), _Slow(), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        other = self.slow(self.other(x))
        return self.first(x) + other


def test_a_branch_s_backward_ends_with_its_own_nodes_not_with_its_input_s_gradient() -> None:
    # the gradient of the branches' shared input is known only after the slow branch
    # too; the fast branch's backward is its own nodes' (oracle: the slow branch's
    # sleep, measured where it happens: the fast branch's backward does not hold it)
    model = nn.Sequential(nn.Linear(4, 4), _Branches())
    _SleepsInBackward.slept_ns.clear()
    trace = hookscope.trace(model, torch.randn(2, 4), backward=True, time=False,
                            stats=False, memory=False)
    (slept,) = _SleepsInBackward.slept_ns
    fast, slow = trace.find("1.fast"), trace.find("1.slow")
    assert slow.backward_ns is not None and slow.backward_ns >= slept
    assert fast.backward_ns is not None and fast.backward_ns < slept
    assert trace.find("1").backward_ns >= slept  # the block holds both branches


def test_a_first_layer_s_backward_ends_with_its_own_nodes_not_with_the_pass() -> None:
    model = _FirstLayerBeforeSlowWork()
    _SleepsInBackward.slept_ns.clear()
    trace = hookscope.trace(model, torch.randn(2, 4), backward=True, time=False,
                            stats=False, memory=False)
    (slept,) = _SleepsInBackward.slept_ns
    first = trace.find("first")
    assert first.backward_ns is not None and first.backward_ns < slept
    assert trace.find("slow").backward_ns >= slept
    assert trace.find("").backward_ns >= slept


def test_without_sequence_numbers_a_backward_ends_with_its_exit_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hookscope.core import torch_private
    from hookscope.core.torch_private import _warnings as private_warnings
    from hookscope.core.torch_private import autograd as private_autograd

    monkeypatch.setattr(private_autograd, "_get_sequence_nr", None)
    monkeypatch.setattr(private_warnings, "_warned", set())
    model = nn.Sequential(nn.Linear(4, 4), _Branches())
    _SleepsInBackward.slept_ns.clear()
    with pytest.warns(torch_private.HookscopeTorchWarning, match="_get_sequence_nr"):
        trace = hookscope.trace(model, torch.randn(2, 4), backward=True, time=False,
                                stats=False, memory=False)
    (slept,) = _SleepsInBackward.slept_ns
    # the fast branch is charged for the slow one again, as the exit event says
    assert trace.find("1.fast").backward_ns >= slept


class _Raises(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("no")


def test_calls_that_raise_leave_no_backward_bookkeeping_behind() -> None:
    model = nn.Sequential(nn.Linear(4, 4), _Raises())
    with hookscope.Tracer(model, grads=True) as tracer:
        for _ in range(3):  # a loop that catches the model's failures
            with pytest.raises(ValueError):
                model(torch.randn(2, 4))
        assert tracer.run is not None
        watch = tracer.run.backward
        assert watch is not None and watch._starts == {}


def _nested(depth: int) -> nn.Module:
    model: nn.Module = nn.Linear(4, 4)
    for _ in range(depth):
        model = nn.Sequential(nn.Linear(4, 4), model)
    return model


def test_each_autograd_node_gets_one_backward_end_hook_however_deep_the_nesting() -> None:
    counts = {}
    for depth in (10, 40):
        model = _nested(depth)
        with hookscope.Tracer(model, grads=True) as tracer:
            model(torch.randn(2, 4)).sum().backward()
            assert tracer.run is not None
            watch = tracer.run.backward
            assert watch is not None
            counts[depth] = len(watch._handles)
        assert all(p.grad is not None for p in model.parameters())
    # linear in the number of calls (each with a few nodes and hooks), not quadratic
    assert counts[40] < 5 * counts[10]


def test_on_the_meta_device_a_backward_has_no_times() -> None:
    """Nothing runs on meta: the backward times were the bookkeeping's own (ms per layer)."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    t = hookscope.trace(model, input_size=(2, 4), device="meta", backward=True)
    assert t.meta["device"] == "meta" and len(t.calls) == 4
    assert all(c.backward_ns is None and c.backward_self_ns is None for c in t.calls)
    assert [g.status for g in t.param_grads] == ["ok"] * 4  # the gradients did arrive
    assert "Bwd time" not in render_trace(t, width=200)
    real = hookscope.trace(model, torch.randn(2, 4), backward=True)
    assert all(c.backward_ns is not None for c in real.calls)
    assert "Bwd time" in render_trace(real, width=200)


def test_a_parent_returning_its_child_s_output_has_at_least_the_child_s_backward_time() -> None:
    """The parent's start was read after the child's hook on the same gradient: its
    inclusive backward time came out below its only child's, every run."""

    class Wrap(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x)  # type: ignore[no-any-return]

    torch.manual_seed(0)
    for _ in range(3):
        t = hookscope.trace(Wrap(), torch.randn(8, 64), backward=True)
        root, inner = t.find(""), t.find("inner")
        assert root.backward_ns >= inner.backward_ns > 0
        assert root.backward_self_ns == root.backward_ns - inner.backward_ns
        children = sum(t.calls[i].backward_ns for i in inner.children)
        assert inner.backward_self_ns == max(0, inner.backward_ns - children)


class _BadBackward(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return FailsInBackward.apply(x)


def test_a_failing_backward_is_said_to_be_the_backward_and_names_its_module() -> None:
    model = nn.Sequential(nn.Linear(4, 4), _BadBackward(), nn.Linear(4, 1))
    with pytest.raises(hookscope.ModelRunError) as info:
        hookscope.trace(model, torch.randn(2, 4), backward=True)
    text = str(info.value)
    assert text.startswith("the model's backward pass raised RuntimeError")
    assert "in the backward of module '1' (_BadBackward, call 0)" in text
    assert "boom in backward" in text and info.value.path == "1"
    assert total_hooks(model) == 0


def test_recording_parameter_gradients_makes_autograd_copy_none() -> None:
    """A gradient kept by a hook is one autograd cannot steal: it copied every one."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Copies(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            if func in (torch.ops.aten.copy_.default, torch.ops.aten.new_empty_strided.default):
                self.count += 1
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), torch.randn(3, 4)
    counts = []
    for grads in (False, True):
        with hookscope.Tracer(model, grads=grads) as tracer:
            loss = model(x).sum()
            with Copies() as copies:
                loss.backward()
        counts.append(copies.count)
        if grads:
            assert tracer.trace is not None
            norms = [s.norm for s in tracer.trace.param_grads]
            assert norms == pytest.approx([p.grad.norm().item() for p in model.parameters()])
        model.zero_grad(set_to_none=True)
    assert counts[1] == counts[0]


def test_a_second_pass_over_a_retained_graph_gets_its_own_input_gradients() -> None:
    """The hooks on a leaf input went with the first pass: the second one's calls got no
    input gradient, and their norms were the first pass's."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    x = torch.randn(3, 4, requires_grad=True)
    with hookscope.Tracer(model, grads=True) as tracer:
        out = model(x)
        (out.sum() * 0).backward(retain_graph=True)  # a first pass of zero gradients
        out.sum().backward()
    assert tracer.trace is not None
    (oracle,) = torch.autograd.grad(model(x).sum(), [x])  # what the second pass gave x
    by_path = {c.path: c for c in tracer.trace.calls}
    assert by_path[""].grad_input_norm == pytest.approx(oracle.norm().item(), rel=1e-5)
    assert by_path["0"].grad_input_norm == pytest.approx(oracle.norm().item(), rel=1e-5)
    assert total_hooks(model) == 0 and not x._backward_hooks


class _TwiceIn(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * 2 + b * 3


class _SelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj, self.mix = nn.Linear(4, 4), _TwiceIn()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.proj(x)
        y = self.mix(h, h)  # one tensor passed twice
        return y, y  # and returned twice


def test_a_tensor_passed_or_returned_several_times_counts_once_in_the_norms() -> None:
    """Each copy got the whole gradient: the norms were sqrt(2) too large."""
    torch.manual_seed(0)
    model, x = _SelfAttention(), torch.randn(2, 4)
    trace = hookscope.trace(model, x, backward=True)
    h = model.proj(x).detach().requires_grad_()
    y = model.mix(h, h)
    (g_h,) = torch.autograd.grad(2 * y.sum(), h)  # the oracle: the loss sums both outputs
    assert trace["mix"].grad_input_norm == pytest.approx(g_h.norm().item(), rel=1e-6)
    assert trace["mix"].grad_output_norm == pytest.approx(
        torch.full_like(y, 2.0).norm().item(), rel=1e-6)
    assert trace[""].grad_output_norm == pytest.approx(
        torch.full_like(y, 2.0).norm().item(), rel=1e-6)


class _TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body, self.h1, self.h2 = nn.Linear(4, 4), nn.Linear(4, 1), nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.body(x)
        return self.h1(z), self.h2(z)


def test_a_head_the_loss_ignores_is_unused_as_ddp_says() -> None:
    torch.manual_seed(0)
    model, x = _TwoHeads(), torch.randn(3, 4)
    trace = hookscope.trace(model, x, backward=True, loss=lambda out: out[0].sum())
    assert {s.path: s.status for s in trace.param_grads}["h2.weight"] == "unused"
    with hookscope.Tracer(model, grads=True) as tracer:
        model(x)[0].sum().backward()
    assert tracer.trace is not None
    status = {s.path: s.status for s in tracer.trace.param_grads}
    assert status["h2.weight"] == "unused" and status["h1.weight"] == "ok"
    model.zero_grad(set_to_none=True)


def test_parameters_unfrozen_inside_a_tracer_block_are_named_in_a_warning() -> None:
    """pix2pix/CycleGAN freeze and unfreeze D around the G step: what is watched is
    decided when the block starts, and D's parameters were reported ``frozen`` without
    a word although they received gradients inside the block."""
    disc = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    disc.requires_grad_(False)
    thawed = r"4 parameter\(s\) frozen when the block started"
    with pytest.warns(UserWarning, match=thawed) as got, \
            hookscope.Tracer(disc, grads=True) as tracer:
        disc.requires_grad_(True)
        disc(torch.randn(2, 4)).sum().backward()
    assert {w.filename for w in got if "frozen when" in str(w.message)} == {__file__}
    assert tracer.trace is not None
    assert {s.status for s in tracer.trace.param_grads} == {"frozen"}
    assert total_hooks(disc) == 0


@pytest.mark.parametrize("select", [None, "2", "*"])
def test_parameters_autograd_grad_did_not_ask_for_are_no_backward_under_select(
    select: str | None,
) -> None:
    """With select= the root call is not observed, and the walk that tells unused
    parameters from ones not asked for never ran: every one not asked for was
    ``unused``."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    with hookscope.Tracer(model, grads=True, select=select) as tracer:
        torch.autograd.grad(model(torch.randn(3, 4)).pow(2).sum(), [model[2].weight])
    assert tracer.trace is not None
    status = {s.path: s.status for s in tracer.trace.param_grads}
    assert status == {"0.weight": "no_backward", "0.bias": "no_backward",
                      "2.weight": "ok", "2.bias": "no_backward"}
