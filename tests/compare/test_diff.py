"""``hookscope.diff`` and ``hookscope diff``: two finished traces, call by call.

Oracles: the models themselves (``named_modules``, ``parameters``), hand-written
forward hooks (output shapes and bytes, a user statistic), ``FlopCounterMode``, and
the facts of the two traces' own call records; never the diff's output.
"""

from __future__ import annotations

import csv
import io
import json
import math
from html import escape
from pathlib import Path
from typing import Any

import pytest
import torch
import torchvision
from tests.helpers import run_cli
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import hookscope
from hookscope import Fact, Field, Probe
from hookscope.compare import TraceDiff
from hookscope.errors import MissingDependencyError, SpecError


def _params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _out_shapes(model: nn.Module, x: torch.Tensor) -> dict[str, list[int]]:
    """Each module's (first call's) output shape, from plain forward hooks."""
    shapes: dict[str, list[int]] = {}

    def hook(name: str) -> Any:
        def record(mod: nn.Module, args: Any, out: Any) -> None:
            if isinstance(out, torch.Tensor):
                shapes.setdefault(name, list(out.shape))
        return record

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules()]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return shapes


def _flops(model: nn.Module, x: torch.Tensor) -> int:
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x)
    return int(counter.get_total_flops())


def _batch_diff(make: Any, size: int) -> tuple[nn.Module, TraceDiff, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = make().eval()
    x1, x8 = torch.randn(1, 3, size, size), torch.randn(8, 3, size, size)
    a = hookscope.trace(model, x1, ops=True)
    b = hookscope.trace(model, x8, ops=True)
    return model, hookscope.diff(a, b), x1, x8


def _check_batch_diff(model: nn.Module, d: TraceDiff, x1: torch.Tensor, x8: torch.Tensor) -> None:
    shapes_1, shapes_8 = _out_shapes(model, x1), _out_shapes(model, x8)
    assert len(d.matching.pairs) == len(d.a.calls) == len(d.b.calls)
    assert d.matching.only_a == [] and d.matching.only_b == []
    # parameters do not change: no row says so, the answer says so
    assert _params(model) == d.a.model.params_total == d.b.model.params_total
    assert not any("params" in r.changes for r in d.rows)
    assert "parameters unchanged" in d.answer
    by_name = {r.name: r for r in d.rows}
    for path, shape in shapes_1.items():
        row = by_name[path]
        assert row.status == "changed"
        # bytes of the output: 8 times as many, from the hooks' shapes (float32)
        out = row.facts["output_bytes"]
        assert out.a == 4 * math.prod(shape) and out.b == 4 * math.prod(shapes_8[path])
        assert out.delta == out.b - out.a and out.relative == pytest.approx(7.0)
        # the shapes are a structural change, as text
        assert row.changes["outputs"] == (str(shape), str(shapes_8[path]))
    # time: each pair's values are the two records' own
    for call_a, call_b in d.matching.pairs:
        t = by_name[call_a.name].facts["time_ns"]
        assert (t.a, t.b) == (call_a.time_ns, call_b.time_ns)
        assert t.relative == pytest.approx((call_b.time_ns - call_a.time_ns) / call_a.time_ns)
    root = by_name[""].facts
    assert root["time_ns"].changed
    assert (root["flops_forward"].a, root["flops_forward"].b) == (_flops(model, x1),
                                                                   _flops(model, x8))
    # ranked: each row's score is at most the one above it
    scores = [r.score() for r in d.rows]
    assert scores == sorted(scores, reverse=True)
    assert d.rows[0].name in d.answer and d.answer.startswith("Most changed: ")


def test_resnet18_at_batch_1_and_8() -> None:
    _check_batch_diff(*_batch_diff(lambda: torchvision.models.resnet18(num_classes=10), 32))


@pytest.mark.slow
def test_resnet50_at_batch_1_and_8() -> None:
    _check_batch_diff(*_batch_diff(lambda: torchvision.models.resnet50(num_classes=10), 64))


def test_a_trace_against_itself_changes_nothing() -> None:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).eval()
    trace = hookscope.trace(model, torch.randn(1, 3, 32, 32), time=False)
    d = hookscope.diff(trace, trace)
    assert {r.status for r in d.rows} == {"same"} and d.changed == []
    assert d.answer.startswith(f"No fact changed in the {len(trace.calls)} matched calls")


def test_replacing_a_layer_is_a_structural_change() -> None:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).eval()
    x = torch.randn(1, 3, 32, 32)
    a = hookscope.trace(model, x)
    old_fc = _params(model.fc)
    model.fc = nn.Sequential(nn.Linear(512, 64), nn.ReLU(), nn.Linear(64, 10))
    new_fc = _params(model.fc)
    b = hookscope.trace(model, x)
    d = hookscope.diff(a, b)
    fc = next(r for r in d.rows if r.path == "fc")
    assert fc.status == "replaced" and (fc.class_a, fc.class_b) == ("Linear", "Sequential")
    assert fc.changes["params"] == (old_fc, new_fc)
    added = [r for r in d.rows if r.status == "added"]
    assert [r.path for r in added] == ["fc.0", "fc.1", "fc.2"]
    assert [r.changes.get("params") for r in added] == [
        (None, _params(model.fc[i])) for i in range(3)]
    root = next(r for r in d.rows if r.path == "")
    assert root.changes["params"] == (a.model.params_total, _params(model))
    assert a.model.params_total - old_fc == _params(model) - new_fc
    # structural rows first: the calls of one side and the replaced module
    assert {r.path for r in d.rows[:4]} == {"fc", "fc.0", "fc.1", "fc.2"}
    assert "3 calls only in B, 1 call replaced" in d.answer
    assert f"parameters {a.model.params_total:,} → {_params(model):,}" in d.answer
    text = d.table(ascii=True).to_text(width=200)
    assert "fc (Linear -> Sequential)" in text and "added" in text
    assert f"params {old_fc:,} -> {new_fc:,}" in text


class OutputL1(Probe):
    """A user's probe: the L1 norm of each call's output tensor."""

    name = "test_diff_output_l1"
    facts = (Fact("out_abs_sum", "sum of |output|"), Fact("out_numel", "elements of the output"))
    fields = (Field("out_abs_sum", lambda call, trace: call.facts.get("out_abs_sum")),)

    def on_exit(self, call: Any, module: Any, args: Any, kwargs: Any, output: Any,
                failed: bool) -> None:
        if isinstance(output, torch.Tensor):
            call.facts["out_abs_sum"] = float(output.detach().abs().sum())
            call.facts["out_numel"] = output.numel()  # a fact with no field nor column


def _l1_by_hooks(model: nn.Module, x: torch.Tensor) -> dict[str, float]:
    found: dict[str, float] = {}

    def hook(name: str) -> Any:
        def record(mod: nn.Module, args: Any, out: torch.Tensor) -> None:
            found.setdefault(name, float(out.abs().sum()))
        return record

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules()]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return found


def _two_mlps() -> tuple[nn.Module, nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    a = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    b = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    b.load_state_dict(a.state_dict())
    with torch.no_grad():
        b[2].weight.mul_(3.0)  # the planted change: only the last layer's output moves
    return a, b, torch.randn(4, 6)


def test_a_user_probe_fact_is_diffed() -> None:
    model_a, model_b, x = _two_mlps()
    ta = hookscope.trace(model_a, x, probes=[OutputL1()], time=False)
    tb = hookscope.trace(model_b, x, probes=[OutputL1()], time=False)
    d = hookscope.diff(ta, tb)
    la, lb = _l1_by_hooks(model_a, x), _l1_by_hooks(model_b, x)
    for row in d.rows:
        f = row.facts["out_abs_sum"]
        assert f.a == pytest.approx(la[row.path]) and f.b == pytest.approx(lb[row.path])
        assert row.facts["out_numel"].changed is False  # the undeclared-column fact too
    assert not d.rows[0].facts["out_abs_sum"].changed or d.rows[0].path in ("2", "")
    assert {r.path for r in d.changed} == {"2", ""}
    assert d.rows[0].facts["out_abs_sum"].relative == pytest.approx((lb["2"] - la["2"]) / la["2"])
    assert "test_diff_output_l1" in d.a.probes
    assert "out_abs_sum" in d.table(ascii=True).to_text(width=200)


def _saved(tmp_path: Path, *, time: bool = True,
           ) -> tuple[Path, Path, dict[str, float], dict[str, float]]:
    model_a, model_b, x = _two_mlps()
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(hookscope.trace(model_a, x, probes=[OutputL1()], time=time).to_json())
    pb.write_text(hookscope.trace(model_b, x, probes=[OutputL1()], time=time).to_json())
    return pa, pb, _l1_by_hooks(model_a, x), _l1_by_hooks(model_b, x)


def test_json_and_csv_parse(tmp_path: Path) -> None:
    pa, pb, la, lb = _saved(tmp_path)
    d = hookscope.diff(pa, pb)  # files are read as traces
    doc = json.loads(d.to_json())
    assert doc["answer"] == d.answer and len(doc["rows"]) == 4
    for row in doc["rows"]:
        fact = row["facts"]["out_abs_sum"]
        assert fact["a"] == pytest.approx(la[row["path_a"]])
        assert fact["b"] == pytest.approx(lb[row["path_a"]])
    rows = list(csv.DictReader(io.StringIO(d.to_csv())))
    assert [r["path_a"] for r in rows] == [r.path_a for r in d.rows]
    for r in rows:
        assert float(r["out_abs_sum_b"]) == pytest.approx(lb[r["path_a"]])
        assert int(r["time_ns_a"]) == d.a.find(r["path_a"]).time_ns
    html = d._repr_html_()
    assert "<table" in html and escape(d.answer.split(",")[0]) in html


def test_to_dataframe_without_pandas_says_so(tmp_path: Path) -> None:
    pa, pb, *_ = _saved(tmp_path)
    d = hookscope.diff(pa, pb)
    try:
        import pandas  # noqa: F401
    except ImportError:
        with pytest.raises(MissingDependencyError):
            d.to_dataframe()
    else:
        frame = d.to_dataframe()
        assert list(frame["path_a"]) == [r.path_a for r in d.rows]


def test_the_command_prints_table_json_and_csv(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    pa, pb, la, _ = _saved(tmp_path, time=False)
    code, out, err = run_cli(capsys, "diff", str(pa), str(pb), "--width", "200")
    assert code == 0 and err == ""
    # the root's output is layer 2's: of two equal changes, the deeper call is named
    assert out.lstrip().startswith("Most changed: 2 (Linear)"), out
    code, out, _ = run_cli(capsys, "diff", str(pa), str(pb), "-f", "json")
    assert code == 0 and json.loads(out)["rows"][0]["path_a"] in ("2", "")
    code, out, _ = run_cli(capsys, "diff", str(pa), str(pb), "-f", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and {r["path_a"] for r in rows} == {"", "0", "1", "2"}
    assert float(next(r for r in rows if r["path_a"] == "2")["out_abs_sum_a"]) == \
        pytest.approx(la["2"])


def test_the_command_takes_a_mapping(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x = torch.ones(1, 4)
    a = nn.Sequential()
    a.add_module("fc", nn.Linear(4, 2))
    b = nn.Sequential()
    b.add_module("head", nn.Linear(4, 2))
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(hookscope.trace(a, x).to_json())
    pb.write_text(hookscope.trace(b, x).to_json())
    code, out, _ = run_cli(capsys, "diff", str(pa), str(pb), "-f", "json")
    assert {r["status"] for r in json.loads(out)["rows"]} >= {"added", "removed"}
    code, out, _ = run_cli(capsys, "diff", str(pa), str(pb), "-f", "json", "--match", "fc=head")
    rows = json.loads(out)["rows"]
    assert code == 0 and {(r["path_a"], r["path_b"]) for r in rows} == {("", ""), ("fc", "head")}


@pytest.mark.parametrize("content, words", [
    ("{}", ["side B", "schema_version"]),
    ("not json", ["side B", "not a JSON document"]),
    (None, ["cannot read trace file", "side B"]),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          content: str | None, words: list[str]) -> None:
    pa, *_ = _saved(tmp_path)
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    code, out, err = run_cli(capsys, "diff", str(pa), str(bad))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert all(w in err for w in words), err


def test_an_old_schema_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pa, pb, *_ = _saved(tmp_path)
    doc = json.loads(pb.read_text())
    doc["schema_version"] = 1
    pb.write_text(json.dumps(doc))
    code, _, err = run_cli(capsys, "diff", str(pa), str(pb))
    assert code == 2 and "schema_version 1" in err and err.count("\n") == 1


def test_bad_python_arguments_are_spec_errors() -> None:
    model_a, _, x = _two_mlps()
    trace = hookscope.trace(model_a, x, time=False)
    with pytest.raises(SpecError, match="side B is a dict"):
        hookscope.diff(trace, {})  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="sort='nope' is not a numeric fact"):
        hookscope.diff(trace, trace, sort="nope")


def test_a_ddp_wrapped_trace_diffs_call_for_call() -> None:
    model_a, _, x = _two_mlps()
    d = hookscope.diff(hookscope.trace(model_a, x), hookscope.trace(nn.DataParallel(model_a), x))
    assert {r.status for r in d.rows} - {"changed", "same"} == set()  # none added or removed
    assert {(r.path_a, r.path_b) for r in d.rows} == {(p, p) for p in ("", "0", "1", "2")}


def test_a_trace_with_a_wrapper_prefix_diffs_through_it() -> None:
    model_a, _, x = _two_mlps()
    wrapped = nn.Sequential()
    wrapped.add_module("module", model_a)  # a wrapper the tracer does not look through
    d = hookscope.diff(hookscope.trace(model_a, x), hookscope.trace(wrapped, x))
    assert {(r.path_a, r.path_b) for r in d.rows if r.path_a is not None} == {
        ("", "module"), ("0", "module.0"), ("1", "module.1"), ("2", "module.2")}
    assert [(r.path_a, r.path_b) for r in d.rows if r.status == "added"] == [(None, "")]
    assert "wrapper prefixes removed on side B" in str(d.table(ascii=True).to_text(width=200))


class BrokenField(Probe):
    """A user's probe whose export field raises: the diff names it."""

    name = "test_diff_broken_field"
    fields = (Field("broken_field", lambda call, trace: 1 / 0),)


def test_a_raising_field_is_named() -> None:
    model_a, _, x = _two_mlps()
    trace = hookscope.trace(model_a, x, probes=[BrokenField()], time=False)
    with pytest.raises(hookscope.RenderError, match="fact 'broken_field' of probe "
                       "'test_diff_broken_field' raised ZeroDivisionError"):
        hookscope.diff(trace, trace)


def test_a_fact_no_probe_here_declares_is_diffed_from_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A trace file written where a probe of one's own ran, read where it is not
    defined: its numeric facts are still compared."""
    model_a, _, x = _two_mlps()
    doc = json.loads(hookscope.trace(model_a, x, time=False).to_json())
    docs = []
    for value in (2.0, 5.0):
        planted = json.loads(json.dumps(doc))
        planted["calls"][1]["undeclared_metric"] = value  # call "0"
        docs.append(planted)
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(docs[0]))
    pb.write_text(json.dumps(docs[1]))
    code, out, _ = run_cli(capsys, "diff", str(pa), str(pb), "-f", "json",
                           "--sort", "undeclared_metric")
    rows = json.loads(out)["rows"]
    assert code == 0 and rows[0]["path_a"] == "0"
    assert rows[0]["facts"]["undeclared_metric"] == {"a": 2.0, "b": 5.0, "delta": 3.0,
                                                     "relative": 1.5}
    assert all("undeclared_metric" not in r["facts"] for r in rows[1:])
