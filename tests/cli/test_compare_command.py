"""``hookscope compare SPEC_A [SPEC_B] --b-...``: the one-line answer and the table, JSON
and CSV rows equal to the library's and to a hand computation, and one error line (exit
2) for every bad input."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from torch import nn

from helpers import assert_one_error_line, run_cli

MODEL = """\
import torch
from torch import nn


def make():
    torch.manual_seed(7)  # fixed weights: the test rebuilds the same model
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)).eval()
"""


@pytest.fixture
def spec(tmp_path: Path) -> str:
    path = tmp_path / "compare_model.py"
    path.write_text(MODEL, encoding="utf-8")
    return f"{path}:make"


def _oracle() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(7)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)).eval()
    # the CLI draws --input 3,4 from a generator seeded with 0 (cli/input_specs.make_inputs)
    x = torch.randn((3, 4), generator=torch.Generator().manual_seed(0))
    return model, x


def test_other_weights_are_named_where_they_start(
        spec: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, x = _oracle()
    twin = copy.deepcopy(model)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["2.bias"] += 0.5
    torch.save(state, tmp_path / "w.pt")
    code, out, err = run_cli(capsys, "compare", spec, "--input", "3,4",
                             "--b-weights", str(tmp_path / "w.pt"), "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["first"] == {"path": "2", "call_index": 0}
    rows = {r["path"]: r for r in data["rows"]}
    assert rows["2"]["max_abs"] == pytest.approx(0.5, rel=1e-6)  # the bias, by hand
    assert rows["0"]["max_abs"] == 0.0 and rows["1"]["max_abs"] == 0.0
    twin.load_state_dict(state)
    with torch.no_grad():
        expected = (model(x) - twin(x)).abs().max().item()
    assert rows[""]["max_abs"] == pytest.approx(expected, rel=1e-6)


def test_the_table_answers_first(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "compare", spec, "--input", "3,4", "--b-autocast", "bf16",
                             "--width", "120")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("Side B first differs at '0' (Linear)")
    assert any("0 (Linear) <- first" in line for line in lines)
    assert "autocast bfloat16" in out


def test_two_specs_and_csv(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "compare", spec, spec, "--input", "3,4", "-f", "csv")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("path,call_index,path_b,class,max_abs")
    assert len(lines) == 1 + 4  # the root and its three layers
    assert all(",0.0,0.0,1.0,inf,0.0," in line for line in lines[1:])


@pytest.mark.parametrize(("args", "fragment"), [
    (["--b-autocast", "int8"], "--b-autocast"),
    (["--b-dtype", "float8"], "--b-dtype"),
    (["--b-weights", "/nonexistent/w.pt"], "is not a file"),
    (["--match", "nothing"], "SIDE_A_PATH=SIDE_B_PATH"),
    (["--match", "nope=0"], "side A's model has no module at or under that path"),
    (["--match", "0=nope"], "side B's model has no module at or under that path"),
    (["--tolerance", "-1"], "tolerance="),
    (["--b-compile-backend", "eagr"], "close matches: eager"),
])
def test_bad_input_is_one_error_line(spec: str, args: list[str], fragment: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "compare", spec, "--input", "3,4", *args)
    assert_one_error_line(code, err, fragment)


def test_weights_that_do_not_fit_are_one_error_line(
        spec: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch.save({"other.weight": torch.zeros(2)}, tmp_path / "w.pt")
    code, _, err = run_cli(capsys, "compare", spec, "--input", "3,4",
                           "--b-weights", str(tmp_path / "w.pt"))
    assert_one_error_line(code, err, "b_weights do not fit", "other.weight")


def test_a_model_that_raises_leaves_no_spill_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "raising.py"
    path.write_text("""\
from torch import nn


def make():
    return nn.Sequential(nn.Linear(4, 8), nn.Linear(6, 2))  # 8 features into 6
""", encoding="utf-8")
    spill = tmp_path / "spill"
    code, _, err = run_cli(capsys, "compare", f"{path}:make", "--input", "3,4",
                           "--spill", str(spill))
    assert_one_error_line(code, err, "side A", "'1'")
    assert not spill.exists()


def test_a_compile_backend_by_name(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    """eager: dynamo's graphs run as they are, no compiler needed; the values equal."""
    code, out, err = run_cli(capsys, "compare", spec, "--input", "3,4",
                             "--b-compile-backend", "eager", "-f", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["settings"]["compile"] == "eager"
    assert all(row["max_abs"] == 0.0 for row in data["rows"])
