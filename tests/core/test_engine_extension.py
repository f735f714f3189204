"""The engine, open to new capabilities (issue 8): a probe defined here, in a test file,
records a per-call and a per-trace fact, gets forward and backward events, and its
facts reach JSON, CSV, the DataFrame and the table with no hookscope file edited.
Backward events, early stop, value replacement and probe errors are checked against
independent oracles (``torch.autograd.grad``, ``param.grad``, call counters)."""

from __future__ import annotations

import json
import math
import re
import time
import warnings
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from helpers import assert_state_unchanged, count_hooks, snapshot_state, total_hooks
from hookscope import Column, Fact, Field, Probe, Unit
from hookscope.core.records.serialize import UnknownFieldsWarning


class GradNormProbe(Probe):
    """Per call: the norm of the output (forward) and of its gradient (backward).
    Per trace: how many backward events arrived, and the parameters' grad norms."""

    name = "gradnorm_test"
    facts = (Fact("out_norm", "norm of the first output"),
             Fact("grad_out_norm", "norm of the gradient of the first output"))
    trace_facts = (Fact("backward_events", "how many backward events arrived", default=0),
                   Fact("param_norms", "parameter path -> gradient norm",
                        default_factory=dict))
    columns = (Column("out_norm", "|out|", lambda c, t: c.facts.get("out_norm"), Unit.STAT),
               Column("grad_out_norm", "|grad out|", lambda c, t: c.facts.get("grad_out_norm"),
                      Unit.STAT))
    fields = (Field("out_norm", lambda c, t: c.facts.get("out_norm")),
              Field("grad_out_norm", lambda c, t: c.facts.get("grad_out_norm")))

    def __init__(self) -> None:
        self.events = 0
        self.param_norms: dict[str, float] = {}
        self.exits: list[str] = []

    def on_exit(self, call: Any, module: nn.Module, args: Any, kwargs: Any, output: Any,
                failed: bool) -> None:
        if isinstance(output, torch.Tensor):
            call.facts["out_norm"] = float(output.detach().norm())

    def on_backward_enter(self, call: Any, grad_outputs: tuple[Any, ...]) -> None:
        self.events += 1
        if grad_outputs and grad_outputs[0] is not None:
            call.facts["grad_out_norm"] = float(grad_outputs[0].norm())

    def on_backward_exit(self, call: Any, grad_inputs: tuple[Any, ...]) -> None:
        self.exits.append(call.path)

    def on_param_grad(self, grad: Any) -> None:
        self.param_norms[grad.path] = float(grad.grad.norm())

    def finalize(self, trace: Any) -> None:
        trace.facts["backward_events"] = self.events
        trace.facts["param_norms"] = dict(self.param_norms)


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=True), nn.Linear(8, 3))


def test_a_probe_from_a_test_file_reaches_json_csv_dataframe_and_the_table() -> None:
    model, x = mlp(), torch.randn(5, 4)
    trace = hookscope.trace(model, x, probes=[GradNormProbe()], backward=True,
                            time=False, stats=False, memory=False)
    with torch.no_grad():
        expected = float(model[0](x).norm())
    assert trace["0"].out_norm == pytest.approx(expected)
    assert trace.backward_events >= 3  # the root and its three children
    # the per-call and per-trace facts survive JSON, and the document names them
    doc = json.loads(trace.to_json())
    assert doc["calls"][1]["out_norm"] == pytest.approx(expected)
    assert doc["facts"]["backward_events"] == trace.backward_events
    assert hookscope.Trace.from_json(trace.to_json()) == trace
    csv_header = trace.to_csv().splitlines()[0].split(",")
    assert {"out_norm", "grad_out_norm"} <= set(csv_header)
    frame = trace.to_dataframe(columns=["path", "out_norm"])
    assert frame["out_norm"].iloc[1] == pytest.approx(expected)
    from hookscope.render.trace_table import render_trace

    text = render_trace(trace, columns=["layer", "out_norm", "grad_out_norm"])
    assert "|out|" in text and "|grad out|" in text
    assert f"{expected:.3g}" in text
    # the default table shows the probe's columns because it ran (headers may wrap)
    assert "|out|" in str(trace) and "|grad" in str(trace)


def test_trace_and_tracer_accept_the_probe_alike() -> None:
    model, x = mlp(), torch.randn(5, 4)
    by_trace = hookscope.trace(model, x, probes=[GradNormProbe], time=False, stats=False,
                               memory=False)
    with hookscope.Tracer(model, probes=[GradNormProbe()]) as tracer:
        model(x)
    assert tracer.trace is not None
    assert [c.out_norm for c in tracer.trace] == [c.out_norm for c in by_trace]
    assert "gradnorm_test" in tracer.trace.probes


def test_backward_events_match_autograd_oracles() -> None:
    model, x = mlp(), torch.randn(5, 4)
    probe = GradNormProbe()
    with hookscope.Tracer(model, probes=[probe]) as tracer:
        out = model(x)
        hidden = model[0](x)  # a second call of layer 0, its output kept as the oracle
        loss = out.pow(2).sum() + hidden.sum()
        loss.backward()
    trace = tracer.trace
    assert trace is not None
    twin = mlp()
    out_t = twin(x)
    loss_t = out_t.pow(2).sum() + twin[0](x).sum()
    (grad_out,) = torch.autograd.grad(loss_t, [out_t], retain_graph=True)
    assert trace[""].grad_out_norm == pytest.approx(float(grad_out.norm()))
    loss_t.backward()
    for path, p in twin.named_parameters():
        assert probe.param_norms[path] == pytest.approx(float(p.grad.norm()))
    assert set(probe.exits) >= {"", "0", "1", "2"}
    # in-place ReLU did not break anything: its backward events arrived
    assert trace["1"].grad_out_norm is not None


def test_autograd_grad_delivers_parameter_gradients_without_touching_grad() -> None:
    model, x = mlp(), torch.randn(5, 4)
    probe = GradNormProbe()
    with hookscope.Tracer(model, probes=[probe]):
        out = model(x).sum()
        grads = torch.autograd.grad(out, list(model.parameters()))
    names = [n for n, _ in model.named_parameters()]
    assert probe.param_norms == pytest.approx(
        {n: float(g.norm()) for n, g in zip(names, grads, strict=True)}
    )
    assert all(p.grad is None for p in model.parameters())


def test_no_hook_is_left_on_modules_or_parameters() -> None:
    model, x = mlp(), torch.randn(5, 4)
    before = count_hooks(model)
    with hookscope.Tracer(model, probes=[GradNormProbe()]) as tracer:
        during = sum(count_hooks(model).values())
        model(x).sum().backward()
    assert during > sum(before.values())  # the tracer did hook modules and parameters
    assert count_hooks(model) == before
    assert tracer.trace is not None


class ParamGradsOnly(Probe):
    """Takes one backward event: each parameter's gradient."""

    name = "param_grads_only_test"

    def __init__(self) -> None:
        self.norms: dict[str, float] = {}

    def on_param_grad(self, grad: Any) -> None:
        self.norms[grad.path] = float(grad.grad.norm())


class BackwardStartsOnly(Probe):
    """Takes one backward event: the gradient of each call's outputs."""

    name = "backward_starts_only_test"

    def __init__(self) -> None:
        self.started: list[str] = []

    def on_backward_enter(self, call: Any, grad_outputs: tuple[Any, ...]) -> None:
        self.started.append(call.path)


def counting_call_hooks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count the hooks the engine puts on calls' tensors: "outputs" (a call's backward
    start) and "inputs" (its end)."""
    from hookscope.core.engine import backward

    made: list[str] = []
    real_outputs, real_inputs = backward.on_gradients, backward.register_multi_grad_hook

    def outputs(tensors: Any, fn: Any) -> Any:
        made.append("outputs")
        return real_outputs(tensors, fn)

    def inputs(tensors: Any, fn: Any) -> Any:
        made.append("inputs")
        return real_inputs(tensors, fn)

    monkeypatch.setattr(backward, "on_gradients", outputs)
    monkeypatch.setattr(backward, "register_multi_grad_hook", inputs)
    return made


def test_a_probe_gets_only_the_backward_events_it_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parameter gradients alone need no hook on any call's tensors (and leave the
    forward on the fast path); a call's backward start needs hooks on its outputs only."""
    made = counting_call_hooks(monkeypatch)
    model, x = mlp(), torch.randn(5, 4)
    params = ParamGradsOnly()
    hookscope.trace(model, x, backward=True, probes=[params], grads=False, time=False,
                    stats=False, memory=False)
    assert made == []
    twin = mlp()
    twin(x).sum().backward()  # trace()'s default loss: the sum of the output
    assert params.norms == pytest.approx(
        {n: float(p.grad.norm()) for n, p in twin.named_parameters()})
    starts = BackwardStartsOnly()
    with hookscope.Tracer(model, shapes=False, probes=[starts]):
        model(x).sum().backward()
    assert sorted(starts.started) == ["", "0", "1", "2"]
    assert made == ["outputs"] * 4  # the outputs of the four calls; no input hooks
    assert all(p.grad is not None for p in model.parameters())


class StopAtProbe(Probe):
    name = "stop_at_test"

    def __init__(self, path: str) -> None:
        self.path = path
        self.tracer: Any = None

    def install(self, tracer: Any) -> list[Any]:
        self.tracer = tracer
        return []

    def on_exit(self, call: Any, module: nn.Module, args: Any, kwargs: Any, output: Any,
                failed: bool) -> None:
        if call.path == self.path:
            self.tracer.stop("found what it was looking for")


class Counting(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(5))
        self.ran: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            self.ran.append(i)
            x = layer(x)
        return x


def test_a_probe_stops_the_run_early_and_the_caller_gets_the_partial_trace() -> None:
    model = Counting()
    state = snapshot_state(model)
    before = count_hooks(model)
    with pytest.raises(hookscope.RunStopped, match="found what it was looking for") as info:
        hookscope.trace(model, torch.randn(2, 4), probes=[StopAtProbe("layers.1")])
    assert model.ran == [0, 1]  # the three layers after the stop never ran
    trace = info.value.trace
    assert trace is not None and trace.stop is not None
    assert trace.stop.probe == "stop_at_test" and trace.stop.path == "layers.1"
    assert trace.error is None  # a stop is not a failure of the model
    assert [c.path for c in trace.calls] == ["", "layers.0", "layers.1"]
    assert count_hooks(model) == before
    assert_state_unchanged(state, model)


@pytest.mark.parametrize("in_tracer", [False, True])
def test_the_call_a_probe_stopped_in_is_recorded_by_every_other_probe(in_tracer: bool) -> None:
    """The stop takes effect once the call's exit event reached every recording probe:
    the stopped call keeps its shapes (the shapes probe runs after a later probe's
    exit), and the caption says who stopped the run, where and why."""
    model = Counting()
    x = torch.randn(2, 4)
    expected = model.layers[1](model.layers[0](x))  # the real output, the oracle
    with pytest.raises(hookscope.RunStopped) as info:
        if in_tracer:
            with hookscope.Tracer(model, stats=True, probes=[StopAtProbe("layers.1")]):
                model(x)
        else:
            hookscope.trace(model, x, probes=[StopAtProbe("layers.1")])
    trace = info.value.trace
    assert trace is not None
    stopped = trace["layers.1"]
    assert [m.shape for m in stopped.outputs] == [tuple(expected.shape)]
    assert [m.shape for m in stopped.inputs] == [tuple(x.shape)]
    assert stopped.stats and stopped.stats[0].numel == expected.numel()
    caption = str(trace).splitlines()[-1]
    assert "STOPPED in 'layers.1' by probe 'stop_at_test': found what it was looking for" \
        in caption


class BrokenProbe(Probe):
    name = "broken_test"

    def on_exit(self, call: Any, module: nn.Module, args: Any, kwargs: Any, output: Any,
                failed: bool) -> None:
        if call.path == "2":
            raise ZeroDivisionError("a bug in the probe")


def test_a_probe_that_raises_is_a_probe_error_not_a_model_failure() -> None:
    model = mlp()
    before = count_hooks(model)
    with pytest.raises(hookscope.ProbeError) as info:
        hookscope.trace(model, torch.randn(2, 4), probes=[BrokenProbe()])
    err = info.value
    assert err.probe == "broken_test" and err.path == "2" and err.event == "on_exit"
    assert "the model itself did not fail" in str(err)
    assert isinstance(err.__cause__, ZeroDivisionError)
    assert not isinstance(err, hookscope.ModelRunError)
    assert err.trace is not None and err.trace.error is None
    assert count_hooks(model) == before


class _Swallowing(nn.Sequential):
    """Catches everything its children raise (a model that swallows errors)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            return super().forward(x)  # type: ignore[no-any-return]
        except Exception:
            return x


@pytest.mark.parametrize("selected", [None, ["<root>", "2"]])
def test_a_probe_error_the_block_handled_stays_handled(selected: list[str] | None) -> None:
    """An error that reached the code in the block, which caught it, was raised again
    when the block ended; one the model swallowed still is (the run did stop)."""
    class BrokenOnce(BrokenProbe):
        def on_exit(self, call: Any, *rest: Any) -> None:
            if call.call_index == 0:
                super().on_exit(call, *rest)

    model = mlp()
    with hookscope.Tracer(model, probes=[BrokenOnce()], select=selected) as tracer:
        with pytest.raises(hookscope.ProbeError):
            model(torch.randn(2, 4))
        assert model(torch.randn(2, 4)).shape == (2, 3)  # runs on, as the loop wanted
    assert tracer.trace is not None
    swallowing = _Swallowing(*mlp())
    with pytest.raises(hookscope.ProbeError, match="a bug in the probe"), \
            hookscope.Tracer(swallowing, probes=[BrokenProbe()]):
        swallowing(torch.randn(2, 4))
    # where the root is not observed, or the model is another module's part, what
    # catches the error is not known: it is raised again
    with pytest.raises(hookscope.ProbeError, match="a bug in the probe"), \
            hookscope.Tracer(swallowing, probes=[BrokenProbe()], select="2"):
        swallowing(torch.randn(2, 4))
    outer = _Swallowing(nn.Identity(), mlp())
    with pytest.raises(hookscope.ProbeError, match="a bug in the probe"), \
            hookscope.Tracer(outer[1], probes=[BrokenProbe()]):
        outer(torch.randn(2, 4))


class DoubleOutput(Probe):
    name = "double_test"
    replaces = True

    def on_exit(self, call: Any, module: nn.Module, args: Any, kwargs: Any, output: Any,
                failed: bool) -> Any:
        return output * 2 if call.path == "0" else None


def test_a_replacing_probe_changes_the_output_and_the_trace_records_what_the_caller_got() -> None:
    model, x = mlp(), torch.randn(2, 4)
    with torch.no_grad():
        expected = model[2](torch.relu(model[0](x) * 2))
        plain = model(x)
    trace_seen = hookscope.trace(model, x, probes=[DoubleOutput(), GradNormProbe()],
                                 time=False, memory=False)
    with hookscope.Tracer(model, probes=[DoubleOutput()]), torch.no_grad():
        got = model(x)
    assert torch.equal(got, expected)
    with torch.no_grad():
        doubled = model[0](x) * 2
    assert trace_seen["0"].out_norm == pytest.approx(float(doubled.norm()))
    with torch.no_grad():
        assert torch.equal(model(x), plain)  # the patch is gone after the block


def test_calls_record_their_start_relative_to_the_trace_start() -> None:
    trace = hookscope.trace(mlp(), torch.randn(2, 4))
    starts = [c.start_ns for c in trace.calls]
    assert all(s is not None and s >= 0 for s in starts)
    assert starts == sorted(starts)
    assert trace.meta["torch_version"] == torch.__version__
    assert trace.meta["hookscope_version"] == hookscope.__version__
    assert trace.meta["device"] == "cpu" and "rank" not in trace.meta


def test_an_older_schema_version_is_refused_in_one_line() -> None:
    from hookscope.core.records.trace import SCHEMA_VERSION

    doc = json.loads(hookscope.trace(mlp(), torch.randn(2, 4)).to_json())
    doc["schema_version"] = SCHEMA_VERSION - 1
    with pytest.raises(hookscope.RenderError, match=r"older than any this hookscope reads"):
        hookscope.Trace.from_json(json.dumps(doc))


def test_a_schema_2_document_with_nan_as_a_string_is_refused() -> None:
    # Schema 2 wrote a non-finite float as the string "nan"; read as schema 3 it would
    # come back as a string, so the document is refused instead.
    trace = hookscope.trace(nn.Sequential(nn.Linear(4, 4)), torch.full((2, 4), math.nan))
    text = re.sub(r'\{\s*"\$float": "nan"\s*\}', '"nan"', trace.to_json())
    assert '"nan"' in text  # the statistics hold NaN
    doc = json.loads(text)
    doc["schema_version"] = 2
    with pytest.raises(hookscope.RenderError, match=r"schema_version 2, older than any"):
        hookscope.Trace.from_json(json.dumps(doc))


def test_unknown_fields_of_a_newer_version_are_kept_with_a_warning() -> None:
    doc = json.loads(hookscope.trace(mlp(), torch.randn(2, 4)).to_json())
    doc["schema_version"] = 99
    doc["calls"][0]["from_the_future"] = {"x": [1, 2]}
    doc["facts"]["future_total"] = 7
    with pytest.warns(UserWarning, match="from_the_future"):
        trace = hookscope.Trace.from_json(json.dumps(doc))
    again = json.loads(trace.to_json())
    assert again["calls"][0]["from_the_future"] == {"x": [1, 2]}
    assert again["facts"]["future_total"] == 7


def test_a_newer_version_without_unknown_fields_is_read_with_a_warning() -> None:
    from hookscope.core.records.trace import SCHEMA_VERSION

    trace = hookscope.trace(mlp(), torch.randn(2, 4))
    doc = json.loads(trace.to_json())
    doc["schema_version"] = SCHEMA_VERSION + 1
    with pytest.warns(UserWarning, match=r"newer hookscope \(schema version"):
        again = hookscope.Trace.from_json(json.dumps(doc))
    assert [c.path for c in again.calls] == [c.path for c in trace.calls]
    with warnings.catch_warnings():  # this version's own documents: no warning
        warnings.simplefilter("error")
        hookscope.Trace.from_json(trace.to_json())


def test_a_nan_statistic_round_trips() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    with torch.no_grad():
        model[0].weight.fill_(math.nan)
    trace = hookscope.trace(model, torch.ones(1, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert hookscope.Trace.from_json(trace.to_json()) == trace


class NanLabel(Probe):
    """Records a NaN float (no encoder) and the string ``"nan"`` side by side."""

    name = "nan_label_test"
    facts = (Fact("nan_label_value", "a float"), Fact("nan_label_text", "a label"))

    def on_exit(self, call: Any, module: Any, args: Any, kwargs: Any, output: Any,
                failed: bool) -> None:
        call.facts["nan_label_value"] = math.nan
        call.facts["nan_label_text"] = "nan"


def test_one_document_writes_every_nan_the_same_way() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    with torch.no_grad():
        model[0].weight.fill_(math.nan)
    trace = hookscope.trace(model, torch.ones(1, 2), stats=True, probes=[NanLabel])
    doc = json.loads(trace.to_json())
    call = doc["calls"][1]
    assert call["stats"][0]["mean"] == {"$float": "nan"}  # an encoder's (value_json.py)
    assert call["nan_label_value"] == {"$float": "nan"}  # no encoder: the default
    back = hookscope.Trace.from_json(trace.to_json()).calls[1]
    assert math.isnan(back.stats[0].mean) and math.isnan(back.nan_label_value)
    assert back.nan_label_text == "nan"  # a string stays a string


class BrokenNeedsStart(Probe):
    name = "broken_needs_start_test"

    def needs_start(self) -> bool:
        raise ValueError("cannot tell")


def test_a_probe_failing_to_say_what_it_needs_is_a_probe_error() -> None:
    model = mlp()
    before = count_hooks(model)
    with pytest.raises(hookscope.ProbeError, match="broken_needs_start_test") as info:
        hookscope.trace(model, torch.randn(2, 4), probes=[BrokenNeedsStart()])
    assert "cannot tell" in str(info.value)
    assert count_hooks(model) == before


class BackwardEnds(Probe):
    """Reads the engine's backward end of every call in ``on_backward_exit``."""

    name = "backward_ends_test"
    uses_backward_end = True

    def __init__(self) -> None:
        self.tracer: Any = None
        self.entered: dict[int, int] = {}
        self.ends: dict[str, Any] = {}

    def install(self, tracer: Any) -> list[Any]:
        self.tracer = tracer
        return []

    def on_backward_enter(self, call: Any, grad_outputs: tuple[Any, ...]) -> None:
        self.entered[call.index] = time.perf_counter_ns()

    def on_backward_exit(self, call: Any, grad_inputs: tuple[Any, ...]) -> None:
        self.ends[call.path] = (self.entered.get(call.index), self.tracer.backward_end(call),
                                time.perf_counter_ns())


class BackwardEndsToo(BackwardEnds):
    name = "backward_ends_too_test"


class BackwardEndsUndeclared(BackwardEnds):
    name = "backward_ends_undeclared_test"
    uses_backward_end = False


def test_a_probe_that_declares_it_reads_each_call_s_backward_end() -> None:
    model = mlp()
    probe, undeclared = BackwardEnds(), BackwardEndsUndeclared()
    too = BackwardEndsToo()  # a second reader gets the same ends
    # grads=False: the gradient probe, which declares it too, is not there
    hookscope.trace(model, torch.randn(2, 4), backward=True, grads=False,
                    probes=[probe, too])
    assert set(probe.ends) == {"", "0", "1", "2"}
    for path, (entered, end, exited) in probe.ends.items():
        assert end is not None, path
        assert entered <= end[0] <= exited  # within the call's backward window
        assert too.ends[path][1] == end
    hookscope.trace(model, torch.randn(2, 4), backward=True, grads=False,
                    probes=[undeclared])
    assert undeclared.ends and all(end is None for _, end, _ in undeclared.ends.values())


# -- declarations and JSON of probes defined by users ---------------------------------------


def test_a_fact_without_an_encoder_holding_nan_or_inf_stays_json() -> None:
    """README's GradNorm probe with an infinite loss: ``to_json`` raised "Out of range
    float values are not JSON compliant"."""

    class NormNoEncoder(Probe):
        name = "user_norm"
        facts = (Fact("user_norm", "a norm"), Fact("user_pair", "two values"),
                 Fact("user_label", "a label"))

        def on_exit(self, call: Any, module: Any, args: Any, kwargs: Any, output: Any,
                    failed: bool) -> None:
            call.facts["user_norm"] = float("inf")
            call.facts["user_pair"] = {"a": float("nan"), "b": [1.0, float("-inf")]}
            call.facts["user_label"] = "inf"

    trace = hookscope.trace(nn.Linear(2, 2), torch.randn(1, 2), probes=[NormNoEncoder])
    text = trace.to_json()
    doc = json.loads(text)  # standard JSON: no NaN/Infinity literals
    assert doc["calls"][0]["user_norm"] == {"$float": "inf"}
    back = hookscope.Trace.from_json(text).calls[0]
    assert back.user_norm == math.inf
    assert math.isnan(back.user_pair["a"]) and back.user_pair["b"] == [1.0, -math.inf]
    assert back.user_label == "inf"  # a string that reads like one stays a string


@pytest.mark.parametrize(("declares", "says"), [
    ({"fields": (Field("time", lambda c, t: 1),)}, "column name of its field 'time_ns'"),
    ({"fields": (Field("path", lambda c, t: 1),)}, "the exports' own fields"),
    ({"columns": (Column("params", "P", lambda c, t: 1),)}, "the trace table's own columns"),
    ({"facts": (Fact("path"),)}, "the engine's call record"),
    ({"facts": (Fact("error"),)}, "the engine's call record"),
])
def test_a_probe_cannot_take_the_name_of_a_built_in_column_field_or_call_key(
    declares: dict[str, Any], says: str
) -> None:
    """A Field ``time`` or ``path`` took over the exports of every trace in the process
    (even of one its probe never ran in); a Fact ``path`` was lost in JSON."""
    with pytest.raises(ValueError, match=re.escape(says)):
        type("Clash", (Probe,), {"name": f"user_clash_{len(says)}", **declares})
    trace = hookscope.trace(nn.Linear(2, 2), torch.randn(1, 2))
    assert trace.to_csv(columns=["path", "time"]).splitlines()[0] == "path,time_ns"


def test_unknown_fields_are_kept_or_said_to_be_ignored() -> None:
    """A newer document's top-level field was said to be kept, and dropped; unknown keys
    of modules and of the model were dropped without a word; a null call key too."""
    doc = json.loads(hookscope.trace(nn.Linear(2, 2), torch.randn(1, 2)).to_json())
    doc["schema_version"] = 3
    doc["new_top"] = {"x": 1}
    doc["modules"][0]["new_module_key"] = 5
    doc["model"]["new_model_key"] = 5
    doc["calls"][0]["new_call_key"] = None
    with pytest.warns(UnknownFieldsWarning) as seen:
        trace = hookscope.Trace.from_json(json.dumps(doc))
    message = str(seen[0].message)
    assert "module 'new_module_key' (ignored)" in message
    assert "model 'new_model_key' (ignored)" in message
    again = json.loads(trace.to_json())
    assert again["new_top"] == {"x": 1}
    assert "new_call_key" in again["calls"][0] and again["calls"][0]["new_call_key"] is None


def test_a_fact_recorded_as_none_comes_back_none() -> None:
    class MaybeScale(Probe):
        name = "user_scale"
        facts = (Fact("user_scale", "a scale", default=1.0),)

        def on_exit(self, call: Any, module: Any, args: Any, kwargs: Any, output: Any,
                    failed: bool) -> None:
            call.facts["user_scale"] = None

    trace = hookscope.trace(nn.Linear(2, 2), torch.randn(1, 2), probes=[MaybeScale])
    back = hookscope.Trace.from_json(trace.to_json())
    assert trace.calls[0].user_scale is None and back.calls[0].user_scale is None
    assert back == trace


def test_a_document_read_before_its_probe_is_defined_is_decoded_once_it_is() -> None:
    """Read in a notebook before ``import myprobes``: the values stayed ``RawValue``,
    and the table raised a TypeError."""
    from hookscope.core.records import facts as core_facts
    from hookscope.render.trace_table import render_trace

    def declare() -> type[Probe]:
        class Late(Probe):
            name = "user_late"
            facts = (Fact("user_late", "numel", encode=lambda v: {"n": v},
                          decode=lambda d: d["n"]),)
            columns = (Column("user_late", "Numel", lambda c, t: c.facts.get("user_late"),
                              Unit.COUNT),)

            def on_exit(self, call: Any, module: Any, args: Any, kwargs: Any,
                        output: Any, failed: bool) -> None:
                call.facts["user_late"] = output.numel()

        return Late

    late = declare()
    text = hookscope.trace(nn.Linear(2, 3), torch.randn(1, 2), probes=[late]).to_json()
    for kind, name in (("facts", "user_late"), ("columns", "user_late")):  # "not defined"
        getattr(core_facts.REGISTRY, {"facts": "call_facts"}.get(kind, kind)).pop(name)
        core_facts.REGISTRY.owners.pop((kind, name))
    with pytest.warns(UnknownFieldsWarning):
        trace = hookscope.Trace.from_json(text)
    assert type(trace.calls[0].facts["user_late"]).__name__ == "RawValue"
    declare()  # the probe's module imported now
    assert trace.calls[0].user_late == 3
    assert trace.calls[0].facts["user_late"] == 3  # decoded on the first read, and kept
    assert "3" in render_trace(trace, columns=["layer", "user_late"]).splitlines()[2]


def test_in_a_tracer_block_a_probe_failing_on_a_failing_call_keeps_the_model_s_failure() -> None:
    """The probe's error replaced the model's: no note on the ValueError, no
    ``trace.error``, and torch's warnings said "the model itself did not fail"."""

    class OnFail(Probe):
        name = "user_onfail"

        def on_exit(self, call: Any, module: Any, args: Any, kwargs: Any, output: Any,
                    failed: bool) -> None:
            if failed:
                raise RuntimeError("probe bug")

    class Boom(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("boom")

    model = nn.Sequential(nn.Linear(4, 4), Boom())
    before = snapshot_state(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's "hook raised" warning would fail here
        tracer = hookscope.Tracer(model, probes=[OnFail])
        with pytest.raises(ValueError, match="boom") as info, tracer:
            model(torch.randn(2, 4))
    notes = getattr(info.value, "__notes__", [])
    assert any("a probe raised while recording this failure in '1'" in n for n in notes)
    assert tracer.trace is not None and tracer.trace.error is not None
    assert tracer.trace.error.path == "1" and tracer.trace.error.exception_type == "ValueError"
    assert_state_unchanged(before, model)


def test_a_column_or_field_that_raises_is_named_with_its_probe() -> None:
    """A column's or field's function that raised surfaced as a bare ZeroDivisionError
    from ``str(trace)``, ``to_csv`` and the notebook view."""
    from hookscope.errors import RenderError
    from hookscope.render.trace_table import render_trace

    class Broken(Probe):
        name = "user_broken"
        columns = (Column("user_broken_c", "Broken", lambda c, t: 1 / 0),)
        fields = (Field("user_broken_f", lambda c, t: 1 / 0),)

    trace = hookscope.trace(nn.Linear(2, 2), torch.randn(1, 2), probes=[Broken])
    with pytest.raises(RenderError, match=r"column 'user_broken_c' of probe 'user_broken' "
                                          r"raised ZeroDivisionError for call '<root>'"):
        render_trace(trace, columns=["layer", "user_broken_c"])
    with pytest.raises(RenderError, match=r"export field 'user_broken_f' of probe "
                                          r"'user_broken' raised ZeroDivisionError"):
        trace.to_csv(columns=["path", "user_broken_f"])


def test_a_fact_cannot_take_the_name_of_a_record_s_attribute() -> None:
    """A trace fact ``unknown`` read back as the record's own ``Trace.unknown``."""
    for declares in ({"trace_facts": (Fact("unknown"),)}, {"trace_facts": (Fact("find"),)},
                     {"facts": (Fact("children"),)}):
        taken = r"is taken by the (trace|call|engine.s call) record"
        with pytest.raises(ValueError, match=taken):
            type("Hidden", (Probe,), {"name": "user_hidden", **declares})


def test_a_probe_cannot_take_another_probe_s_column_or_field_through_the_other_name() -> None:
    """``columns=`` of the table and of the exports take one vocabulary: a column named
    like the timing probe's field ``time_ns`` took over ``columns=["time_ns"]``, and a
    field saying ``column="time"`` took over the exports' ``time``."""
    with pytest.raises(ValueError, match=r"column name 'time_ns' is taken by .*TimingProbe"):
        type("Hijack", (Probe,), {"name": "hijack_a",
                                  "columns": (Column("time_ns", "Mine", lambda c, t: 42),)})
    with pytest.raises(ValueError, match=r"says column='time', which is not a column"):
        type("Hijack", (Probe,), {
            "name": "hijack_b",
            "fields": (Field("hijack_field", lambda c, t: 7, column="time"),)})
    trace = hookscope.trace(nn.Linear(2, 2), torch.randn(1, 2))
    assert trace.to_csv(columns=["path", "time"]).splitlines()[0] == "path,time_ns"


def test_a_probe_s_own_mistakes_are_named_with_the_probe() -> None:
    class NoHandles(Probe):
        name = "no_handles"
        install_touches_modules = False

        def install(self, tracer: Any) -> Any:
            return None  # forgot the list

    model = nn.Linear(2, 2)
    with pytest.raises(hookscope.ProbeError, match=r"'no_handles'.*install\(\) must return a "
                                                   r"list of handles"):
        hookscope.trace(model, torch.randn(1, 2), probes=[NoHandles()])
    assert total_hooks(model) == 0

    class Tensorial(Probe):
        name = "keeps_a_tensor"
        facts = (Fact("output_tensor", "the output itself"),)

        def on_exit(self, call: Any, module: Any, args: Any, kwargs: Any, output: Any,
                    failed: bool) -> None:
            call.facts["output_tensor"] = output.detach()

    trace = hookscope.trace(model, torch.randn(1, 2), probes=[Tensorial()])
    with pytest.raises(hookscope.RenderError, match=r"fact 'output_tensor' of probe "
                       r"'keeps_a_tensor' of call '<root>' holds Tensor"):
        trace.to_json()


class _ShiftOut(Probe):
    name = "shift_output"
    replaces = True

    def on_exit(self, call: Any, module: Any, args: Any, kwargs: Any, output: Any,
                failed: bool) -> Any:
        return output + 100 if call.path == "0" else None


class _ShiftIn(Probe):
    name = "shift_input"
    replaces = True

    def on_enter(self, call: Any, module: Any, args: Any, kwargs: Any) -> Any:
        return ((args[0] + 1000,), kwargs) if call.path == "2" else None


def test_an_outer_tracer_records_what_an_inner_replacing_and_recording_tracer_replaced() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(3, 4)
    seen: dict[str, torch.Tensor] = {}  # the oracle: what each call's caller received
    handles = [model[0].register_forward_hook(lambda m, a, o: seen.update(out0=o.clone())),
               model[2].register_forward_pre_hook(lambda m, a: seen.update(in2=a[0].clone()))]
    with (hookscope.Tracer(model, stats=True, shapes=False) as outer,
          hookscope.Tracer(model, stats=True, shapes=False,
                           probes=[_ShiftOut(), _ShiftIn()]) as inner):
        model(x)
    for h in handles:
        h.remove()
    assert outer.trace is not None and inner.trace is not None
    for trace in (outer.trace, inner.trace):
        assert trace["0"].stats[0].mean == pytest.approx(seen["out0"].mean().item() + 100)
        assert trace["1"].stats[0].mean == pytest.approx(
            (seen["out0"] + 100).relu().mean().item())
    assert outer.trace["2"].stats[0].mean == pytest.approx(inner.trace["2"].stats[0].mean)
    assert total_hooks(model) == 0


class _KeepsOutputs(Probe):
    name = "keeps_outputs"
    replaces = True

    def on_exit(self, call: Any, module: Any, args: Any, kwargs: Any, output: Any,
                failed: bool) -> Any:
        return None


def test_a_replacing_tracer_records_what_a_hook_added_in_its_block_returned() -> None:
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(4, 4), nn.ReLU()), torch.randn(2, 4)
    with hookscope.Tracer(model, stats=True, shapes=False, probes=[_KeepsOutputs()]) as tracer:
        handle = model[0].register_forward_hook(lambda m, a, out: out * 0 + 5)
        out = model(x)
        handle.remove()
    assert tracer.trace is not None
    assert tracer.trace["0"].stats[0].mean == pytest.approx(5.0)  # what the caller got
    assert torch.equal(out, torch.full((2, 4), 5.0))
    assert total_hooks(model) == 0


class _Events(Probe):
    name = "backward_order_test"

    def __init__(self) -> None:
        self.events: list[str] = []

    def on_backward_enter(self, call: Any, grad_outputs: Any) -> None:
        self.events.append(f"enter {call.path}")

    def on_backward_exit(self, call: Any, grad_inputs: Any) -> None:
        self.events.append(f"exit {call.path}")


def test_a_call_s_backward_exit_comes_before_the_backward_of_what_made_its_input() -> None:
    """One tensor is ``1``'s input and ``0``'s output: ``1``'s backward makes its
    gradient, then ``0``'s backward receives it. The events came the other way round."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
    x = torch.randn(3, 4, requires_grad=True)
    probe = _Events()
    with hookscope.Tracer(model, shapes=False, probes=[probe]):
        model(x).sum().backward()
    events = probe.events
    for later, earlier in (("2", "1"), ("1", "0")):
        assert events.index(f"exit {later}") < events.index(f"enter {earlier}")
    assert events.index("exit 0") < events.index("exit ")  # the inner call ends first
