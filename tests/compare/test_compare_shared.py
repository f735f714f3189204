"""hookscope.compare keeps one copy of a value that one call returns and the next
receives, and measures a container's output that is its last child's once: the
results stay those of hand computations where a module writes a shared value in place
(in side A's run, or only in side B's re-run)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn

import hookscope.compare.measure as measure_module
from hookscope.compare import compare


class _WritesInput(nn.Module):
    """Writes its input in place after its child received (and side A stored) it."""

    def __init__(self, *, in_place: bool = True) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.in_place = in_place

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        x = x.mul_(2) if self.in_place else x * 2
        return y + x


def _model(*, in_place: bool = True) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 6), _WritesInput(in_place=in_place),
                         nn.Linear(6, 2)).eval()


def _hand_inputs(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each module's first input, cloned when its call starts (a plain pre-hook)."""
    seen: dict[str, torch.Tensor] = {}
    handles = [m.register_forward_pre_hook(
        lambda m, args, path=path: seen.setdefault(path, args[0].detach().clone()))
        for path, m in model.named_modules()]
    try:
        with torch.no_grad():
            model(x.clone())
    finally:
        for h in handles:
            h.remove()
    return seen


def _introduced_by_hand(path: str, model_a: nn.Module, model_b: nn.Module,
                        x: torch.Tensor) -> float:
    """Side B's module at ``path`` on side A's input of it (a clone), against side A's
    output, with side B's submodules run as they are (they introduce nothing here
    but ``1.fc``'s bias, which is measured on ``1.fc`` itself)."""
    inputs = _hand_inputs(model_a, x)
    with torch.no_grad():
        want = model_a.get_submodule(path)(inputs[path].clone())
        got = model_b.get_submodule(path)(inputs[path].clone())
    return float((want - got).abs().max())


def test_a_module_that_writes_its_input_after_a_child_stored_it() -> None:
    model, x = _model(), torch.randn(4, 6)
    other = copy.deepcopy(model)
    with torch.no_grad():
        other[1].fc.bias += 0.25
    result = compare(model, other, x)
    assert result.first is not None and result.first.path == "1.fc"
    assert result.row("1.fc").introduced_max_abs == pytest.approx(0.25, rel=1e-6)
    assert result.row("1.fc").introduced_max_abs == pytest.approx(
        _introduced_by_hand("1.fc", model, other, x), rel=1e-6)
    # a re-run handed the stored copy itself would double "0"'s reference here
    for path in ("0", "1", "2"):
        assert result.row(path).introduced_max_abs == 0.0
    # the output rows: side B's outputs against side A's, by hand
    with torch.no_grad():
        a0, b0 = model[0](x), other[0](x)
    assert result.row("0").max_abs == 0.0 and float((a0 - b0).abs().max()) == 0.0
    assert result.row("1").max_abs == pytest.approx(0.25, rel=1e-6)


def test_side_b_writing_in_place_where_side_a_does_not_changes_no_measure() -> None:
    model_a, model_b = _model(in_place=False), _model(in_place=True)
    x = torch.randn(4, 6)
    result = compare(model_a, model_b, x)
    with torch.no_grad():
        want, got = model_a(x.clone()), model_b(x.clone())
    assert torch.equal(want, got)  # x * 2 and x.mul_(2): the same values
    assert all(r.max_abs == 0 and r.introduced_max_abs == 0 for r in result.rows)


def test_a_container_whose_output_is_its_last_child_s_is_measured_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 6), nn.Tanh()).eval()
    other = copy.deepcopy(model)
    with torch.no_grad():
        other[0].bias += 0.5
    x = torch.randn(4, 6)
    counted: list[str] = []
    real = measure_module.tensor_error

    def counting(a: torch.Tensor, b: torch.Tensor, **kwargs: Any) -> Any:
        counted.append("measured")
        return real(a, b, **kwargs)

    monkeypatch.setattr(measure_module, "tensor_error", counting)
    result = compare(model, other, x)
    assert len(result.rows) == 3
    assert len(counted) == 2  # "0" and "1"; "" is "1"'s output, measured with it
    with torch.no_grad():
        a, b = model(x), other(x)
    d = float((a - b).abs().max())
    for path in ("", "1"):
        row = result.row(path)
        assert row.max_abs == pytest.approx(d, rel=1e-6)
        assert row.max_rel == pytest.approx(d / float(a.abs().max()), rel=1e-6)
        assert row.cosine == pytest.approx(float(torch.nn.functional.cosine_similarity(
            a.flatten().double(), b.flatten().double(), dim=0)), abs=1e-6)
