"""Each rule's finding points at the line a user edits to fix it.

Every test plants one rule's fault in a small model defined here and finds the line
independently: ``inspect.getsourcelines`` of the class that holds the fault, searched
for the text of the faulty line.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from hookscope.lint import Finding


def _line_in(obj: Any, text: str) -> tuple[str, int]:
    """``(file, line)`` of the one line of ``obj``'s source that holds ``text``."""
    lines, first = inspect.getsourcelines(obj)
    (index,) = [i for i, source in enumerate(lines) if text in source]
    return inspect.getsourcefile(obj) or "", first + index


def _only(code: str, model: nn.Module, *inputs: Any, **options: Any) -> Finding:
    (finding,) = [f for f in hookscope.lint(model, *inputs, **options) if f.code == code]
    return finding


def _at(finding: Finding) -> tuple[str | None, int | None]:
    return finding.file, finding.line


_X = torch.randn(2, 4)


class _Sub(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("shift", torch.zeros(4, requires_grad=True))  # HS202
        self.scale = torch.ones(4)  # HS201

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.scale + self.shift  # type: ignore[no-any-return]


class _HoldsSub(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.sub = _Sub()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.sub(x)  # type: ignore[no-any-return]


def test_hs202_a_grad_buffer_points_at_the_register_buffer_call_in_the_child() -> None:
    """It pointed at the parent's ``self.sub = _Sub()``."""
    finding = _only("HS202", _HoldsSub())
    assert _at(finding) == _line_in(_Sub, 'self.register_buffer("shift"')


def test_hs201_a_plain_tensor_points_at_its_assignment_in_the_child() -> None:
    assert _at(_only("HS201", _HoldsSub())) == _line_in(_Sub, "self.scale = torch.ones(4)")


class _PlainLists(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.blocks = [nn.Linear(4, 4)]
        self.gains = [nn.Parameter(torch.ones(4))]


@pytest.mark.parametrize(("code", "text"), [("HS101", "self.blocks = ["),
                                            ("HS102", "self.gains = [")])
def test_hs101_hs102_plain_containers_point_at_their_assignment(code: str, text: str) -> None:
    assert _at(_only(code, _PlainLists())) == _line_in(_PlainLists, text)


class _Head(nn.Module):
    def __init__(self, owner: nn.Module) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.owner = owner  # registers the owner: a cycle


class _KeepsOwner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = _Head(self)


def test_hs103_a_cycle_points_at_the_childs_assignment_of_its_owner() -> None:
    assert _at(_only("HS103", _KeepsOwner())) == _line_in(_Head, "self.owner = owner")


class _Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight


def test_hs203_a_tie_points_at_the_line_that_ties() -> None:
    finding = _only("HS203", _Tied())
    assert _at(finding) == _line_in(_Tied, "self.head.weight = self.embed.weight")


class _Frozen(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.head = nn.Linear(4, 4)
        self.body.requires_grad_(False)


class _FrozenInLoop(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.head = nn.Linear(4, 4)
        for p in self.body.parameters():
            p.requires_grad = False


class _FrozenWeight(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.body.weight.requires_grad = False


@pytest.mark.parametrize(("model", "text"), [
    (_Frozen, "self.body.requires_grad_(False)"),
    (_FrozenInLoop, "for p in self.body.parameters():"),
    (_FrozenWeight, "self.body.weight.requires_grad = False"),
])
def test_hs204_a_frozen_parameter_points_at_the_line_that_freezes_it(
    model: type[nn.Module], text: str
) -> None:
    finding = _only("HS204", model())
    assert not model().body.weight.requires_grad  # oracle
    assert _at(finding) == _line_in(model, text)


class _BadInit(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.out = nn.Linear(4, 4)
        self.w = nn.Parameter(torch.empty(4, 4))
        nn.init.constant_(self.fc.weight, float("nan"))
        self.w.data.fill_(1.0)


class _InfInOneValue(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        with torch.no_grad():
            self.fc.weight[0, 0] = float("inf")


@pytest.mark.parametrize(("model", "text"), [(_BadInit, "nn.init.constant_(self.fc"),
                                             (_InfInOneValue, "self.fc.weight[0, 0] = ")])
def test_hs301_non_finite_values_point_at_the_line_that_writes_them(
    model: type[nn.Module], text: str
) -> None:
    built = model()
    assert not torch.isfinite(built.fc.weight).all()  # oracle
    assert _at(_only("HS301", built)) == _line_in(model, text)


def test_hs302_constant_values_point_at_the_line_that_writes_them() -> None:
    model = _BadInit()
    assert (model.w == 1).all()  # oracle
    assert _at(_only("HS302", model)) == _line_in(_BadInit, "self.w.data.fill_(1.0)")


class _MixedPlaces(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.wide = nn.Linear(4, 4, dtype=torch.float64)
        self.register_buffer("table", torch.zeros(2, device="meta"))


def test_hs401_a_tensor_on_another_device_points_at_its_creation() -> None:
    finding = _only("HS401", _MixedPlaces())
    assert _at(finding) == _line_in(_MixedPlaces, 'self.register_buffer("table"')


def test_hs402_a_tensor_of_another_dtype_points_at_its_creation() -> None:
    finding = _only("HS402", _MixedPlaces())
    assert _at(finding) == _line_in(_MixedPlaces, "self.wide = nn.Linear(4, 4, dtype")


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)  # type: ignore[no-any-return]


class _MadeInForward(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layer = nn.Linear(4, 4)
        return layer(x)  # type: ignore[no-any-return]


class _BlockMadeInForward(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        block = _Block()
        return block(x)  # type: ignore[no-any-return]


class _DropoutMadeInForward(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        return nn.Dropout(0.5)(y)  # type: ignore[no-any-return]


@pytest.mark.parametrize(("model", "text"), [
    (_MadeInForward, "layer = nn.Linear(4, 4)"),
    (_BlockMadeInForward, "block = _Block()"),
    (_DropoutMadeInForward, "return nn.Dropout(0.5)(y)"),  # no state: where it ran
])
def test_hs501_a_module_made_in_forward_points_at_the_line_that_makes_it(
    model: type[nn.Module], text: str
) -> None:
    """It pointed at the ``class`` line."""
    finding = _only("HS501", model().eval(), _X)
    assert _at(finding) == _line_in(model, text)


class _HeldInList(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = [nn.Linear(4, 4)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers[0](x)  # type: ignore[no-any-return]


def test_hs501_a_module_held_in_a_list_points_at_the_list() -> None:
    finding = _only("HS501", _HeldInList(), _X)
    assert _at(finding) == _line_in(_HeldInList, "self.layers = [nn.Linear(4, 4)]")


class _Forgotten(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)  # type: ignore[no-any-return]


def test_hs502_a_forgotten_layer_points_at_its_assignment() -> None:
    assert _at(_only("HS502", _Forgotten(), _X)) == _line_in(_Forgotten, "self.norm = ")


class _DetachedAux(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.aux = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) + self.aux(x).detach()  # type: ignore[no-any-return]


def test_hs503_points_at_the_module_whose_parameters_get_no_gradient() -> None:
    finding = _only("HS503", _DetachedAux(), _X, backward=True)
    assert _at(finding) == _line_in(_DetachedAux, "self.aux = nn.Sequential")


class _BatchOfOne(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.norm = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(x))  # type: ignore[no-any-return]


def test_hs504_a_batchnorm_on_one_sample_points_at_the_layer() -> None:
    finding = _only("HS504", _BatchOfOne(), torch.randn(1, 3, 4, 4))
    assert _at(finding) == _line_in(_BatchOfOne, "self.norm = nn.BatchNorm2d")


class _LazyHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.lazy_head = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.lazy_head is None:
            self.lazy_head = self._make_head()
        return self.lazy_head(self.fc(x))  # type: ignore[no-any-return]

    def _make_head(self) -> nn.Module:
        return nn.Linear(4, 2)


class _ParameterOnFirstCall(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if "gain" not in self._parameters:
            self.gain = nn.Parameter(torch.ones(4))
        return x * self.gain


@pytest.mark.parametrize(("model", "text"), [
    (_LazyHead, "self.lazy_head = self._make_head()"),
    (_ParameterOnFirstCall, "self.gain = nn.Parameter"),
])
def test_hs505_a_member_made_in_forward_points_at_the_line_that_registers_it(
    model: type[nn.Module], text: str
) -> None:
    """It pointed at ``self.lazy_head = None`` in ``__init__``."""
    before = {n for n, _ in model().named_parameters()}
    probe = model()
    probe(_X)
    assert {n for n, _ in probe.named_parameters()} > before  # oracle: forward registers
    assert _at(_only("HS505", model(), _X)) == _line_in(model, text)


class _Raises(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layer = nn.Linear(4, 4)
        raise RuntimeError(f"boom after {layer}")


def test_the_registration_hooks_are_gone_after_a_run_also_when_the_model_raises() -> None:
    from torch.nn.modules import module as torch_module

    hooks = (torch_module._global_module_registration_hooks,
             torch_module._global_parameter_registration_hooks,
             torch_module._global_buffer_registration_hooks)
    before = [dict(h) for h in hooks]
    hookscope.lint(_MadeInForward(), _X)
    with pytest.raises(hookscope.errors.ModelRunError):
        hookscope.lint(_Raises(), _X)
    assert [dict(h) for h in hooks] == before


class _DetachedFeatures(nn.Module):
    """A head trained on detached GPT-2 features: the backbone gets no gradient."""

    def __init__(self) -> None:
        super().__init__()
        transformers = pytest.importorskip("transformers")
        config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=50)
        self.backbone = transformers.GPT2Model(config)
        self.head = nn.Linear(64, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        features = self.backbone(ids).last_hidden_state.detach()
        return self.head(features)  # type: ignore[no-any-return]


def test_hs503_on_gpt2_is_one_finding_for_the_backbone_at_its_assignment() -> None:
    """One finding per tensor: dozens for a detached GPT-2 backbone."""
    torch.manual_seed(0)
    model, ids = _DetachedFeatures(), torch.randint(0, 50, (2, 6))
    twin = copy.deepcopy(model)
    twin(ids).sum().backward()
    oracle = [n for n, p in twin.named_parameters() if p.grad is None]
    assert oracle == [f"backbone.{n}" for n, _ in model.backbone.named_parameters()]
    finding = _only("HS503", model, ids, backward=True)
    assert finding.path == "backbone" and list(finding.parameters) == oracle
    assert finding.message.startswith(f"backbone: {len(oracle)} parameters get no gradient (")
    assert _at(finding) == _line_in(_DetachedFeatures, "self.backbone = ")
