"""``hookscope memory MODEL``: the plan of a training step from the command line, its
answer line first, JSON and CSV that match the Python API, and one error line for bad
options."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import torch

import hookscope
from helpers import assert_one_error_line, model_spec, run_cli

SOURCE = """
import torch
from torch import nn

def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))
"""


@pytest.fixture
def spec(tmp_path: Path) -> str:
    return model_spec(tmp_path, SOURCE, "mlp")


def _python_plan(**options: object) -> hookscope.MemoryPlan:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 64))
    return hookscope.memory_plan(model, torch.randn(16, 64), **options)  # type: ignore[arg-type]


def test_table_opens_with_the_answer(capsys: pytest.CaptureFixture[str], spec: str) -> None:
    code, out, err = run_cli(capsys, "memory", spec, "-i", "16,64", "--no-color",
                             "--width", "120")
    assert code == 0, err
    plan = _python_plan()
    assert out.splitlines()[0].strip() == plan.headline()
    assert "timeline: forward" in out and "Saved activations" in out


def test_json_is_the_plan_of_the_api(capsys: pytest.CaptureFixture[str], spec: str) -> None:
    code, out, err = run_cli(capsys, "memory", spec, "-i", "16,64", "--optimizer", "sgd",
                             "--shards", "2", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    plan = _python_plan(optimizer="sgd", shards=2)
    assert data["peak_bytes"] == plan.peak_bytes
    assert [m["parameters"] for m in data["modules"]] == [m.parameters for m in plan.modules]
    assert data["optimizer"] == "SGD" and data["shards"] == 2


def test_csv_has_one_row_per_module(capsys: pytest.CaptureFixture[str], spec: str) -> None:
    code, out, err = run_cli(capsys, "memory", spec, "-i", "16,64", "--format", "csv",
                             "--inference")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["path"] for r in rows] == ["", "0", "1", "2"]
    assert all(r["gradients"] == "0" for r in rows)


def test_device_memory_answers_with_a_batch_size(capsys: pytest.CaptureFixture[str],
                                                 spec: str) -> None:
    budget = _python_plan(batch_size=50).peak_bytes
    code, out, err = run_cli(capsys, "memory", spec, "-i", "16,64", "--device-memory",
                             str(budget), "--format", "json")
    assert code == 0, err
    n = json.loads(out)["max_batch_size"]
    assert _python_plan(batch_size=n).peak_bytes <= budget < \
        _python_plan(batch_size=n + 1).peak_bytes


@pytest.mark.parametrize(("args", "fragment"), [
    (["--optimizer", "adamm"], "optimizer='adamm'"),
    (["--device-memory", "lots"], "device_memory='lots'"),
    (["--checkpoint", "nothing.*"], "selects no module"),
])
def test_bad_options_are_one_error_line(capsys: pytest.CaptureFixture[str], spec: str,
                                        args: list[str], fragment: str) -> None:
    code, out, err = run_cli(capsys, "memory", spec, "-i", "16,64", *args)
    assert out == ""
    assert_one_error_line(code, err, fragment)


def test_plot_draws_the_timeline(capsys: pytest.CaptureFixture[str], spec: str,
                                 tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    picture = tmp_path / "timeline.png"
    code, _, err = run_cli(capsys, "memory", spec, "-i", "16,64", "--plot", str(picture),
                           "--no-color")
    assert code == 0, err
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_model_that_reads_its_weights_when_built_is_built_off_meta(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec = model_spec(tmp_path, """
        import torch
        from torch import nn

        class Scaled(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 8)
                self.scale = float(self.fc.weight.abs().max().item())

            def forward(self, x):
                return self.fc(x) * self.scale
    """, "Scaled")
    code, out, err = run_cli(capsys, "memory", spec, "-i", "4,8", "--format", "json")
    assert code == 0, err
    assert "cannot be built on the meta device" in err
    assert json.loads(out)["modules"][0]["parameters"] == (8 * 8 + 8) * 4


def test_a_kernel_that_takes_only_bf16_gets_one_line_naming_the_dtype(
        capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    config = ("num_hidden_layers=1,hidden_size=64,intermediate_size=128,num_attention_heads=4,"
              "num_key_value_heads=2,num_local_experts=4,vocab_size=128")
    code, out, err = run_cli(capsys, "memory", "transformers:mixtral", "--config", config)
    if code == 0:  # a torch whose fake grouped matmul takes float32
        assert "peak" in out
        return
    assert_one_error_line(code, err, "layers.0.mlp.experts", "pass --dtype bfloat16")
    assert run_cli(capsys, "memory", "transformers:mixtral", "--config", config,
                   "--dtype", "bf16")[0] == 0
