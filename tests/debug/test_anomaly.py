"""hookscope.find_anomaly / detect_anomaly (issue 10): the first non-finite module call,
its output, its inputs, the aten op that made it, and the early stop, checked against
models whose anomaly is known by construction (a log of negatives, a float16
overflow on a reused module's second call, the gradient of sqrt at 0)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from helpers import assert_state_unchanged, count_hooks, snapshot_state, total_hooks


class Log(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 2).log()


class Counted(nn.Module):
    """stem -> log -> head, counting which layers ran."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(4, 4)
        self.log = Log()
        self.head = nn.Linear(4, 2)
        self.ran: list[str] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for name in ("stem", "log", "head"):
            self.ran.append(name)
            x = getattr(self, name)(x)
        return x


class Overflow(nn.Module):
    """A float16 Linear reused twice: its first output is finite, the second overflows."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Linear(4, 4, bias=False).half()
        with torch.no_grad():
            self.scale.weight.fill_(100.0)  # one call: x*400; two calls: x*160000
        self.after = nn.Linear(4, 4).half()
        self.ran: list[str] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.ran.append("first")
        x = self.scale(x)
        self.ran.append("second")
        x = self.scale(x)
        self.ran.append("after")
        return self.after(x)


class SqrtScale(nn.Module):
    """``x * sqrt(w)``: finite forward for w >= 0, an infinite gradient of w at 0."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor([0.0, 1.0, 4.0, 9.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w.sqrt()


def test_a_log_of_negatives_is_found_at_its_layer_with_its_op_and_the_rest_never_runs() -> None:
    torch.manual_seed(0)
    model = Counted()
    x = torch.randn(3, 4)
    with torch.no_grad():
        hidden = model.stem(x)
        expected_nans = int(torch.isnan((hidden * 2).log()).sum())
    model.ran.clear()
    before = snapshot_state(model)
    report = hookscope.find_anomaly(model, x)
    assert report is not None and expected_nans > 0
    a = report.first
    assert (a.path, a.module_class, a.call_index, a.tensor) == ("log", "Log", 0, "out")
    assert (a.nan_count, a.inf_count, a.numel) == (expected_nans, 0, 12)
    assert model.ran == ["stem", "log"]  # head never ran
    [inp] = a.inputs
    assert inp.finite is True and inp.stats.path == "args[0]"
    assert inp.stats.min == pytest.approx(float(hidden.min()))
    assert a.op is not None and a.op.name == "aten.log.default" and a.op.path == "log"
    assert [t.finite for t in a.op.inputs] == [True]
    assert a.op.outputs[0].nan_count == expected_nans and a.op.outputs[0].shape == (3, 4)
    assert report.stopped and report.trace is not None
    assert [c.path for c in report.trace.calls] == ["", "stem", "log"]
    assert_state_unchanged(before, model)
    assert total_hooks(model) == 0


def test_a_float16_overflow_on_the_second_call_of_a_reused_module() -> None:
    model = Overflow()
    x = torch.full((2, 4), 1.0, dtype=torch.float16)
    report = hookscope.find_anomaly(model, x)
    assert report is not None
    a = report.first
    assert (a.path, a.call_index) == ("scale", 1)  # the second call, not the first
    assert a.inf_count == 8 and a.nan_count == 0
    [inp] = a.inputs
    assert inp.finite is True and inp.stats.max == pytest.approx(400.0)
    assert a.op is not None and a.op.name == "aten.mm.default"
    assert model.ran == ["first", "second"]


def test_a_clean_model_gives_none_and_every_layer_runs() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=True), nn.Linear(8, 2))
    before = count_hooks(model)
    assert hookscope.find_anomaly(model, torch.randn(3, 4)) is None
    assert hookscope.find_anomaly(model, torch.randn(3, 4), backward=True) is None
    assert count_hooks(model) == before


def test_an_input_that_is_already_nan_is_reported_as_not_finite() -> None:
    model = nn.Sequential(nn.Linear(4, 2))
    x = torch.ones(1, 4)
    x[0, 1] = float("nan")
    report = hookscope.find_anomaly(model, x)
    assert report is not None
    a = report.first
    assert a.path == "0"  # calls end innermost first: the Linear before the Sequential
    assert [i.finite for i in a.inputs] == [False]
    assert a.inputs[0].stats.nan_count == 1
    assert a.op is not None and False in [t.finite for t in a.op.inputs]


class LogBetweenChildren(nn.Module):
    """The NaN is made by the parent's own code, between two submodules: the first call
    whose output is not finite (``act``) only passes it on."""

    def __init__(self, inplace: bool) -> None:
        super().__init__()
        self.lin, self.act, self.head = nn.Linear(3, 3), nn.ReLU(inplace=inplace), nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.lin(x).log()))


@pytest.mark.parametrize("inplace", [False, True])
def test_a_nan_made_by_the_parents_own_code_is_traced_back_to_its_op(inplace: bool) -> None:
    torch.manual_seed(0)
    model, x = LogBetweenChildren(inplace), torch.randn(2, 3)
    with torch.no_grad():
        made = model.lin(x).log()
    assert not bool(torch.isfinite(made).all())
    report = hookscope.find_anomaly(model, x)
    assert report is not None
    a = report.first
    assert a.path == "act"  # the first call whose output is not finite
    assert a.origin is not None
    assert (a.origin.name, a.origin.path) == ("aten.log.default", "")
    assert [t.finite for t in a.origin.inputs] == [True]
    assert "made before the call by aten.log.default in <root>" in str(report)
    assert json.loads(report.to_json())["anomalies"][0]["origin"]["name"] == "aten.log.default"


def test_a_nan_made_inside_the_call_names_no_origin() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), Log(), nn.Linear(4, 2))
    report = hookscope.find_anomaly(model, torch.randn(3, 4))
    assert report is not None and report.first.op is not None
    assert report.first.origin is None


def test_collect_all_reports_every_anomalous_call_in_execution_order() -> None:
    torch.manual_seed(0)
    model = Counted()
    report = hookscope.find_anomaly(model, torch.randn(3, 4), collect_all=True)
    assert report is not None and not report.stopped
    assert [(a.path, a.op.path if a.op else None) for a in report.anomalies] == [
        ("log", "log"), ("head", "head"), ("", "log")]
    assert model.ran == ["stem", "log", "head"]


def test_a_backward_anomaly_names_the_node_then_the_parameter() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), SqrtScale(), nn.Linear(4, 2))
    x = torch.randn(3, 4)
    assert hookscope.find_anomaly(model, x) is None  # the forward is finite
    # oracle: autograd's own gradient of the same loss
    (g,) = torch.autograd.grad(model(x).sum(), [model[1].w])
    bad = int((~torch.isfinite(g)).sum())
    report = hookscope.find_anomaly(model, x, backward=True)
    assert report is not None
    a = report.first
    assert a.phase == "backward" and a.kind.value == "backward_node"
    assert a.node is not None and a.node.name == "SqrtBackward0"  # w.sqrt(), at w = 0
    assert a.path == "1" and a.module_class == "SqrtScale"
    assert a.inf_count + a.nan_count == bad
    every = hookscope.find_anomaly(model, x, backward=True, collect_all=True)
    assert every is not None
    param = every.anomalies[1]
    assert (param.kind.value, param.parameter, param.path) == ("param_grad", "1.w", "1")
    assert param.inf_count + param.nan_count == bad
    assert param.op is not None and param.op.phase == "backward" and param.op.path == "1"
    assert all(p.grad is None for p in model.parameters())
    assert total_hooks(model) == 0


def test_the_report_prints_and_round_trips_as_json() -> None:
    torch.manual_seed(0)
    report = hookscope.find_anomaly(Counted(), torch.randn(3, 4))
    assert report is not None
    text = str(report)
    assert text.splitlines()[0].startswith(
        "First non-finite value: forward output out of module 'log' (Log, call 0) holds")
    assert "first op that produced it: aten.log.default in 'log'" in text
    assert "the rest of the model did not run" in text
    doc = json.loads(report.to_json())
    assert doc["schema_version"] == 2 and doc["calls_run"] == 3
    [found] = doc["anomalies"]
    assert found["path"] == "log" and found["op"]["name"] == "aten.log.default"
    assert found["kind"] == "output" and found["inputs"][0]["stats"]["nan_count"] == 0


def test_detect_anomaly_raises_inside_the_users_loop_with_the_same_report() -> None:
    torch.manual_seed(0)
    model = Counted()
    good, bad = torch.ones(2, 4) * 0.0, torch.randn(3, 4)
    with torch.no_grad():
        model.stem.weight.zero_()
        model.stem.bias.fill_(1.0)  # stem(x) = 1 for every x: log(2) is finite
    steps = 0
    with hookscope.detect_anomaly(model):
        for _ in range(2):
            model(good).sum().backward()
            steps += 1
    with torch.no_grad():
        model.stem.bias.fill_(-1.0)
    with pytest.raises(hookscope.NonFiniteError) as info, hookscope.detect_anomaly(model):
        model(bad)
    assert steps == 2
    report = info.value.report
    assert report.first.path == "log" and report.first.op is not None
    assert isinstance(info.value, hookscope.RunStopped)
    assert total_hooks(model) == 0


def test_bad_options_are_spec_errors() -> None:
    with pytest.raises(hookscope.SpecError, match="collect_all"):
        hookscope.find_anomaly(nn.Linear(2, 2), torch.ones(1, 2), collect_all="yes")
    with pytest.raises(hookscope.SpecError, match="pdb= must be True or False"):
        hookscope.find_anomaly(nn.Linear(2, 2), torch.ones(1, 2), pdb="yes")


class MaskedAttention(nn.Module):
    """A -inf mask inside a softmax: a non-finite op whose call still ends finite."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.ones(x.shape[-1], x.shape[-1], dtype=torch.bool).triu(1)
        scores = (x.unsqueeze(-1) * x.unsqueeze(-2)).masked_fill(mask, float("-inf"))
        return scores.softmax(-1).sum(-1)


class MaskThenOverflow(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = MaskedAttention()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x) * 1e39  # float32 overflow: the parent's own op


def test_a_masked_non_finite_op_inside_a_finite_child_is_not_the_parents_cause() -> None:
    model = MaskThenOverflow()
    x = torch.ones(2, 4)
    with torch.no_grad():
        inner = model.attn(x)
    assert bool(torch.isfinite(inner).all())  # the child is finite despite its -inf op
    report = hookscope.find_anomaly(model, x)
    assert report is not None
    a = report.first
    assert (a.path, a.inf_count) == ("", 8)
    # what made the parent's output infinite: its own multiplication, not the mask
    assert a.op is not None and a.op.name == "aten.mul.Tensor" and a.op.path == ""
    assert [t.finite for t in a.op.inputs] == [True]


class RepairedThenOverflow(nn.Module):
    """A log of negatives repaired in place, then an overflow: the first op that made
    a non-finite value is still the log, though its output no longer holds one."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.log()
        y.nan_to_num_(0.0)
        return y + x * 1e39


def test_an_op_whose_output_is_overwritten_in_place_is_checked_before_the_write() -> None:
    x = torch.tensor([[-1.0, 2.0]])
    report = hookscope.find_anomaly(RepairedThenOverflow(), x)
    assert report is not None and report.first.op is not None
    assert report.first.op.name == "aten.log.default"
    assert report.first.op.outputs[0].nan_count == 1


def test_holding_few_unchecked_ops_finds_the_same_op(monkeypatch: pytest.MonkeyPatch) -> None:
    from hookscope.debug import op_check as checks

    torch.manual_seed(0)
    x = torch.randn(3, 4)
    expected = hookscope.find_anomaly(Counted(), x)
    monkeypatch.setattr(checks, "PENDING_LIMIT", 1)  # every op is checked at once
    found = hookscope.find_anomaly(Counted(), x)
    assert expected is not None and found is not None
    assert expected.first.op is not None and found.first.op is not None
    assert (found.first.op.name, found.first.op.path) == (expected.first.op.name, "log")


class ReluAfterLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x))


@pytest.mark.parametrize("how", ["patch", "user hook"])
def test_an_in_place_relu_whose_output_something_else_wrote_into_is_read(how: str) -> None:
    # an in-place ReLU of a finite input is finite without reading it, unless a patch
    # or a hook wrote into the same tensor: then its output is read, and found
    torch.manual_seed(0)
    model = ReluAfterLinear()
    x = torch.randn(2, 4)
    assert hookscope.find_anomaly(model, x) is None

    def poison(module: nn.Module, inputs: Any, output: torch.Tensor) -> torch.Tensor:
        return output.fill_(float("nan"))

    if how == "patch":
        with hookscope.patch(model, {"act": poison}):
            report = hookscope.find_anomaly(model, x)
    else:
        handle = model.act.register_forward_hook(poison)
        try:
            report = hookscope.find_anomaly(model, x)
        finally:
            handle.remove()
    assert report is not None
    assert (report.first.path, report.first.nan_count) == ("act", 8)


class WritesThroughData(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        y.data[0, 0] = float("nan")  # no version bump: the value changes unseen by autograd
        return y


@pytest.mark.parametrize("ops", [True, False])
def test_a_nan_written_through_data_after_a_child_checked_it_is_found(ops: bool) -> None:
    report = hookscope.find_anomaly(nn.Sequential(WritesThroughData()), torch.randn(2, 4),
                                    ops=ops)
    assert report is not None and report.first.path == "0"


def test_an_in_place_relu_with_a_forward_patched_on_the_instance_is_read() -> None:
    torch.manual_seed(0)
    model = ReluAfterLinear()
    model.act.forward = lambda x: x.mul_(float("nan"))  # type: ignore[method-assign]
    report = hookscope.find_anomaly(model, torch.randn(2, 4))
    assert report is not None and report.first.path == "act"


class LayerNorms(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(4):
            x = torch.nn.functional.layer_norm(x, x.shape[-1:])
        return x


def test_ops_with_tuple_outputs_count_against_the_held_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hookscope.debug import op_check as checks

    held: list[int] = []
    flush = checks.OpCheckMode.flush

    def counting_flush(self: checks.OpCheckMode) -> None:
        held.append(self._held)
        flush(self)

    monkeypatch.setattr(checks, "PENDING_LIMIT", 100)
    monkeypatch.setattr(checks.OpCheckMode, "flush", counting_flush)
    assert hookscope.find_anomaly(LayerNorms(), torch.randn(8, 32)) is None
    assert held and max(held) > 100  # native_layer_norm returns a tuple: counted


def test_the_meta_device_is_a_spec_error_not_a_clean_run() -> None:
    """Nothing is computed on meta: the run came back "every output is finite" for a
    model that makes NaN on the CPU."""

    class Log(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.log()

    model = nn.Sequential(nn.Identity(), Log())
    x = -torch.ones(2, 4)
    assert hookscope.find_anomaly(model, x) is not None  # log(-1): NaN on the CPU
    with pytest.raises(hookscope.SpecError, match="meta device has shapes but no values"):
        hookscope.find_anomaly(model.to("meta"), x.to("meta"))
    with pytest.raises(hookscope.SpecError, match="meta"):
        hookscope.find_anomaly(nn.Sequential(nn.Linear(4, 4), Log()), x.to("meta"))


def test_batch_norm_writing_its_statistics_is_marked_in_place() -> None:
    """native_batch_norm updates running_mean/var without saying so in its schema: the
    report listed them as NaN inputs, as if they had been NaN before the op."""
    model = nn.Sequential(nn.BatchNorm1d(4)).train()
    x = torch.randn(6, 4)
    x[0, 0] = math.nan
    report = hookscope.find_anomaly(model, x)
    assert report is not None and report.first.op is not None
    assert "batch_norm" in report.first.op.name and report.first.op.inplace
    assert torch.isfinite(model[0].running_mean).all()  # and the model is put back


@pytest.mark.parametrize("made_inside", [False, True])
def test_inside_inference_mode_the_anomaly_is_found_as_under_no_grad(made_inside: bool) -> None:
    """Inference tensors keep no version counter: reading one raised, which made
    find_anomaly and detect_anomaly fail with a ProbeError inside evaluation code."""
    torch.manual_seed(0)
    model = Counted()
    x = torch.randn(3, 4)
    with torch.no_grad():
        expected = hookscope.find_anomaly(model, x)
    assert expected is not None
    with torch.inference_mode():
        inputs = torch.randn(3, 4).copy_(x) if made_inside else x
        report = hookscope.find_anomaly(model, inputs)
        with pytest.raises(hookscope.NonFiniteError) as info, hookscope.detect_anomaly(model):
            model(inputs)
    assert report is not None
    for found in (report.first, info.value.report.first):
        assert (found.path, found.nan_count) == (expected.first.path, expected.first.nan_count)
    assert total_hooks(model) == 0


class Tagged(torch.Tensor):
    """A tensor subclass that keeps its own data (as MONAI's MetaTensor does)."""


def test_a_nan_in_a_tensor_subclass_that_holds_its_data_is_found() -> None:
    """Only exact ``torch.Tensor``/``Parameter`` values were read: a model fed a
    metadata-carrying subclass was reported clean with a NaN in its output."""
    torch.manual_seed(0)
    model = Counted()
    x = torch.randn(3, 4)
    plain = hookscope.find_anomaly(model, x)
    tagged = hookscope.find_anomaly(model, x.as_subclass(Tagged))
    assert plain is not None and tagged is not None
    assert type(model(x.as_subclass(Tagged))) is Tagged  # the subclass flows through
    assert (tagged.first.path, tagged.first.nan_count) == (plain.first.path, plain.first.nan_count)
    with pytest.raises(hookscope.NonFiniteError) as info, hookscope.detect_anomaly(model):
        model(x.as_subclass(Tagged))
    assert info.value.report.first.path == plain.first.path


class MaskThenLog(nn.Module):
    """A legitimate ``-inf`` mask made first, then the bug: a log of negatives, both in
    the parent's own code, before the child that receives the NaN."""

    def __init__(self) -> None:
        super().__init__()
        self.proj, self.act = nn.Linear(4, 4), nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.full((4, 4), float("-inf")).triu(1)
        h = torch.log(self.proj(x)) + mask.diagonal()  # the diagonal is all zeros: finite
        return self.act(h)


def test_the_origin_is_the_op_that_made_the_value_the_call_received() -> None:
    """The origin was the caller's first non-finite op, whatever value it made: the
    causal mask, not the log whose NaN reached the child."""
    torch.manual_seed(0)
    report = hookscope.find_anomaly(MaskThenLog(), torch.randn(3, 4))
    assert report is not None
    a = report.first
    assert a.path == "act" and a.origin is not None
    assert (a.origin.name, a.origin.path) == ("aten.log.default", "")
    assert all(i.finite for i in a.origin.inputs)


def test_a_nan_in_the_models_input_or_in_a_parameter_names_no_origin() -> None:
    """A NaN the model received was said to be made by the first op that passed it on
    (``aten.add`` in the root), and a NaN weight by the caller's mask op."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    x = torch.randn(2, 4)
    x[0, 0] = float("nan")
    report = hookscope.find_anomaly(model, x)
    assert report is not None and report.first.path == "0"
    assert report.first.origin is None
    assert report.first.inputs[0].finite is False  # it came in, and the report says so
    model = MaskThenLog()
    with torch.no_grad():
        model.proj.weight[0, 0] = float("nan")
        model.proj.bias.fill_(10.0)  # the log's input stays positive where finite
    report = hookscope.find_anomaly(model, torch.randn(3, 4).abs() * 0.01)
    assert report is not None and report.first.path == "proj"
    assert report.first.origin is None  # the value was made from its own weight
    assert all(i.finite for i in report.first.inputs)


class _SafeSqrt(nn.Module):
    """A finite forward whose input gradient is NaN where the input is not positive."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x.sqrt(), torch.zeros_like(x))


def test_a_parameter_gradient_is_checked_in_backward_order() -> None:
    """Under ``torch.autograd.grad`` a parameter's gradient was checked at the end of
    the backward: a later module gradient was reported first, with the op of the
    parameter's gradient."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), _SafeSqrt(), nn.Linear(4, 4), SqrtScale())
    x = torch.randn(3, 4)
    order: list[tuple[str, bool]] = []  # the oracle: tensor hooks, in autograd's order
    out = model[1](model[0](x))
    out.register_hook(lambda g: order.append(("grad_out of 1", bool(g.isfinite().all()))))
    out = model[3](model[2](out))
    handle = model[3].w.register_hook(lambda g: order.append(("3.w", bool(g.isfinite().all()))))
    torch.autograd.grad(out.sum(), list(model.parameters()))
    handle.remove()
    first_bad = next(name for name, finite in order if not finite)
    assert first_bad == "3.w"
    report = hookscope.find_anomaly(model, x, backward=True, collect_all=True)
    assert report is not None
    node, param = report.anomalies[:2]  # the node that made it, then the parameter's
    assert node.node is not None and (node.node.name, node.path) == ("SqrtBackward0", "3")
    assert param.parameter == "3.w" and param.inf_count == 1


def test_a_gradient_made_in_a_call_s_backward_is_that_call_s_gradient_input() -> None:
    """One tensor is the gradient of ``sq``'s input and of ``t``'s output: autograd
    makes it in ``sq``'s backward, before ``t``'s starts. The report named ``t``'s
    output gradient, with ``sq``'s op."""
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("lin", nn.Linear(4, 4))
    model.add_module("t", nn.Tanh())
    model.add_module("sq", _SafeSqrt())
    model.add_module("out", nn.Linear(4, 2))
    x = torch.randn(3, 4)
    order: list[str] = []  # the oracle: torch's full backward hooks, in autograd's order
    handles = [m.register_full_backward_hook(
        lambda m, gi, go, n=n: order.append(n) if gi[0] is not None
        and not bool(gi[0].isfinite().all()) else None) for n, m in model.named_children()]
    # x needs no gradient: torch says so of the first layer's hook
    with pytest.warns(UserWarning, match="no inputs require gradients"):
        torch.autograd.grad(model(x).sum(), list(model.parameters()))
    for h in handles:
        h.remove()
    assert order[0] == "sq"
    report = hookscope.find_anomaly(model, x, backward=True)
    assert report is not None
    a = report.first
    assert a.node is not None and (a.node.name, a.path) == ("SqrtBackward0", "sq")
    every = hookscope.find_anomaly(model, x, backward=True, collect_all=True)
    assert every is not None
    assert [(b.path, b.tensor) for b in every.anomalies][:3] == [
        ("sq", "grad_in[0]"), ("sq", "grad_in[0]"), ("t", "grad_out[0]")]
    assert [b.kind.value for b in every.anomalies][:3] == [
        "backward_node", "grad_input", "grad_output"]


class _LogThenMask(nn.Module):
    """The bug (a log of negatives) and then a legitimate ``-inf`` mask, both reaching
    the child through one add: the NaN's maker is the log, not the mask."""

    def __init__(self, mask_kind: str) -> None:
        super().__init__()
        self.proj, self.act, self.mask_kind = nn.Linear(4, 4), nn.Softmax(-1), mask_kind

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = torch.log(self.proj(x))
        causal = torch.ones(3, 4, dtype=torch.bool).triu(1)
        if self.mask_kind == "masked_fill":
            mask = torch.zeros(3, 4).masked_fill(causal, float("-inf"))
        else:  # made by a write (fill_), then triu
            mask = torch.full((3, 4), float("-inf")).triu(1)
        return self.act(scores + mask)


@pytest.mark.parametrize("mask_kind", ["masked_fill", "full"])
def test_the_origin_follows_every_branch_to_the_op_that_made_a_nan(mask_kind: str) -> None:
    torch.manual_seed(0)
    report = hookscope.find_anomaly(_LogThenMask(mask_kind), torch.randn(3, 4))
    assert report is not None and report.first.path == "act"
    assert report.first.origin is not None
    assert report.first.origin.name == "aten.log.default"


class _PassesOn(nn.Module):
    """A NaN of the model's input or of its own buffer passed straight to a child, after
    the root made an unrelated ``-inf`` mask."""

    def __init__(self, from_buffer: bool) -> None:
        super().__init__()
        self.a, self.from_buffer = nn.Linear(4, 4), from_buffer
        self.register_buffer("pos", torch.full((2, 4), float("nan")))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.zeros(2, 4).masked_fill(torch.ones(2, 4, dtype=torch.bool), float("-inf"))
        h = self.a(self.pos if self.from_buffer else x)
        return h + mask.exp()


@pytest.mark.parametrize("from_buffer", [False, True])
def test_a_nan_from_the_model_s_input_or_buffer_has_no_origin(from_buffer: bool) -> None:
    x = torch.randn(2, 4) if from_buffer else torch.full((2, 4), float("nan"))
    report = hookscope.find_anomaly(_PassesOn(from_buffer), x)
    assert report is not None and report.first.path == "a"
    assert report.first.origin is None
