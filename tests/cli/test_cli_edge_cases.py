"""The command line under hostile use: bad model files, odd options, odd destinations.

Each test pins one promise of the command line that ``test_cli.py`` does not: a mistake
gets exactly one ``error: ...`` line and exit status 2 (no traceback), stdout carries
only the result (JSON and CSV stay parseable whatever the model prints), nothing is
written half-way, and the environment (``NO_COLOR``, ``FORCE_COLOR``, a closed or full
stdout, Ctrl-C) is respected. Most run in-process through ``main([...])``; the few
that need a real process (a closed pipe, SIGINT) run the console script.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest
import torch

from helpers import assert_one_error_line, model_spec, run_cli
from hookscope.cli import main

SEED = "hookscope.examples:seed_model"

MODELS = """
    import sys
    import time

    from torch import nn


    class Noisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            print("forward says hello")
            return self.fc(x)


    def noisy():
        print("factory says hello")
        return Noisy()


    def exits():
        sys.exit("factory gave up")


    class ExitsInForward(nn.Module):
        def forward(self, x):
            sys.exit(5)


    class Slow(nn.Module):
        def forward(self, x):
            print("forward started", file=sys.stderr, flush=True)
            time.sleep(60)
            return x


    def slow():
        return nn.Sequential(Slow())


    def mlp():
        return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


    class Raising(nn.Module):
        def forward(self, x):
            print("about to fail")
            raise RuntimeError("boom on purpose")


    def raising():
        return Raising()
"""


@pytest.fixture
def models(tmp_path: Path) -> Path:
    path = tmp_path / "edge_models.py"
    path.write_text(textwrap.dedent(MODELS))
    return path





class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


class ClosedPipe(io.StringIO):
    """A stdout whose reader went away (``| head``)."""

    def write(self, s: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


class FullDisk(io.StringIO):
    """A stdout on a full disk (``> /dev/full``)."""

    def write(self, s: str) -> int:
        raise OSError(28, "No space left on device")


def console_script() -> str:
    path = Path(sysconfig.get_path("scripts")) / "hookscope"
    found = str(path) if path.exists() else shutil.which("hookscope")
    if found is None:
        pytest.fail("the hookscope console script is not installed; run pip install -e .")
    return found


# ------------------------------------------------------------- what the model prints


@pytest.mark.parametrize(
    ("command", "fmt"), [("summary", "json"), ("trace", "json"), ("trace", "csv")]
)
def test_model_prints_go_to_stderr_and_keep_stdout_parseable(
    capsys: pytest.CaptureFixture[str], models: Path, command: str, fmt: str
) -> None:
    code, out, err = run_cli(capsys, command, f"{models}:noisy", "-i", "1,4", "-f", fmt)
    assert code == 0, err
    assert "hello" not in out
    assert "factory says hello" in err and "forward says hello" in err
    if fmt == "json":
        assert json.loads(out)["calls"][0]["class"] == "Noisy"
    else:
        assert out.splitlines()[0].startswith("index,path,class")


def test_inspect_json_stays_parseable_when_the_file_prints_on_import(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "chatty.py"
    path.write_text("print('imported!')\nfrom torch import nn\nmodel = nn.Linear(4, 2)\n")
    code, out, err = run_cli(capsys, "inspect", f"{path}:model", "-f", "json")
    assert code == 0, err
    assert json.loads(out)["model"]["params"]["total"] == 10
    assert "imported!" in err


def test_inspect_builds_as_the_code_does_a_model_that_reads_its_weights_in_init(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """inspect builds on meta by default; an __init__ that reads a weight's value
    cannot run there, and the error blamed the factory with no way out."""
    spec = model_spec(tmp_path, """
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(4, 4)
                width = 2 if self.a.weight.abs().sum().item() > 0 else 1
                self.b = nn.Linear(4, width)
    """, "Net")
    code, out, err = run_cli(capsys, "inspect", spec, "-f", "json")
    assert code == 0, err
    assert json.loads(out)["model"]["params"]["total"] == 20 + 10
    assert "cannot be built on the meta device" in err
    code, _, err = run_cli(capsys, "inspect", spec, "--device", "meta")
    assert_one_error_line(code, err, "meta")  # asked for: refused, not built elsewhere


def test_hookscope_s_warnings_are_one_line_not_a_pointer_into_typer(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec = model_spec(tmp_path, """
        import torch
        from torch import nn

        class Clamp(nn.Module):
            def __init__(self):
                super().__init__()
                self.l = nn.Linear(4, 4)

            def forward(self, x):
                with torch.no_grad():
                    self.l.weight.clamp_(-0.1, 0.1)  # a max-norm constraint of its own
                return self.l(x)
    """, "Clamp")
    code, _, err = run_cli(capsys, "summary", spec, "--input", "1,4")
    assert code == 0, err
    assert err.splitlines() == [
        "warning: the forward wrote into 1 parameter(s) in place (l.weight); they keep "
        "the values it wrote"]


def test_partial_json_stays_parseable_when_the_model_prints_then_raises(
    capsys: pytest.CaptureFixture[str], models: Path
) -> None:
    code, out, err = run_cli(capsys, "trace", f"{models}:raising", "-i", "1,4", "-f", "json")
    assert code == 2
    assert json.loads(out)["error"]["message"] == "boom on purpose"
    assert err.splitlines()[-1].startswith("error: the model raised RuntimeError")


# ------------------------------------------------------------------- sys.exit in models


def test_file_that_exits_on_import(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "script.py"
    path.write_text("import sys\nsys.exit(3)\n")
    code, out, err = run_cli(capsys, "summary", f"{path}:make", "-i", "1,4")
    assert_one_error_line(code, err, "importing", "sys.exit(3)", "__main__")
    assert out == ""


def test_file_that_parses_arguments_on_import_does_not_see_hookscopes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent("""
        import argparse
        from torch import nn
        parser = argparse.ArgumentParser()
        parser.add_argument("--hidden", type=int, default=8)
        args = parser.parse_args()
        def make():
            return nn.Linear(4, args.hidden)
    """))
    argv = list(sys.argv)
    code, out, err = run_cli(capsys, "summary", f"{path}:make", "-i", "1,4")
    assert (code, err) == (0, "")
    assert "[1, 8]" in out
    assert sys.argv == argv


def test_factory_that_exits(capsys: pytest.CaptureFixture[str], models: Path) -> None:
    code, _, err = run_cli(capsys, "summary", f"{models}:exits", "-i", "1,4")
    assert_one_error_line(code, err, "factory 'exits'", "sys.exit('factory gave up')")


def test_forward_that_exits(capsys: pytest.CaptureFixture[str], models: Path) -> None:
    code, _, err = run_cli(capsys, "trace", f"{models}:ExitsInForward", "-i", "1,4")
    assert_one_error_line(code, err, "sys.exit(5)")


# ---------------------------------------------------------------------------- inputs


def test_input_too_large_to_allocate_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "summary", SEED, "-i", "99999999999,99999999999")
    assert_one_error_line(
        code, err, "cannot make input '99999999999,99999999999:float32'", "smaller"
    )


def test_unavailable_device_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    if torch.xpu.is_available():
        pytest.skip("this machine has an XPU")
    code, _, err = run_cli(capsys, "summary", SEED, "-i", "2,2", "--device", "xpu")
    assert_one_error_line(code, err, "device 'xpu' is not available here")


# ------------------------------------------------ options the format or the run ignores


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["trace", "-f", "json", "--sort", "time"], ["--sort only shapes the table"]),
        (["trace", "-f", "json", "--columns", "bogus", "--top", "2"], ["--columns, --top"]),
        (["trace", "-f", "csv", "--sort", "time", "--depth", "1"], ["--sort, --depth"]),
        (["summary", "-f", "json", "--depth", "1"], ["--depth only shapes the table"]),
        (["trace", "-f", "json", "--depth", "0"], ["--depth only shapes the table"]),
        (["summary", "-f", "json", "--no-fold"], ["--no-fold only shapes the table"]),
        (["trace", "-f", "csv", "--no-fold"], ["--no-fold only shapes the table"]),
        (["trace", "--sort", "time", "--no-time"], ["--sort time", "--no-time"]),
        (["trace", "--columns", "layer,mean", "--no-stats"], ["--columns mean", "--no-stats"]),
        (["trace", "--sort", "out_bytes", "--no-memory"], ["'out_bytes'", "--no-memory"]),
        (["trace", "--sort", "flops_fwd"], ["'flops_fwd'", "--ops"]),
        (["trace", "--columns", "layer,grad_out"], ["'grad_out'", "--backward"]),
        (["trace", "--sort", "bwd_time"], ["'bwd_time'", "--backward"]),
        (["trace", "--sort", "time", "--device", "meta"], ["'time'", "meta"]),
        (["trace", "--columns", "mean", "--device", "meta"], ["'mean'", "meta"]),
    ],
)
def test_options_without_effect_fail_before_the_model_runs(
    capsys: pytest.CaptureFixture[str], models: Path, argv: list[str], fragments: list[str]
) -> None:
    command, *options = argv
    code, out, err = run_cli(capsys, command, f"{models}:raising", "-i", "1,4", *options)
    assert_one_error_line(code, err, *fragments)  # not the model's error: it never ran
    assert out == ""


def test_options_with_their_probe_still_work(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "trace", SEED, "-i", "2,2", "--ops", "--sort", "flops_fwd",
                             "--columns", "layer,flops_fwd,out_bytes", "--width", "100")
    assert (code, err) == (0, "")
    assert "by flops_fwd" in out
    code, out, err = run_cli(capsys, "trace", SEED, "-i", "2,2", "--device", "meta",
                             "--sort", "out_bytes", "--width", "100")
    assert (code, err) == (0, "")


# ------------------------------------------------------------------------------ -o FILE


def test_dash_output_is_stdout(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "summary", SEED, "-i", "2,2", "-f", "json", "-o", "-")
    assert (code, err) == (0, "")
    assert json.loads(out)["model"]["class"] == "Model"
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("name", [".", ""])
def test_output_to_a_directory_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    name: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "summary", SEED, "-i", "2,2", "-o", name)
    assert_one_error_line(code, err, "is a directory", "give a file name")
    assert list(tmp_path.iterdir()) == []


def test_output_into_a_missing_directory_names_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run_cli(capsys, "summary", SEED, "-i", "2,2", "-o", str(tmp_path / "no/x.txt"))
    assert_one_error_line(code, err, "directory", "does not exist")
    (tmp_path / "afile").write_text("")
    for fmt in ("table", "json"):  # each checks before the run, and as it writes
        code, _, err = run_cli(capsys, "summary", SEED, "-i", "2,2", "--format", fmt, "-o",
                               str(tmp_path / "afile" / "deeper" / "x.txt"))
        assert_one_error_line(code, err, "afile' is a file, not a directory")
    assert (tmp_path / "afile").read_text() == ""


def test_output_through_a_symlink_keeps_the_link_and_the_mode(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    real = tmp_path / "real.txt"
    real.write_text("old")
    real.chmod(0o600)
    link = tmp_path / "link.txt"
    link.symlink_to(real.name)
    code, _, err = run_cli(capsys, "summary", SEED, "-i", "2,2", "-o", str(link))
    assert (code, err) == (0, "")
    assert link.is_symlink()
    assert real.read_text().startswith("Layer (type)")
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "real.txt"]


def test_output_to_a_device_is_written_not_replaced(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    link = tmp_path / "sink"  # a link to /dev/null, like /dev/stdout -> /proc/self/fd/1
    link.symlink_to(os.devnull)
    code, _, err = run_cli(capsys, "summary", SEED, "-i", "2,2", "-o", str(link))
    assert (code, err) == (0, "")
    assert link.is_symlink() and stat.S_ISCHR(os.stat(link).st_mode)


def test_output_expands_a_tilde(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    code, _, err = run_cli(capsys, "summary", SEED, "-i", "2,2", "--output=~/out.txt")
    assert (code, err) == (0, "")
    assert (tmp_path / "out.txt").read_text().startswith("Layer (type)")


def test_ctrl_c_while_writing_the_output_file_leaves_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "out.txt"
    target.write_text("previous result\n")

    def interrupted(src: str, dst: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("os.replace", interrupted)
    code, _, err = run_cli(capsys, "summary", SEED, "-i", "2,2", "-o", str(target))
    assert (code, err) == (130, "error: interrupted\n")
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]
    assert target.read_text() == "previous result\n"


# ------------------------------------------------------------------------------ colour


def test_no_color_env_on_a_terminal_gives_plain_ascii(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    tty = FakeTTY()
    monkeypatch.setattr("sys.stdout", tty)
    assert main(["summary", SEED, "--input", "2,2", "--width", "100"]) == 0
    assert "\x1b[" not in tty.getvalue()
    assert tty.getvalue().startswith("Layer (type)")


def test_force_color_env_in_a_pipe_gives_the_terminal_tables(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    code, out, _ = run_cli(capsys, "summary", SEED, "--input", "2,2", "--width", "100")
    assert code == 0
    assert "\x1b[" in out and "─" in out  # colour and box characters go together
    code, out, _ = run_cli(capsys, "summary", SEED, "--input", "2,2", "--no-color")
    assert "\x1b[" not in out and out.startswith("Layer (type)")


# ---------------------------------------------------------------------- a broken stdout


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_closed_stdout_does_not_hide_the_models_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, models: Path,
    fmt: str,
) -> None:
    monkeypatch.setattr("sys.stdout", ClosedPipe())
    code = main(["summary", f"{models}:raising", "-i", "1,4", "-f", fmt])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines()[-1].startswith("error: the model raised RuntimeError")


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_closed_stdout_after_success_exits_1_quietly(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    monkeypatch.setattr("sys.stdout", ClosedPipe())
    assert main(["summary", SEED, "-i", "2,2", "-f", fmt]) == 1
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_full_disk_on_stdout_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    monkeypatch.setattr("sys.stdout", FullDisk())
    code = main(["summary", SEED, "-i", "2,2", "-f", fmt])
    assert_one_error_line(code, capsys.readouterr().err, "cannot write to stdout", "No space left")


def test_demo_on_a_full_disk_is_one_line_and_on_a_closed_pipe_quiet(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdout", FullDisk())
    code = main(["demo"])
    assert_one_error_line(code, capsys.readouterr().err, "cannot write to stdout", "No space left")
    # a real pipe: rich itself handles the broken pipe of a real file descriptor
    done = subprocess.run(
        ["bash", "-c", f"set -o pipefail; '{console_script()}' demo | head -n 1"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert (done.returncode, done.stderr) == (1, "")


def test_no_stdout_at_all_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdout", None)  # what Python sets when run with `>&-`
    code = main(["summary", SEED, "-i", "2,2"])
    assert_one_error_line(code, capsys.readouterr().err, "stdout is closed", "-o FILE")


@pytest.mark.parametrize("model", ["mlp", "raising"])
def test_ascii_only_stdout_still_gets_the_table(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, models: Path,
    model: str,
) -> None:
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="ascii")  # PYTHONIOENCODING=ascii
    monkeypatch.setattr("sys.stdout", stdout)
    code = main(["summary", f"{models}:{model}", "-i", "1,4"])
    err = capsys.readouterr().err
    stdout.flush()
    table = stdout.buffer.getvalue().decode("ascii")
    assert "Total" in table and "internal error" not in err
    if model == "mlp":
        assert (code, err) == (0, "")
    else:
        assert code == 2
        assert err.splitlines()[-1].startswith("error: the model raised RuntimeError")


def test_real_closed_pipe_with_a_raising_model(models: Path) -> None:
    process = subprocess.Popen(
        [console_script(), "summary", f"{models}:raising", "--input", "1,4"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    stderr = process.stderr.read()
    assert process.wait(timeout=120) == 2
    assert "Traceback" not in stderr and "Exception ignored" not in stderr
    assert stderr.splitlines()[-1].startswith("error: the model raised RuntimeError")


# --------------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_during_the_forward_exits_130_without_a_file(
    models: Path, tmp_path: Path
) -> None:
    target = tmp_path / "out.json"
    # a job started in the background of a shell without job control (nohup ... &)
    # inherits SIGINT ignored, and Python then keeps it ignored: give the child the
    # default action a terminal's Ctrl-C meets
    process = subprocess.Popen(
        [console_script(), "trace", f"{models}:slow", "-i", "1,4", "-f", "json",
         "-o", str(target)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert process.stderr is not None
    for line in process.stderr:  # the model's own print, sent to stderr
        if line.strip() == "forward started":
            break
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130
    assert (out, err) == ("", "error: interrupted\n")
    assert not [p.name for p in tmp_path.iterdir() if "out.json" in p.name]


# ----------------------------------------------------------------------------- help


def test_help_shows_readable_metavars(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "trace", "--help")
    assert code == 0
    assert "--depth N" in out and "--width N" in out and "--device DEVICE" in out
    assert "<int range>" not in out and "<str>" not in out.split("Options:")[1]

