"""CSV and DataFrame exports, and exact JSON round trips of real models."""

from __future__ import annotations

import csv
import io
import math
import sys

import pytest
import torch
from torch import nn

import hookscope
from hookscope.render.export import (
    FIELDS,
    trace_to_csv,
    trace_to_dataframe,
)


def small_gpt2() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(
        "gpt2", n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16,
        bos_token_id=0, eos_token_id=0,
    )
    return transformers.AutoModel.from_config(config).eval()


def small_resnet18() -> nn.Module:
    torchvision = pytest.importorskip("torchvision")
    return torchvision.models.get_model("resnet18", weights=None).eval()


def cnn_trace() -> hookscope.Trace:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    return hookscope.trace(model, torch.randn(2, 3, 8, 8), grad=True)


def parse(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_csv_has_one_row_per_call_with_the_records_values() -> None:
    trace = cnn_trace()
    rows = parse(trace_to_csv(trace))
    assert len(rows) == len(trace) == 5
    for row, call in zip(rows, trace, strict=True):
        assert (row["index"], row["path"], row["class"]) == (
            str(call.index), call.path, call.module_class,
        )
        assert int(row["time_ns"]) == call.time_ns
        assert int(row["self_time_ns"]) == call.self_time_ns
        assert int(row["output_bytes"]) == call.memory.output_bytes
        assert int(row["saved_bytes"]) == call.memory.saved_bytes
        assert float(row["mean"]) == call.stats[0].mean  # full precision survives
        assert row["parent"] == ("" if call.parent is None else str(call.parent))
    assert rows[1]["inputs"] == "[2, 3, 8, 8]" and rows[1]["outputs"] == "[2, 4, 6, 6]"
    assert rows[0]["params"] == str(4 * 3 * 3 * 3 + 4 + 4 * 6 * 6 * 3 + 3)
    assert rows[0]["allocated_delta"] == ""  # a CUDA-only field on the CPU


def test_csv_fields_follow_the_probes_that_ran() -> None:
    model = nn.Linear(2, 2)
    shapes_only = hookscope.trace(model, torch.zeros(1, 2), time=False, stats=False,
                                  memory=False)
    header = trace_to_csv(shapes_only).splitlines()[0].split(",")
    assert header == ["index", "path", "class", "call_index", "depth", "parent", "inputs",
                      "outputs", "params", "start_ns", "error"]
    full = trace_to_csv(cnn_trace()).splitlines()[0].split(",")
    ran = {"", "shapes", "time", "stats", "memory"}  # "": the trace's own fields
    assert set(full) == {name for name in FIELDS if FIELDS[name].probe in ran
                         and FIELDS[name].default}
    assert full[:8] == ["index", "path", "class", "call_index", "depth", "parent", "inputs",
                        "outputs"]


def test_csv_columns_and_unknown_column_error() -> None:
    trace = cnn_trace()
    text = trace_to_csv(trace, columns=["path", "time_ns"])
    assert text.splitlines()[0] == "path,time_ns"
    assert len(text.splitlines()) == len(trace) + 1
    with pytest.raises(hookscope.RenderError, match=r"\['speed'\].*valid columns: index"):
        trace_to_csv(trace, columns=["path", "speed"])
    with pytest.raises(hookscope.RenderError, match="list of field names"):
        trace_to_csv(trace, columns="path")


def test_csv_quotes_multi_tensor_shapes_and_writes_nan() -> None:
    class Split(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x / 0 * 0, x.long()

    trace = hookscope.trace(Split(), torch.ones(2, 3))
    rows = parse(trace.to_csv())
    assert rows[0]["outputs"] == "out[0]: [2, 3]; out[1]: [2, 3] int64"
    assert math.isnan(float(rows[0]["mean"]))
    assert rows[0]["nan_count"] == "6"


def test_dataframe_has_the_csv_columns() -> None:
    pd = pytest.importorskip("pandas")
    trace = cnn_trace()
    frame = trace.to_dataframe()
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == list(parse(trace.to_csv())[0])
    assert len(frame) == len(trace)
    assert frame["time_ns"].tolist() == [c.time_ns for c in trace]
    assert list(trace_to_dataframe(trace, columns=["path", "mean"]).columns) == ["path", "mean"]


def test_dataframe_without_pandas_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # makes `import pandas` fail
    with pytest.raises(ImportError) as info:
        cnn_trace().to_dataframe()
    assert isinstance(info.value, hookscope.MissingDependencyError)
    assert isinstance(info.value, hookscope.HookscopeError)
    assert str(info.value) == (
        "pandas is not installed (needed for to_dataframe): pip install 'hookscope[pandas]'"
    )


def assert_round_trip(trace: hookscope.Trace) -> None:
    text = trace.to_json()
    again = hookscope.Trace.from_json(text)
    assert again == trace
    assert again.to_json() == text


def test_json_round_trip_of_resnet18_with_every_probe() -> None:
    trace = hookscope.trace(
        small_resnet18(), torch.randn(1, 3, 32, 32), time=True, stats=True, memory=True,
        ops=True, backward=True,
    )
    assert all(c.stats and c.memory and c.time_ns is not None for c in trace)
    assert trace.find("layer1.0.conv1").memory.saved_bytes is not None
    assert_round_trip(trace)


def test_json_round_trip_of_gpt2_with_every_probe() -> None:
    trace = hookscope.trace(
        small_gpt2(), torch.randint(0, 64, (1, 16)), time=True, stats=True, memory=True,
        ops=True,
    )
    assert len(trace) > 20
    assert_round_trip(trace)


def test_json_round_trip_keeps_nan_statistics_and_input_stats() -> None:
    class Bad(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.log(x)

    model = nn.Sequential(Bad(), nn.Linear(5, 2))
    x = torch.tensor([[-1.0, 0.0, 1.0, 2.0]])
    with pytest.raises(hookscope.ModelRunError) as info:
        hookscope.trace(model, x)
    trace = info.value.trace
    stats = trace.find("0").stats[0]
    assert math.isnan(stats.mean) and (stats.nan_count, stats.inf_count) == (1, 1)
    assert trace.find("1").input_stats is not None
    assert_round_trip(trace)


def test_one_name_selects_one_fact_in_the_table_and_the_exports() -> None:
    """Issue 13: the table's column names select the same facts in CSV and DataFrame
    (``time`` -> ``time_ns``), and the export field names work as table columns."""
    from hookscope.render.trace_table import render_trace

    trace = cnn_trace()
    header = trace.to_csv(columns=["path", "time", "zeros", "out_bytes", "nan"]).splitlines()[0]
    assert header == "path,time_ns,zero_fraction,output_bytes,nan_count"
    frame = trace.to_dataframe(columns=["path", "self_time"])
    assert list(frame.columns) == ["path", "self_time_ns"]
    by_field = render_trace(trace, columns=["layer", "time_ns", "zero_fraction"])
    by_column = render_trace(trace, columns=["layer", "time", "zeros"])
    assert by_field == by_column


def test_every_table_column_name_selects_a_field_in_the_exports() -> None:
    """``--columns layer,output,time`` drew the table and was refused by ``--format
    csv`` (``layer``), and ``time_pct`` had no field at all."""
    from hookscope.render.columns import columns

    trace = cnn_trace()
    built_in = {"", "shapes", "time", "stats", "memory", "ops", "grads"}
    for name, column in columns().items():  # every column hookscope's table knows
        if column.probe in built_in:
            assert trace.to_csv(columns=[name]).splitlines()[0]
    rows = list(csv.DictReader(io.StringIO(trace.to_csv(columns=["layer", "time_pct"]))))
    assert list(rows[0]) == ["path", "time_share"]
    total = trace.total_time_ns
    assert total
    for row, call in zip(rows, trace.calls, strict=True):
        assert row["path"] == call.path
        assert float(row["time_share"]) == pytest.approx(call.time_ns / total)
    # derived: not in an export that names no columns
    assert "time_share" not in trace.to_csv().splitlines()[0]


def test_every_export_field_with_a_column_selects_it_in_the_table() -> None:
    """The other way round: ``--columns path`` was refused, while the probes' field
    names (``time_ns``) were taken."""
    from hookscope.render.columns import column
    from hookscope.render.export import fields
    from hookscope.render.trace_table import render_trace

    linked = {name: f.column for name, f in fields().items() if f.column}
    assert linked["path"] == "layer"
    for name, col in linked.items():
        assert column(name).name == col
    trace = cnn_trace()
    assert render_trace(trace, columns=["path", "time_ns"]) == \
        render_trace(trace, columns=["layer", "time"])
