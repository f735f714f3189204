"""The table of ``hookscope grads``: laid out as every table is, no number ever cut."""

from __future__ import annotations

import re

import pytest
import torch

import hookscope
from hookscope.render.grads_table import grads_table


@pytest.fixture(scope="module")
def monitor() -> hookscope.GradientMonitor:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    with hookscope.GradientMonitor(model, explode_above=100.0, on_anomaly=lambda a: None) as mon:
        for _ in range(2):
            model(torch.randn(2, 3, 32, 32)).sum().backward()
            mon.step()
            model.zero_grad()
    return mon


@pytest.mark.parametrize("width", [30, 40, 50, 60, 72, 90, 120, 160])
def test_no_number_is_cut_and_every_row_stays_distinguishable(
    monitor: hookscope.GradientMonitor, width: int
) -> None:
    text = grads_table(monitor.history, monitor.anomalies, ascii=True).to_text(width=width)
    assert text.isascii()
    lines = text.splitlines()
    assert all(len(line) <= width for line in lines)
    rows = lines[3:3 + len(monitor.names)]
    labels = [row.split("  ")[0] for row in rows]
    assert len(set(labels)) == len(labels)  # two rows never read the same
    # a name is cut last: while the Last column can be left out, every path is whole
    shown = "Last" in lines[1]
    assert shown or re.search(r"not shown at width \d+:[^;]*\blast\b", text.replace("\n  ", " "))
    for name, row, label in zip(monitor.names, rows, labels, strict=True):
        if "~" not in label or not shown:  # shortened (the "…" of plain text)
            assert label.strip() == name
        last = monitor.history.column(name)[-1]  # the oracle: the recorded norm
        if shown:
            cell = row[len(label):].split()[0]
            assert float(cell) == pytest.approx(last, rel=1e-3), (row, last)
    if width < 90:
        assert "not shown at width" in text
        assert re.search(r"width=\d+ shows them", text)  # Python's words, not the CLI's


def test_anomalies_are_listed_next_to_their_parameter(monitor: hookscope.GradientMonitor) -> None:
    text = str(grads_table(monitor.history, monitor.anomalies, ascii=True))
    flagged = {a.path for a in monitor.anomalies}
    assert flagged
    for line in text.splitlines()[3:]:
        name = line.split("  ")[0]
        if name in monitor.names:
            assert ("explode at step" in line) == (name in flagged)


def test_distinct_shortener_keeps_bert_like_paths_apart_at_every_width_it_allows() -> None:
    from hookscope.render.grid import LABEL_MIN, distinct_min, distinct_shortener

    names = [f"encoder.layer.{i}.attention.self.{part}.{kind}" for i in range(12)
             for part in ("query", "key", "value") for kind in ("weight", "bias")]
    shorten = distinct_shortener(names)
    floor = distinct_min(names, LABEL_MIN)
    # 12 layers x 6 tensors: the layer number and the tensor's name must both survive,
    # which the matching of elided forms manages in 17 characters (first-come forms: 19)
    assert LABEL_MIN <= floor <= 17
    for width in range(floor, max(map(len, names)) + 1):
        forms = [shorten(n, width) for n in names]
        assert all(len(f) <= width for f in forms)
        assert len(set(forms)) == len(names), width


def test_each_column_of_numbers_follows_one_rule(monitor: hookscope.GradientMonitor) -> None:
    """A column mixed ``0.1235`` and ``3.049e+05``: one notation per column."""
    text = grads_table(monitor.history, monitor.anomalies, ascii=True).to_text(width=200)
    lines = text.splitlines()
    rows = lines[3:3 + len(monitor.names)]
    for col in range(1, 5):  # Last, Median, Min, Max
        cells = [row.split()[col] for row in rows if len(row.split()) > col]
        numbers = [c for c in cells if c not in ("-", "nan", "inf", "-inf")]
        assert numbers
        kinds = {"e" in c for c in numbers}
        assert len(kinds) == 1, (col, numbers)
