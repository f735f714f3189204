"""The HTML report without a browser: which sections a trace's data gives, one row per
call (against our own forward pre-hooks), a user's probe's column with no report code
changed, folding of repeated blocks, escaping of the model's names, the size of a
24-layer model's page, and the pages of a summary, a structure and a gradient history.
"""

from __future__ import annotations

import dataclasses
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import torch
from report_models import EVIL_CLASS, EVIL_NAME, called_modules, evil_model, gpt2_model
from torch import nn

import hookscope
from hookscope import Column, Fact, Probe, Unit
from hookscope.errors import SpecError
from hookscope.render.report.markup import script_json


class Rows(HTMLParser):
    """The rows of the call table: each ``tr``'s attributes and its cells' text."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []
        self.headers: list[str] = []
        self._cell: list[str] | None = None
        self._in_table = False
        self._th: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table" and "calls" in (a.get("class") or ""):
            self._in_table = True
        elif self._in_table and tag == "tr":
            self.rows.append({"attrs": a, "cells": []})
        elif self._in_table and tag == "td" and self.rows:
            self._cell = []
        elif self._in_table and tag == "th":
            self._th = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._in_table = False
        elif tag == "td" and self._cell is not None:
            self.rows[-1]["cells"].append("".join(self._cell))
            self._cell = None
        elif tag == "th" and self._th is not None:
            self.headers.append("".join(self._th))
            self._th = None

    def handle_data(self, data: str) -> None:
        for part in (self._cell, self._th):
            if part is not None:
                part.append(data)

    def calls(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if "data-i" in r["attrs"]]


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def sections(html: str) -> set[str]:
    return set(re.findall(r'<section id="hs-([a-z]+)"', html))


def test_sections_appear_only_with_their_data() -> None:
    x = torch.randn(5, 4)
    bare = hookscope.trace(mlp(), x, time=False, stats=False, memory=False).to_html()
    assert sections(bare) == {"tree"}
    assert "<th>FLOPs</th>" not in bare and "<th>time</th>" not in bare
    assert 'id="hs-problems"' not in bare
    full = hookscope.trace(mlp(), x, ops=True, backward=True).to_html()
    assert sections(full) == {"tree", "time", "flops", "stats", "memory", "grads"}
    assert "<th>FLOPs</th>" in full and "<th>time</th>" in full


def _chart_bars(html: str, title: str) -> dict[str, str]:
    """The bars of the chart titled ``title``: label -> the value its tooltip shows."""
    found = re.search(rf'aria-label="{re.escape(title)}".*?</svg>', html, re.S)
    assert found, title
    return dict(re.findall(r"<title>([^<:]+): ([^<]+)</title>", found.group(0)))


def test_the_time_by_op_chart_appears_iff_the_ops_carry_times() -> None:
    from hookscope.render.units import format_time

    trace = hookscope.trace(mlp(), torch.randn(5, 4), ops=True)
    ops = trace.facts["ops"]
    assert ops and all(o.time_ns is not None for o in ops)
    html = trace.to_html()
    bars = _chart_bars(html, "Time by aten op type")
    # the oracle: each op type's bar is the sum of its ops' recorded times
    expected: dict[str, int] = {}
    for o in ops:
        expected[o.name] = expected.get(o.name, 0) + o.time_ns
    assert {n: v.strip() for n, v in bars.items()} == {
        n: format_time(t) for n, t in expected.items()}
    assert '<text class="axis"' in html.split('aria-label="Time by aten op type"')[1]
    trace.facts["ops"] = [dataclasses.replace(o, start_ns=None, time_ns=None) for o in ops]
    old = trace.to_html()
    assert "Time by aten op type" not in old and "FLOPs by aten op type" in old


def test_the_header_s_totals_are_the_model_s() -> None:
    model, x = mlp(), torch.randn(5, 4)
    html = hookscope.trace(model, x, ops=True).to_html()
    params = sum(p.numel() for p in model.parameters())
    flops = 2 * 5 * (4 * 8 + 8 * 3)  # two matmuls: 2 * batch * in * out each
    assert f"<th>parameters</th><td>{params:,} (" in html
    assert f"forward {flops:,}, backward 0" in html
    assert f"torch {torch.__version__}" in html


def test_one_row_per_call_with_its_path_class_and_parent() -> None:
    model = gpt2_model(2)
    ids = torch.randint(0, 100, (1, 8))
    trace = hookscope.trace(model, ids)
    rows = Rows(trace.to_html()).calls()
    called = called_modules(model, ids)
    assert {r["attrs"]["data-path"]: r["attrs"]["data-cls"] for r in rows} == called
    by_index = {r["attrs"]["data-i"]: r["attrs"]["data-path"] for r in rows}
    for r in rows:
        path, parent = r["attrs"]["data-path"], r["attrs"].get("data-p")
        if path:
            assert path.startswith(by_index[parent] + "." if by_index[parent] else "")


def test_repeated_blocks_fold_with_every_call_inside_still_in_the_table() -> None:
    model = gpt2_model(4)
    ids = torch.randint(0, 100, (1, 8))
    parsed = Rows(hookscope.trace(model, ids).to_html())
    folds = [r for r in parsed.rows if r["attrs"].get("class") == "fold"]
    assert len(folds) == 1 and "h.1 … h.3" in folds[0]["cells"][0]
    infold = {r["attrs"]["data-path"] for r in parsed.calls()
              if "infold" in (r["attrs"].get("class") or "")}
    called = called_modules(model, ids)
    assert infold == {p for p in called if re.match(r"h\.[123](\.|$)", p)}


class NumelProbe(Probe):
    """A user's probe: each call's output element count, in a column of its own."""

    name = "report_test_numel"
    facts = (Fact("report_numel", "elements of the output"),)
    columns = (Column("report_numel", "Out elements",
                      lambda c, t: c.facts.get("report_numel"), Unit.COUNT),)

    def on_exit(self, call: Any, module: Any, args: Any, kwargs: Any, output: Any,
                failed: bool) -> None:
        if isinstance(output, torch.Tensor):
            call.facts["report_numel"] = output.numel()


def test_a_user_probe_s_column_appears_with_its_values() -> None:
    model, x = mlp(), torch.randn(5, 4)
    parsed = Rows(hookscope.trace(model, x, probes=[NumelProbe()]).to_html())
    at = parsed.headers.index("Out elements")
    cells = {r["attrs"]["data-path"]: r["cells"][at] for r in parsed.calls()}
    assert cells == {"": "15", "0": "40", "1": "40", "2": "15"}  # 5x3, 5x8, 5x8, 5x3


def test_names_from_the_model_are_escaped_everywhere() -> None:
    html = hookscope.trace(evil_model(), torch.randn(2, 4)).to_html()
    assert EVIL_NAME not in html and EVIL_CLASS not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert html.count("<script") == 2  # the page's data and its own script, no more
    assert html.count("</script>") == 2


def test_json_in_a_script_element_cannot_end_it() -> None:
    value = {"name": "</script><script>alert(3)</script>", "amp": "a&b", "ls": "x\u2028y\u2029"}
    text = script_json(value)
    assert not set("<>&\u2028\u2029") & set(text)
    assert json.loads(text) == value


def test_to_html_writes_the_page_and_refuses_a_missing_folder(tmp_path: Path) -> None:
    trace = hookscope.trace(mlp(), torch.randn(5, 4))
    path = tmp_path / "r.html"
    assert trace.to_html(path) == path.read_text(encoding="utf-8")
    with pytest.raises(SpecError, match="does not exist"):
        trace.to_html(tmp_path / "nope" / "r.html")
    with pytest.raises(SpecError, match="folder"):
        trace.to_html(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]  # no temporary left


def test_the_notebook_view_is_the_table_and_charts_without_the_page() -> None:
    trace = hookscope.trace(mlp(), torch.randn(5, 4))
    fragment = trace._repr_html_()
    assert fragment.startswith('<div class="hsr">') and "<html" not in fragment
    assert 'class="calls"' in fragment and 'class="chart"' in fragment


def test_summary_and_structure_pages(tmp_path: Path) -> None:
    model = mlp()
    summary_html = hookscope.summary(model, input_size=(5, 4)).to_html(tmp_path / "s.html")
    assert len(Rows(summary_html).calls()) == 4
    info = hookscope.inspect(model)
    rows = Rows(info.to_html(tmp_path / "i.html")).calls()
    assert [r["attrs"]["data-path"] for r in rows] == [p for p, _ in model.named_modules()]
    assert rows[1]["cells"][3] == f"{sum(p.numel() for p in model[0].parameters()):,}"


def test_a_gradient_history_page_draws_the_norms_over_steps(tmp_path: Path) -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with hookscope.GradientMonitor(model) as mon:
        for _ in range(4):
            opt.zero_grad()
            model(torch.randn(5, 4)).square().sum().backward()
            opt.step()
            mon.step()
        html = mon.to_html(tmp_path / "h.html")
    assert "<th>steps</th><td>4</td>" in html
    lines = re.findall(r"<polyline[^>]*points=\"([^\"]*)\"", html)
    assert len(lines) == 1 + 2  # the total and the two Linear modules
    assert all(len(points.split()) == 4 for points in lines)


@pytest.mark.slow
def test_a_500_call_model_s_page_is_at_most_3_mb() -> None:
    """24 GPT-2 blocks make 293 calls: 42 make the 500 the size budget is for."""
    model = gpt2_model(42)
    trace = hookscope.trace(model, torch.randint(0, 100, (1, 32)), ops=True, backward=True)
    assert len(trace.calls) > 500
    assert len(trace.to_html().encode()) <= 3 * 1024 * 1024


def test_golden_page_of_the_seed_model(golden: Any) -> None:
    """The whole page of a fixed-valued model (shapes and FLOPs, no times): any change
    to the markup, the style or the script shows in the diff."""
    from hookscope.examples import seed_model

    trace = hookscope.trace(seed_model(), torch.ones(2, 2), time=False, stats=False,
                            memory=False, ops=True)
    # fixed op times (the measured ones vary run to run): the time-by-op chart is drawn
    trace.facts["ops"] = [dataclasses.replace(o, start_ns=1_000 * o.index,
                                              time_ns=100 * (o.index + 1))
                          for o in trace.facts["ops"]]
    trace.meta.clear()
    trace.meta.update(torch_version="TORCH", hookscope_version="HOOKSCOPE", device="cpu")
    golden("report", trace.to_html(), ext="html")
