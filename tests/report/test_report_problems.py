"""The report's problem sections: lint findings with their code and the source line to
edit, and the first non-finite value with the op that made it; a ``<`` in a message
stays text. Both from Python and from ``hookscope report --lint/--find-anomaly``."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
from torch import nn

import hookscope
import zoo
from helpers import model_spec, run_cli

NAN_SOURCE = """
    import torch
    from torch import nn


    class LogOfNegative(nn.Module):
        def forward(self, x):
            return torch.log(x - 10)


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.bad = LogOfNegative()

        def forward(self, x):
            return self.bad(self.fc(x).abs())
"""


def assignment_line(cls: type, text: str) -> int:
    """The oracle: the line of ``text`` in the class's source file."""
    lines, first = inspect.getsourcelines(cls)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_lint_findings_show_their_code_and_the_line_to_edit() -> None:
    model, x = zoo.build(zoo.PlainListModel), torch.randn(2, 4)
    findings = hookscope.lint(model, x)
    html = hookscope.trace(model, x).to_html(findings=findings)
    line = assignment_line(zoo.PlainListModel, "self.layers = [nn.Linear(4, 4)]")
    assert 'id="hs-lint"' in html
    assert f"zoo.py:{line}</td>" in html
    assert "<td>HS101 " in html and "<td>layers</td>" in html


def test_no_findings_no_lint_section() -> None:
    model = nn.Linear(2, 2)
    assert 'id="hs-lint"' not in hookscope.trace(model, torch.randn(1, 2)).to_html(
        findings=hookscope.lint(model))


def test_the_first_non_finite_value_is_shown_with_its_op(tmp_path: Path) -> None:
    spec = model_spec(tmp_path, NAN_SOURCE, "Net")
    import importlib.util

    loaded = importlib.util.spec_from_file_location("nan_model", spec.split(":")[0])
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    torch.manual_seed(0)
    model, x = module.Net(), torch.rand(2, 4)
    with torch.no_grad():  # the oracle: log of values below 10 is NaN
        assert torch.isnan(torch.log(model.fc(x).abs() - 10)).any()
    report = hookscope.find_anomaly(model, x)
    assert report is not None
    html = report.to_html(tmp_path / "a.html")
    assert 'id="hs-anomaly"' in html and "First non-finite value: bad" in html
    assert "aten.log" in html
    assert html.count('data-path="fc"') == 1  # the partial trace's table is below


@pytest.mark.parametrize("flag, code, section", [("--lint", 0, "hs-lint"),
                                                 ("--find-anomaly", 1, "hs-anomaly")])
def test_the_command_adds_the_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, code: int, section: str,
) -> None:
    source = NAN_SOURCE.replace("class Net(nn.Module):\n        def __init__(self):\n"
                                "            super().__init__()\n",
                                "class Net(nn.Module):\n        def __init__(self):\n"
                                "            super().__init__()\n"
                                "            self.spare = [nn.Linear(4, 4)]\n")
    out = tmp_path / "r.html"
    got, _, err = run_cli(capsys, "report", model_spec(tmp_path, source, "Net"), "--input",
                          "2,4", flag, "-o", str(out))
    assert (got, err) == (code, "")
    assert f'id="{section}"' in out.read_text(encoding="utf-8")
