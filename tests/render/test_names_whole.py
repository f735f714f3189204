"""A name is cut last: at 80, 100 and 120 columns, every module path, class name and op
name a table shows is whole (issue: ``h.1~h.11 (GP~k) x11`` while Mean was dropped).

Oracles: ``named_modules()`` (paths and classes) and the ops table's own op list
(:func:`hookscope.flops.registry.by_op`). Models: GPT-2 and BERT from their default
configurations (random weights, 8 tokens), the 70B Llama configuration on the meta
device, and ``hookscope demo``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from helpers import run_cli
from hookscope.render.ops_table import render_ops
from hookscope.render.trace_table import render_trace

WIDTHS = (80, 100, 120)
LLAMA_70B = {"hidden_size": 8192, "num_hidden_layers": 80, "num_attention_heads": 64,
             "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 128256}
LABEL = re.compile(r"^(?P<names>.+?)(?: \((?P<cls>[^()]+)\))?(?: x\d+)?(?: \[(?:tied|shared)\])?$")


def _gpt2() -> tuple[nn.Module, hookscope.Trace]:
    transformers = pytest.importorskip("transformers")
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()
    return model, hookscope.trace(model, torch.zeros(1, 8, dtype=torch.int64), ops=True)


def _bert() -> tuple[nn.Module, hookscope.Trace]:
    transformers = pytest.importorskip("transformers")
    model = transformers.BertModel(transformers.BertConfig()).eval()
    return model, hookscope.trace(model, torch.zeros(1, 8, dtype=torch.int64), ops=True)


def _llama70b() -> tuple[nn.Module, hookscope.Trace]:
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA_70B)).eval()
    ids = torch.zeros(1, 8, dtype=torch.int64, device="meta")
    return model, hookscope.trace(model, ids, time=False, stats=False, memory=False, ops=True)


MODELS: dict[str, Callable[[], tuple[nn.Module, hookscope.Trace]]] = {
    "gpt2": _gpt2, "bert": _bert, "llama70b": _llama70b}
_CACHE: dict[str, tuple[nn.Module, hookscope.Trace]] = {}


def _traced(name: str) -> tuple[nn.Module, hookscope.Trace]:
    if name not in _CACHE:
        _CACHE[name] = MODELS[name]()
    return _CACHE[name]


def _layer_cells(text: str) -> list[str]:
    """The first column's cells of a plain-text table (the rows between the rules)."""
    lines = text.splitlines()
    rules = [i for i, line in enumerate(lines) if re.fullmatch(r"-+(  -+)*", line)]
    width = len(lines[rules[0]].split("  ")[0])
    end = rules[1] if len(rules) > 1 else len(lines)
    cells = [line[:width].strip() for line in lines[rules[0] + 1:end]]
    return [c for c in cells if c]


def _assert_real_names(model: nn.Module, cells: list[str]) -> None:
    paths = [p for p, _ in model.named_modules() if p]
    classes = {type(m).__name__ for m in model.modules()}
    for cell in cells:
        match = LABEL.match(cell)
        assert match, cell
        cls = match["cls"]
        if cls is None:  # the root is named by its class
            assert cell == type(model).__name__
            continue
        assert cls in classes, cell
        for name in match["names"].split(" ... "):
            name = re.sub(r"#\d+$", "", name)  # a later call of a reused module
            assert any(p == name or p.endswith("." + name) for p in paths), cell


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", list(MODELS))
def test_every_path_class_and_op_name_is_whole(name: str, width: int) -> None:
    model, trace = _traced(name)
    tables = {"summary": hookscope.Summary(trace).to_text(width=width),
              "trace": render_trace(trace, width=width)}
    for kind, text in tables.items():
        assert "~" not in text, (kind, width)  # plain text draws a shortened name's "…"
        cells = _layer_cells(text)
        assert len(cells) > 10
        _assert_real_names(model, cells)
    from hookscope.flops.registry import by_op

    ops = render_ops(trace, top=12, width=width)
    assert "~" not in ops
    for op in list(by_op(trace))[:12]:
        assert re.search(rf"^{re.escape(op)}\s", ops, re.MULTILINE), (op, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_demo_shows_every_name_whole(capsys: pytest.CaptureFixture[str], width: int) -> None:
    from hookscope import examples

    code, out, err = run_cli(capsys, "demo", "--width", str(width), "--no-color")
    assert code == 0, err
    tables = out.split("\nNext\n")[0]
    assert "~" not in tables
    cnn = examples.small_cnn()
    for path, module in cnn.named_modules():
        if path and "." in path:  # the summary shows every row of the small CNN
            assert f"{path} ({type(module).__name__})" in tables, (path, width)
    trace = hookscope.trace(cnn, torch.randn(examples.SMALL_CNN_INPUT_SHAPE), ops=True)
    from hookscope.flops.registry import by_op

    for op in list(by_op(trace))[:5]:
        assert op in tables, op


@pytest.mark.parametrize("width", WIDTHS)
def test_keyword_names_are_whole_their_shapes_wrapped_below(width: int) -> None:
    model, trace = _traced("gpt2")
    seen: set[str] = set()

    def record(module: nn.Module, args: Any, kwargs: dict[str, Any]) -> None:
        seen.update(k for k, v in kwargs.items() if isinstance(v, torch.Tensor))

    handle = model.transformer.h[0].register_forward_pre_hook(record, with_kwargs=True)
    try:
        with torch.no_grad():
            model(torch.zeros(1, 8, dtype=torch.int64))
    finally:
        handle.remove()
    assert seen  # the oracle: the keyword tensors a block is called with
    text = render_trace(trace, columns=["layer", "input"], width=width)
    for name in seen:
        assert f'kwargs["{name}"]:' in text, (name, width)
    assert "~" not in text


def test_columns_go_before_a_name_is_cut_and_the_caption_says_which() -> None:
    _, trace = _traced("gpt2")
    text = render_trace(trace, width=80)
    assert "h.1 ... h.11 (GPT2Block) x11" in text
    left = re.search(r"not shown at width 80: ([^;]+);", text.replace("\n  ", " "))
    assert left and "input (Input shape)" in left.group(1)


def _dropped(text: str) -> bool:
    return "not shown at width" in text


@pytest.mark.parametrize("render", [
    lambda t, w: hookscope.Summary(t).to_text(width=w),
    lambda t, w: render_trace(t, width=w),
])
def test_the_width_the_caption_names_is_where_every_column_fits(render: Any) -> None:
    _, trace = _traced("gpt2")
    text = render(trace, 80)
    found = re.search(r"width=(\d+) shows them", text.replace("\n  ", " "))
    assert found, text
    fits = int(found.group(1))
    assert not _dropped(render(trace, fits)) and _dropped(render(trace, fits - 1))
    assert "--width" not in text and "--columns" not in text  # Python, not CLI, words
