"""Issue 14 regressions from the command line: the memory guard (with a patched
available-memory figure), --dtype, integer ids from an unnamed --input, decoder inputs
beside the user's, -o checked before the model is built, whole config messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hookscope.cli import main
from hookscope.core import meta

pytest.importorskip("transformers")

GPT2 = ["transformers:gpt2", "--config", "n_layer=1,n_embd=32,n_head=2"]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def little_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(meta, "available_memory", lambda device=None: 1 << 20)  # 1 MiB


def test_summary_of_a_model_too_large_runs_on_meta_with_a_notice(
    little_memory: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "summary", *GPT2, "-f", "json")
    assert code == 0, err
    assert json.loads(out)["meta"]["device"] == "meta"
    (notice,) = err.strip().splitlines()
    assert "more than the 1.0 MiB of memory available" in notice
    assert "meta device" in notice and "--device cpu" in notice


def test_trace_of_a_model_too_large_stops_naming_its_size(
    little_memory: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "trace", *GPT2)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert "parameters and buffers (" in line and "--device meta" in line


def test_an_explicit_device_forces_the_build(
    little_memory: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "trace", *GPT2, "--device", "cpu", "--no-stats")
    assert code == 0, err


def test_inspect_never_allocates_weights(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "inspect", *GPT2, "-f", "json")
    assert code == 0, err
    assert {p["device"] for p in json.loads(out)["parameters"]} == {"meta"}


def test_dtype_casts_the_model_and_its_floating_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "summary", "torchvision:resnet18", "--dtype", "bf16",
                         "--device", "meta", "-f", "json")
    assert code == 0, err
    root = json.loads(out)["calls"][0]
    assert root["inputs"][0]["dtype"] == root["outputs"][0]["dtype"] == "bfloat16"


def test_unknown_dtype_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "summary", *GPT2, "--dtype", "fp8")
    assert code == 2 and "float16 (half, fp16), bfloat16 (bf16)" in err


def test_unnamed_input_of_a_text_model_is_int64_ids(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "summary", *GPT2, "--input", "1,16", "-f", "json")
    assert code == 0, err
    assert json.loads(out)["calls"][0]["inputs"][0]["dtype"] == "int64"


def test_encoder_decoder_gets_decoder_ids_beside_the_users(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "summary", "transformers:t5", "--config",
                         "num_layers=1,d_model=32,d_ff=64,num_heads=2,d_kv=16",
                         "--input", "input_ids=1,24:int64", "-f", "json")
    assert code == 0, err
    shapes = {m["path"]: m["shape"] for m in json.loads(out)["calls"][0]["inputs"]}
    assert shapes['kwargs["decoder_input_ids"]'] == [1, 24]


def test_output_is_checked_before_the_model_is_built(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from hookscope.cli import loading

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was built")

    monkeypatch.setattr(loading, "load_model", never)
    code, out, err = run(capsys, "summary", *GPT2, "-o", str(tmp_path / "missing" / "x"))
    assert code == 2 and out == "" and "does not exist" in err


def test_config_validation_message_is_whole(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "inspect", "transformers:gpt2", "--config", "n_layer=two")
    assert code == 2 and "expected int, got str" in err and len(err.splitlines()) == 1
