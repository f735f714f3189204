"""``hookscope hooks MODEL`` on a model file whose factory registers hooks itself.

The expected lines are found in the model file's own text (the line of each ``def``),
independently of the code under test.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from helpers import assert_one_error_line, run_cli

MODEL_FILE = """
    import torch
    from torch import nn


    def log_shapes(module, args, output):
        print(type(module).__name__, tuple(output.shape))


    def clip_grad(grad):
        return grad.clamp(-1.0, 1.0)


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)
            self.act = nn.ReLU()

        def forward(self, x):
            return self.act(self.fc(x))


    def make():
        print("building")  # the model's own output goes to stderr
        net = Net()
        net.fc.register_forward_hook(log_shapes)
        net.act.register_forward_hook(log_shapes, always_call=True)
        net.fc.weight.register_hook(clip_grad)
        return net


    def plain():
        return Net()
"""


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "hooked.py"
    path.write_text(textwrap.dedent(MODEL_FILE))
    return path


def def_line(path: Path, name: str) -> int:
    lines = path.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.startswith(f"def {name}("))


def test_table_lists_the_hooks_the_factory_registered(
    capsys: pytest.CaptureFixture[str], model_file: Path
) -> None:
    code, out, err = run_cli(capsys, "hooks", f"{model_file}:make", "--width", "200")
    assert code == 0, err
    assert "building" in err and "building" not in out
    log, clip = def_line(model_file, "log_shapes"), def_line(model_file, "clip_grad")
    lines = out.splitlines()
    assert lines[0] == "Net: 3 hooks"
    assert lines[1:4] == ["+-- fc (Linear)", "|   `-- forward", lines[3]]
    assert lines[3].startswith(f"|       `-- log_shapes  {model_file}:{log}  id ")
    assert lines[4:6] == ["+-- fc.weight (Parameter)", "|   `-- grad"]
    assert lines[6].startswith(f"|       `-- clip_grad  {model_file}:{clip}  id ")
    assert lines[7:9] == ["`-- act (ReLU)", "    `-- forward"]
    assert lines[9].startswith(f"        `-- log_shapes  {model_file}:{log}  [always_call]  id ")
    assert len(lines) == 10


def test_json_parses_and_names_every_hook(
    capsys: pytest.CaptureFixture[str], model_file: Path, tmp_path: Path
) -> None:
    code, out, err = run_cli(capsys, "hooks", f"{model_file}:make", "--format", "json")
    assert code == 0, err
    document = json.loads(out)
    assert document["schema_version"] == 1 and document["model_class"] == "Net"
    found = [(h["owner"], h["kind"], h["name"], h["line"], h["flags"]) for h in document["hooks"]]
    log, clip = def_line(model_file, "log_shapes"), def_line(model_file, "clip_grad")
    assert found == [
        ("fc", "forward", "log_shapes", log, []),
        ("fc.weight", "grad", "clip_grad", clip, []),
        ("act", "forward", "log_shapes", log, ["always_call"]),
    ]
    target = tmp_path / "hooks.json"
    code, out, _ = run_cli(capsys, "hooks", f"{model_file}:make", "-f", "json", "-o", str(target))
    assert code == 0 and out == ""
    written = json.loads(target.read_text())["hooks"]  # a second build: new handle ids
    assert [(h["owner"], h["kind"], h["name"], h["line"], h["flags"]) for h in written] == found


def test_a_model_without_hooks_says_so(
    capsys: pytest.CaptureFixture[str], model_file: Path
) -> None:
    code, out, err = run_cli(capsys, "hooks", f"{model_file}:plain", "--no-color")
    assert (code, out) == (0, "Net: no hooks\n"), err


def test_a_bad_model_spec_is_one_error_line(
    capsys: pytest.CaptureFixture[str], model_file: Path
) -> None:
    code, out, err = run_cli(capsys, "hooks", f"{model_file}:missing")
    assert out == ""
    assert_one_error_line(code, err, "missing")
