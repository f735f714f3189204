"""``hookscope.lint`` itself: the seed example, options, suppression, the report, and
that linting leaves the model exactly as it was."""

from __future__ import annotations

import json
from pathlib import Path

import lint_zoo as zoo
import pytest
import seed_model
import torch
from torch import nn

import hookscope
from helpers import assert_state_unchanged, snapshot_state, total_hooks
from hookscope.errors import ModelRunError, SpecError
from hookscope.lint import Finding, Hit, LintReport, Severity, register_rule
from hookscope.lint.rules import RULES


def _line_of(text: str) -> int:
    lines = Path(seed_model.__file__).read_text().splitlines()
    (line,) = [i for i, source in enumerate(lines, 1) if text in source]
    return line


def test_the_seed_list_example_is_caught_at_its_file_and_line() -> None:
    report = hookscope.lint(seed_model.ListModel())
    (finding,) = list(report)
    line = _line_of("self.layers = [FunctionA(1.0)")
    assert (finding.code, finding.severity, finding.attribute) == ("HS101", Severity.ERROR,
                                                                   "layers")
    assert (finding.file, finding.line, finding.col) == (seed_model.__file__, line, 9)
    first = report.to_text().splitlines()[0]
    assert first.endswith(f"seed_model.py:{line}:9: HS101 [error] {finding.message}")
    assert not list(hookscope.lint(seed_model.ModuleListModel()))


def test_the_seed_example_with_a_forward_pass_also_sees_the_layers_run() -> None:
    report = hookscope.lint(seed_model.ListModel(), torch.randn(2, 1))
    assert report.codes() == ["HS101", "HS501"]
    assert "ran 3 times" in next(f for f in report if f.code == "HS501").message


def test_public_names() -> None:
    assert hookscope.Finding is Finding and hookscope.Severity is Severity
    import importlib

    importlib.import_module("hookscope.lint.rules")  # binds the package to hookscope.lint
    assert callable(hookscope.lint)
    assert hookscope.lint.LintReport is LintReport  # the package, with its names
    from hookscope.lint import lint

    assert isinstance(lint(nn.Linear(2, 2)), LintReport)


def test_select_and_ignore() -> None:
    model = zoo.PlainTensor()
    model.cache = [nn.Linear(2, 2)]
    assert hookscope.lint(model).codes() == ["HS101", "HS201"]
    assert hookscope.lint(model, select=["HS2"]).codes() == ["HS201"]
    assert hookscope.lint(model, ignore=["HS101"]).codes() == ["HS201"]
    assert hookscope.lint(model, ignore=["scale"]).codes() == ["HS101"]
    assert hookscope.lint(model, ignore=[("HS201", "sc*")]).codes() == ["HS101"]
    assert hookscope.lint(model, ignore=[("HS101", "sc*")]).codes() == ["HS101", "HS201"]
    report = hookscope.lint(model, ignore=["<root>"])
    assert not list(report) and report.suppressed == 2


def test_inputs_with_only_static_rules_selected_are_not_asked_for_again() -> None:
    """``--input 2,4 --select HS2`` said "give inputs for the HS5xx rules"."""
    model = nn.Sequential(nn.Linear(4, 4))
    text = hookscope.lint(model, torch.randn(2, 4), select=["HS2"]).to_text()
    assert "the selected rules need no forward pass" in text and "give inputs" not in text
    assert "give inputs for the HS5xx rules" in hookscope.lint(model).to_text()


def test_ignore_globs_match_module_paths_below() -> None:
    model = nn.Sequential(zoo.PlainTensor(), zoo.PlainTensor())
    report = hookscope.lint(model, ignore=[("HS201", "1.*")])
    assert [f.target for f in report] == ["0.scale"]
    assert [f.target for f in hookscope.lint(model, ignore=["1"])] == ["0.scale"]


@pytest.mark.parametrize("options, fragment", [
    ({"select": ["HS999"]}, "'HS999' is not a rule code"),
    ({"select": "HS101"}, "must be a list"),
    ({"ignore": "HS101"}, "must be a list"),
    ({"ignore": [("HS1",)]}, "an ignore entry is"),
    ({"ignore": [("XX1", "a")]}, "'XX1' is not a rule code"),
    ({"backward": True}, "backward=True needs inputs"),
])
def test_bad_options_are_one_line_spec_errors(options: dict[str, object], fragment: str) -> None:
    with pytest.raises(SpecError, match=fragment) as info:
        hookscope.lint(nn.Linear(2, 2), **options)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_not_a_module() -> None:
    with pytest.raises(SpecError, match=r"expects a torch\.nn\.Module"):
        hookscope.lint("resnet")  # type: ignore[arg-type]


def test_report_text_json_exit_code_and_repr() -> None:
    report = hookscope.lint(zoo.Tied(), torch.tensor([[1, 2]]))
    assert report.counts() == {"error": 0, "warning": 0, "info": 1}
    assert report.exit_code() == 0 and report.exit_code(fail_on="info") == 1
    assert repr(report) == "<LintReport Tied: 0 error(s), 0 warning(s), 1 info>"
    doc = json.loads(report.to_json())
    assert doc["schema_version"] == 1 and doc["dynamic"] is True
    assert doc["findings"][0]["code"] == "HS203" and doc["findings"][0]["severity"] == "info"
    assert report.to_json() == json.dumps(doc, indent=2, sort_keys=True)
    text = report.to_text()
    assert "<model>: HS203 [info]" not in text  # located: where head is assigned
    assert "ignore=['HS203']" in text and "--ignore HS203" in text
    assert "--explain HS203" in text
    with pytest.raises(SpecError, match="severity must be one of"):
        report.exit_code(fail_on="fatal")


def test_findings_are_sorted_most_severe_first() -> None:
    model = zoo.Tied()
    model.extra = [nn.Linear(2, 2)]
    model.scale = torch.ones(2)
    assert [f.severity for f in hookscope.lint(model)] == [
        Severity.ERROR, Severity.WARNING, Severity.INFO]


def test_registering_a_duplicate_code_or_name_raises() -> None:
    def rule(ctx: object) -> list[Hit]:
        return []

    with pytest.raises(SpecError, match="HS101 is already registered"):
        register_rule("HS101", "another", severity=Severity.INFO, why="", fix="")(rule)
    with pytest.raises(SpecError, match="already registered"):
        register_rule("HS998", "tied-parameter", severity=Severity.INFO, why="", fix="")(rule)
    with pytest.raises(SpecError, match="three digits"):
        register_rule("X1", "x", severity=Severity.INFO, why="", fix="")(rule)
    assert "HS998" not in RULES


def test_a_new_rule_runs_without_touching_the_others() -> None:
    @register_rule("HS990", "test-only-rule", severity=Severity.INFO, why="w", fix="f")
    def flag_root(ctx: object) -> list[Hit]:
        return [Hit("", None, "hello")]

    try:
        report = hookscope.lint(nn.Linear(2, 2))
        assert [(f.code, f.message, f.fix) for f in report] == [("HS990", "hello", "f")]
    finally:
        del RULES["HS990"]


@pytest.mark.parametrize("code", sorted(zoo.CASES))
def test_lint_leaves_no_hook_and_does_not_change_the_model(code: str) -> None:
    bad, _, inputs, options = zoo.CASES[code]
    model = bad()
    before = snapshot_state(model)
    hookscope.lint(model, *(inputs() if inputs else ()), **options)
    assert total_hooks(model) == 0
    assert_state_unchanged(before, model)


def test_batchnorm_running_statistics_are_put_back() -> None:
    model = zoo.bn_model().train()
    before = snapshot_state(model)
    hookscope.lint(model, torch.randn(4, 3, 8, 8), backward=True)
    assert_state_unchanged(before, model)


def test_backward_runs_under_the_callers_no_grad_and_is_refused_in_inference_mode() -> None:
    class Unused(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.used, self.spare = nn.Linear(4, 2), nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.used(x)

    model = Unused()
    with torch.no_grad():
        report = hookscope.lint(model, torch.randn(2, 4), backward=True)
    assert report.backward and report.backward_skipped is None
    assert "HS502" in report.codes()  # spare never ran
    with torch.inference_mode(), pytest.raises(hookscope.SpecError, match="inference_mode"):
        hookscope.lint(model, torch.randn(2, 4), backward=True)


def test_a_backward_that_could_not_run_is_said_so_not_claimed() -> None:
    class ArgMax(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x).argmax(-1)

    report = hookscope.lint(ArgMax(), torch.randn(2, 4), backward=True)
    assert not report.backward
    assert report.backward_skipped is not None
    assert "no backward pass: no floating output requires grad" in report.to_text()
    assert "forward pass and backward" not in report.to_text()
    doc = json.loads(report.to_json())
    assert doc["backward"] is False and "requires grad" in doc["backward_skipped"]


def test_a_forward_that_fails_still_says_what_the_static_rules_found() -> None:
    class Mixed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4).double()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x))

    assert "HS402" in hookscope.lint(Mixed()).codes()
    with pytest.raises(ModelRunError) as info:
        hookscope.lint(Mixed(), torch.randn(2, 4))
    message = str(info.value)
    assert "same dtype" in message  # the model's own error first
    assert "the static rules found: HS402" in message and "b.weight" in message
    with pytest.raises(ModelRunError) as info:
        hookscope.lint(Mixed(), torch.randn(2, 4), ignore=["HS402"])
    assert "static rules" not in str(info.value)


def test_a_model_that_raises_is_a_model_run_error_and_leaves_no_hook() -> None:
    class Raises(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom")

    model = Raises()
    before = snapshot_state(model)
    with pytest.raises(ModelRunError, match="boom"):
        hookscope.lint(model, torch.randn(2, 4))
    assert total_hooks(model) == 0
    assert_state_unchanged(before, model)


def test_static_lint_of_a_meta_model_reads_no_values() -> None:
    with torch.device("meta"):
        model = zoo.NestedPlainDict()
    assert hookscope.lint(model).codes() == ["HS101"]


def test_explain_documents_every_rule() -> None:
    for code, rule in RULES.items():
        text = rule.explain()
        assert text.startswith(f"{code} {rule.name} [{rule.severity.value}]")
        assert "Fix: " in text and f"--ignore {code}" in text


def test_lint_leaves_a_graph_built_before_it_able_to_run_backward() -> None:
    """Lint's forward copied every buffer back, bumping its version: a graph that saved
    BatchNorm's statistics before the call failed its backward ("modified by an inplace
    operation")."""
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    x = torch.randn(1, 3, 32, 32)
    loss = model(x).sum()
    versions = [b._version for b in model.buffers()]
    hookscope.lint(model, x)
    assert [b._version for b in model.buffers()] == versions
    loss.backward()
    assert model.conv1.weight.grad is not None
