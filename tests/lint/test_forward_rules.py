"""The rules of the forward (and backward) pass, HS501-HS505, where they were wrong.

Each test first establishes the truth by running the model itself (forward hooks that
count calls, ``state_dict()`` keys before and after a call, gradients of a backward
run by hand), then checks that the linter reports it, or does not.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import lint_zoo as models
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parameter import is_lazy

import hookscope
from helpers import call_counts
from hookscope.lint import Severity


def _line_of(text: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    (line,) = [i for i, source in enumerate(lines, 1) if source.strip().startswith(text)]
    return line


def _ids(tensors: Any) -> set[int]:
    return {id(t) for t in tensors}


# -- a wrapper of registered layers (HS101, HS501) -----------------------------------


class _ViewInList(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)
        self.views = [nn.Sequential(self.conv, self.bn)]  # a view of registered layers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.views[0](x)  # type: ignore[no-any-return]


class _SequentialInForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.Sequential(self.a, nn.ReLU(), self.b)(x)  # type: ignore[no-any-return]


def _wrappers_run(model: nn.Module, x: torch.Tensor) -> list[nn.Module]:
    """The ``nn.Sequential`` objects that run in ``model(x)``, seen by a global hook."""
    seen: list[nn.Module] = []

    def note(module: nn.Module, args: Any) -> None:
        if isinstance(module, nn.Sequential):
            seen.append(module)

    handle = torch.nn.modules.module.register_module_forward_pre_hook(note)
    try:
        model(x)
    finally:
        handle.remove()
    return seen


@pytest.mark.parametrize("model", [_ViewInList, _SequentialInForward])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_a_wrapper_of_registered_layers_is_no_error(model: type[nn.Module], mode: str) -> None:
    """HS101/HS501 errors said the wrapped layers' parameters were never trained, saved
    or moved, and had fresh weights on every call."""
    x = torch.randn(3, 4)
    m = getattr(model(), mode)()
    registered = _ids(m.parameters()) | _ids(m.buffers())
    wrappers = _wrappers_run(m, x)
    assert wrappers and all(  # the truth: a wrapper holds only what the model registers
        _ids(w.parameters()) | _ids(w.buffers()) <= registered for w in wrappers)
    report = hookscope.lint(m, x)
    assert [f for f in report if f.severity is not Severity.INFO] == [], report.to_text()
    if model is _ViewInList:  # what print(model) does not show is worth knowing
        (finding,) = list(report)
        assert (finding.code, finding.attribute) == ("HS101", "views")
        assert "nothing is lost" in finding.message


def test_a_wrapper_counts_only_the_parameters_the_model_does_not_register() -> None:
    class Half(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.views = [nn.Sequential(self.a, nn.Linear(4, 2))]

    model = Half()
    lost = [p for p in model.views[0].parameters() if id(p) not in _ids(model.parameters())]
    assert sum(p.numel() for p in lost) == 10  # the Linear(4, 2): 8 + 2
    (finding,) = [f for f in hookscope.lint(model) if f.code == "HS101"]
    assert finding.severity is Severity.ERROR
    assert "their 10 parameters are not in parameters()" in finding.message


def test_a_fresh_dropout_in_a_wrapper_made_in_forward_is_found_for_what_it_is() -> None:
    """The wrapper's registered Linear was counted as fresh weights."""

    class Drops(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.Sequential(self.a, nn.Dropout(0.5))(x)  # type: ignore[no-any-return]

    model, x = Drops().eval(), torch.randn(8, 4)
    assert not torch.equal(model(x), model(x))  # the truth: it drops in eval mode
    (finding,) = [f for f in hookscope.lint(model, x) if f.code == "HS501"]
    assert "fresh weights" not in finding.message
    assert "training flag" in finding.message


# -- where HS501 reports a module of a submodule's plain list ------------------------


class _Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(2, 2)
        self.extra = [nn.Linear(2, 2)]  # the bug: a plain list, in a submodule

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l(x)  # type: ignore[no-any-return]


class _CallsIntoEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = _Encoder()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.enc.extra[0](self.enc(x))  # type: ignore[no-any-return]


def test_a_module_in_a_submodules_plain_list_is_reported_at_that_submodule() -> None:
    """It was reported at the caller (the root) and located at the root's class."""
    model = _CallsIntoEncoder()
    held = model.enc.extra[0]
    assert all(m is not held for m in model.modules())  # the truth: unregistered
    found = [(f.path, f.attribute, f.file, f.line)
             for f in hookscope.lint(model, torch.randn(1, 2)) if f.code == "HS501"]
    assert found == [("enc", "extra", __file__, _line_of("self.extra = [nn.Linear(2, 2)]"))]


# -- HS502: what counts as a use of self.<layer> -------------------------------------


class _NormMethod(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(8)  # forgotten: forward calls the tensor's norm()
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x / x.norm(dim=-1, keepdim=True))  # type: ignore[no-any-return]


class _FunctionalLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)  # forgotten: forward calls F.linear
        self.w = nn.Parameter(torch.randn(2, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.w)


@pytest.mark.parametrize(("model", "attribute"),
                         [(_NormMethod, "norm"), (_FunctionalLinear, "linear")])
def test_a_forgotten_layer_is_found_when_another_object_has_an_attribute_of_its_name(
    model: type[nn.Module], attribute: str
) -> None:
    m, x = model(), torch.randn(4, 8)
    assert call_counts(m, lambda: m(x))[attribute] == 0  # the truth: it never runs
    found = [(f.code, f.path, f.attribute) for f in hookscope.lint(m, x)]
    assert found == [("HS502", "", attribute)]


def _use_a(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return module.a(x)  # type: ignore[no-any-return,operator]


class _Branch(nn.Module):
    """Runs ``a`` only when asked, by one of the ways below: a branch, not forgotten."""

    def __init__(self, use_a: bool) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.use_a = use_a

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.reach(x) if self.use_a else x)  # type: ignore[no-any-return]


class _ByAlias(_Branch):
    def reach(self, x: torch.Tensor) -> torch.Tensor:
        module = self
        return module.a(x)  # type: ignore[no-any-return]


class _ByString(_Branch):
    def reach(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(self, "a")(x)  # type: ignore[no-any-return]  # noqa: B009


class _ByComputedName(_Branch):
    def reach(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(self, chr(97))(x)  # type: ignore[no-any-return]


class _ByHelper(_Branch):
    def reach(self, x: torch.Tensor) -> torch.Tensor:
        return _use_a(self, x)


class _ByChildren(_Branch):
    def reach(self, x: torch.Tensor) -> torch.Tensor:
        return next(iter(self.children()))(x)  # type: ignore[no-any-return]


class _BySuper(_ByString):
    def reach(self, x: torch.Tensor) -> torch.Tensor:
        return super().reach(x)


@pytest.mark.parametrize("model", [_ByAlias, _ByString, _ByComputedName, _ByHelper,
                                   _ByChildren, _BySuper])
def test_a_layer_its_class_may_reach_is_not_a_forgotten_one(model: type[_Branch]) -> None:
    """Sound: a use of self that may reach the layer without naming it counts."""
    x = torch.randn(2, 4)
    taken = model(use_a=True)
    assert call_counts(taken, lambda: taken(x))["a"] == 1  # the truth: the branch runs it
    assert "HS502" not in hookscope.lint(model(use_a=False), x).codes()


# -- HS503 in eval mode: a branch taken in training only -----------------------------


class _NoiseInTraining(nn.Module):
    """A learned noise scale used in training only (as wav2vec2's masked_spec_embed)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.noise = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            x = x + self.noise * torch.randn_like(x)
        return self.fc(x)  # type: ignore[no-any-return]


def _gets_gradient(model: nn.Module, x: torch.Tensor, name: str) -> bool:
    """The oracle: a backward run by hand on a twin."""
    twin = copy.deepcopy(model)
    twin(x).sum().backward()
    return dict(twin.named_parameters())[name].grad is not None


def test_a_parameter_of_a_training_only_branch_is_not_reported_in_eval_mode() -> None:
    x = torch.randn(2, 4)
    model = _NoiseInTraining()
    assert _gets_gradient(model.train(), x, "noise")  # trained in training mode
    assert not _gets_gradient(model.eval(), x, "noise")  # no gradient in eval mode
    assert "HS503" not in hookscope.lint(model.eval(), x, backward=True).codes()
    assert "HS503" not in hookscope.lint(model.train(), x, backward=True).codes()


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_a_detached_parameter_is_reported_in_either_mode_without_overclaiming(
    mode: str
) -> None:
    x = torch.randn(2, 4)
    model = getattr(models.UnusedParameter(), mode)()
    assert not _gets_gradient(model, x, "gain")
    (finding,) = [f for f in hookscope.lint(model, x, backward=True) if f.code == "HS503"]
    assert finding.severity is Severity.WARNING and finding.target == "gain"
    # what is established is the gradient from the outputs, not what an optimizer does
    assert "optimizer never changes it" not in finding.message
    assert "no gradient (gain): a loss computed from the outputs" in finding.message


class _PartlyDetached(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.scale = nn.Parameter(torch.full((4,), 2.0))
        self.shift = nn.Parameter(torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) * self.scale.detach() + self.shift.detach()  # type: ignore[no-any-return]


class _DetachedBranches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.aux = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
        self.part = _PartlyDetached()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) + self.aux(x).detach() + self.part(x)  # type: ignore[no-any-return]


def test_parameters_without_gradient_are_one_finding_per_module() -> None:
    """HS503 made one finding per tensor: four for one detached two-layer branch."""
    model, x = _DetachedBranches(), torch.randn(2, 4)
    twin = copy.deepcopy(model)
    twin(x).sum().backward()
    oracle = [n for n, p in twin.named_parameters() if p.grad is None]
    assert oracle == ["aux.0.weight", "aux.0.bias", "aux.1.weight", "aux.1.bias",
                      "part.scale", "part.shift"]
    found = {f.path: f for f in hookscope.lint(model, x, backward=True) if f.code == "HS503"}
    assert sorted(found) == ["aux", "part"]  # part.a gets its gradient: not the whole part
    assert list(found["aux"].parameters) == oracle[:4]
    assert list(found["part"].parameters) == oracle[4:]
    assert found["aux"].message.startswith(
        "aux: 4 parameters get no gradient (0.weight, 0.bias, 1.weight, 1.bias): ")
    assert found["part"].message.startswith("part: 2 parameters get no gradient (scale, shift)")
    doc = json.loads(hookscope.lint(model, x, backward=True).to_json())
    assert {tuple(f["parameters"]) for f in doc["findings"] if f["code"] == "HS503"} == {
        tuple(oracle[:4]), tuple(oracle[4:])}


def test_without_backward_a_note_names_the_rules_that_need_one() -> None:
    """Without backward=True a parameter that gets no gradient went unreported, and
    nothing said so."""
    model, x = _DetachedBranches(), torch.randn(2, 4)
    report = hookscope.lint(model, x)
    assert "HS503" not in report.codes() and "HS503" in report.skipped_rules
    (note,) = report.notes
    assert note == "HS503 (parameter-without-gradient) needs a backward pass: pass backward=True"
    assert note in report.to_text().splitlines()
    assert json.loads(report.to_json())["notes"] == [note]
    static = hookscope.lint(model)
    assert {"HS501", "HS503"} <= set(static.skipped_rules)
    assert static.notes[0].endswith(": pass inputs and backward=True")
    assert "--backward" not in static.notes[0]
    ran = hookscope.lint(model, x, backward=True)
    assert ran.notes == () and ran.skipped_rules == () and "HS503" in ran.codes()
    assert hookscope.lint(model, x, select=["HS1"]).notes == ()


# -- lazy modules with backward=True -------------------------------------------------


def test_backward_on_a_lazy_model_takes_its_gradients_and_leaves_it_lazy() -> None:
    """lint(backward=True) took the gradients after the model was made lazy again, and
    blamed the model's backward (ModelRunError)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.LazyLinear(3), nn.ReLU(), nn.Linear(3, 2))
    x = torch.randn(2, 4)
    twin = copy.deepcopy(model)
    twin(x).sum().backward()
    assert all(p.grad is not None for p in twin.parameters())  # the oracle
    report = hookscope.lint(model, x, backward=True)
    assert report.backward and "HS503" not in report.codes()
    assert is_lazy(model[0].weight) and all(p.grad is None for p in model.parameters())


def test_a_lazy_parameter_without_gradient_is_reported() -> None:
    class Detached(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lazy = nn.LazyLinear(3)
            self.head = nn.Linear(4, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(x) + self.lazy(x).detach()  # type: ignore[no-any-return]

    model, x = Detached(), torch.randn(2, 4)
    twin = copy.deepcopy(model)
    twin(x).sum().backward()
    oracle = sorted(n for n, p in twin.named_parameters() if p.grad is None)
    assert oracle == ["lazy.bias", "lazy.weight"]
    (finding,) = [f for f in hookscope.lint(model, x, backward=True) if f.code == "HS503"]
    assert finding.target == "lazy" and sorted(finding.parameters) == oracle


# -- HS505: a layer or parameter made on the first call ------------------------------


class _ProjOnFirstCall(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not hasattr(self, "proj"):
            self.proj = nn.Linear(4, 4)
        return self.proj(self.a(x))  # type: ignore[no-any-return]


class _ScaleOnFirstCall(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not hasattr(self, "scale"):
            self.scale = nn.Parameter(torch.ones(4))
        return self.a(x) * self.scale


@pytest.mark.parametrize(("model", "attribute", "assigned"), [
    (_ProjOnFirstCall, "proj", "self.proj = nn.Linear(4, 4)"),
    (_ScaleOnFirstCall, "scale", "self.scale = nn.Parameter(torch.ones(4))"),
])
def test_what_forward_registers_is_found_where_forward_makes_it(
    model: type[nn.Module], attribute: str, assigned: str
) -> None:
    """HS501 said the layer was held in "the plain attribute self._modules"; the
    parameter was not reported at all."""
    x = torch.randn(2, 4)
    fresh, ran = model(), model()
    ran(x)
    new = set(ran.state_dict()) - set(fresh.state_dict())  # the truth
    assert new and all(key.split(".")[0] == attribute for key in new)
    report = hookscope.lint(model(), x)
    assert [(f.code, f.path, f.attribute, f.line) for f in report] == [
        ("HS505", "", attribute, _line_of(assigned))]


class _CacheOnFirstCall(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not hasattr(self, "cache"):
            self.register_buffer("cache", torch.zeros(4), persistent=False)
        return x + self.cache


class _ActivationOnFirstCall(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not hasattr(self, "act"):
            self.act = nn.ReLU()
        return self.act(x)  # type: ignore[no-any-return]


class _ViewOnFirstCall(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not hasattr(self, "view"):
            self.view = nn.Sequential(self.fc, nn.ReLU())
        return self.view(x)  # type: ignore[no-any-return]


@pytest.mark.parametrize("model", [_CacheOnFirstCall, _ActivationOnFirstCall,
                                   _ViewOnFirstCall])
def test_what_forward_registers_without_a_parameter_to_train_is_no_finding(
    model: type[nn.Module]
) -> None:
    ran, x = model(), torch.randn(2, 4)
    before = _ids(ran.parameters())
    ran(x)
    assert _ids(ran.parameters()) == before  # the truth: no parameter is added
    assert len(list(ran.modules())) + len(list(ran.buffers())) > len(list(model().modules()))
    assert hookscope.lint(model(), x).codes() == []


class _EqualByIdentity(nn.Linear):
    """A module class that defines ``__eq__``: Python makes it unhashable."""

    def __eq__(self, other: object) -> bool:
        return self is other


class _MadeInForward(nn.Module):
    def __init__(self, layer: type[nn.Linear]) -> None:
        super().__init__()
        self.fc, self.layer = nn.Linear(4, 4), layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.Sequential(self.layer(4, 4))(self.fc(x))


class _HeldInAList(nn.Module):
    def __init__(self, layer: type[nn.Linear]) -> None:
        super().__init__()
        self.fc, self.held = nn.Linear(4, 4), [layer(4, 4)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.held[0](self.fc(x))


@pytest.mark.parametrize("model", [_MadeInForward, _HeldInAList])
def test_an_unhashable_module_is_linted_as_a_hashable_one(model: type[nn.Module]) -> None:
    """Modules made or held outside the model are tracked by ``id``: an unhashable one
    is found as the same model with a plain ``nn.Linear`` is."""
    with pytest.raises(TypeError, match="unhashable"):
        hash(_EqualByIdentity(4, 4))
    x = torch.randn(2, 4)
    plain = hookscope.lint(model(nn.Linear), x)
    unhashable = hookscope.lint(model(_EqualByIdentity), x)
    assert unhashable.codes() == plain.codes() and "HS501" in plain.codes()


def test_modules_by_id_lists_what_modules_lists() -> None:
    from hookscope.lint.context import modules_by_id

    shared = nn.Linear(2, 2)
    model = nn.Sequential(shared, nn.Sequential(nn.ReLU(), shared), nn.ModuleList([nn.Tanh()]))
    assert [id(m) for m in modules_by_id(model)] == [id(m) for m in model.modules()]
    tree = nn.Sequential(_EqualByIdentity(2, 2), nn.Sequential(_EqualByIdentity(2, 2)))
    assert len(modules_by_id(tree)) == 4
