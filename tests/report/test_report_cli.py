"""``hookscope report MODEL -o FILE``: the page of a traced run, in-process through
``main([...])``; a missing ``-o`` and a failing model give one error line, the latter
after writing the partial run's page with its problem section."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import assert_one_error_line, model_spec, run_cli

SOURCE = """
    import torch
    from torch import nn


    class Boom(nn.Module):
        def forward(self, x):
            raise RuntimeError("boom <b>on purpose</b>")


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)
            self.act = nn.ReLU()

        def forward(self, x):
            return self.act(self.fc(x))


    class Raising(Net):
        def __init__(self):
            super().__init__()
            self.bad = Boom()

        def forward(self, x):
            return self.bad(self.fc(x))
"""


def test_report_writes_one_page_with_every_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    spec = model_spec(tmp_path, SOURCE, "Net")
    out = tmp_path / "report.html"
    code, stdout, err = run_cli(capsys, "report", spec, "--input", "2,4", "--ops",
                                "--backward", "-o", str(out))
    assert (code, stdout, err) == (0, "", "")
    html = out.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>")
    for path in ('data-path=""', 'data-path="fc"', 'data-path="act"'):
        assert path in html
    assert 'id="hs-grads"' in html and 'id="hs-flops"' in html
    assert f"forward {2 * 2 * 4 * 3:,}" in html  # one Linear: 2 * batch * in * out


def test_report_needs_an_output_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "report", model_spec(tmp_path, SOURCE, "Net"))
    assert_one_error_line(code, err, "-o report.html")


def test_a_failing_model_gets_the_page_of_its_partial_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "report.html"
    code, _, err = run_cli(capsys, "report", model_spec(tmp_path, SOURCE, "Raising"),
                           "--input", "2,4", "-o", str(out))
    assert_one_error_line(code, err, "'bad'", "boom")
    html = out.read_text(encoding="utf-8")
    assert 'id="hs-problems"' in html and "boom &lt;b&gt;on purpose&lt;/b&gt;" in html
    assert "<b>on purpose" not in html
