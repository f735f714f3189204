"""``hookscope trace --find-anomaly`` (exit 1 when found, 0 when clean), ``--break-at``
and ``--break-on`` (issue 10), in-process."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from helpers import assert_one_error_line, run_cli

MODELS = """
import torch
from torch import nn


class Log(nn.Module):
    def forward(self, x):
        return x.log()


def nan():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), Log(), nn.Linear(8, 2))


class SafeSqrt(nn.Module):
    def forward(self, x):
        return torch.where(x > 0, x.sqrt(), torch.zeros_like(x))


def grad_nan():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), SafeSqrt(), nn.Linear(8, 2))


def clean():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
"""


@pytest.fixture
def models(tmp_path: Path) -> str:
    path = tmp_path / "models.py"
    path.write_text(textwrap.dedent(MODELS))
    return str(path)


def test_find_anomaly_prints_the_report_and_exits_1(
    models: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "trace", f"{models}:nan", "-i", "3,4", "--find-anomaly")
    assert code == 1
    assert out.startswith("First non-finite value: forward output out of module '1' (Log")
    assert "aten.log.default" in out


def test_find_anomaly_on_a_clean_model_exits_0(
    models: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "trace", f"{models}:clean", "-i", "3,4", "--find-anomaly",
                           "--backward")
    assert code == 0 and "every output is finite" in out


def test_find_anomaly_as_json(models: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "trace", f"{models}:nan", "-i", "3,4", "--find-anomaly",
                           "-f", "json")
    assert code == 1
    doc = json.loads(out)
    assert doc["anomalies"][0]["path"] == "1" and doc["stopped"] is True


def test_find_anomaly_refuses_repeat(models: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "trace", f"{models}:nan", "-i", "3,4", "--find-anomaly",
                           "--repeat", "2")
    assert_one_error_line(code, err, "--repeat")


def test_break_at_and_break_on_open_the_breakpointhook(
    models: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(sys, "breakpointhook",
                        lambda: seen.append(sys._getframe(1).f_locals["path"]))
    code, _, _ = run_cli(capsys, "trace", f"{models}:nan", "-i", "3,4", "--break-on", "nan",
                           "--no-time")
    assert code == 0 and seen == ["1"]  # once: where the NaN is made, not in its wake
    seen.clear()
    code, _, _ = run_cli(capsys, "trace", f"{models}:clean", "-i", "3,4", "--break-at", "0")
    assert code == 0 and seen == ["0"]


def test_break_at_leaves_the_pause_out_of_the_times(
    models: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second in pdb was timed as the layer's forward time."""
    monkeypatch.setattr(sys, "breakpointhook", lambda: None)
    code, out, _ = run_cli(capsys, "trace", f"{models}:clean", "-i", "3,4", "--break-at", "2",
                           "-f", "json")
    assert code == 0
    assert all(c.get("time_ns") is None for c in json.loads(out)["calls"])
    code, _, err = run_cli(capsys, "trace", f"{models}:clean", "-i", "3,4", "--break-at", "2",
                           "--sort", "time")
    assert_one_error_line(code, err, "--break-at/--break-on pause the run in the debugger")


def test_break_at_matching_no_module_names_the_option(
    models: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(sys, "breakpointhook", lambda: seen.append(1))
    code, _, err = run_cli(capsys, "trace", f"{models}:clean", "-i", "3,4", "--break-at", "zz*")
    line = assert_one_error_line(code, err, "--break-at 'zz*' matches no module", "'0'")
    assert "at=" not in line and seen == []


@pytest.mark.parametrize("option", [["--sort", "time"], ["--top", "2"], ["--columns", "time"],
                                    ["--depth", "1"]])
def test_find_anomaly_refuses_options_of_the_trace_table(
    models: str, capsys: pytest.CaptureFixture[str], option: list[str]
) -> None:
    """They were accepted and ignored: the report has no table to sort or cut."""
    code, _, err = run_cli(capsys, "trace", f"{models}:nan", "-i", "3,4", "--find-anomaly",
                           *option)
    assert_one_error_line(code, err, f"drop {option[0]}")


@pytest.mark.parametrize("option", ["--ops", "--no-stats", "--no-memory", "--no-time"])
def test_find_anomaly_refuses_probe_switches_it_would_ignore(
    models: str, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    """``--find-anomaly --ops`` ran the NaN check alone and exited 1, the FLOPs never
    counted."""
    code, _, err = run_cli(capsys, "trace", f"{models}:nan", "-i", "3,4", "--find-anomaly",
                           option)
    assert_one_error_line(code, err, f"drop {option}")


@pytest.mark.parametrize("option", [["--break-at", "1"], ["--no-time"], ["--device", "meta"]])
def test_repeat_in_a_run_that_is_not_timed_is_refused(
    models: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    option: list[str],
) -> None:
    """``--break-at 1 --repeat 3`` ran three times, untimed, and said "times are medians
    of 3 runs"."""
    monkeypatch.setattr(sys, "breakpointhook", lambda: None)
    code, _, err = run_cli(capsys, "trace", f"{models}:clean", "-i", "3,4", "--repeat", "3",
                           *option)
    assert_one_error_line(code, err, "drop --repeat")


def test_a_clean_find_anomaly_json_has_the_report_s_keys(
    models: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, found, _ = run_cli(capsys, "trace", f"{models}:nan", "-i", "3,4", "--find-anomaly",
                          "-f", "json")
    code, clean, _ = run_cli(capsys, "trace", f"{models}:clean", "-i", "3,4",
                             "--find-anomaly", "-f", "json")
    assert code == 0
    doc = json.loads(clean)
    assert sorted(doc) == sorted(json.loads(found))
    assert doc["anomalies"] == [] and doc["stopped"] is False


def test_find_anomaly_backward_names_the_node_torch_s_detect_anomaly_names(
    models: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util
    import re

    import torch

    spec = importlib.util.spec_from_file_location("cli_models", models)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.grad_nan()
    torch.manual_seed(1)
    x = torch.randn(3, 4)
    with pytest.warns(UserWarning), pytest.raises(RuntimeError) as info, \
            torch.autograd.detect_anomaly():
        model(x).sum().backward()
    node = re.search(r"Function '(\w+)'", str(info.value))
    assert node is not None
    code, out, _ = run_cli(capsys, "trace", f"{models}:grad_nan", "-i", "3,4", "--find-anomaly",
                           "--backward")
    assert code == 1
    assert out.startswith(f"First non-finite value: backward node {node.group(1)} ")
    assert "in module '1' (SafeSqrt, call 0)" in out.splitlines()[0]
    assert "return torch.where(x > 0, x.sqrt(), torch.zeros_like(x))" in out
