"""The command line, run in-process through ``hookscope.cli.app(argv)``.

Each test calls ``main([...])`` and reads stdout/stderr with ``capsys``. Numbers are
checked against independent oracles: parameter totals against
``sum(p.numel() for p in model.parameters())``, output shapes against the outputs of
the real model, collected with plain forward hooks.
"""

from __future__ import annotations

import io
import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from helpers import assert_one_error_line, run_cli
from hookscope import examples
from hookscope.api.aggregate import median_times
from hookscope.cli import main
from hookscope.render.table import to_text

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "text"
SEED = "hookscope.examples:seed_model"
CNN = "hookscope.examples:small_cnn"

MODELS_FILE = """
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)
            self.act = nn.ReLU()

        def forward(self, x):
            return self.act(self.fc(x))


    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(4, 6)

        def forward(self, x):
            h = self.body(x)
            return {"logits": h[:, :2], "hidden": h}


    class Boom(nn.Module):
        def forward(self, x):
            raise RuntimeError("boom on purpose\\nwith a second line")


    class Raising(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)
            self.bad = Boom()

        def forward(self, x):
            return self.bad(self.fc(x))


    def make():
        torch.manual_seed(0)
        return Net()


    def heads():
        return Heads()


    def raising():
        return Raising()
"""


class FakeTTY(io.StringIO):
    """A stdout that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def models_file(tmp_path: Path) -> Path:
    path = tmp_path / "models.py"
    path.write_text(textwrap.dedent(MODELS_FILE))
    return path





def real_output_shapes(model: nn.Module, *args: Any) -> dict[str, tuple[int, ...]]:
    """Oracle: the shape of every module's (tensor) output, from plain forward hooks."""
    shapes: dict[str, tuple[int, ...]] = {}

    def record(path: str) -> Any:
        def hook(_module: nn.Module, _inputs: Any, output: torch.Tensor) -> None:
            shapes.setdefault(path, tuple(output.shape))

        return hook

    handles = [m.register_forward_hook(record(p)) for p, m in model.named_modules()]
    try:
        with torch.no_grad():
            model(*args)
    finally:
        for handle in handles:
            handle.remove()
    return shapes


def check_golden(name: str, text: str, update: bool) -> None:
    path = GOLDEN / (re.sub(r"\W+", "_", name).strip("_") + ".txt")
    if update:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"{path} is missing; create it with pytest --update-golden"
    assert text == path.read_text(encoding="utf-8")


# ---------------------------------------------------------------------------- summary


def test_summary_table_of_seed_model(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "summary", SEED, "--input", "2,2")
    assert (code, err) == (0, "")
    for label in ("Model", "ab (Layer_AB)", "b (Function_B)", "d (Function_D)", "Total"):
        assert label in out
    assert "[2, 2]" in out
    assert "\x1b[" not in out  # not a terminal: no colour


def test_summary_json_schema_and_oracles(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "summary", CNN, "--input", "1,3,32,32", "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    model = examples.small_cnn()
    assert doc["schema_version"] == 3
    assert doc["hookscope_version"] == hookscope.__version__
    assert doc["model"]["class"] == "SmallCNN"
    assert doc["model"]["params"]["total"] == sum(p.numel() for p in model.parameters())
    assert doc["model"]["params"]["trainable"] == sum(
        p.numel() for p in model.parameters() if p.requires_grad
    )
    assert doc["model"]["buffers"]["total"] == sum(b.numel() for b in model.buffers())
    modules = {m["path"]: m for m in doc["modules"]}
    assert modules["features.0"]["class"] == "Conv2d"
    assert modules["features.0"]["params"] == 3 * 16 * 9 + 16
    expected = real_output_shapes(model, torch.zeros(1, 3, 32, 32))
    assert {c["path"] for c in doc["calls"]} == set(expected)
    for call in doc["calls"]:
        assert {"path", "call_index", "depth", "parent", "inputs", "outputs"} <= set(call)
        (output,) = call["outputs"]
        assert output["path"] == "out"
        assert tuple(output["shape"]) == expected[call["path"]]
        assert output["dtype"] == "float32"
        for meta in call["inputs"]:
            assert {"path", "shape", "dtype"} <= set(meta)
    assert doc["calls"][0]["parent"] is None
    assert doc["calls"][1]["parent"] == 0 and doc["calls"][1]["depth"] == 1


def test_summary_nested_outputs_have_paths(
    capsys: pytest.CaptureFixture[str], models_file: Path
) -> None:
    code, out, _ = run_cli(capsys, "summary", f"{models_file}:heads", "-i", "2,4", "-f", "json")
    assert code == 0
    root = json.loads(out)["calls"][0]
    shapes = {m["path"]: m["shape"] for m in root["outputs"]}
    assert shapes == {'out["logits"]': [2, 2], 'out["hidden"]': [2, 6]}


def test_summary_depth_limits_rows(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "summary", SEED, "--input", "2,2", "--depth", "1")
    assert code == 0
    assert "ab (Layer_AB)" in out and "cd (Layer_CD)" in out
    assert "Function_A" not in out


def test_summary_file_spec_relative_path(
    capsys: pytest.CaptureFixture[str], models_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(models_file.parent)
    code, out, err = run_cli(capsys, "summary", "models.py:make", "--input", "1,4")
    assert (code, err) == (0, "")
    assert "fc (Linear)" in out and "[1, 3]" in out
    assert "15" in out  # 4 * 3 weights + 3 biases


def test_summary_keyword_input_and_dtype(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "summary", SEED, "-i", "x=2,2:float64", "-f", "json")
    assert code == 0, err
    root = json.loads(out)["calls"][0]
    assert root["inputs"] == [
        {"path": 'kwargs["x"]', "shape": [2, 2], "dtype": "float64", "device": "cpu",
         "requires_grad": False, "layout": "strided"}
    ]
    assert root["outputs"][0]["dtype"] == "float64"  # float32 parameters promote


def test_summary_torchvision_resnet18(capsys: pytest.CaptureFixture[str]) -> None:
    import torchvision

    code, out, err = run_cli(capsys, "summary", "torchvision:resnet18", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    reference = torchvision.models.resnet18(weights=None)
    assert doc["model"]["params"]["total"] == sum(p.numel() for p in reference.parameters())
    assert doc["calls"][0]["inputs"][0]["shape"] == [1, 3, 224, 224]
    assert doc["calls"][0]["outputs"][0]["shape"] == [1, 1000]
    assert doc["calls"][0]["class"] == "ResNet"


def test_summary_torchvision_table_depth(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "summary", "torchvision:resnet18", "--depth", "1")
    assert code == 0
    assert "layer4 (Sequential)" in out and "11,689,512" in out
    assert "BasicBlock" not in out


def test_summary_meta_device_matches_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["summary", CNN, "--input", "1,3,32,32", "--format", "json"]
    _, cpu, _ = run_cli(capsys, *argv)
    code, meta, err = run_cli(capsys, *argv, "--device", "meta")
    assert code == 0, err
    cpu_doc, meta_doc = json.loads(cpu), json.loads(meta)
    assert meta_doc["model"]["params"] == cpu_doc["model"]["params"]
    assert [c["outputs"][0]["shape"] for c in meta_doc["calls"]] == [
        c["outputs"][0]["shape"] for c in cpu_doc["calls"]
    ]
    assert {c["outputs"][0]["device"] for c in meta_doc["calls"]} == {"meta"}


def test_summary_transformers_with_config(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys, "summary", "transformers:gpt2", "--config", "n_layer=2,n_embd=64,n_head=2",
        "--format", "json",
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["model"]["class"] == "GPT2Model"
    root = doc["calls"][0]
    assert root["inputs"][0]["path"] == 'kwargs["input_ids"]'
    assert root["inputs"][0]["shape"] == [1, 128]
    hidden = next(m for m in root["outputs"] if m["path"] == 'out["last_hidden_state"]')
    assert hidden["shape"] == [1, 128, 64]
    assert sum(1 for m in doc["modules"] if m["class"] == "GPT2Block") == 2


def test_summary_output_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    code, out, err = run_cli(capsys, "summary", SEED, "-i", "2,2", "-f", "json", "-o", str(target))
    assert (code, out, err) == (0, "", "")
    assert json.loads(target.read_text())["model"]["class"] == "Model"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temporary left


def test_summary_table_to_file_is_ascii(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "summary.txt"
    code, _, _ = run_cli(capsys, "summary", SEED, "-i", "2,2", "-o", str(target), "--width", "90")
    assert code == 0
    text = target.read_text()
    assert text.startswith("Layer (type)") and "\x1b[" not in text
    assert max(len(line) for line in text.splitlines()) <= 90


def test_terminal_gets_colour_and_box_characters(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tty = FakeTTY()
    monkeypatch.setattr("sys.stdout", tty)
    assert main(["summary", SEED, "--input", "2,2", "--width", "100"]) == 0
    assert "\x1b[" in tty.getvalue()
    assert "━" in tty.getvalue() or "─" in tty.getvalue()
    plain = FakeTTY()
    monkeypatch.setattr("sys.stdout", plain)
    assert main(["summary", SEED, "--input", "2,2", "--width", "100", "--no-color"]) == 0
    assert "\x1b[" not in plain.getvalue()
    assert plain.getvalue().startswith("Layer (type)")


# ---------------------------------------------------------------------------- inspect


def test_inspect_table_needs_no_forward(
    capsys: pytest.CaptureFixture[str], models_file: Path
) -> None:
    code, out, err = run_cli(capsys, "inspect", f"{models_file}:raising")
    assert (code, err) == (0, "")
    assert "bad" in out and "Boom" in out and "15" in out


def test_inspect_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "inspect", SEED, "--format", "json")
    assert code == 0
    doc = json.loads(out)
    model = examples.seed_model()
    assert doc["kind"] == "structure"
    assert doc["model"]["params"]["total"] == sum(p.numel() for p in model.parameters())
    assert doc["model"]["buffers"]["total"] == 1
    assert [m["path"] for m in doc["modules"]] == [p for p, _ in model.named_modules()]
    params = {p["path"]: p for p in doc["parameters"]}
    assert params["ab.b.W1"]["shape"] == [1]
    assert [b["path"] for b in doc["buffers"]] == ["cd.c.duck"]


def test_inspect_meta_device(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "inspect", "torchvision:resnet18", "--device", "meta",
                           "-f", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["model"]["params"]["total"] == 11_689_512
    assert {p["device"] for p in doc["parameters"]} == {"meta"}


# ------------------------------------------------------------------------------ demo


def test_demo_runs_without_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "demo", "--width", "120")
    assert (code, err) == (0, "")
    for heading in ("1. Structure", "2. Summary", "3. Trace", "Next"):
        assert heading in out
    assert 'info["ab.b.W1"]' in out and "SmallCNN" in out
    assert "hookscope summary" in out
    assert "\x1b[" not in out


# ------------------------------------------------------------------------------ trace


def test_trace_json_has_times_and_stats(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "trace", CNN, "-i", "1,3,32,32", "-f", "json")
    assert code == 0, err
    doc = json.loads(out)
    for call in doc["calls"]:
        assert call["time_ns"] is not None and call["self_time_ns"] <= call["time_ns"]
        assert call["stats"] is not None
    assert "time" in doc["probes"] and "stats" in doc["probes"]


def test_trace_without_probes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "trace", SEED, "-i", "2,2", "-f", "json",
                           "--no-time", "--no-stats", "--no-memory")
    assert code == 0
    doc = json.loads(out)
    # a probe that did not run records no fact: its keys are absent
    assert all("time_ns" not in c and "stats" not in c for c in doc["calls"])


def test_trace_table_sort_top(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "trace", CNN, "-i", "1,3,32,32", "--sort", "time",
                             "--top", "3", "--width", "200")
    assert code == 0, err
    assert "SmallCNN" in out  # the root call is the slowest (inclusive time)
    assert "Flatten" not in out


def test_trace_csv(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "trace", SEED, "-i", "2,2", "-f", "csv")
    assert code == 0
    lines = out.strip().splitlines()
    assert len(lines) == 1 + 7  # header + one row per call
    assert "path" in lines[0]


def test_trace_repeat_reports_medians(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "trace", SEED, "-i", "2,2", "-f", "json", "--repeat", "3")
    assert code == 0
    assert json.loads(out)["meta"]["repeat"] == 3


def test_trace_backward(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "trace", SEED, "-i", "2,2", "--backward", "-f", "json")
    assert code == 0, err
    assert json.loads(out)["calls"][0]["path"] == ""


PARAMS_FILE = """
import torch
from torch import nn


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.a = nn.Linear(4, 4)
        self.unused = nn.Linear(4, 4)
        self.frozen = nn.Linear(4, 4).requires_grad_(False)
        self.tied = nn.Linear(4, 4, bias=False)
        self.again = nn.Linear(4, 4, bias=False)
        self.again.weight = self.tied.weight

    def forward(self, x):
        return self.again(self.tied(self.frozen(self.a(x))))


def make():
    return Branchy()
"""


def test_trace_backward_table_names_every_parameter(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The per-parameter gradients were in the JSON only: the table named no unused
    parameter. Oracle: the parameters' own gradients from autograd."""
    path = tmp_path / "branchy.py"
    path.write_text(PARAMS_FILE)
    code, out, err = run_cli(capsys, "trace", f"{path}:make", "-i", "3,4", "--backward",
                             "--width", "150")
    assert code == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if line.split() and line.split()[0] in
            {"a.weight", "a.bias", "unused.weight", "frozen.weight", "tied.weight"}}
    assert rows["unused.weight"][1] == "unused" and rows["frozen.weight"][1] == "frozen"
    assert "(=" in " ".join(rows["tied.weight"])  # one row for the tied weight, its alias
    namespace: dict[str, Any] = {}
    exec(PARAMS_FILE, namespace)
    model = namespace["make"]()
    x = torch.randn((3, 4), generator=torch.Generator().manual_seed(0))
    model(x).sum().backward()
    assert rows["a.weight"][1] == "ok"
    assert float(rows["a.weight"][2]) == pytest.approx(float(model.a.weight.grad.norm()),
                                                       rel=1e-3, abs=0.0)


def flop_counter_total(model: nn.Module, x: torch.Tensor) -> int:
    """Oracle: torch's own FlopCounterMode on the same model and input."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x)
    return int(counter.get_total_flops())


def test_summary_ops_flops_match_flop_counter(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "summary", CNN, "-i", "1,3,32,32", "--ops", "-f", "json")
    assert code == 0, err
    totals = json.loads(out)["totals"]
    assert totals["flops_forward"] == flop_counter_total(examples.small_cnn(),
                                                         torch.zeros(1, 3, 32, 32))
    code, out, _ = run_cli(capsys, "summary", CNN, "-i", "1,3,32,32", "--ops")
    assert code == 0
    assert "FLOPs" in out and "aten.convolution.default" in out


def test_trace_ops_table_top(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "trace", CNN, "-i", "1,3,32,32", "--ops", "--top", "2",
                             "--no-time", "--no-stats", "--no-memory", "--width", "200")
    assert code == 0, err
    assert "aten.convolution.default" in out and "aten.addmm.default" in out
    assert "aten.relu.default" not in out  # only the 2 heaviest op types
    assert "2 of 13 rows" in out or "2 of 13 calls" in out


def test_trace_repeat_shows_progress_on_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stderr = FakeTTY()
    monkeypatch.setattr("sys.stderr", stderr)
    code, out, _ = run_cli(capsys, "trace", SEED, "-i", "2,2", "--repeat", "4")
    assert code == 0
    assert "times are medians of 4 runs" in out
    assert "tracing" in stderr.getvalue() and "4/4" in stderr.getvalue()
    stderr = FakeTTY()  # --no-color asks for plain output: no bar, no escape codes
    monkeypatch.setattr("sys.stderr", stderr)
    code, out, _ = run_cli(capsys, "trace", SEED, "-i", "2,2", "--repeat", "4", "--no-color")
    assert code == 0 and "times are medians of 4 runs" in out
    assert "tracing" not in stderr.getvalue() and "\x1b[" not in stderr.getvalue()


def test_median_times_takes_the_median_per_call() -> None:
    model = examples.seed_model()
    x = torch.ones(2, 2)
    traces = [hookscope.trace(model, x, stats=False, memory=False) for _ in range(3)]
    for trace, scale in zip(traces, (1, 5, 3), strict=True):
        for call in trace.calls:
            call.facts["time_ns"], call.facts["self_time_ns"] = 100 * scale, 10 * scale
    merged = median_times(traces)
    assert {(c.time_ns, c.self_time_ns) for c in merged.calls} == {(300, 30)}
    assert merged.meta["repeat"] == 3


def test_median_times_takes_the_median_of_backward_times_too() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    x = torch.randn(2, 4)
    traces = [hookscope.trace(model, x, backward=True) for _ in range(3)]
    for trace, scale in zip(traces, (9, 1, 5), strict=True):
        for call in trace.calls:
            call.facts["backward_ns"], call.facts["backward_self_ns"] = 100 * scale, 10 * scale
    merged = median_times(traces)
    assert {(c.backward_ns, c.backward_self_ns) for c in merged.calls} == {(500, 50)}


# ------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["summary", "no_colon_here"], ["is not of the form"]),
        (["summary", "missing_file.py:make", "-i", "1,4"], ["not found"]),
        (["summary", "hookscope.examples:no_such", "-i", "2,2"], ["no attribute 'no_such'"]),
        (["summary", "no_such_pkg.mod:make"], ["module 'no_such_pkg.mod' not found"]),
        (["summary", SEED, "--input", "2,x"], ["'2,x'", "empty dimension"]),
        (["summary", SEED, "--input", "2,2:float99"], ["dtype 'float99'"]),
        (["summary", SEED], ["no default inputs", "--input"]),
        (["summary", SEED, "-i", "2,2", "--format", "xml"], ["--format", "'xml'"]),
        (["summary", SEED, "-i", "2,2", "--bogus"], ["No such option: --bogus"]),
        (["summary", SEED, "-i", "2,2", "--depth", "-1"], ["--depth"]),
        (["summary"], ["Missing argument"]),
        (["summarize", SEED], ["No such command"]),
        (["summary", SEED, "-i", "2,2", "--device", "tpu9"], ["device 'tpu9'"]),
        (["summary", SEED, "-i", "2,2", "--config", "a=1"], ["config overrides"]),
        (["summary", "torchvision:resnet19"], ["no model 'resnet19'"]),
        (["inspect", "transformers:gpt3"], ["no model type 'gpt3'"]),
        (["trace", SEED, "-i", "2,2", "--format", "xml"], ["--format"]),
        (["trace", SEED, "-i", "2,2", "--repeat", "0"], ["--repeat"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], fragments: list[str]
) -> None:
    code, _, err = run_cli(capsys, *argv)
    assert_one_error_line(code, err, *fragments)


def test_unknown_column_fails_before_the_model_runs(
    capsys: pytest.CaptureFixture[str], models_file: Path, tmp_path: Path
) -> None:
    target = tmp_path / "trace.txt"
    code, out, err = run_cli(capsys, "trace", f"{models_file}:raising", "-i", "2,4",
                             "--columns", "layer,nope", "-o", str(target))
    assert_one_error_line(code, err, "unknown trace column 'nope'", "valid columns: layer")
    assert out == ""  # the (raising) model never ran: no partial table
    assert not target.exists()


def test_unknown_csv_column_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "trace", SEED, "-i", "2,2", "-f", "csv", "--columns", "nope")
    assert_one_error_line(code, err, "nope")
    assert out == ""


def test_trace_csv_columns(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "trace", SEED, "-i", "2,2", "-f", "csv",
                           "--columns", "path,outputs")
    assert code == 0
    assert out.splitlines()[:3] == ["path,outputs", ",\"[2, 2]\"", "ab,\"[2, 2]\""]


def test_unknown_sort_column_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "trace", SEED, "-i", "2,2", "--sort", "nope")
    assert_one_error_line(code, err, "nope")


def test_model_raising_prints_partial_table_then_one_line(
    capsys: pytest.CaptureFixture[str], models_file: Path
) -> None:
    code, out, err = run_cli(capsys, "summary", f"{models_file}:raising", "--input", "2,4")
    line = assert_one_error_line(code, err, "'bad'", "[2, 3]", "boom on purpose")
    assert "with a second line" in line
    assert "fc (Linear)" in out and "bad (Boom)" in out  # the partial table
    assert "[2, 3]" in out


def test_model_raising_partial_json(capsys: pytest.CaptureFixture[str], models_file: Path) -> None:
    code, out, err = run_cli(capsys, "trace", f"{models_file}:raising", "-i", "2,4", "-f", "json")
    assert_one_error_line(code, err, "'bad'")
    doc = json.loads(out)
    assert doc["error"]["path"] == "bad"
    assert [c["path"] for c in doc["calls"]] == ["", "fc", "bad"]


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_failure_writes_the_partial_result_to_the_output_file(
    capsys: pytest.CaptureFixture[str], models_file: Path, tmp_path: Path, fmt: str
) -> None:
    """The oracle: what the same command prints on stdout without ``-o``."""
    argv = ["summary", f"{models_file}:raising", "-i", "2,4", "-f", fmt, "--width", "100"]
    code, printed, err = run_cli(capsys, *argv)
    assert_one_error_line(code, err, "'bad'")
    target = tmp_path / "out" / "result.txt"
    target.parent.mkdir()
    code, out, err = run_cli(capsys, *argv, "-o", str(target))
    assert_one_error_line(code, err, "'bad'")  # the model's error and exit status 2
    assert out == ""  # with -o, stdout stays empty, as on success
    written = target.read_text()
    if fmt == "json":  # the same document, but for the times measured in each run
        printed_doc, written_doc = json.loads(printed), json.loads(written)
        assert written_doc["error"] == printed_doc["error"] and printed_doc["error"]
        assert [c["path"] for c in written_doc["calls"]] == ["", "fc", "bad"]
        assert written_doc["calls"] == [
            {**c, "start_ns": w["start_ns"]}
            for c, w in zip(printed_doc["calls"], written_doc["calls"], strict=True)
        ]
    else:
        assert "bad (Boom)" in printed and written == printed
    assert [p.name for p in target.parent.iterdir()] == ["result.txt"]  # no temporary


def test_failure_replaces_an_existing_output_file_with_the_partial_result(
    capsys: pytest.CaptureFixture[str], models_file: Path, tmp_path: Path
) -> None:
    target = tmp_path / "result.txt"
    target.write_text("previous result\n")
    target.chmod(0o640)
    code, _, _ = run_cli(capsys, "summary", f"{models_file}:raising", "-i", "2,4",
                         "-o", str(target))
    assert code == 2
    assert "fc (Linear)" in target.read_text() and "FAILED in 'bad'" in target.read_text()
    assert target.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models.py", "result.txt"]


def test_unwritable_output_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "missing_dir" / "out.txt"
    code, _, err = run_cli(capsys, "summary", SEED, "-i", "2,2", "-o", str(target))
    assert_one_error_line(code, err, "cannot write output file", "missing_dir")


def test_debug_shows_the_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "summary", SEED, "--input", "2,x", "--debug")
    assert code == 2
    assert "Traceback" in err and "SpecError" in err
    assert err.splitlines()[-1].startswith("error: ")


def test_internal_error_is_one_line_and_exit_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise TypeError("a bug in hookscope")

    monkeypatch.setattr(hookscope, "summary", broken)
    code, _, err = run_cli(capsys, "summary", SEED, "-i", "2,2")
    assert code == 1
    assert err.splitlines() == [
        "error: internal error: TypeError: a bug in hookscope; rerun with --debug for the "
        "traceback"
    ]


def test_no_arguments_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys)
    assert code == 0
    for command in ("summary", "trace", "inspect", "demo"):
        assert command in out


def test_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "trace", "--help")
    assert code == 0 and "--repeat" in out and "--columns" in out
    code, out, _ = run_cli(capsys, "--version")
    assert (code, out) == (0, f"hookscope {hookscope.__version__}\n")


# ----------------------------------------------------------------------------- golden


def test_golden_summary_cli_ascii(
    capsys: pytest.CaptureFixture[str], update_golden: bool, request: pytest.FixtureRequest
) -> None:
    code, out, _ = run_cli(capsys, "summary", SEED, "-i", "2,2", "--width", "100", "--no-color")
    assert code == 0
    check_golden(request.node.name, out, update_golden)


@pytest.mark.parametrize("ascii", [True, False], ids=["ascii", "box"])
def test_golden_summary_table(
    ascii: bool, update_golden: bool, request: pytest.FixtureRequest
) -> None:
    result = hookscope.summary(examples.seed_model(), torch.ones(examples.SEED_INPUT_SHAPE))
    text = to_text(result.table(ascii=ascii), width=100)
    assert "\x1b[" not in text
    check_golden(request.node.name, text, update_golden)


def test_golden_inspect_cli_ascii(
    capsys: pytest.CaptureFixture[str], update_golden: bool, request: pytest.FixtureRequest
) -> None:
    code, out, _ = run_cli(capsys, "inspect", SEED, "--width", "100")
    assert code == 0
    check_golden(request.node.name, out, update_golden)


def test_cli_main_stays_the_entry_point_after_a_run(capsys: pytest.CaptureFixture[str]) -> None:
    """The commands module must not shadow ``hookscope.cli.main`` once it is imported."""
    import hookscope.cli

    run_cli(capsys, "--version")
    assert callable(hookscope.cli.main) and hookscope.cli.main.__module__ == "hookscope.cli"


def test_a_failing_call_names_its_inputs_dtypes(capsys: pytest.CaptureFixture[str]) -> None:
    """The error named the shapes only: an int64 input, the cause, was not shown."""
    code, _, err = run_cli(capsys, "summary", CNN, "-i", "1,3,32,32:int64")
    assert_one_error_line(code, err, "with inputs args[0]=[1, 3, 32, 32] int64:")
    code, _, err = run_cli(capsys, "summary", CNN, "-i", "1,4,32,32")
    assert_one_error_line(code, err, "with inputs args[0]=[1, 4, 32, 32]:")  # float32


@pytest.mark.parametrize(("command", "name", "check"), [
    (["trace", "hookscope.examples:small_cnn", "-i", "1,3,32,32"], "out.json",
     lambda text: json.loads(text)["calls"]),
    (["trace", "hookscope.examples:small_cnn", "-i", "1,3,32,32"], "out.CSV",
     lambda text: text.splitlines()[0].split(",")[:2] == ["index", "path"]),
    (["summary", "hookscope.examples:small_cnn", "-i", "1,3,32,32"], "out.json",
     lambda text: json.loads(text)["calls"]),
    (["inspect", "hookscope.examples:small_cnn"], "out.json",
     lambda text: json.loads(text)),
    (["lint", "hookscope.examples:small_cnn", "-i", "1,3,32,32"], "out.json",
     lambda text: "findings" in json.loads(text)),
])
def test_an_output_file_s_extension_chooses_the_format(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str], name: str,
        check: Any) -> None:
    path = tmp_path / name
    code, _, err = run_cli(capsys, *command, "-o", str(path))
    assert code == 0, err
    assert check(path.read_text())


def test_format_given_wins_over_the_extension(capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:
    path = tmp_path / "table.json"
    code, _, err = run_cli(capsys, "summary", "hookscope.examples:small_cnn", "-i",
                           "1,3,32,32", "-f", "table", "-o", str(path))
    assert code == 0, err
    with pytest.raises(json.JSONDecodeError):
        json.loads(path.read_text())
    assert "Layer (type)" in path.read_text()
    other = tmp_path / "plain.txt"  # any other name: the table
    assert run_cli(capsys, "summary", "hookscope.examples:small_cnn", "-i", "1,3,32,32",
                   "-o", str(other))[0] == 0
    assert "Layer (type)" in other.read_text()
