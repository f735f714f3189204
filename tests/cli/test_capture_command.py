"""``hookscope capture MODEL --select GLOB -o DIR``: the activations of the selected
modules on disk, equal to the same modules' outputs computed independently."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import hookscope
from helpers import assert_one_error_line, run_cli

MODEL = """\
import torch
from torch import nn


def make():
    torch.manual_seed(7)  # fixed weights: the test rebuilds the same model
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
"""


@pytest.fixture
def model_file(tmp_path: Path) -> str:
    path = tmp_path / "capture_model.py"
    path.write_text(MODEL, encoding="utf-8")
    return f"{path}:make"


def _oracle() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(7)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    # the CLI draws --input 3,4 from a generator seeded with 0 (cli/input_specs.make_inputs)
    x = torch.randn((3, 4), generator=torch.Generator().manual_seed(0))
    return model, x


def test_capture_writes_the_selected_outputs(
    capsys: pytest.CaptureFixture[str], model_file: str, tmp_path: Path
) -> None:
    out_dir = tmp_path / "acts"
    code, _, err = run_cli(capsys, "capture", model_file, "--input", "3,4", "--select", "0",
                           "-o", str(out_dir))
    assert code == 0, err
    assert (out_dir / "index.json").is_file()
    acts = hookscope.load_activations(out_dir)
    assert list(acts) == ["0"]
    model, x = _oracle()
    with torch.no_grad():
        assert torch.equal(acts["0"], model[0](x))


def test_capture_of_nothing_is_one_error_line(
    capsys: pytest.CaptureFixture[str], model_file: str, tmp_path: Path
) -> None:
    code, _, err = run_cli(capsys, "capture", model_file, "--input", "3,4", "--select",
                           "nope", "-o", str(tmp_path / "none"))
    line = assert_one_error_line(code, err, "--select 'nope' matches no module")
    assert "select=" not in line  # the command's own words, not the library's
    assert not (tmp_path / "none").exists()


def test_the_command_s_own_options_are_named_in_its_errors(
    capsys: pytest.CaptureFixture[str], model_file: str, tmp_path: Path
) -> None:
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    code, _, err = run_cli(capsys, "capture", model_file, "--input", "3,4", "--select", "0",
                           "-o", str(full))
    assert_one_error_line(code, err, "--output", "is a directory that is not empty")
    assert [p.name for p in full.iterdir()] == ["keep.txt"]
    code, _, err = run_cli(capsys, "capture", model_file, "--input", "3,4", "--select", "0",
                           "-o", str(tmp_path / "new"), "--what", "bogus")
    assert code == 2 and "'--what'" in err and "output" in err and "Traceback" not in err
    assert not (tmp_path / "new").exists()


def test_a_model_that_raises_is_one_error_line_naming_the_module(
    capsys: pytest.CaptureFixture[str], model_file: str, tmp_path: Path
) -> None:
    code, _, err = run_cli(capsys, "capture", model_file, "--input", "3,5", "--select", "0",
                           "-o", str(tmp_path / "bad"))
    assert_one_error_line(code, err, "module '0' (Linear, call 0)", "cannot be multiplied")
    assert not (tmp_path / "bad").exists()  # nothing written half-way


def test_a_directory_under_one_that_does_not_exist_fails_before_the_model_is_built(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Like every other command's ``-o``: the directory holding the output must exist."""
    built = tmp_path / "built.txt"
    model = tmp_path / "noted_model.py"
    model.write_text(MODEL.replace("def make():\n",
                                   f"def make():\n    open({str(built)!r}, 'w').close()\n"),
                     encoding="utf-8")
    code, _, err = run_cli(capsys, "capture", f"{model}:make", "--input", "3,4",
                           "--select", "0", "-o", str(tmp_path / "missing" / "acts"))
    assert_one_error_line(code, err, "--output", "missing", "does not exist; create it first")
    assert not (tmp_path / "missing").exists()
    assert not built.exists()  # refused before the model was built


LATE = """\
import torch
from torch import nn


def make():
    return nn.Sequential(nn.Linear(4, 4), nn.Linear(5, 2))  # the second one does not fit
"""


@pytest.mark.parametrize("existing", [False, True], ids=["new-dir", "empty-dir"])
def test_a_capture_that_fails_late_leaves_nothing_and_the_same_command_runs_again(
    capsys: pytest.CaptureFixture[str], model_file: str, tmp_path: Path, existing: bool
) -> None:
    late = tmp_path / "late.py"
    late.write_text(LATE, encoding="utf-8")
    out_dir = tmp_path / "acts"
    if existing:
        out_dir.mkdir()
    code, _, err = run_cli(capsys, "capture", f"{late}:make", "--input", "3,4", "--select",
                           "*", "--shard-mib", "0.00001", "-o", str(out_dir))
    assert_one_error_line(code, err, "module '1' (Linear, call 0)")
    assert out_dir.exists() == existing
    assert not existing or list(out_dir.iterdir()) == []
    code, _, err = run_cli(capsys, "capture", model_file, "--input", "3,4", "--select", "0",
                           "-o", str(out_dir))
    assert code == 0, err
    assert list(hookscope.load_activations(out_dir)) == ["0"]


@pytest.mark.parametrize("option", ["inf", "nan", "parent-is-a-file"])
def test_an_unusable_shard_size_or_directory_is_one_error_line(
    capsys: pytest.CaptureFixture[str], model_file: str, tmp_path: Path, option: str
) -> None:
    """These were internal errors (OverflowError from --shard-mib inf, NotADirectoryError
    from a directory under a file)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    if option == "parent-is-a-file":
        args = ["-o", str(blocker / "sub")]
        expected = "is a file, not a directory"
    else:
        args = ["-o", str(tmp_path / "out"), "--shard-mib", option]
        expected = "positive finite number"
    code, _, err = run_cli(capsys, "capture", model_file, "--input", "3,4", "--select", "0",
                           *args)
    assert_one_error_line(code, err, expected)
    assert not (tmp_path / "out").exists()
