"""Each rule fires on its model and not on the corrected twin (``models.CASES``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import lint_zoo as models
import pytest
import torch
from torch import nn

import hookscope
from helpers import FailsInBackward
from hookscope.lint import Severity
from hookscope.lint.catalog import load_rules

RULES = load_rules()


def test_every_rule_has_a_case() -> None:
    assert sorted(models.CASES) == sorted(RULES)


def _lint(build, inputs, options):  # type: ignore[no-untyped-def]
    args = inputs() if inputs is not None else ()
    return hookscope.lint(build(), *args, **options)


@pytest.mark.parametrize("code", sorted(models.CASES))
def test_rule_fires_on_the_bad_model(code: str) -> None:
    bad, _, inputs, options = models.CASES[code]
    report = _lint(bad, inputs, options)
    found = [f for f in report if f.code == code]
    assert found, report.to_text()
    rule = RULES[code]
    assert all(f.severity is rule.severity and f.name == rule.name and f.fix == rule.fix
               for f in found)


@pytest.mark.parametrize("code", sorted(models.CASES))
def test_rule_is_silent_on_the_corrected_twin(code: str) -> None:
    _, good, inputs, options = models.CASES[code]
    report = _lint(good, inputs, options)
    assert code not in report.codes(), report.to_text()


def test_severities_are_those_of_the_issue() -> None:
    errors = {"HS101", "HS102", "HS103", "HS501"}
    infos = {"HS203", "HS204"}
    for code, rule in RULES.items():
        expected = (Severity.ERROR if code in errors else
                    Severity.INFO if code in infos else Severity.WARNING)
        assert rule.severity is expected, code


def test_a_module_that_contains_itself_is_named_where_the_cycle_closes() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU()))
    model[1][0].back = model[1]  # a grandchild registers its parent: 1.0.back is "1"
    with pytest.raises(RecursionError):  # what the finding warns of
        model.state_dict()
    (finding,) = [f for f in hookscope.lint(model) if f.code == "HS103"]
    assert (finding.path, finding.attribute) == ("1.0", "back")
    assert "'1', a module that contains it" in finding.message


def test_module_in_plain_container_names_what_goes_wrong() -> None:
    (finding,) = [f for f in hookscope.lint(models.NestedPlainDict()) if f.code == "HS101"]
    assert finding.attribute == "heads"
    for consequence in ("parameters()", "state_dict()", ".to()"):
        assert consequence in finding.message
    assert "2 modules" in finding.message and "30 parameters" in finding.message  # 20 + 10
    assert "nn.ModuleList" in finding.fix and "nn.ModuleDict" in finding.fix


@pytest.mark.parametrize(("held", "severity", "says"), [
    (lambda: [nn.ReLU(), nn.Tanh()], Severity.INFO, "nothing is lost"),
    (lambda: [nn.Dropout()], Severity.ERROR, ".train()/.eval() do not reach them (Dropout"),
    (lambda: [nn.BatchNorm1d(4, affine=False)], Severity.ERROR, "9 buffer values"),
])
def test_a_plain_list_of_modules_is_as_serious_as_what_it_loses(
    held: Any, severity: Severity, says: str
) -> None:
    """A list of ReLUs was an error saying "their 0 parameters are not in parameters()";
    for Dropout the real loss (eval never reaches it) went unsaid."""

    class Holds(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.extra = held()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x)  # type: ignore[no-any-return]

    (finding,) = [f for f in hookscope.lint(Holds()) if f.code == "HS101"]
    assert finding.severity is severity and says in finding.message
    assert "0 parameters" not in finding.message


def test_a_plain_list_of_a_class_without_source_is_a_warning_not_information() -> None:
    """Without source to read, "does not read its training flag" was claimed."""
    space: dict[str, Any] = {}
    exec("from torch import nn\n"  # a class inspect cannot read
         "class MyDrop(nn.Module):\n"
         "    def forward(self, x):\n"
         "        return nn.functional.dropout(x, 0.5, self.training)\n", space)

    class Holds(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 2)
            self.extra = [space["MyDrop"]()]

    (finding,) = [f for f in hookscope.lint(Holds()) if f.code == "HS101"]
    assert finding.severity is Severity.WARNING
    assert "could not be read from its source" in finding.message


def _class_made_in_a_function(reads_training: bool) -> type[nn.Module]:
    """A module class defined inside a function (as ``kernels`` makes its ``Func``):
    inspect finds no class statement for it, only its methods' source."""

    class Dropping(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.functional.dropout(x, 0.5, self.training)

    class Doubling(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    made = Dropping if reads_training else Doubling
    made.__qualname__ = "Func"  # no class statement of that name: inspect cannot find it
    return made


@pytest.mark.parametrize("reads_training", [True, False])
def test_a_class_made_in_a_function_is_read_from_its_methods(reads_training: bool) -> None:
    made = _class_made_in_a_function(reads_training)

    class Holds(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 2)
            self.extra = [made()]

    (finding,) = [f for f in hookscope.lint(Holds()) if f.code == "HS101"]
    if reads_training:  # .eval() does not reach it: a real loss
        assert finding.severity is Severity.ERROR and "training flag" in finding.message
    else:
        assert finding.severity is Severity.INFO and "nothing is lost" in finding.message


def test_a_private_dict_of_stateless_modules_is_not_reported() -> None:
    """transformers 5.25 keeps ``kernels``' wrappers in ``self._kernel_funcs`` on
    purpose, unregistered: no parameters, no buffers, no training flag read."""
    made = _class_made_in_a_function(False)

    class Holds(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 2)
            self.__dict__.setdefault("_kernel_funcs", {"rms_norm": made()})

    assert "HS101" not in hookscope.lint(Holds()).codes()


def test_a_list_of_references_to_registered_modules_is_not_reported() -> None:
    assert "HS101" not in hookscope.lint(models.ReferenceList()).codes()


def test_plain_tensor_is_located_and_named() -> None:
    (finding,) = [f for f in hookscope.lint(models.PlainTensor()) if f.code == "HS201"]
    assert (finding.path, finding.attribute) == ("", "scale")
    assert finding.file == models.__file__
    assert finding.line == _line_of(models.__file__, "self.scale = torch.full")
    assert "register_buffer" in finding.fix


def test_tied_is_reported_at_the_second_name() -> None:
    (finding,) = [f for f in hookscope.lint(models.Tied()) if f.code == "HS203"]
    assert finding.target == "head.weight" and "embed.weight" in finding.message


def test_frozen_reports_the_largest_frozen_subtree_once() -> None:
    found = [f for f in hookscope.lint(models.frozen()) if f.code == "HS204"]
    assert [f.target for f in found] == ["0"]


def test_non_finite_counts_nan_and_inf() -> None:
    (finding,) = [f for f in hookscope.lint(models.nan_weight()) if f.code == "HS301"]
    assert "2 non-finite values (1 NaN, 1 infinite)" in finding.message
    assert "HS302" not in hookscope.lint(models.nan_weight()).codes()


def test_constant_kernel_and_vectors() -> None:
    assert "HS302" in hookscope.lint(models.constant_kernel()).codes()
    ones = nn.Sequential(nn.LayerNorm(4))  # a vector of ones: not a weight matrix
    assert "HS302" not in hookscope.lint(ones).codes()


def test_mixed_devices_names_the_minority() -> None:
    (finding,) = [f for f in hookscope.lint(models.mixed_devices()) if f.code == "HS401"]
    assert "on meta" in finding.message and finding.path == "1"


def test_dropout_made_in_forward_is_reported_in_eval_mode_relu_is_not() -> None:
    x = torch.randn(2, 4)
    assert "HS501" in hookscope.lint(models.DropoutInForward().eval(), x).codes()
    assert "HS501" not in hookscope.lint(models.StatelessInForward(), x).codes()
    (finding,) = [f for f in hookscope.lint(models.MadeInForward(), x) if f.code == "HS501"]
    assert "made inside forward" in finding.message and finding.attribute is None


def test_forgotten_layer_names_the_attribute_and_its_line() -> None:
    (finding,) = [f for f in hookscope.lint(models.Forgotten(), torch.randn(2, 4))
                  if f.code == "HS502"]
    assert finding.target == "norm"
    assert finding.line == _line_of(models.__file__, "self.norm = nn.LayerNorm(4)")


def test_no_gradient_only_with_backward() -> None:
    x = torch.randn(2, 4)
    assert "HS503" not in hookscope.lint(models.UnusedParameter(), x).codes()
    (finding,) = [f for f in hookscope.lint(models.UnusedParameter(), x, backward=True)
                  if f.code == "HS503"]
    assert finding.target == "gain"


@dataclasses.dataclass
class _Out:
    logits: torch.Tensor


class _Policy(nn.Module):  # an actor-critic head: a distribution and a value
    def __init__(self) -> None:
        super().__init__()
        self.mu, self.value = nn.Linear(4, 2), nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> Any:
        return torch.distributions.Normal(self.mu(x), 1.0), self.value(x)


class _InADataclass(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 2), nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> Any:
        return _Out(self.a(x)), self.b(x)


class _Spectral(nn.Module):  # a complex output
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> Any:
        return torch.fft.rfft(self.a(x))


@pytest.mark.parametrize("model", [_Policy, _InADataclass, _Spectral])
def test_no_gradient_finds_every_output_that_trace_differentiates(model: type) -> None:
    x = torch.randn(3, 4)
    report = hookscope.lint(model(), x, backward=True)
    assert "HS503" not in report.codes()
    assert report.backward_skipped is None
    # the oracle: each parameter's gradient, by hand, exists
    m = model()
    out = m(x)
    loss = sum(t.abs().sum() for t in _tensors_in(out))
    assert all(p.grad is None for p in m.parameters())
    loss.backward()
    assert all(p.grad is not None for p in m.parameters())


def _tensors_in(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, torch.distributions.Normal):
        return [out.loc]
    if dataclasses.is_dataclass(out):
        return [out.logits]
    return [t for o in out for t in _tensors_in(o)]


def test_batchnorm_batch_of_two_is_fine() -> None:
    report = hookscope.lint(models.bn_model().train(), torch.randn(2, 3, 8, 8))
    assert "HS504" not in report.codes()


def _line_of(file: str, text: str) -> int:
    lines = Path(file).read_text().splitlines()
    (line,) = [i for i, source in enumerate(lines, 1) if text in source]
    return line


def test_a_few_zero_matrices_are_a_deliberate_idiom_most_are_a_bug() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2))
    nn.init.zeros_(model[2].weight)  # a zero-initialised head (torchvision's ViT does)
    assert "HS302" not in hookscope.lint(model).codes()
    nn.init.zeros_(model[1].weight)  # two of three: an initialisation that zeroes weights
    found = [f.target for f in hookscope.lint(model) if f.code == "HS302"]
    assert found == ["1.weight", "2.weight"]
    nn.init.constant_(model[0].weight, 1.0)  # one non-zero value: always reported
    assert "0.weight" in [f.target for f in hookscope.lint(model) if f.code == "HS302"]


_SHARED_GELU = nn.GELU()  # made once at import, in training mode (transformers' ACT2FN)


class _UsesSharedGelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _SHARED_GELU(self.fc(x))


def test_a_stateless_module_made_in_training_mode_is_not_reported_in_eval() -> None:
    """RoBERTa's LM head calls transformers' module-level ``gelu``, made in training mode:
    an HS501 error on a stock model, though GELU never reads its training flag."""
    x = torch.randn(2, 4)
    assert _SHARED_GELU.training
    assert "HS501" not in hookscope.lint(_UsesSharedGelu().eval(), x).codes()
    assert "HS501" in hookscope.lint(models.DropoutInForward().eval(), x).codes()


def test_a_layer_inside_a_torchscript_submodule_is_not_a_forgotten_one() -> None:
    """TorchScript runs its submodules without module hooks: HS502 called ``blk.a``
    forgotten although it ran and got gradients."""

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.a(x)  # type: ignore[no-any-return]

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blk = torch.jit.script(Block())
            self.unused = nn.Linear(4, 4)  # a real forgotten layer beside it

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.blk(x)  # type: ignore[no-any-return]

    found = [(f.code, f.path, f.attribute) for f in hookscope.lint(Net(), torch.randn(2, 4))]
    assert found == [("HS502", "", "unused")]


class _BadBackward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return FailsInBackward.apply(self.fc(x))


def test_a_backward_that_raises_is_a_model_run_error() -> None:
    model = _BadBackward()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(hookscope.ModelRunError, match=r"backward pass raised .*boom in backward"):
        hookscope.lint(model, torch.randn(3, 4), backward=True)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    assert all(p.grad is None for p in model.parameters())


def test_a_single_unregistered_parameter_gets_the_fix_for_one_value() -> None:
    """The fix said to hold "them" in an nn.ParameterList or nn.ParameterDict."""

    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.__dict__["scale"] = nn.Parameter(torch.ones(3))  # bypasses registration

    model = Scaled()
    assert "scale" not in dict(model.named_parameters())  # the truth: unregistered
    (finding,) = [f for f in hookscope.lint(model) if f.code == "HS102"]
    assert "ParameterList" not in finding.fix and "ParameterDict" not in finding.fix
    assert "self.scale = nn.Parameter(" in finding.fix
    fixed = nn.Module()
    fixed.scale = nn.Parameter(torch.ones(3))  # what the fix says registers it
    assert "scale" in dict(fixed.named_parameters())


def test_a_non_persistent_float32_constant_of_a_half_model_is_not_mixed_dtypes() -> None:
    """transformers keeps RoPE's inv_freq in float32 in a bfloat16 model, on purpose:
    HS402 fired on every such model."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)).to(torch.bfloat16)
    model[0].register_buffer("inv_freq", torch.ones(2), persistent=False)
    assert model[0].inv_freq.dtype == torch.float32  # the truth: a float32 constant
    assert all(t.dtype == torch.bfloat16 for t in model.state_dict().values())  # not saved
    assert "HS402" not in hookscope.lint(model).codes()
    model[1].register_buffer("scale", torch.ones(2))  # persistent: what a checkpoint holds
    found = [f.target for f in hookscope.lint(model) if f.code == "HS402"]
    assert found == ["1.scale"]
    model[1].register_buffer("table", torch.ones(2, dtype=torch.float64), persistent=False)
    found = [f.message for f in hookscope.lint(model) if f.code == "HS402"]
    assert len(found) == 2 and any("float64" in m for m in found)
