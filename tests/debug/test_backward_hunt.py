"""find_anomaly(backward=True) (issue 39): the autograd node that made the first
non-finite gradient from finite ones, the module call whose forward made it, the forward
op and the line of the model's code, on planted backward faults in a small model,
resnet50 and GPT-2. The oracle is ``torch.autograd.detect_anomaly`` (the node it names,
the forward stack it prints) for faults that make a NaN, and the planted line (marked
``# fault``) with plain ``torch.autograd.grad`` for the overflows (an Inf, which
``detect_anomaly`` does not check)."""

from __future__ import annotations

import inspect
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from helpers import assert_state_unchanged, snapshot_state, total_hooks

Fault = Callable[[torch.Tensor], torch.Tensor]


class NanGrad(torch.autograd.Function):
    """A custom function whose backward returns NaN."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * float("nan")


def sqrt_below_zero(y: torch.Tensor) -> torch.Tensor:
    return torch.where(y > 0, y.sqrt(), torch.zeros_like(y))  # fault


def sqrt_at_zero(y: torch.Tensor) -> torch.Tensor:
    return torch.where(y > 0, y.relu().sqrt(), torch.zeros_like(y))  # fault


def log_at_zero(y: torch.Tensor) -> torch.Tensor:
    return torch.where(y > 0, y.relu().log(), torch.zeros_like(y))  # fault


def log1p_at_minus_one(y: torch.Tensor) -> torch.Tensor:
    z = y * 3
    return torch.where(z > -1, torch.log1p(z.clamp(min=-1)), torch.zeros_like(z))  # fault


def division_by_zero(y: torch.Tensor) -> torch.Tensor:
    d = y.relu()
    return torch.where(d != 0, y / d, torch.zeros_like(y))  # fault


def pow_of_zero_to_a_negative_power(y: torch.Tensor) -> torch.Tensor:
    return torch.where(y > 0, y.relu() ** -0.5, torch.zeros_like(y))  # fault


def rsqrt_at_zero(y: torch.Tensor) -> torch.Tensor:
    return torch.where(y > 0, y.relu().rsqrt(), torch.zeros_like(y))  # fault


def acos_at_one(y: torch.Tensor) -> torch.Tensor:
    z = torch.tanh(y * 100)  # saturates to exactly -1 or 1 in float32
    return torch.where(z.abs() < 1, torch.acos(z), torch.zeros_like(z))  # fault


def custom_function(y: torch.Tensor) -> torch.Tensor:
    return NanGrad.apply(y)  # fault


NAN_FAULTS: dict[str, tuple[Fault, str]] = {
    "sqrt below 0": (sqrt_below_zero, "sqrt"),
    "sqrt at 0": (sqrt_at_zero, "sqrt"),
    "log at 0": (log_at_zero, "log"),
    "log1p at -1": (log1p_at_minus_one, "log1p"),
    "division by zero": (division_by_zero, "div"),
    "pow of 0 to a negative power": (pow_of_zero_to_a_negative_power, "pow"),
    "rsqrt at 0": (rsqrt_at_zero, "rsqrt"),
    "acos at 1": (acos_at_one, "acos"),
    "custom autograd.Function": (custom_function, "NanGrad.apply"),
}


class Planted(nn.Module):
    def __init__(self, fault: Fault) -> None:
        super().__init__()
        self.fault = fault

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return self.fault(y)


class Small(nn.Module):
    """``lin -> fault -> head``: the issue's planted model."""

    def __init__(self, fault: Fault, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4).to(dtype)
        self.act = Planted(fault)
        self.head = nn.Linear(4, 2).to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.lin(x)))


def fault_line(fn: Callable[..., Any]) -> int:
    """The line marked ``# fault`` in ``fn``'s source: where the planted op is called."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, text in enumerate(lines) if "# fault" in text)


def torch_says(run: Callable[[], Any]) -> tuple[str, list[tuple[str, int]]]:
    """Run ``run`` (a backward) under ``torch.autograd.detect_anomaly``: the node its
    error names, and the frames of the forward stack it prints."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="returned nan values") as info, \
                torch.autograd.detect_anomaly():
            run()
    node = re.search(r"Function '(\w+)' returned nan", str(info.value))
    assert node is not None
    [stack] = [str(w.message) for w in caught if "Traceback of forward call" in str(w.message)]
    frames = [(f, int(n)) for f, n in re.findall(r'File "([^"]+)", line (\d+)', stack)]
    return node.group(1), frames


def _outside_torch(frames: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The frames of a forward stack torch printed that are not torch's own."""
    torch_dir = str(Path(torch.__file__).parent)
    return [(f, n) for f, n in frames if not f.startswith(torch_dir)]


def _backward(model: nn.Module, x: torch.Tensor,
              loss: Callable[[Any], torch.Tensor] | None = None) -> Callable[[], None]:
    def run() -> None:
        out = model(x)
        value = loss(out) if loss is not None else out.sum()
        torch.autograd.grad(value, [p for p in model.parameters() if p.requires_grad])
    return run


@pytest.mark.parametrize("name", list(NAN_FAULTS))
def test_the_node_is_the_one_detect_anomaly_names_with_the_planted_line(name: str) -> None:
    fault, op = NAN_FAULTS[name]
    torch.manual_seed(0)
    model, x = Small(fault), torch.randn(8, 4)
    assert hookscope.find_anomaly(model, x) is None  # the forward is finite
    node, frames = torch_says(_backward(model, x))
    before = snapshot_state(model)
    report = hookscope.find_anomaly(model, x, backward=True)
    assert report is not None
    a = report.first
    assert a.kind.value == "backward_node" and a.node is not None
    assert a.node.name == node
    assert (a.path, a.module_class, a.call_index) == ("act", "Planted", 0)
    assert a.node.forward_op == op
    assert a.node.source is not None
    assert (a.node.source.file, a.node.source.line) == (__file__, fault_line(fault))
    assert (__file__, fault_line(fault)) == _outside_torch(frames)[-1]  # torch's own answer
    assert "# fault" in a.node.source.code
    # the gradients it received were finite, the one it computed holds the NaN
    assert all(s.nan_count == 0 and s.inf_count == 0 for s in a.node.grad_outputs)
    assert a.nan_count > 0 and a.node.grad_inputs[int(a.tensor[8:-1])].nan_count == a.nan_count
    assert_state_unchanged(before, model)
    assert total_hooks(model) == 0
    assert not torch.is_anomaly_enabled()


def test_the_report_names_the_node_the_module_and_the_line() -> None:
    torch.manual_seed(0)
    report = hookscope.find_anomaly(Small(sqrt_below_zero), torch.randn(8, 4), backward=True)
    assert report is not None
    text = str(report)
    first = text.splitlines()[0]
    assert first.startswith("First non-finite value: backward node SqrtBackward0 (the gradient "
                            "of sqrt in module 'act' (Planted, call 0)) made grad_in[0] with ")
    assert f"forward line: {__file__}:{fault_line(sqrt_below_zero)} in sqrt_below_zero" in text
    assert "return torch.where(y > 0, y.sqrt(), torch.zeros_like(y))  # fault" in text
    assert "grad_out[0]: finite" in text and "grad_in[0]: NOT finite" in text
    doc = report.to_dict()["anomalies"][0]
    assert doc["node"]["name"] == "SqrtBackward0"
    assert doc["node"]["source"]["line"] == fault_line(sqrt_below_zero)


def reciprocal_overflow(y: torch.Tensor) -> torch.Tensor:
    return torch.reciprocal(y.abs() * 1e-20 + 1e-30)  # fault


def test_a_float32_overflow_of_the_gradient_is_its_node() -> None:
    """1/s at s ~ 1e-20 is finite (1e20); its gradient, -1/s^2 ~ -1e40, overflows."""
    torch.manual_seed(0)
    model, x = Small(reciprocal_overflow), torch.randn(8, 4)
    # oracle: the gradients of the planted op's output and input, by plain autograd
    s = (model.lin(x).abs() * 1e-20 + 1e-30).detach().requires_grad_()
    r = torch.reciprocal(s)
    g_r, g_s = torch.autograd.grad(model.head(r).sum(), [r, s])
    assert bool(torch.isfinite(g_r).all()) and bool(torch.isinf(g_s).any())
    report = hookscope.find_anomaly(model, x, backward=True)
    assert report is not None and report.first.node is not None
    a = report.first
    assert (a.node.name, a.node.forward_op, a.path) == ("ReciprocalBackward0", "reciprocal", "act")
    assert a.inf_count == int(torch.isinf(g_s).sum()) and a.nan_count == 0
    assert a.node.source is not None and a.node.source.line == fault_line(reciprocal_overflow)


def scaled_loss(out: torch.Tensor) -> torch.Tensor:
    return out.float().sum() * 131072.0  # fault: a loss scale above float16's range


def test_a_float16_overflow_in_the_loss_is_found_outside_any_module() -> None:
    """A float16 model, its loss scaled by 2**17 in float32: the gradient cast back to
    float16 (65504 at most) overflows in the loss's own node."""
    torch.manual_seed(0)
    model, x = Small(torch.tanh, torch.float16), torch.randn(8, 4).half()
    out = model(x).detach().requires_grad_()
    (g,) = torch.autograd.grad(scaled_loss(out), [out])  # oracle: plain autograd
    assert bool(torch.isinf(g).all())
    report = hookscope.find_anomaly(model, x, backward=True, loss=scaled_loss)
    assert report is not None and report.first.node is not None
    a = report.first
    assert (a.node.name, a.call, a.path) == ("ToCopyBackward0", None, "")
    assert a.inf_count == g.numel()
    assert a.node.source is not None and a.node.source.line == fault_line(scaled_loss)
    assert "no module (the loss)" in str(report)
    assert not torch.is_anomaly_enabled()


def test_a_float16_overflow_inside_the_model_is_its_node() -> None:
    """float16 ``y * w`` with w = 60000: finite for |y| < 1; the gradient of y, g * w
    with g = 2 (the output is added to itself), is beyond float16's 65504."""
    torch.manual_seed(0)

    class Scale(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.full((4,), 60000.0, dtype=torch.float16))

        def forward(self, y: torch.Tensor) -> torch.Tensor:
            z = y.tanh() * 1e-3 * self.w  # fault
            return z + z

    model = nn.Sequential(nn.Linear(4, 4).half(), Scale())
    x = torch.randn(8, 4).half()
    report = hookscope.find_anomaly(model, x, backward=True)
    assert report is not None and report.first.node is not None
    a = report.first
    assert (a.node.name, a.path) == ("MulBackward0", "1") and a.inf_count > 0
    assert a.node.source is not None and "# fault" in a.node.source.code


def test_a_fault_in_the_loss_matches_detect_anomaly() -> None:
    torch.manual_seed(0)
    model, x = Small(torch.tanh), torch.randn(8, 4)

    def loss(out: torch.Tensor) -> torch.Tensor:
        return torch.where(out > 0, out.sqrt(), torch.zeros_like(out)).sum()  # fault

    node, _ = torch_says(_backward(model, x, loss))
    report = hookscope.find_anomaly(model, x, backward=True, loss=loss)
    assert report is not None and report.first.node is not None
    assert report.first.node.name == node and report.first.call is None
    assert report.first.node.source is not None
    assert report.first.node.source.line == fault_line(loss)


class SqrtActivation(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x.sqrt(), torch.zeros_like(x))  # fault


def test_resnet50_with_a_sqrt_activation() -> None:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).eval()
    block = model.layer2[0]
    block.relu = SqrtActivation()  # called three times in the block's forward
    x = torch.randn(1, 3, 64, 64)
    node, frames = torch_says(_backward(model, x))
    # which of the block's three calls: the line of the block's forward that called it
    source, first = inspect.getsourcelines(type(block).forward)
    relu_lines = [first + i for i, text in enumerate(source) if "self.relu(" in text]
    called_at = [line for f, line in frames if f == inspect.getsourcefile(type(block))][-1]
    report = hookscope.find_anomaly(model, x, backward=True)
    assert report is not None and report.first.node is not None
    a = report.first
    assert a.node.name == node == "SqrtBackward0"
    assert (a.path, a.call_index) == ("layer2.0.relu", relu_lines.index(called_at))
    assert a.node.source is not None and a.node.source.line == fault_line(SqrtActivation.forward)
    assert total_hooks(model) == 0


def test_gpt2_with_a_log_in_its_mlp() -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=100, n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    model.transformer.h[1].mlp.act = Planted(log_at_zero)
    ids = torch.randint(0, cfg.vocab_size, (1, 16))

    def loss(out: Any) -> torch.Tensor:
        return out.logits.logsumexp(-1).mean()

    node, frames = torch_says(_backward(model, ids, loss))
    report = hookscope.find_anomaly(model, ids, backward=True, loss=loss)
    assert report is not None and report.first.node is not None
    a = report.first
    assert (a.node.name, a.path) == (node, "transformer.h.1.mlp.act")
    assert a.node.source is not None
    assert (a.node.source.file, a.node.source.line) == _outside_torch(frames)[-1] == (
        __file__, fault_line(log_at_zero))
    assert total_hooks(model) == 0


def test_detect_anomaly_names_the_node_in_the_users_loop() -> None:
    torch.manual_seed(0)
    model, x = Small(sqrt_below_zero), torch.randn(8, 4)
    with pytest.raises(hookscope.NonFiniteError) as info, hookscope.detect_anomaly(model):
        model(x).sum().backward()
    a = info.value.report.first
    assert a.node is not None and (a.node.name, a.path) == ("SqrtBackward0", "act")
    assert not torch.is_anomaly_enabled()
    assert total_hooks(model) == 0
    for p in model.parameters():
        p.grad = None


def test_the_users_anomaly_mode_is_left_as_it_was() -> None:
    torch.manual_seed(0)
    model, x = Small(torch.tanh), torch.randn(8, 4)
    torch.autograd.set_detect_anomaly(True, check_nan=False)
    try:
        assert hookscope.find_anomaly(model, x, backward=True) is None
        assert torch.is_anomaly_enabled() and not torch.is_anomaly_check_nan_enabled()
    finally:
        torch.autograd.set_detect_anomaly(False)


def test_the_hunt_records_no_stacks_and_reads_the_line_from_a_second_forward() -> None:
    """Stacks on every node are most of the hunt's cost: its run records none (anomaly
    mode off), and only when a node is found does a second forward, with stacks, give
    its line; a clean run is one forward."""
    seen: list[bool] = []

    class Probe(nn.Module):
        def __init__(self, fault: bool) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.fault = fault

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(torch.is_anomaly_enabled())
            y = self.lin(x)
            return sqrt_below_zero(y) if self.fault else y

    torch.manual_seed(0)
    x = torch.randn(3, 4)
    assert hookscope.find_anomaly(Probe(fault=False), x, backward=True) is None
    assert seen == [False]
    seen.clear()
    report = hookscope.find_anomaly(Probe(fault=True), x, backward=True)
    assert report is not None and report.first.node is not None
    assert seen == [False, True]
    source = report.first.node.source
    assert source is not None and source.line == fault_line(sqrt_below_zero)
    assert not torch.is_anomaly_enabled()


def test_collect_all_gives_each_node_found_its_own_line() -> None:
    class TwoFaults(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.b = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return sqrt_below_zero(self.a(x)) + log_at_zero(self.b(x))

    torch.manual_seed(0)
    report = hookscope.find_anomaly(TwoFaults(), torch.randn(3, 4), backward=True,
                                    collect_all=True)
    assert report is not None
    nodes = [a.node for a in report.anomalies if a.node is not None]
    lines = {"SqrtBackward0": fault_line(sqrt_below_zero), "LogBackward0": fault_line(log_at_zero)}
    assert sorted(node.name for node in nodes) == sorted(lines)
    for node in nodes:
        assert node.source is not None and node.source.line == lines[node.name]
