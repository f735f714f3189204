"""``hookscope grads`` and ``hookscope trace --backward`` in-process: the table, the
picture, and one-line errors with exit status 2."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from helpers import assert_one_error_line, model_spec, run_cli

MODEL = textwrap.dedent("""
    import torch
    from torch import nn

    def build():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
""")


@pytest.fixture
def model_file(tmp_path: Path) -> str:
    path = tmp_path / "net.py"
    path.write_text(MODEL)
    return f"{path}:build"


def test_grads_prints_a_row_per_parameter_with_anomalies_flagged(
    capsys: pytest.CaptureFixture[str], model_file: str, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "g.png"
    code, out, err = run_cli(capsys, "grads", model_file, "--input", "3,4", "--steps", "3",
                             "--explode-above", "0.5", "--plot", str(png), "--no-color")
    assert code == 0, err
    assert "Gradient norms over 3 steps" in out
    for name in ("0.weight", "0.bias", "2.weight", "2.bias"):
        assert name in out
    assert "explode at step 0" in out
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_grads_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], model_file: str
) -> None:
    code, _, err = run_cli(capsys, "grads", model_file, "--input", "3,5", "--steps", "1")
    assert_one_error_line(code, err)
    code, _, err = run_cli(capsys, "grads", model_file, "--input", "3,4", "--device", "meta")
    assert_one_error_line(code, err, "meta")
    for option, value in (("--explode-above", "-3"), ("--vanish-below", "0")):
        code, _, err = run_cli(capsys, "grads", model_file, "--input", "3,4", option, value)
        line = assert_one_error_line(code, err, f"{option} must be a positive number")
        assert "_" not in line.split(":")[1].split()[0]  # the option, not the argument
    # --lr inf trained to all-NaN norms and exited 0; nan and negatives were refused
    code, _, err = run_cli(capsys, "grads", model_file, "--input", "3,4", "--lr", "inf")
    assert_one_error_line(code, err, "--lr must be a finite learning rate")


def test_an_output_that_cannot_be_written_is_refused_before_training_and_plotting(
    capsys: pytest.CaptureFixture[str], model_file: str, tmp_path: Path,
) -> None:
    """-o was checked only at the end: the steps ran and --plot was written first."""
    pytest.importorskip("matplotlib")
    png = tmp_path / "g.png"
    code, _, err = run_cli(capsys, "grads", model_file, "--input", "3,4", "--steps", "2",
                           "--plot", str(png), "-o", str(tmp_path / "missing" / "g.txt"))
    assert_one_error_line(code, err, "does not exist")
    assert not png.exists()


def test_a_model_with_nothing_to_train_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """It was an internal error (exit 1) from the optimizer's empty parameter list."""
    spec = model_spec(tmp_path, "from torch import nn\n\ndef relu():\n    return nn.ReLU()\n",
                      "relu")
    code, _, err = run_cli(capsys, "grads", spec, "--input", "3,2")
    assert_one_error_line(code, err, "has no parameter that requires grad")


@pytest.mark.parametrize("plot", ["out.txt", "out.pgf", "missing-dir/g.png"])
def test_a_plot_path_that_cannot_be_written_is_refused_before_training(
    capsys: pytest.CaptureFixture[str], model_file: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, plot: str,
) -> None:
    pytest.importorskip("matplotlib")
    import hookscope.cli.grads_command as grads_command

    trained: list[int] = []
    monkeypatch.setattr(grads_command, "_train", lambda *a, **k: trained.append(1))
    code, _, err = run_cli(capsys, "grads", model_file, "--input", "3,4", "--steps", "2",
                           "--plot", str(tmp_path / plot))
    assert_one_error_line(code, err, "is not an image format" if "." in plot[-4:]
                          and "/" not in plot else "does not exist")
    assert trained == []
    assert not (tmp_path / plot).exists()


def test_trace_backward_shows_the_backward_columns(
    capsys: pytest.CaptureFixture[str], model_file: str
) -> None:
    code, out, err = run_cli(capsys, "trace", model_file, "--input", "3,4", "--backward",
                             "--no-color")
    assert code == 0, err
    flat = " ".join(out.split())  # headers wrap between words to fit the width
    assert "|grad" in flat and "out|" in flat and "in|" in flat and "Bwd" in flat
    code, out, err = run_cli(capsys, "trace", model_file, "--input", "3,4", "--backward",
                             "--format", "csv")
    assert code == 0, err
    assert "grad_output_norm" in out.splitlines()[0]


def test_two_runs_print_the_same_numbers(capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    """The weights of a model built without a seed were new on every run, so were the
    norms (``hookscope grads torchvision:resnet18`` gave 1412, then 1025)."""
    import torch

    path = tmp_path / "unseeded.py"
    path.write_text(MODEL.replace("torch.manual_seed(0)\n", ""))
    outs = []
    for _ in range(2):
        torch.manual_seed(len(outs) + 1)  # whatever the process drew before
        code, out, err = run_cli(capsys, "grads", f"{path}:build", "--input", "3,4",
                                 "--steps", "2", "--no-color")
        assert code == 0, err
        outs.append(out)
    assert outs[0] == outs[1]


TRAIN_ONLY_FAILURES = textwrap.dedent("""
    import torch
    from torch import nn

    class Boom(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            raise RuntimeError("boom in backward")

    class Bad(nn.Module):
        def forward(self, x):
            return Boom.apply(x)

    def batchnorm():  # built in eval mode: fails in training mode alone, on a batch of 1
        return nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).eval()

    def bad_backward():
        return nn.Sequential(nn.Linear(4, 4), Bad(), nn.Linear(4, 1))
""")


@pytest.mark.parametrize(("factory", "fragments"), [
    ("batchnorm", ("module '1' (BatchNorm1d", "Expected more than 1 value")),
    ("bad_backward", ("backward raised RuntimeError at step 0", "boom in backward")),
])
def test_a_model_that_fails_only_in_training_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, factory: str,
    fragments: tuple[str, ...],
) -> None:
    path = tmp_path / "train_only.py"
    path.write_text(TRAIN_ONLY_FAILURES)
    code, _, err = run_cli(capsys, "grads", f"{path}:{factory}", "--input", "1,4")
    assert_one_error_line(code, err, *fragments)
