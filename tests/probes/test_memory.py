"""Memory probe: output bytes, saved-for-backward bytes, and that watching the saved
tensors changes nothing autograd does."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from helpers import assert_outputs_identical, assert_state_unchanged, count_hooks, snapshot_state
from hookscope.probes.memory import tensor_bytes

F32 = 4  # torch.float32 element size


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class Mul(nn.Module):
    """``x * w``: autograd saves both factors when both require grad."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w


class Exp(nn.Module):
    """``exp`` saves its output."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x)


class Twice(nn.Module):
    """Saves the same tensor twice (``x * x`` saves ``x`` as both factors)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x


def known_savers() -> nn.Sequential:
    return nn.Sequential(Mul((4, 8)), Exp(), nn.ReLU(), Twice())


def test_output_bytes_are_numel_times_element_size() -> None:
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 5)
    ).to(torch.float64)
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    outputs: dict[str, torch.Tensor] = {}
    for path, m in model.named_modules():
        m.register_forward_hook(lambda mod, a, out, path=path: outputs.__setitem__(path, out))
    trace = hookscope.trace(model, x)
    for call in trace:
        assert call.memory is not None
        assert call.memory.output_bytes == nbytes(outputs[call.path])
    assert trace.find("0").memory.output_bytes == 2 * 8 * 8 * 8 * 8  # float64


def test_a_storage_shared_by_several_outputs_counts_once() -> None:
    class Views(nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            y = x * 2
            return {"same": (y, y), "flat": y.view(-1), "halves": y.chunk(2), "row": y[0]}

    class Expanded(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[:1].expand(1000, 6)  # 6000 elements over one 6-element row

    x = torch.randn(4, 6)
    views = hookscope.trace(Views(), x).find("").memory
    assert views.output_bytes == nbytes(x * 2) == 4 * 6 * F32
    expanded = hookscope.trace(Expanded(), x).find("").memory
    # NB: never more than the storage holds (the whole of x here, 4 * 6 floats).
    assert expanded.output_bytes == x.untyped_storage().nbytes() == 4 * 6 * F32
    assert tensor_bytes([x[:, :2]]) == 4 * 2 * F32  # a slice: its own elements only


def test_sparse_and_non_tensor_outputs() -> None:
    class Sparse(nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return x.to_sparse(), None, "text", 3

    x = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 0.0]])
    s = x.to_sparse()
    memory = hookscope.trace(Sparse(), x).find("").memory
    assert memory.output_bytes == nbytes(s._indices()) + nbytes(s._values()) == 2 * 2 * 8 + 2 * 4


def test_saved_bytes_match_what_autograd_saves_by_construction() -> None:
    model = known_savers()
    x = torch.randn(4, 8, requires_grad=True)
    trace = hookscope.trace(model, x, grad=True)
    n = 4 * 8 * F32
    assert trace.find("0").memory.saved_bytes == 2 * n  # x and w
    assert trace.find("1").memory.saved_bytes == n  # exp's output
    assert trace.find("2").memory.saved_bytes == n  # relu's output
    assert trace.find("3").memory.saved_bytes == n  # x twice, one storage
    assert trace.find("").memory.saved_bytes == 0  # its children saved, not itself


def test_saved_bytes_follow_grad_mode() -> None:
    model = known_savers()
    x = torch.randn(4, 8)
    assert hookscope.trace(model, x).find("1").memory.saved_bytes is None  # no_grad
    with torch.inference_mode():
        inference = hookscope.trace(model, x, grad=True)
    assert inference.find("1").memory.saved_bytes is None
    backward = hookscope.trace(model, x, backward=True)
    assert backward.find("0").memory.saved_bytes == 4 * 8 * F32  # x needs no grad: x only
    with pytest.raises(hookscope.SpecError, match="grad=False"):
        hookscope.trace(model, x, backward=True, grad=False)


def run_and_grad(model: nn.Module, x: torch.Tensor) -> tuple[Any, ...]:
    out = model(x)
    return (out, *torch.autograd.grad(out.sum(), [x, *model.parameters()]))


def test_watching_saved_tensors_changes_nothing_autograd_does() -> None:
    model = known_savers()
    x = torch.randn(4, 8, requires_grad=True)
    expected = run_and_grad(model, x)
    before = snapshot_state(model)
    with hookscope.Tracer(model, memory=True):
        got = run_and_grad(model, x)
    assert_outputs_identical(expected, got)
    assert_state_unchanged(before, model)
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None


def test_inplace_modification_of_a_saved_tensor_still_raises() -> None:
    model = nn.Sequential(Exp())
    x = torch.randn(3, requires_grad=True)
    with hookscope.Tracer(model, memory=True):
        out = model(x)
        out.add_(1)  # exp saved its output
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()


def test_saved_activations_are_freed_without_the_garbage_collector() -> None:
    model = nn.Sequential(Exp(), nn.ReLU())
    x = torch.randn(100, requires_grad=True)
    gc.disable()
    try:
        with hookscope.Tracer(model, memory=True):
            out = model(x)
            alive = weakref.ref(out)
            inner = weakref.ref(out.grad_fn._saved_result)
            del out
        assert alive() is None and inner() is None
    finally:
        gc.enable()


def test_the_users_saved_tensor_hooks_keep_working() -> None:
    packed: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        packed.append(t.numel())
        return t.clone()

    model = known_savers()
    x = torch.randn(4, 8, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        expected = run_and_grad(model, x)
        n_plain = len(packed)
        with hookscope.Tracer(model, memory=True) as tracer:
            got = run_and_grad(model, x)
    assert len(packed) == 2 * n_plain > 0  # the user's pack ran for every saved tensor
    assert_outputs_identical(expected, got)
    assert tracer.trace is not None and tracer.trace.find("1").memory.saved_bytes == 4 * 8 * F32


def test_a_failing_call_has_no_output_bytes() -> None:
    class Fail(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("no")

    model = nn.Sequential(nn.ReLU(), Fail())
    with pytest.raises(hookscope.ModelRunError) as info:
        hookscope.trace(model, torch.zeros(3))
    assert info.value.trace.find("1").memory.output_bytes == 0
    assert info.value.trace.find("0").memory.output_bytes == 3 * F32


class Raising(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.fc(x)).view(3)  # raises: 8 elements into shape [3]


@pytest.mark.parametrize("backward", [False, True])
def test_all_probes_leave_the_model_unchanged(backward: bool) -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    model.eval()
    x = torch.randn(2, 4)
    with torch.no_grad():
        expected = model(x)
    hooks, before = count_hooks(model), snapshot_state(model)
    with torch.no_grad(), hookscope.Tracer(model, time=True, stats=True, memory=True):
        got = model(x)
    assert_outputs_identical(expected, got)
    trace = hookscope.trace(model, x, backward=backward, grad=True)
    assert count_hooks(model) == hooks
    assert_state_unchanged(before, model)
    assert trace.find("").memory is not None and trace.find("").stats is not None


def test_a_raising_model_is_left_unchanged_with_every_probe() -> None:
    model = Raising().eval()
    hooks, before = count_hooks(model), snapshot_state(model)
    with pytest.raises(hookscope.ModelRunError) as info:
        hookscope.trace(model, torch.randn(2, 4), grad=True)
    assert info.value.path == ""
    assert count_hooks(model) == hooks
    assert_state_unchanged(before, model)
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None


class _DifferentiableNorm(hookscope.Probe):
    """A probe that takes a norm with grad on, in both events: autograd saves tensors."""

    name = "differentiable_norm"
    facts = (hookscope.Fact("differentiable_norm", "norm of the output"),)

    def on_enter(self, call: Any, module: Any, args: Any, kwargs: Any) -> None:
        if args and isinstance(args[0], torch.Tensor):
            (args[0] * 2).norm()

    def on_exit(self, call: Any, module: Any, args: Any, kwargs: Any, output: Any,
                failed: bool) -> None:
        if isinstance(output, torch.Tensor):
            call.facts["differentiable_norm"] = output.norm().item()


def test_tensors_another_probe_makes_autograd_save_are_not_the_model_s() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4))
    x = torch.randn(3, 4)
    alone = hookscope.trace(model, x, memory=True, backward=True)
    probed = hookscope.trace(model, x, memory=True, backward=True, probes=[_DifferentiableNorm()])
    saved = [c.memory.saved_bytes for c in alone.calls]
    assert [c.memory.saved_bytes for c in probed.calls] == saved
    assert saved[1] > 0  # the oracle: the model's own saved tensors are still counted
    with hookscope.Tracer(model, memory=True, probes=[_DifferentiableNorm()]) as tracer:
        model(x).sum().backward()
    assert tracer.trace is not None
    assert [c.memory.saved_bytes for c in tracer.trace.calls] == saved
    model.zero_grad(set_to_none=True)
