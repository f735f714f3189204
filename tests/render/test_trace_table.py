"""The trace table: columns by name, sorting, top K, depth, formatting, print(trace)."""

from __future__ import annotations

import math
import re

import pytest
import torch
from torch import nn

import hookscope
from hookscope.core.records.module_records import ModelSummary, ModuleInfo
from hookscope.core.records.trace import Call, FailureRecord, Trace
from hookscope.core.records.values import MemoryRecord, TensorMeta, TensorStats
from hookscope.render.table import to_text
from hookscope.render.trace_table import (
    columns,
    default_columns,
    render_trace,
    trace_table,
)
from hookscope.render.units import format_bytes, format_percent, format_stat, format_time


def meta(path: str, *shape: int) -> TensorMeta:
    return TensorMeta(path, shape, "float32", "cpu")


def stats(mean: float, *, nan: int = 0) -> list[TensorStats]:
    return [TensorStats("out", 8, mean, 1.0, -2.0, 3.0, 3.0, 0.25, nan, 0)]


def module(path: str, cls: str, depth: int, params: int) -> ModuleInfo:
    parent = None if not path else path.rpartition(".")[0]
    return ModuleInfo(path, cls, depth, parent, (), (), params, params, params, 0, "")


def hand_made_trace() -> Trace:
    """A trace written by hand: a root with a fast conv, a slow act, and a NaN head."""
    def call(index: int, path: str, cls: str, depth: int, parent: int | None,
             children: list[int], inp: TensorMeta, out: TensorMeta, time_ns: int,
             self_ns: int, stat: list[TensorStats], memory: MemoryRecord) -> Call:
        facts = {"inputs": [inp], "outputs": [out], "time_ns": time_ns,
                 "self_time_ns": self_ns, "stats": stat, "memory": memory}
        return Call(index, path, cls, 0, depth, parent, children, facts=facts)

    calls = [
        call(0, "", "Net", 0, None, [1, 2, 3], meta("args[0]", 1, 3, 8, 8), meta("out", 1, 2),
             9_000_000, 500_000, stats(0.5), MemoryRecord(8, None)),
        call(1, "conv", "Conv2d", 1, 0, [], meta("args[0]", 1, 3, 8, 8),
             meta("out", 1, 4, 8, 8), 1_500_000, 1_500_000, stats(-0.125),
             MemoryRecord(1024, None)),
        call(2, "act", "ReLU", 1, 0, [], meta("args[0]", 1, 4, 8, 8), meta("out", 1, 4, 8, 8),
             7_000_000, 7_000_000, stats(0.25), MemoryRecord(1024, None)),
        call(3, "head", "Linear", 1, 0, [], meta("args[0]", 1, 256), meta("out", 1, 2), 0, 0,
             stats(math.nan, nan=2), MemoryRecord(8, None)),
    ]
    modules = {
        "": module("", "Net", 0, 626), "conv": module("conv", "Conv2d", 1, 112),
        "act": module("act", "ReLU", 1, 0), "head": module("head", "Linear", 1, 514),
    }
    return Trace(
        model=ModelSummary("Net", 626, 626, 0, 2504, 0), modules=modules, calls=calls,
        probes=["shapes", "stats", "memory", "time"],
    )


def rows(text: str) -> list[str]:
    """The body lines of a rendered table (between the two rules)."""
    lines = text.splitlines()
    rules = [i for i, line in enumerate(lines) if line.strip().startswith("--")]
    return [line for line in lines[rules[0] + 1 : rules[1]] if line.strip()]


def test_the_seed_conv2d_shows_its_input_and_output_shapes() -> None:
    conv = nn.Conv2d(3, 16, 3, padding=1)
    trace = hookscope.trace(conv, torch.randn(1, 3, 32, 32))
    text = str(trace)
    assert "Conv2d" in text
    assert "[1, 3, 32, 32]" in text and "[1, 16, 32, 32]" in text
    assert "Time" in text and "Mean" in text and "Out bytes" in text


EXPECTED = """\
Layer (type)     Input shape   Output shape     Time  Self time    Mean  Std  Zeros  NaN  Out bytes
---------------  ------------  ------------  -------  ---------  ------  ---  -----  ---  ---------
Net              [1, 3, 8, 8]  [1, 2]        9.00 ms     500 us     0.5    1  25.0%    0        8 B
  conv (Conv2d)  [1, 3, 8, 8]  [1, 4, 8, 8]  1.50 ms    1.50 ms  -0.125    1  25.0%    0   1.00 KiB
  act (ReLU)     [1, 4, 8, 8]  [1, 4, 8, 8]  7.00 ms    7.00 ms    0.25    1  25.0%    0   1.00 KiB
  head (Linear)  [1, 256]      [1, 2]           0 ns       0 ns     nan    1  25.0%    2        8 B
---------------  ------------  ------------  -------  ---------  ------  ---  -----  ---  ---------
Total                                        9.00 ms
4 calls | params: 626 | time: 9.00 ms
"""


def test_hand_made_trace_renders_exactly() -> None:
    """Values from the hand-made records: 1_500_000 ns is 1.50 ms, 1024 B is 1.00 KiB,
    a zero fraction of 0.25 is 25.0%, and no column of an absent probe (Inf, Saved)."""
    text = render_trace(hand_made_trace(), width=120)
    assert "\n".join(line.rstrip() for line in text.splitlines()) + "\n" == EXPECTED
    assert text.isascii()


def test_sort_by_time_puts_the_slowest_first() -> None:
    trace = hand_made_trace()
    text = render_trace(trace, columns=["layer", "time"], sort="time")
    expected = [c.path or "Net" for c in sorted(trace.calls, key=lambda c: -(c.time_ns or 0))]
    assert [line.split()[0] for line in rows(text)] == expected
    assert "4 calls, by time" in " ".join(text.split())


def test_sort_puts_nan_first_and_names_ascending() -> None:
    trace = hand_made_trace()
    by_mean = rows(render_trace(trace, columns=["layer", "mean"], sort="mean"))
    assert [line.split()[0] for line in by_mean] == ["head", "Net", "act", "conv"]
    by_name = rows(render_trace(trace, columns=["layer"], sort="layer"))
    assert [line.split()[0] for line in by_name] == ["Net", "act", "conv", "head"]


def test_sort_by_a_column_without_values_says_the_rows_are_in_call_order() -> None:
    """CUDA memory on the CPU: no call has a peak; the rows stay in call order and the
    caption says why, instead of looking sorted."""
    trace = hand_made_trace()
    assert all(c.memory is None or c.memory.peak_bytes is None for c in trace.calls)
    text = render_trace(trace, columns=["layer", "peak"], sort="peak")
    assert [line.split()[0] for line in rows(text)] == [c.path or "Net" for c in trace.calls]
    assert "in call order: no call has a 'peak' value to sort by" in " ".join(text.split())


def test_top_keeps_k_rows_after_sorting() -> None:
    trace = hand_made_trace()
    text = render_trace(trace, columns=["layer", "self_time"], sort="self_time", top=2)
    assert [line.split()[0] for line in rows(text)] == ["act", "conv"]
    assert "2 of 4 rows, by self_time" in " ".join(text.split())


def test_depth_limits_the_rows() -> None:
    text = render_trace(hand_made_trace(), columns=["layer"], depth=0)
    assert [line.split()[0] for line in rows(text)] == ["Net"]


def test_unknown_column_or_sort_lists_the_valid_names() -> None:
    trace = hand_made_trace()
    with pytest.raises(hookscope.RenderError, match="unknown trace column 'speed'") as info:
        trace_table(trace, columns=["layer", "speed"])
    assert all(name in str(info.value) for name in columns())
    with pytest.raises(hookscope.RenderError, match=r"'parms' \(did you mean 'params'\?\)"):
        trace_table(trace, sort="parms")
    with pytest.raises(hookscope.RenderError, match="'slowest'"):
        trace_table(trace, sort="slowest")
    with pytest.raises(hookscope.RenderError, match="top must be an integer >= 1"):
        trace_table(trace, top=0)
    with pytest.raises(hookscope.RenderError, match="list of column names"):
        trace_table(trace, columns="time")


def test_default_columns_follow_the_probes_that_ran() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    x = torch.randn(2, 4)
    shapes_only = hookscope.trace(model, x, time=False, stats=False, memory=False)
    assert default_columns(shapes_only) == ["layer", "input", "output", "params"]
    everything = hookscope.trace(model, x, grad=True)
    assert default_columns(everything) == [
        "layer", "input", "output", "time", "self_time", "mean", "std", "zeros",
        "out_bytes", "saved_bytes",
    ]
    nan_trace = hand_made_trace()
    assert "nan" in default_columns(nan_trace) and "inf" not in default_columns(nan_trace)


def test_a_failed_trace_says_where_it_failed() -> None:
    trace = hand_made_trace()
    trace.error = FailureRecord(3, "head", "RuntimeError", "shapes do not match")
    assert "FAILED in 'head': RuntimeError: shapes do not match" in render_trace(trace)


def test_nonzero_nan_counts_are_highlighted_in_colour() -> None:
    table = trace_table(hand_made_trace(), columns=["layer", "nan"])
    coloured = to_text(table, color=True)
    assert re.search(r"\x1b\[1;31m *2\x1b\[0m", coloured)
    assert not re.search(r"\x1b\[1;31m *0", coloured)


@pytest.mark.parametrize(("ns", "ascii", "text"), [
    (None, False, ""), (0, False, "0 ns"), (999, False, "999 ns"), (1_000, False, "1.00 µs"),
    (12_345, True, "12.3 us"), (999_499, False, "999 µs"), (999_500, False, "1.00 ms"),
    (45_830_000, False, "45.8 ms"), (3_000_000_000, False, "3.00 s"),
])
def test_format_time(ns: int | None, ascii: bool, text: str) -> None:
    assert format_time(ns, ascii=ascii) == text


@pytest.mark.parametrize(("n", "text"), [
    (None, ""), (0, "0 B"), (1023, "1023 B"), (1024, "1.00 KiB"), (1536, "1.50 KiB"),
    (256 * 1024, "256 KiB"), (3 * 2**20, "3.00 MiB"), (-2048, "-2.00 KiB"),
    (5 * 2**40, "5.00 TiB"),
])
def test_format_bytes(n: int | None, text: str) -> None:
    assert format_bytes(n) == text


def test_format_stat_and_percent() -> None:
    assert [format_stat(x) for x in (None, math.nan, -math.inf, 0.123456, 12345678.0)] == [
        "", "nan", "-inf", "0.1235", "1.235e+07",
    ]
    assert format_stat(0.123456, digits=3) == "0.123"
    assert (format_percent(0.5123), format_percent(None)) == ("51.2%", "")


@pytest.mark.parametrize("width", [44, 36, 28, 24])
def test_a_shortened_fold_keeps_its_range_readable(width: int) -> None:
    """A fold's name was cut as one string: ``layers.1 .… layers.79``, ``h.1….11``."""
    from hookscope.render.labels import _elide_name, shorten_tree

    cell = "  layers.1 ... layers.79 (LlamaDecoderLayer) x79"
    short = shorten_tree(cell, width)
    assert len(short) <= width and short.endswith(") x79")
    name = short.strip().partition(" (")[0]
    assert name in ("layers.1 ... layers.79", "layers.1...layers.79", "layers.1…layers.79",
                    "layers.1…79")
    assert _elide_name("h.1 ... h.11", 6) == "h.1…11"
    assert _elide_name("layers.1 ... layers.79", 11) == "layers.1…79"
    assert _elide_name("layers.1 ... layers.79", 19) == "layers.1…layers.79"
    assert _elide_name("layers.1 ... layers.79", 20) == "layers.1...layers.79"


def test_a_shortened_label_keeps_its_name_whole_while_the_class_can_give_way() -> None:
    """``layer1.0 (BasicBlock)`` in 18 columns read ``lay…1.0 (Ba…k)``: the name, which
    tells the rows apart, was cut while the class kept four characters."""
    from hookscope.render.labels import shorten_tree

    assert shorten_tree("    layer1.0 (BasicBlock)", 18) == "    layer1.0 (B…k)"
    assert shorten_tree("  lm_head (Linear) [tied]", 22) == "  lm_head (L…r) [tied]"
    # no room for the name and two characters of the class: both shortened
    short = shorten_tree("    layer1.0 (BasicBlock)", 16)
    assert len(short) <= 16 and short.endswith("(Ba…k)") and "layer1.0" not in short


class _Enc(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class _EncDec(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc, self.dec = _Enc(), _Enc()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dec(self.enc(x))


def _layer_cells(text: str) -> list[str]:
    lines = text.splitlines()
    rows = lines[2:lines.index(lines[1], 2)]
    return [re.match(r"\s*\S+(?: \S+)*", line).group(0) for line in rows]  # type: ignore[union-attr]


def test_selected_rows_of_two_lists_are_told_apart_and_the_total_is_theirs() -> None:
    model = _EncDec()
    trace = hookscope.trace(model, torch.randn(1, 4), select="**.layers.0", time=False,
                            stats=False, memory=False)
    text = render_trace(trace, columns=["layer", "params"])
    assert _layer_cells(text) == ["enc.layers.0 (Linear)", "dec.layers.0 (Linear)"]
    (total,) = [line for line in text.splitlines() if line.startswith("Total")]
    assert int(total.split()[-1]) == 2 * sum(p.numel() for p in model.enc.layers[0].parameters())
    # under a selected parent, a row is named below it, as in a full tree
    trace = hookscope.trace(model, torch.randn(1, 4), select=["enc", "**.layers.1"],
                            time=False, stats=False, memory=False)
    assert _layer_cells(render_trace(trace, columns=["layer"])) == [
        "enc (_Enc)", "  layers.1 (Linear)", "dec.layers.1 (Linear)"]


class _TiedHeads(nn.Module):
    """An embedding, a body, and two heads sharing the embedding's weight, one of them
    holding it twice: every way a tied tensor spans selected rows."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.body = nn.Linear(4, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight
        self.aux = nn.Module()
        self.aux.a, self.aux.b = nn.Linear(4, 10), nn.Linear(4, 10)
        self.aux.a.weight = self.aux.b.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.body(self.emb(ids))
        return self.head(h) + self.aux.a(h) + self.aux.b(h)


@pytest.mark.parametrize("select", [
    ["emb", "head"], ["head", "aux.*"], ["emb", "body", "head", "aux"], ["head"],
])
def test_the_total_of_selected_rows_counts_a_tied_weight_once(select: list[str]) -> None:
    """GPT-2's ``select=["transformer", "lm_head"]`` showed 33,920 params where the
    model has 30,720: the tied embedding was counted in both rows."""
    model = _TiedHeads()
    trace = hookscope.trace(model, torch.tensor([[1, 2]]), select=select, time=False,
                            stats=False, memory=False)
    top = [c.path for c in trace.calls if c.parent is None]
    unique = {id(p): p.numel() for path in top  # the oracle: each tensor once
              for p in model.get_submodule(path).parameters()}
    (total,) = [line for line in render_trace(trace, columns=["layer", "params"]).splitlines()
                if line.startswith("Total")]
    assert int(total.split()[-1].replace(",", "")) == sum(unique.values())


def test_a_fold_of_the_root_called_again_is_named_by_the_model() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with torch.no_grad(), hookscope.Tracer(model, time=False, stats=False,
                                           memory=False) as tracer:
        for _ in range(3):
            model(torch.randn(2, 4))
    assert tracer.trace is not None
    cells = _layer_cells(render_trace(tracer.trace, columns=["layer"]))
    assert cells[-1] == "Sequential#1 ... Sequential#2 x2"


class _Deep(nn.Module):
    """``encoder.layer.N.attention.self.query``: paths that differ in the middle."""

    def __init__(self, n: int = 4) -> None:
        super().__init__()
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList()
        for _ in range(n):
            block = nn.Module()
            block.attention = nn.Module()
            block.attention.self = nn.Module()
            block.attention.self.query = nn.Linear(4, 4)
            self.encoder.layer.append(block)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.encoder.layer:  # type: ignore[union-attr]
            x = block.attention.self.query(x)
        return x


@pytest.mark.parametrize("width", [50, 60, 80])
@pytest.mark.parametrize("how", ["select", "sort"])
def test_rows_named_by_whole_paths_stay_apart_and_show_their_index(width: int, how: str) -> None:
    """Under ``select=``/``sort=`` rows are named by their whole path, which a narrow
    table cut in the middle, where the layer index is: every row read
    ``encod…query (Li…r)``."""
    model = _Deep()
    trace = hookscope.trace(model, torch.randn(1, 4), select="**.query" if how == "select"
                            else None, stats=False, memory=False)
    text = render_trace(trace, width=width, columns=["layer", "output", "time"],
                        **({"sort": "time"} if how == "sort" else {}))
    assert max(map(len, text.splitlines())) <= width
    cells = [line.split(")")[0] for line in text.splitlines() if "query" in line]
    assert len(cells) == 4 and len(set(cells)) == 4
    for i in range(4):  # each row still shows its layer index
        assert sum(f"{i}." in c.split("(")[0] for c in cells) == 1


def test_a_failure_message_of_several_lines_keeps_the_caption_one_line() -> None:
    class Bad(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("shape mismatch\nexpected 3\ngot 4")

    model = nn.Sequential(nn.Linear(2, 2), Bad())
    with pytest.raises(hookscope.ModelRunError) as info:
        hookscope.trace(model, torch.randn(1, 2))
    trace = info.value.trace
    assert trace is not None and trace.error is not None
    assert trace.error.message == "shape mismatch\nexpected 3\ngot 4"  # the record: whole
    caption = render_trace(trace, width=200).splitlines()[-1]
    assert caption.endswith("FAILED in '1': ValueError: shape mismatch ~")
    assert "expected 3" not in render_trace(trace, width=200)


class _TwoShare(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        shared = nn.Linear(2, 2)
        self.a, self.b = nn.Sequential(shared, nn.Linear(2, 2)), nn.Sequential(shared)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


def test_the_total_of_selected_rows_counts_a_shared_submodule_once() -> None:
    model = _TwoShare()
    trace = hookscope.trace(model, torch.randn(1, 2), select=["a", "b"], time=False,
                            stats=False, memory=False)
    unique = {id(p): p.numel() for name in ("a", "b")  # the oracle: each tensor once
              for p in model.get_submodule(name).parameters()}
    (total,) = [line for line in render_trace(trace, columns=["layer", "params"]).splitlines()
                if line.startswith("Total")]
    assert int(total.split()[-1].replace(",", "")) == sum(unique.values())


def test_a_narrow_table_of_chosen_columns_does_not_advise_choosing_columns() -> None:
    """The caption said 'or pick them with --columns' to a user who just did."""
    trace = hookscope.trace(nn.Sequential(nn.Linear(2, 2)), torch.randn(1, 2))
    chosen = render_trace(trace, width=40,
                          columns=["layer", "output", "time", "mean", "std", "absmax"])
    assert "not shown at width 40" in chosen and "pick" not in chosen
    default = render_trace(trace, width=40).replace("\n  ", " ")
    assert "not shown at width 40" in default and "or pick" in default
