"""``hookscope lint`` in-process: exit codes, text and JSON, --explain, usage errors."""

from __future__ import annotations

import json

import pytest
import seed_model

from helpers import assert_one_error_line, run_cli

SEED = f"{seed_model.__file__}:ListModel"
FIXED = f"{seed_model.__file__}:ModuleListModel"


def test_findings_exit_1_with_text_in_the_linters_convention(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_cli(capsys, "lint", SEED)
    assert code == 1
    first = out.splitlines()[0]
    assert "seed_model.py:" in first and ": HS101 [error] self.layers is a plain list" in first
    assert out.splitlines()[1] == "    module: <root>, attribute: layers"
    assert "static rules only" in out  # no --input, no default inputs: no error


def test_no_findings_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "lint", FIXED, "--input", "2,1", "--backward")
    assert code == 0, out
    assert "no findings (static rules and one forward pass and backward)" in out


def test_fail_on_and_ignore(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(capsys, "lint", SEED, "--ignore", "HS101")[0] == 0
    assert run_cli(capsys, "lint", SEED, "--select", "HS2,HS3")[0] == 0
    assert run_cli(capsys, "lint", SEED, "--fail-on", "warning")[0] == 1


def test_json_for_ci(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "lint", SEED, "--input", "2,1", "--format", "json")
    assert code == 1
    doc = json.loads(out)
    assert doc["schema_version"] == 1
    assert [f["code"] for f in doc["findings"]] == ["HS101", "HS501"]
    assert doc["findings"][0]["line"] > 0 and doc["counts"]["error"] == 2


def test_explain(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "lint", "--explain", "hs101")
    assert code == 0
    assert out.startswith("HS101 module-in-plain-container [error]")
    assert "nn.ModuleList" in out


@pytest.mark.parametrize("argv, fragment", [
    (["lint"], "needs a MODEL"),
    (["lint", "--explain", "HS999"], "no lint rule 'HS999'"),
    (["lint", SEED, "--select", "HS9"], "'HS9' is not a rule code"),
    (["lint", SEED, "--backward"], "--backward needs inputs"),
    (["lint", "nowhere.py:build"], "nowhere.py"),
])
def test_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    code, _, err = run_cli(capsys, *argv)
    assert_one_error_line(code, err, fragment)


def test_bad_fail_on_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run_cli(capsys, "lint", SEED, "--fail-on", "fatal")
    assert code == 2


def test_without_backward_a_note_says_which_rules_need_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    note = "HS503 (parameter-without-gradient) needs a backward pass: run with --backward"
    code, out, err = run_cli(capsys, "lint", FIXED, "--input", "2,1")
    assert code == 0 and note in out.splitlines() and "backward=True" not in out
    code, out, err = run_cli(capsys, "lint", FIXED, "--input", "2,1", "--format", "json")
    assert code == 0 and note in err and json.loads(out)["skipped_rules"] == ["HS503"]
    code, out, err = run_cli(capsys, "lint", FIXED, "--input", "2,1", "--backward")
    assert code == 0 and "HS503" not in out + err
    code, out, err = run_cli(capsys, "lint", FIXED)  # no inputs: static rules only
    assert code == 0 and ("HS503 (parameter-without-gradient) needs a backward pass: give "
                          "inputs (--input) and run with --backward") in out
