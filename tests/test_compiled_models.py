"""Compiled models: ``torch.compile(model)`` and ``model.compile()``.

hookscope observes a compiled model as the original module run eagerly (paths without
``_orig_mod.``, totals equal the eager model's), leaves the compiled state alone (the
user's compiled code is not compiled again afterwards), and with ``compiled=True``
reports dynamo's graphs, graph breaks (module path and source line) and recompilations.

Oracles: ``named_modules``/``parameters`` of the eager model, ``FlopCounterMode`` on the
eager model, pre-hooks that count calls, ``param.grad``, ``inspect.getsourcelines`` for
the line of a planted break, and a counting backend for "compiled again".
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from flop_oracles import count_flops, math_attention
from helpers import (
    assert_one_error_line,
    assert_outputs_identical,
    assert_state_unchanged,
    call_counts,
    model_spec,
    run_cli,
    snapshot_state,
    total_hooks,
)
from hookscope.core.records.compile_report import CompileReport


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    """Each test compiles from scratch and leaves nothing compiled for the next."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class CountingBackend:
    """A ``torch.compile`` backend that counts the graphs it is given (runs them as
    they are): the user's model compiled again shows as a higher count."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        self.graphs += 1
        return gm.forward


def compile_model(model: nn.Module, how: str, backend: Any = "eager") -> nn.Module:
    """The model compiled ``how``: ``"torch.compile"`` (a wrapper) or ``"in place"``."""
    if how == "torch.compile":
        return torch.compile(model, backend=backend)  # type: ignore[return-value]
    model.compile(backend=backend)
    return model


HOWS = ["torch.compile", "in place"]


class ItemBreak(nn.Module):
    """A submodule whose ``forward`` makes dynamo break the graph (``.item()``)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        scale = y.abs().max().item()  # dynamo cannot put a Python float in the graph
        return y / (1.0 + scale)


class PrintBreak(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        print("PrintBreak ran")  # a builtin dynamo does not trace
        return torch.tanh(y)


class WithBreaks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.body = nn.Sequential(nn.ReLU(), ItemBreak())
        self.out = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(self.inp(x)))


def _line_of(cls: type, text: str) -> int:
    """The line of ``cls.forward`` that contains ``text`` (the test finds it itself)."""
    lines, first = inspect.getsourcelines(cls.forward)  # type: ignore[attr-defined]
    (offset,) = [i for i, line in enumerate(lines) if text in line]
    return first + offset


def _seq() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


# -- module facts: the original module, run eagerly -------------------------------------


@pytest.mark.parametrize("how", HOWS)
def test_paths_counts_and_flops_are_the_eager_model_s(how: str) -> None:
    model = _seq()
    x = torch.randn(3, 4)
    eager_counts = call_counts(model, lambda: model(x))
    oracle = count_flops(model, x)
    compiled = compile_model(model, how)
    compiled(x)  # compiled now: its cached code would skip every hook
    trace = hookscope.trace(compiled, x, ops=True)
    assert [c.path for c in trace.calls] == [p for p, _ in model.named_modules()]
    assert {p: len(trace.calls_of(p)) for p in eager_counts} == eager_counts
    assert trace.model.params_total == sum(p.numel() for p in model.parameters())
    assert trace.totals_flops.forward == oracle.forward
    assert trace.meta["compiled"] == ("torch.compile(model)" if how == "torch.compile"
                                      else "model.compile()")
    text = str(hookscope.summary(compiled, x))
    assert "[compiled]" in text and "original module run eagerly" in text
    assert "_orig_mod" not in text


@pytest.mark.parametrize("how", HOWS)
def test_the_user_s_compiled_model_is_left_as_it_was(how: str) -> None:
    """Hooks, flags, values and the compiled state: the same objects, and the user's
    next call runs the code compiled before (the backend is not called again)."""
    model = _seq()
    x = torch.randn(3, 4)
    backend = CountingBackend()
    compiled = compile_model(model, how, backend)
    expected = compiled(x)
    graphs = backend.graphs
    assert graphs >= 1
    before = snapshot_state(model)
    wrapper_attrs = sorted(vars(compiled))
    call_impl = model.__dict__.get("_compiled_call_impl")
    counters = {k: dict(v) for k, v in torch._dynamo.utils.counters.items()}
    hookscope.trace(compiled, x, compiled=True, backward=True)
    hookscope.summary(compiled, x, compiled=True)
    assert_state_unchanged(before, model)
    assert total_hooks(model) == 0
    assert sorted(vars(compiled)) == wrapper_attrs
    assert model.__dict__.get("_compiled_call_impl") is call_impl
    assert {k: dict(v) for k, v in torch._dynamo.utils.counters.items()} == counters
    assert_outputs_identical(expected, compiled(x))
    assert backend.graphs == graphs  # not compiled again


def test_a_tracer_block_around_a_compiled_model_names_the_original_paths() -> None:
    model = _seq()
    compiled = torch.compile(model, backend="eager")
    x = torch.randn(2, 4)
    compiled(x)
    with hookscope.Tracer(compiled) as tracer:
        compiled(x)
    assert tracer.trace is not None
    assert [c.path for c in tracer.trace.calls] == ["", "0", "1", "2"]


# -- compiled=True: dynamo's account ----------------------------------------------------


def test_a_planted_item_break_is_reported_at_its_module_and_line() -> None:
    model = WithBreaks()
    compiled = torch.compile(model, backend="eager")
    x = torch.randn(3, 4)
    compiled(x)
    trace = hookscope.trace(compiled, x, compiled=True)
    report = CompileReport.of(trace.meta)
    assert report is not None and report.error is None
    assert report.graphs >= 2 and len(report.breaks) >= 1
    (brk,) = [b for b in report.breaks if b.path == "body.1"]
    assert brk.line == _line_of(ItemBreak, ".item()")
    assert brk.file == inspect.getsourcefile(ItemBreak)
    assert "item()" in brk.reason
    text = str(trace)
    assert f"in 'body.1' (test_compiled_models.py:{brk.line})" in text


def test_a_print_break_is_reported_at_its_module_and_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    model = nn.Sequential(nn.Linear(4, 8), PrintBreak(), nn.Linear(8, 2))
    trace = hookscope.trace(model, torch.randn(2, 4), compiled=True)  # not compiled: asks
    report = CompileReport.of(trace.meta)
    assert report is not None
    (brk,) = report.breaks
    assert brk.paths == ("1",)
    assert brk.line == _line_of(PrintBreak, "print(")
    assert "compiled" not in trace.meta  # the model itself is not compiled
    capsys.readouterr()


def test_compiled_true_inside_another_tracer_s_block_still_compiles() -> None:
    """Another active tracer sets the compiler's stance to force_eager, under which
    dynamo compiles nothing: the explanation runs with the default stance."""
    other = nn.Linear(2, 2)
    with hookscope.Tracer(other):
        trace = hookscope.trace(WithBreaks(), torch.randn(2, 4), compiled=True)
        other(torch.randn(1, 2))
    report = CompileReport.of(trace.meta)
    assert report is not None and report.graphs >= 2
    assert [b.path for b in report.breaks] == ["body.1"]


def test_breaks_in_modules_of_one_class_name_only_those_modules() -> None:
    """Two ``ItemBreak``s share their ``forward``: each break names the right one, or
    both when dynamo's account cannot tell them apart, never another module."""
    model = nn.Sequential(nn.Linear(4, 8), ItemBreak(), nn.ReLU(), ItemBreak())
    trace = hookscope.trace(model, torch.randn(2, 4), compiled=True)
    report = CompileReport.of(trace.meta)
    assert report is not None and report.breaks
    line = _line_of(ItemBreak, ".item()")
    for brk in report.breaks:
        assert brk.line == line
        assert brk.paths and set(brk.paths) <= {"1", "3"}


class Stack(nn.Module):
    """A model class of the user's own (dynamo compiles its ``forward`` frame)."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.out = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.inp(x)))


def test_recompilations_report_the_guard_that_failed() -> None:
    model = Stack()
    compiled = torch.compile(model, backend="eager", dynamic=False)
    compiled(torch.randn(3, 4))
    compiled(torch.randn(5, 4))  # another batch size: a guard fails, compiled again
    trace = hookscope.trace(compiled, torch.randn(3, 4), compiled=True)
    report = CompileReport.of(trace.meta)
    assert report is not None
    root = [r for r in report.recompiles if r.paths == ("",)]
    assert root and any("size mismatch" in r.reason for r in root)
    assert "recompiled in '<root>'" in str(trace)


def test_the_compile_report_survives_the_json_round_trip() -> None:
    model = WithBreaks()
    trace = hookscope.trace(model, torch.randn(2, 4), compiled=True)
    again = hookscope.Trace.from_json(trace.to_json())
    assert again == trace
    assert CompileReport.of(again.meta) == CompileReport.of(trace.meta)


def test_compiled_true_puts_back_what_its_forward_changed() -> None:
    """The explained forward runs in training mode here: BatchNorm's statistics, the
    random state (dropout) and every flag are as they were afterwards."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.5),
                          PrintBreak()).train()
    x = torch.randn(6, 4)
    before = snapshot_state(model)
    rng = torch.get_rng_state()
    trace = hookscope.trace(model, x, compiled=True)
    assert_state_unchanged(before, model)
    report = CompileReport.of(trace.meta)
    assert report is not None and report.breaks and report.breaks[0].paths == ("3",)
    rng_after_trace = torch.get_rng_state()
    torch.set_rng_state(rng)
    hookscope.trace(model, x)  # the same trace without compiled=True
    assert torch.equal(torch.get_rng_state(), rng_after_trace)


def test_dynamo_s_failure_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    import hookscope.api.compiled as api_compiled

    def failing(*_: Any) -> Any:
        raise RuntimeError("dynamo could not compile this\nmore detail")

    monkeypatch.setattr(api_compiled, "explain_module_run", failing)
    trace = hookscope.trace(_seq(), torch.randn(2, 4), compiled=True)
    report = CompileReport.of(trace.meta)
    assert report is not None
    assert report.error == "RuntimeError: dynamo could not compile this"
    text = " ".join(str(trace).split())  # the note wraps at the table's width
    assert "torch.compile failed: RuntimeError: dynamo could not compile this" in text
    assert len(trace.calls) == 4  # the eager facts are all there


def test_compiled_true_on_the_meta_device_is_a_spec_error() -> None:
    with pytest.raises(hookscope.SpecError, match="compiled=True"):
        hookscope.trace(_seq(), torch.randn(2, 4), device="meta", compiled=True)
    with pytest.raises(hookscope.SpecError, match="compiled="):
        hookscope.trace(_seq(), torch.randn(2, 4), compiled="yes")  # type: ignore[arg-type]


# -- the gradient monitor and capture ----------------------------------------------------


def test_the_gradient_monitor_watches_the_compiled_code_s_gradients() -> None:
    model = _seq()
    backend = CountingBackend()
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(5, 4)
    with hookscope.GradientMonitor(compiled) as mon:
        compiled(x).pow(2).sum().backward()
        mon.step()
    assert backend.graphs >= 1  # the compiled code ran, not an eager copy
    assert mon.names == [n for n, _ in model.named_parameters()]
    assert "[compiled] torch.compile(model): the gradients its compiled code made" in str(mon)
    for name, p in model.named_parameters():
        assert p.grad is not None
        assert mon.history.column(name)[-1] == pytest.approx(p.grad.norm().item(), rel=1e-5)


def test_capture_of_a_compiled_model_uses_the_original_paths() -> None:
    model = _seq()
    compiled = torch.compile(model, backend="eager")
    x = torch.randn(2, 4)
    compiled(x)
    acts = hookscope.capture(compiled, x, select="1")
    assert list(acts) == ["1"]
    assert torch.equal(acts["1"], torch.relu(model[0](x)))
    assert total_hooks(model) == 0


# -- the CLI --------------------------------------------------------------------------------

_CLI_MODEL = """
import torch
from torch import nn


class Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        if y.sum().item() > 1e9:
            y = y * 2
        return y


def Compiled():
    model = nn.Sequential(nn.Linear(4, 8), Noisy(), nn.Linear(8, 2))
    return torch.compile(model, backend="eager")
"""


def test_cli_compiled_prints_the_break_with_its_module_and_line(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    spec = model_spec(tmp_path, _CLI_MODEL, "Compiled")
    code, out, err = run_cli(capsys, "summary", spec, "-i", "2,4", "--compiled",
                             "--no-color")
    assert code == 0, err
    # the file is the text as it is: its first line is the empty one
    line = 1 + _CLI_MODEL.splitlines().index("        if y.sum().item() > 1e9:")
    assert f"break 1 in '1' (compiled_model.py:{line})" in out
    assert "_orig_mod" not in out
    code, out, err = run_cli(capsys, "trace", spec, "-i", "2,4", "--compiled", "-f", "json")
    assert code == 0, err
    meta = json.loads(out)["meta"]
    assert meta["compiled"] == "torch.compile(model)"
    assert [(b["paths"], b["line"]) for b in meta["compile"]["breaks"]] == [(["1"], line)]
    code, out, err = run_cli(capsys, "trace", spec, "-i", "2,4", "--compiled",
                             "--device", "meta")
    assert_one_error_line(code, err, "--compiled")


# -- real models ------------------------------------------------------------------------------


def _resnet18() -> tuple[nn.Module, tuple[Any, ...]]:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    return torchvision.models.resnet18(weights=None).eval(), (torch.randn(1, 3, 64, 64),)


def _gpt2() -> tuple[nn.Module, tuple[Any, ...]]:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2)
    model = transformers.GPT2LMHeadModel(config).eval()
    return model, (torch.randint(0, config.vocab_size, (1, 16)),)


@pytest.mark.slow
@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("build", [_resnet18, _gpt2], ids=["resnet18", "gpt2"])
def test_real_compiled_models_total_what_the_eager_model_does(
        build: Callable[[], tuple[nn.Module, tuple[Any, ...]]], how: str) -> None:
    model, args = build()
    eager_counts = call_counts(model, lambda: model(*args))
    with math_attention():  # attention as matmuls, which FlopCounterMode counts
        oracle = count_flops(model, *args)
    params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    compiled = compile_model(model, how)
    with torch.no_grad():
        expected = compiled(*args)  # compiled now
    before = snapshot_state(model)
    with math_attention():
        trace = hookscope.trace(compiled, *args, ops=True)
    summary = hookscope.summary(compiled, *args)
    for t in (trace, summary.trace):
        assert t.model.params_total == params
        assert {p: len(t.calls_of(p)) for p in eager_counts} == eager_counts
        assert len(t.calls) == sum(eager_counts.values())
    assert trace.totals_flops.forward == oracle.forward
    assert "_orig_mod" not in str(summary)
    if build is _gpt2:  # dynamo's account too: GPT-2 compiles whole
        explained = hookscope.summary(compiled, *args, compiled=True)
        report = CompileReport.of(explained.trace.meta)
        assert report is not None and report.error is None and report.graphs >= 1
        assert explained.trace.model.params_total == params
        if not report.breaks:
            assert "no graph break" in " ".join(str(explained).split())
    assert_state_unchanged(before, model)
    with torch.no_grad():
        assert_outputs_identical(expected, compiled(*args), requires_grad=False)


# -- inspect and lint -------------------------------------------------------------------------


class Unused(nn.Module):
    """A module with a submodule its forward never calls (a lint finding)."""

    def __init__(self) -> None:
        super().__init__()
        self.used, self.spare = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


@pytest.mark.parametrize("how", HOWS)
def test_inspect_and_lint_see_the_original_module(how: str) -> None:
    model = Unused()
    x = torch.randn(2, 4)
    eager = [(f.code, f.path) for f in hookscope.lint(model, x).findings]
    assert eager  # the oracle is not vacuous
    compiled = compile_model(model, how)
    compiled(x)
    info = hookscope.inspect(compiled)
    assert list(info.modules) == [p for p, _ in model.named_modules()]
    assert [(f.code, f.path) for f in hookscope.lint(compiled, x).findings] == eager
    assert total_hooks(model) == 0
