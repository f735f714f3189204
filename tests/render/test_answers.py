"""Tables a user can act on: folds from two repeats, ``inspect`` folded, ``top`` the
heaviest rows, the same layout on a terminal and in a pipe, ``COLUMNS`` honoured, and a
caption that speaks Python from Python and flags on the command line."""

from __future__ import annotations

import io
import re

import pytest
import torch
from rich.console import Console
from torch import nn

import hookscope
from helpers import run_cli
from hookscope.render.table import structure_table
from hookscope.render.trace_table import render_trace, trace_table


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.act = nn.Linear(4, 4), nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x))


def _blocks(n: int) -> nn.Sequential:
    return nn.Sequential(*[_Block() for _ in range(n)])


def test_a_single_repeat_is_shown_whole_with_its_statistics() -> None:
    """``layer1.1 (BasicBlock) x1`` hid a whole block's rows, statistics included."""
    model = _blocks(2)
    x = torch.randn(3, 4)
    trace = hookscope.trace(model, x)
    text = render_trace(trace, columns=["layer", "mean"], width=200)
    assert " x1" not in text
    for cls in (nn.Linear, nn.ReLU):  # the oracle: a row for every module
        count = sum(isinstance(m, cls) for m in model.modules())
        assert text.count(f"({cls.__name__})") == count
    means: list[float] = []
    handle = model[1].register_forward_hook(lambda m, a, out: means.append(out.mean().item()))
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    (block,) = [line for line in text.splitlines() if line.strip().startswith("1 (_Block)")]
    assert float(block.split()[-1]) == pytest.approx(means[0], rel=1e-2, abs=1e-6)


def test_two_repeats_fold() -> None:
    model = _blocks(3)
    text = hookscope.summary(model, torch.randn(3, 4)).to_text(width=200)
    block = sum(p.numel() for p in model[1].parameters())
    assert re.search(rf"1 \.\.\. 2 \(_Block\) x2 .*\b{2 * block}\b", text)


def test_inspect_folds_repeated_blocks_like_summary() -> None:
    transformers = pytest.importorskip("transformers")
    model = transformers.GPT2Model(transformers.GPT2Config(n_layer=4, n_embd=64, n_head=2))
    info = hookscope.inspect(model)
    text = structure_table(info, ascii=True).to_text(width=120)
    rows = [line for line in text.splitlines() if line.startswith("  ")]
    folded = [line for line in rows if "h.1 ... h.3 x3" in line]
    assert len(folded) == 1
    params = sum(p.numel() for i in (1, 2, 3) for p in model.h[i].parameters())
    assert f"{params:,}" in folded[0] and "GPT2Block" in folded[0]
    assert len(rows) < len(list(model.named_modules())) - 20  # each block is 11 modules
    assert "h.2" not in text.replace("h.1 ... h.3", "")
    every = structure_table(info, ascii=True, fold=False).to_text(width=120)
    assert all(f"h.{i} " in every for i in range(4)) and " x3" not in every


def test_inspect_on_the_command_line_folds_and_no_fold_shows_every_block(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("transformers")
    code, out, err = run_cli(capsys, "inspect", "transformers:gpt2", "--width", "120")
    assert code == 0, err
    assert "h.1 ... h.11 x11" in out and len(out.splitlines()) < 40
    code, out, err = run_cli(capsys, "inspect", "transformers:gpt2", "--no-fold")
    assert code == 0, err
    assert "h.11 " in out and " x11" not in out


def test_top_keeps_the_heaviest_rows_not_the_first_of_the_tree() -> None:
    """``top=3`` cut the call table in tree order, mid-block."""
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 64), nn.Linear(64, 2)),
                          nn.Linear(2, 3))
    trace = hookscope.trace(model, torch.randn(1, 2), time=False, stats=False, memory=False)
    text = render_trace(trace, columns=["layer", "params"], top=3, width=120)
    sizes = {p or "<root>": sum(x.numel() for x in m.parameters())
             for p, m in model.named_modules()}  # the oracle
    heaviest = sorted(sizes, key=sizes.get, reverse=True)[:3]  # type: ignore[arg-type]
    shown = [line.split()[0] for line in text.splitlines()[2:5]]
    assert shown == [("Sequential" if p == "<root>" else p) for p in heaviest]
    assert "by params" in text


def test_the_same_width_gives_the_same_layout_on_a_terminal_and_in_a_pipe() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    trace = hookscope.trace(model, torch.randn(2, 4))
    for width in (40, 60, 80):
        table = trace_table(trace)
        plain = [line.rstrip() for line in table.to_text(width=width).splitlines()]
        buf = io.StringIO()
        Console(file=buf, width=width, force_terminal=True, color_system=None).print(
            trace_table(trace))
        rich = [line.rstrip().replace("µ", "u") for line in buf.getvalue().splitlines()]
        assert plain[0] == rich[0], width  # the same headers at the same places
        body = [line for line in plain if not set(line) <= {"-", " "}]
        shown = [line for line in rich if line and not set(line) <= {"─", " "}]
        assert body[:6] == shown[:6], width


def test_columns_sets_the_width_of_piped_output(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    code, out, err = run_cli(capsys, "trace", "hookscope.examples:small_cnn",
                             "-i", "1,3,32,32")
    assert code == 0, err
    assert max(map(len, out.splitlines())) <= 60
    assert "not shown at width 60" in out.replace("\n  ", " ")
    assert re.search(r"widen with --width \d+", out.replace("\n  ", " "))  # CLI words
    assert "columns=[" not in out and "width=" not in out


def test_print_of_a_summary_uses_the_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    summary = hookscope.summary(hookscope.examples.small_cnn(), torch.randn(1, 3, 32, 32))
    monkeypatch.setenv("COLUMNS", "50")  # what the terminal size reads first
    assert max(map(len, str(summary).splitlines())) <= 50
    monkeypatch.setenv("COLUMNS", "200")
    assert max(map(len, str(summary).splitlines())) > 50


def test_counts_in_captions_are_singular_for_one() -> None:
    model = nn.Sequential(nn.BatchNorm1d(1, track_running_stats=False))
    model[0].register_buffer("one", torch.zeros(1))
    text = hookscope.summary(model, torch.randn(2, 1)).to_text()
    assert "1 element " in text and "1 elements" not in text
    inspect = str(hookscope.inspect(model))
    assert "1 element," in inspect and "1 elements" not in inspect


def _gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    return GPT2Model(GPT2Config(n_layer=3, n_embd=32, n_head=2, vocab_size=50, n_positions=16))


def _spec(tmp_path: object, name: str, body: str) -> str:
    from pathlib import Path

    path = Path(str(tmp_path)) / f"{name}.py"
    path.write_text(f"from torch import nn\n\n\ndef make():\n    return {body}\n")
    return f"{path}:make"


def test_fold_and_depth_advice_speaks_python_from_python() -> None:
    """``print(hookscope.summary(...))`` said "--no-fold", a flag Python has no use for;
    the advice it gives must be an argument that works: ``fold=False`` shows every
    module ``named_modules`` lists, ``depth=N`` every call."""
    model, ids = _gpt2(), torch.randint(0, 50, (1, 8))
    trace = hookscope.trace(model, ids)
    texts = [str(hookscope.summary(model, ids)), str(hookscope.inspect(model)), str(trace),
             trace_table(trace, depth=1, depth_hint=True).to_text(width=200)]
    for text in texts:
        assert "--" not in text.replace("\n  ", " ").split("Total")[-1], text
    joined = " ".join(texts).replace("\n  ", " ")
    assert "fold=False shows them" in joined and re.search(r"depth=\d+ shows them", joined)
    unfolded = str(hookscope.summary(model, ids, fold=False))
    deep = int(re.search(r"depth=(\d+) shows them", joined).group(1))  # type: ignore[union-attr]
    deeper = render_trace(trace, depth=deep, fold=False, width=200)
    blocks = [path for path, m in model.named_modules() if type(m).__name__ == "GPT2Block"]
    fcs = [path for path, m in model.named_modules() if path.endswith("mlp.c_fc")]
    assert all(f"{path} (GPT2Block)" in unfolded for path in blocks), unfolded
    assert "deeper rows hidden" not in deeper and deeper.count("c_fc (Conv1D)") == len(fcs), deeper


def test_fold_and_depth_advice_names_flags_on_the_command_line(
    capsys: pytest.CaptureFixture[str], tmp_path: object,
) -> None:
    """The same advice on the command line is a flag, and the flag it names works."""
    blocks = _spec(tmp_path, "blocks", "nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), "
                   "nn.ReLU()) for _ in range(4)])")
    for command in (["summary", blocks, "-i", "1,4"], ["trace", blocks, "-i", "1,4"],
                    ["inspect", blocks]):
        code, out, err = run_cli(capsys, *command, "--width", "200")
        assert code == 0, err
        assert "fold=False" not in out and "--no-fold shows them" in out, out
        code, out, err = run_cli(capsys, *command, "--no-fold", "--width", "200")
        assert code == 0, err
        assert "folded" not in out and len(re.findall(r"\bReLU\b", out)) == 4, out
    # 25 blocks of different widths: 76 rows, more than the CLI shows without --depth
    chain = _spec(tmp_path, "chain", "nn.Sequential(*[nn.Sequential(nn.Linear(4 + i, 5 + i), "
                  "nn.ReLU()) for i in range(25)])")
    for command in (["summary", chain, "-i", "1,4"], ["trace", chain, "-i", "1,4"]):
        code, out, err = run_cli(capsys, *command, "--width", "200")
        assert code == 0, err
        flag = re.search(r"\((--depth \d+) shows them\)", out)
        assert flag and "depth=" not in out, out
        code, out, err = run_cli(capsys, *command, *flag.group(1).split(), "--width", "200")
        assert code == 0, err
        assert "deeper rows hidden" not in out and out.count("(ReLU)") == 25, out
