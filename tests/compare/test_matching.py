"""Call matching between two runs (``hookscope.compare.matching``).

Oracles: the module tree itself (``named_modules`` of the unwrapped model), and the
order of the calls hand-written forward hooks see on each model.
"""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn
from torch.fx.experimental.optimization import fuse

import hookscope
from hookscope.compare import CallMatching, match_calls
from hookscope.errors import SpecError


def _resnet() -> nn.Module:
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10).eval()


def _x() -> torch.Tensor:
    return torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))


def _hook_order(model: nn.Module, x: torch.Tensor) -> list[str]:
    """The paths of the modules whose forward ran, in call order, from plain hooks."""
    seen: list[str] = []
    handles = [m.register_forward_pre_hook(lambda mod, args, name=name: seen.append(name))
               for name, m in model.named_modules()]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return seen


def _paths(matching: CallMatching) -> list[tuple[str, str]]:
    return [(a.path, b.path) for a, b in matching.pairs]


def test_identical_runs_pair_every_call_in_order() -> None:
    model, x = _resnet(), _x()
    a, b = hookscope.trace(model, x), hookscope.trace(model, x)
    m = match_calls(a, b)
    assert [p for p, _ in _paths(m)] == _hook_order(model, x)
    assert all(pa == pb and ca.call_index == cb.call_index for (ca, cb), (pa, pb)
               in zip(m.pairs, _paths(m), strict=True))
    assert m.only_a == [] and m.only_b == [] and m.unwrapped == ()


@pytest.mark.parametrize("wrap, prefix", [
    (nn.DataParallel, "module"),  # the prefix DistributedDataParallel adds too
    (lambda m: torch.compile(m, backend="eager"), "_orig_mod"),
])
def test_a_wrapper_prefix_is_removed(wrap, prefix) -> None:  # type: ignore[no-untyped-def]
    model, x = _resnet(), _x()
    a, b = hookscope.trace(model, x), hookscope.trace(wrap(model), x)
    m = match_calls(a, b)
    order = _hook_order(model, x)
    expected = [(p, f"{prefix}.{p}" if p else prefix) for p in order]
    assert _paths(m) == expected
    assert [c.path for c in m.only_b] == [""]  # the wrapper itself, listed
    assert m.only_a == [] and m.unwrapped == ("b",)
    # the other way round: A is the wrapped one
    back = match_calls(b, a)
    assert [(pb, pa) for pa, pb in _paths(back)] == expected and back.unwrapped == ("a",)
    assert [c.path for c in back.only_a] == [""]


def test_a_submodule_named_module_is_kept_when_the_trees_agree() -> None:
    model = nn.Sequential()
    model.add_module("module", nn.Linear(2, 2))
    model.add_module("head", nn.Linear(2, 2))
    x = torch.ones(1, 2)
    m = match_calls(hookscope.trace(model, x), hookscope.trace(model, x))
    assert _paths(m) == [("", ""), ("module", "module"), ("head", "head")]
    assert m.unwrapped == ()


def test_fused_conv_bn_lists_the_batchnorms_as_unmatched() -> None:
    model, x = _resnet(), _x()
    fused = fuse(model)  # torch.fx: BatchNorms folded into their convs, containers inlined
    a, b = hookscope.trace(model, x), hookscope.trace(fused, x)
    order, fused_order = _hook_order(model, x), _hook_order(fused, x)
    m = match_calls(a, b)
    assert [c.path for c in m.only_a] == [p for p in order if p not in fused_order]
    assert [c.path for c in m.only_b] == [p for p in fused_order if p not in order]
    assert _paths(m) == [(p, p) for p in order if p in fused_order]
    bn_calls = [p for p in order if isinstance(model.get_submodule(p), nn.BatchNorm2d)]
    assert len(bn_calls) == 20 and set(bn_calls) <= {c.path for c in m.only_a}
    assert not any(isinstance(fused.get_submodule(b.path), nn.BatchNorm2d)
                   for _, b in m.pairs)


class _Old(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.encoder(x))


class _New(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


def test_a_user_mapping_maps_a_path_and_its_subtree() -> None:
    x = torch.ones(1, 4)
    a, b = hookscope.trace(_Old(), x), hookscope.trace(_New(), x)
    plain = match_calls(a, b)
    assert _paths(plain) == [("", "")]
    assert [c.path for c in plain.only_a] == ["encoder", "encoder.0", "encoder.1", "fc"]
    assert [c.path for c in plain.only_b] == ["backbone", "backbone.0", "backbone.1", "head"]
    m = match_calls(a, b, match={"encoder": "backbone", "fc": "head"})
    assert _paths(m) == [("", ""), ("encoder", "backbone"), ("encoder.0", "backbone.0"),
                         ("encoder.1", "backbone.1"), ("fc", "head")]
    assert m.only_a == [] and m.only_b == []


def test_a_mapping_into_a_wrapped_side() -> None:
    x = torch.ones(1, 4)
    a, b = hookscope.trace(_Old(), x), hookscope.trace(nn.DataParallel(_New()), x)
    m = match_calls(a, b, match={"encoder": "module.backbone", "fc": "module.head"})
    assert _paths(m) == [("", "module"), ("encoder", "module.backbone"),
                         ("encoder.0", "module.backbone.0"),
                         ("encoder.1", "module.backbone.1"), ("fc", "module.head")]
    assert [c.path for c in m.only_b] == [""]


def test_repeated_calls_pair_by_call_index() -> None:
    relu = nn.ReLU()
    model = nn.Sequential(relu, nn.Linear(2, 2), relu)
    x = torch.ones(1, 2)
    short = nn.Sequential(relu, nn.Linear(2, 2))  # the shared ReLU runs once here
    m = match_calls(hookscope.trace(model, x), hookscope.trace(short, x))
    assert [(a.name, b.name) for a, b in m.pairs] == [("", ""), ("0", "0"), ("1", "1")]
    assert [c.name for c in m.only_a] == ["0#1"]


@pytest.mark.parametrize("match, words", [
    ({"encoderr": "backbone"}, ["'encoderr'", "side A", "encoder"]),
    ({"encoder": "nowhere"}, ["'nowhere'", "side B"]),
    ({"encoder": 3}, ["str", "int"]),
])
def test_a_bad_mapping_is_one_clear_error(match, words) -> None:  # type: ignore[no-untyped-def]
    x = torch.ones(1, 4)
    a, b = hookscope.trace(_Old(), x), hookscope.trace(_New(), x)
    with pytest.raises(SpecError) as info:
        match_calls(a, b, match=match)
    assert all(w in str(info.value) for w in words), str(info.value)
