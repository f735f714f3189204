"""Selectors (issue 11): ``*`` stays inside one path segment, ``**`` crosses dots, a
module class selects its instances. The oracle is the list of every path of a
ResNet-like tree, filtered by hand."""

from __future__ import annotations

from typing import Any

import pytest
from torch import nn

import hookscope
from hookscope.core.model.selectors import compile_module_selector, compile_selector

PATHS = [
    "", "conv1", "layer1", "layer1.0", "layer1.0.conv1", "layer1.0.downsample",
    "layer1.0.downsample.0", "layer1.1", "layer1.1.conv1", "layer2", "layer2.0",
    "layer2.0.conv1", "fc",
]


@pytest.mark.parametrize(
    ("select", "expected"),
    [
        ("layer*.0", ["layer1.0", "layer2.0"]),
        ("layer*", ["layer1", "layer2"]),
        ("layer1.**", ["layer1", "layer1.0", "layer1.0.conv1", "layer1.0.downsample",
                       "layer1.0.downsample.0", "layer1.1", "layer1.1.conv1"]),
        ("**.conv1", ["conv1", "layer1.0.conv1", "layer1.1.conv1", "layer2.0.conv1"]),
        ("layer**0", ["layer1.0", "layer1.0.downsample.0", "layer2.0"]),
        ("layer?.?", ["layer1.0", "layer1.1", "layer2.0"]),
        ("layer[!1].0", ["layer2.0"]),
        ("layer[12].1", ["layer1.1"]),
        ("**", PATHS),
        ("*", ["conv1", "layer1", "layer2", "fc"]),  # not the root: it has no segment
        (["*", "<root>"], ["", "conv1", "layer1", "layer2", "fc"]),
        ("*.**", [p for p in PATHS if p]),  # one segment at least: not the root
        ("**.*", [p for p in PATHS if p]),
        ("<root>", [""]),
        (["fc", "conv1"], ["conv1", "fc"]),
        ("layer1.0.downsample.0", ["layer1.0.downsample.0"]),
        ("f.", []),  # a dot is literal, not "any character"
    ],
)
def test_glob_segments(select: Any, expected: list[str]) -> None:
    matches = compile_selector(select)
    assert [p for p in PATHS if matches(p)] == expected


def test_a_callable_is_used_as_is() -> None:
    fn = compile_selector(lambda p: p.endswith("1"))
    assert [p for p in PATHS if fn(p)] == ["conv1", "layer1", "layer1.0.conv1",
                                             "layer1.1", "layer1.1.conv1", "layer2.0.conv1"]


def test_module_class_selects_instances() -> None:
    model = nn.Sequential(nn.Conv2d(1, 1, 1), nn.Sequential(nn.ReLU(), nn.Conv2d(1, 1, 1)))
    by_class = compile_module_selector(nn.Conv2d)
    assert [p for p, m in model.named_modules() if by_class(p, m)] == ["0", "1.1"]
    both = compile_module_selector((nn.Conv2d, nn.ReLU))
    assert [p for p, m in model.named_modules() if both(p, m)] == ["0", "1.0", "1.1"]
    by_glob = compile_module_selector("1.*")
    assert [p for p, m in model.named_modules() if by_glob(p, m)] == ["1.0", "1.1"]


@pytest.mark.parametrize("bad", [5, [], ["ok", 3], int, (nn.Conv2d, "x")])
def test_bad_selectors_are_spec_errors(bad: Any) -> None:
    with pytest.raises(hookscope.SpecError, match="selector"):
        compile_module_selector(bad)


def test_a_module_class_selects_its_instances_in_trace_and_tracer() -> None:
    """``select=nn.ReLU`` was called as ``fn(path)``: ``nn.ReLU("0")`` is a truthy
    module, so every module was selected (and ``nn.Linear`` raised a TypeError)."""
    import torch

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 8), nn.ReLU()))
    expected = [p for p, m in model.named_modules() if isinstance(m, nn.ReLU)]  # the oracle
    x = torch.randn(2, 4)
    traced = hookscope.trace(model, x, select=nn.ReLU)
    assert [c.path for c in traced.calls] == expected == ["1", "2.1"]
    with hookscope.Tracer(model, select=(nn.Linear,)) as tracer:
        model(x)
    assert tracer.trace is not None
    assert [c.path for c in tracer.trace.calls] == ["0", "2.0"]
    with pytest.raises(hookscope.SpecError, match="matches no module"):
        hookscope.trace(model, x, select=nn.Conv2d)
    with pytest.raises(hookscope.SpecError, match=r"nn\.Module subclass"):
        hookscope.trace(model, x, select=int)  # type: ignore[arg-type]


def test_a_path_only_selector_refuses_a_class_in_one_line() -> None:
    with pytest.raises(hookscope.SpecError, match="is a class"):
        compile_selector(nn.ReLU)  # type: ignore[arg-type]
