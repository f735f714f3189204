"""Tables at every width: no number cut, columns left out said, folding, labels, golden files.

Models: torchvision resnet18, transformers GPT-2 (default config) and a Llama-70B-size
configuration on the meta device; traces with shapes and FLOPs only (deterministic).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch

import hookscope
from hookscope.render.ops_table import render_ops
from hookscope.render.trace_table import render_trace

NUMBER = re.compile(r"(?<![\w.…~])\d[\d,]*(?:\.\d+)?(?![\w…~])")
LLAMA_70B = {"hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
             "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 32000}


def _resnet18() -> hookscope.Trace:
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.resnet18().eval()
    return hookscope.trace(model, torch.randn(1, 3, 224, 224), time=False, stats=False,
                           memory=False, ops=True)


def _gpt2() -> hookscope.Trace:
    transformers = pytest.importorskip("transformers")
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()
    return hookscope.trace(model, torch.zeros(1, 32, dtype=torch.int64), time=False,
                           stats=False, memory=False, ops=True)


def _llama70b() -> hookscope.Trace:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(**LLAMA_70B)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config).eval()
    return hookscope.trace(model, torch.zeros(1, 32, dtype=torch.int64, device="meta"),
                           time=False, stats=False, memory=False, ops=True)


BUILDERS: dict[str, Callable[[], hookscope.Trace]] = {
    "resnet18": _resnet18, "gpt2": _gpt2, "llama70b": _llama70b}
_CACHE: dict[str, hookscope.Trace] = {}


def traced(name: str) -> hookscope.Trace:
    if name not in _CACHE:
        _CACHE[name] = BUILDERS[name]()
    return _CACHE[name]


TRACE_COLUMNS = ["layer", "input", "output", "params", "flops_fwd"]
RENDERERS: dict[str, Callable[[hookscope.Trace, int], str]] = {
    "summary": lambda t, w: hookscope.Summary(t).to_text(width=w),
    "trace": lambda t, w: render_trace(t, columns=TRACE_COLUMNS, width=w),
    "ops": lambda t, w: render_ops(t, top=12, width=w),
}


def _numbers(text: str) -> set[str]:
    """The numbers of a table, leaving out the widths named in the caption."""
    text = re.sub(r"(--)?width[\s=]+\d+", "", text.replace("\n  ", " "))
    return set(NUMBER.findall(text))


HEADERS = ("Input", "Output", "Params", "FLOPs", "Count", "Phase", "Share")


@pytest.mark.parametrize("model", list(BUILDERS))
@pytest.mark.parametrize("renderer", list(RENDERERS))
def test_no_number_is_cut_at_any_width(model: str, renderer: str) -> None:
    trace = traced(model)
    render = RENDERERS[renderer]
    reference = render(trace, 1000)
    whole = _numbers(reference)
    for width in range(40, 201):
        text = render(trace, width)
        assert _numbers(text) <= whole, (width, _numbers(text) - whole)
        assert text.isascii(), width  # a shortened label's "…" is drawn as "~"
        for line in text.splitlines():
            assert len(line) <= width, (width, line)
        missing = [h for h in HEADERS if h in reference[:400] and h not in text[:400]]
        if missing:
            assert f"not shown at width {width}" in text, (width, missing)


@pytest.mark.parametrize("model", list(BUILDERS))
def test_every_shown_count_of_the_json_is_whole(model: str) -> None:
    trace = traced(model)
    for width in (40, 80, 120):
        text = hookscope.Summary(trace, fold=False).to_text(width=width)
        if "Params" in text.splitlines()[0]:
            for info in trace.modules.values():
                if any(c.path == info.path for c in trace.calls):
                    assert f"{info.total_params:,}" in text


def test_repeated_blocks_fold_with_summed_numbers() -> None:
    trace = traced("gpt2")
    text = hookscope.Summary(trace).to_text(width=200)
    block = trace.modules["transformer.h.1"].total_params
    assert re.search(r"h\.1 \.\.\. h\.11 \(GPT2Block\) x11 .* " + f"{11 * block:,}", text)
    assert "h.0 (GPT2Block)" in text and "  0 (GPT2Block)" not in text
    assert "h.5 (GPT2Block)" not in text
    unfolded = hookscope.Summary(trace, fold=False).to_text(width=200)
    assert "h.5 (GPT2Block)" in unfolded and "x11" not in unfolded
    flops = sum(trace.find(f"transformer.h.{i}").flops.forward for i in range(1, 12))
    assert f"{flops:,}" in text


class _Stack(torch.nn.Module):
    """``layers.N`` blocks of two Linears: at ``depth=1`` each block is one row (the
    ModuleList itself is never called)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.layers:
            x = block(x)
        return x


def test_blocks_at_the_depth_limit_fold_too() -> None:
    """At the depth where the blocks show no rows below them, nothing folded: an
    80-layer Llama printed 80 layer rows at depth 2 and 4 at depth 3."""
    from hookscope.render.fold import auto_depth, tree_rows

    model = _Stack(80)
    trace = hookscope.trace(model, torch.randn(1, 4), time=False, stats=False, memory=False)
    text = hookscope.Summary(trace, depth=1).to_text(width=200)
    block = sum(p.numel() for p in model.layers[1].parameters())  # the oracle
    assert re.search(r"layers\.1 \.\.\. layers\.79 \(Sequential\) x79 .* "
                     + f"{79 * block:,}", text)
    assert "layers.40 (Sequential)" not in text
    rows = [len(tree_rows(trace, depth=d)) for d in range(1, 4)]
    assert rows == sorted(rows) and rows[0] == 3  # the root, layers.0, the fold
    assert auto_depth(trace, max_rows=10) is None  # every depth fits once folded


def test_the_70b_llama_summary_fits_on_a_screen() -> None:
    text = hookscope.Summary(traced("llama70b")).to_text(width=120)
    assert len(text.splitlines()) < 50
    assert "layers.1 ... layers.79 (LlamaDecoderLayer) x79" in \
        hookscope.Summary(traced("llama70b")).to_text(width=200)


def test_tied_parameter_row_says_so() -> None:
    text = hookscope.Summary(traced("gpt2")).to_text(width=200)
    assert "lm_head (Linear) [tied]" in text
    transformers = pytest.importorskip("transformers")
    info = hookscope.inspect(transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1)))
    assert info["lm_head.weight"].tied_to == "transformer.wte.weight"


def test_sizes_fit_their_units() -> None:
    model = torch.nn.Linear(10, 10, bias=True)  # 110 params: 440 B
    text = hookscope.summary(torch.nn.Sequential(model, torch.nn.Linear(10, 1)),
                             torch.randn(1, 10)).to_text()
    assert "param size: 484 B" in text and "MiB" not in text
    assert "buffers: 0 elements (0 B)" in text and "memory: params 484 B" in text


@pytest.mark.parametrize("model", list(BUILDERS))
@pytest.mark.parametrize("renderer", list(RENDERERS))
@pytest.mark.parametrize("width", [80, 120, 200])
def test_golden(model: str, renderer: str, width: int, golden) -> None:  # type: ignore[no-untyped-def]
    golden(renderer, RENDERERS[renderer](traced(model), width))


def test_jupyter_display_and_short_repr() -> None:
    formatters = pytest.importorskip("IPython.core.formatters")
    trace = traced("resnet18")
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    shown = [hookscope.Summary(trace), trace, hookscope.inspect(model)]
    for obj in shown:
        data, _ = formatters.DisplayFormatter().format(obj)
        assert "<table" in data["text/html"] and "</table>" in data["text/html"]
        assert len(data["text/plain"]) < 200
    assert "layer1.1 (BasicBlock) x1" not in data["text/html"]


def test_dataframe_keeps_integers_integer() -> None:
    pytest.importorskip("pandas")
    trace = hookscope.trace(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU()),
                            torch.randn(1, 2), memory=True, ops=True)
    frame = trace.to_dataframe()
    for name in ("index", "depth", "call_index", "params", "time_ns", "output_bytes",
                 "flops_forward"):
        if name in frame:
            assert str(frame[name].dtype) in ("int64", "Int64"), (name, frame[name].dtype)


def test_keyword_names_are_whole_at_every_width_where_their_column_is_shown() -> None:
    """``kwargs["input_ids"]`` and ``kwargs["decoder_input_ids"]`` (T5, BART) were both
    shortened to ``kwargs…ids"]``: a keyword name is now shown whole, its shape wrapped
    onto the next line when the line is too long."""
    from torch import nn

    class EncoderDecoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.e = nn.Embedding(10, 4)

        def forward(self, input_ids: torch.Tensor, decoder_input_ids: torch.Tensor) -> Any:
            return {"a": self.e(input_ids), "b": self.e(decoder_input_ids)}

    ids = torch.zeros(1, 3, dtype=torch.long)
    summary = hookscope.summary(EncoderDecoder(), kwargs={"input_ids": ids,
                                                          "decoder_input_ids": ids})
    shown = wrapped = 0
    for width in range(40, 121):
        text = summary.to_text(width=width)
        if "Input" not in text.splitlines()[0] + text.splitlines()[1]:
            assert "input (Input shape)" in text.replace("\n  ", " "), width  # said so
            continue
        shown += 1
        found = re.findall(r'kwargs\S*:', text)
        assert found == ['kwargs["input_ids"]:', 'kwargs["decoder_input_ids"]:'], (width, found)
        wrapped += 'kwargs["input_ids"]: [' not in text
    assert shown > 20 and wrapped  # shown at many widths, wrapped at some


def test_a_fold_sums_counts_and_shares_but_not_a_fraction_of_one_output() -> None:
    """A fold of 11 blocks showed Zeros as the sum of their zero fractions (385%)."""
    from torch import nn

    from hookscope.render.trace_table import render_trace

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.fc(x))  # about half zeros

    torch.manual_seed(0)
    model = nn.Sequential(*[Block() for _ in range(4)])
    trace = hookscope.trace(model, torch.randn(64, 8))
    text = render_trace(trace, columns=["layer", "zeros", "time_pct"], width=200)
    (row,) = [line for line in text.splitlines() if "x3" in line]
    shares = sum(trace.find(str(i)).facts["time_ns"] for i in (1, 2, 3)) / trace.total_time_ns
    assert row.split()[-1] == f"{100 * shares:.1f}%"  # the blocks' share of the time
    assert row.split()[-2] == "x3"  # no Zeros: a fraction is not a sum


class _SharesProj(torch.nn.Module):
    def __init__(self, proj: torch.nn.Module) -> None:
        super().__init__()
        self.own, self.proj = torch.nn.Linear(4, 4), proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.own(x))


@pytest.mark.parametrize("fold", [True, False])
def test_rows_that_hold_a_module_registered_first_elsewhere_say_so(fold: bool) -> None:
    """Four blocks sharing one Linear: blocks 1-3 counted its parameters in their rows
    (and their fold), with no marker, so the rows added up to more than the Total."""
    shared = torch.nn.Linear(4, 4)
    model = torch.nn.Sequential(*[_SharesProj(shared) for _ in range(4)])
    text = hookscope.summary(model, torch.randn(2, 4), fold=fold).to_text(width=200)
    lines = text.splitlines()
    assert not any(line.strip().startswith("0 (_SharesProj)") and "[shared]" in line
                   for line in lines)  # block 0 holds it at its first path
    if fold:
        assert any("1 ... 3 (_SharesProj) x3 [shared]" in line for line in lines)
        assert "[shared] 1 ... 3 hold 0.proj, registered first there" in text
    else:
        for i in (1, 2, 3):
            assert any(line.strip().startswith(f"{i} (_SharesProj) [shared]") for line in lines)
        assert "[shared] 2 holds 0.proj, registered first there" in text
    total = sum(p.numel() for p in model.parameters())  # the oracle: each tensor once
    assert f"{total:,}" in next(line for line in lines if line.startswith("Total"))


class _Blk(torch.nn.Module):
    def __init__(self, child: bool) -> None:
        super().__init__()
        self.inner = torch.nn.Identity() if child else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x) if self.inner is not None else x


def test_leaves_after_a_block_with_children_do_not_fold() -> None:
    """Blocks, not leaves: the fold looked at the first block's children only."""
    model = torch.nn.Sequential(_Blk(True), _Blk(False), _Blk(False), _Blk(False))
    text = hookscope.summary(model, torch.randn(1, 4)).to_text(width=200)
    assert "x3" not in text
    assert all(f"{i} (_Blk)" in text for i in range(4))
