"""Capture (issue 11): captured tensors equal the same module's output computed
independently; reused modules give one entry per call; nested outputs keep their
structure; inputs are what ``forward`` received; no hook is left."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
import zoo
from helpers import assert_state_unchanged, snapshot_state, total_hooks


def resnet_like() -> nn.Module:
    torch.manual_seed(0)

    def block() -> nn.Module:
        b = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4),
                          nn.ReLU(inplace=True))
        b.add_module("downsample", nn.Sequential(nn.Conv2d(4, 4, 1)))
        return b

    model = nn.Sequential()
    model.add_module("layer1", nn.Sequential(block(), block()))
    model.add_module("layer2", nn.Sequential(block()))
    return model.eval()


def test_captured_outputs_equal_the_modules_own_outputs() -> None:
    model, x = resnet_like(), torch.randn(2, 4, 8, 8)
    before = snapshot_state(model)
    acts = hookscope.capture(model, x, select="layer*.0")
    assert sorted(acts) == ["layer1.0", "layer2.0"]  # * does not cross dots
    with torch.no_grad():  # the oracle: the modules called by hand
        h1 = model.layer1[0](x)
        expected2 = model.layer2[0](model.layer1[1](h1))
    assert torch.equal(acts["layer1.0"], h1)
    assert torch.equal(acts["layer2.0"], expected2)
    assert not acts["layer1.0"].requires_grad
    assert_state_unchanged(before, model)
    assert total_hooks(model) == 0


def test_capture_is_a_copy_that_inplace_ops_cannot_change() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(inplace=True))
    x = torch.randn(4, 3)
    acts = hookscope.capture(model, x, select="0")
    with torch.no_grad():
        assert torch.equal(acts["0"], model[0](x))  # ReLU ran in place on it afterwards
    assert (acts["0"] < 0).any()


def test_reused_module_calls_are_captured_separately() -> None:
    model = zoo.build(zoo.SharedModule)
    args, kwargs = zoo.SharedModule.example_inputs()
    acts = hookscope.capture(model, *args, kwargs=kwargs, select="fc")
    trace = hookscope.trace(model, *args, kwargs=kwargs)
    assert sorted(acts) == sorted(c.name for c in trace.calls if c.path == "fc")
    assert sorted(acts) == ["fc", "fc#1"]
    assert not torch.equal(acts["fc"], acts["fc#1"])
    assert acts.calls_of("fc")[1] is acts["fc#1"]  # type: ignore[attr-defined]


def test_nested_outputs_keep_their_structure() -> None:
    class Pair(nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return {"a": x + 1, "rest": (x * 2, None, 3)}

    model = nn.Sequential(Pair())
    x = torch.randn(2)
    out = hookscope.capture(model, x, select="0")["0"]
    assert set(out) == {"a", "rest"}
    assert torch.equal(out["a"], x + 1) and torch.equal(out["rest"][0], x * 2)
    assert out["rest"][1:] == (None, 3)


def test_inputs_are_what_forward_received_before_it_ran() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(inplace=True))
    x = torch.randn(4, 3)
    both = hookscope.capture(model, x, select="1", what="both")["1"]
    with torch.no_grad():
        h = model[0](x)
    assert torch.equal(both["input"].args[0], h)  # before ReLU changed it in place
    assert torch.equal(both["output"], torch.relu(h))
    inputs = hookscope.capture(model, x, select="1", what="input")["1"]
    assert torch.equal(inputs.args[0], h) and inputs.kwargs == {}


def test_module_class_selector_and_device() -> None:
    model, x = resnet_like(), torch.randn(1, 4, 8, 8)
    acts = hookscope.capture(model, x, select=nn.Conv2d, to=None)
    assert len(acts) == 6
    assert all(t.device == x.device for t in acts.values())


def test_capture_over_batches_keeps_each_batch() -> None:
    model = resnet_like()
    xs = [torch.randn(2, 4, 8, 8) for _ in range(3)]
    with hookscope.Capture(model, select="layer2.0") as cap, torch.no_grad():
        for x in xs:
            model(x)
    acts = cap.activations
    assert list(acts) == ["layer2.0", "layer2.0#1", "layer2.0#2"]
    with torch.no_grad():
        for x, got in zip(xs, acts.calls_of("layer2.0"), strict=True):  # type: ignore[attr-defined]
            assert torch.equal(got, model.layer2[0](model.layer1(x)))
    assert total_hooks(model) == 0


def test_a_raising_model_leaves_no_hook_and_keeps_what_finished() -> None:
    model = zoo.build(zoo.RaisingModel)
    args, kwargs = zoo.RaisingModel.example_inputs()
    cap = hookscope.Capture(model, select="**")
    with pytest.raises(Exception, match="mat1"), cap:
        model(*args, **kwargs)
    assert "stem" in cap.activations and "block.proj" not in cap.activations
    assert total_hooks(model) == 0


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"select": "nothing.here"}, "matches no module"),
        ({"select": "**", "what": "grads"}, "what="),
        ({"select": "**", "to": "nowhere"}, "to="),
        pytest.param({"select": "**", "to": "cuda:0"}, "to='cuda:0'.*not available here",
                     marks=pytest.mark.skipif(torch.cuda.is_available(), reason="has CUDA")),
        ({"select": "**", "shard_mib": 0}, "shard_mib"),
        ({"select": 3}, "selector"),
    ],
)
def test_bad_options_are_spec_errors(options: dict[str, Any], match: str) -> None:
    with pytest.raises(hookscope.SpecError, match=match):
        hookscope.capture(nn.Sequential(nn.Linear(2, 2)), torch.randn(1, 2), **options)


def test_a_capture_that_could_not_start_is_not_left_active(tmp_path: Path) -> None:
    """The tracer failing to start (a module refusing hooks) leaves the Capture closed,
    not "already active", and nothing on disk presented as a complete capture."""

    class NoHooks(nn.Linear):
        def register_forward_hook(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("this module refuses hooks")

    model = nn.Sequential(NoHooks(2, 2))
    cap = hookscope.Capture(model, select="0", save_to=tmp_path / "acts")
    with pytest.raises(RuntimeError, match="refuses hooks"):
        cap.__enter__()
    with pytest.raises(hookscope.SpecError, match=r"interrupted capture.*refuses hooks"):
        hookscope.load_activations(tmp_path / "acts")
    with pytest.raises(hookscope.SpecError) as reused:
        cap.__enter__()
    assert "already active" not in str(reused.value)
    assert total_hooks(model) == 0


class _Recursive(nn.Module):
    """``r`` calls itself: its outer call starts first and ends last."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor, depth: int = 2) -> torch.Tensor:
        y = self.lin(x)
        return self(y, depth - 1) + 10 if depth else y


class _HoldsRecursive(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.r = _Recursive()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.r(x)  # type: ignore[no-any-return]


def test_a_recursive_module_s_calls_are_in_call_order_in_memory_as_on_disk(
    tmp_path: Path,
) -> None:
    """In memory the calls were kept as they ended (``r#2, r#1, r``), on disk as they
    started: ``calls_of`` gave two orders."""
    torch.manual_seed(0)
    model, x = _HoldsRecursive(), torch.randn(1, 2)
    oracle: list[torch.Tensor] = []  # the outputs, in the order the calls start
    starts: list[int] = []

    def pre(module: nn.Module, args: Any) -> None:
        starts.append(len(oracle))
        oracle.append(torch.empty(0))

    def post(module: nn.Module, args: Any, out: torch.Tensor) -> None:
        oracle[starts.pop()] = out.detach().clone()

    handles = [model.r.register_forward_pre_hook(pre), model.r.register_forward_hook(post)]
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    memory = hookscope.capture(model, x, select="r")
    disk = hookscope.capture(model, x, select="r", save_to=tmp_path / "c")
    assert list(memory) == list(disk) == ["r", "r#1", "r#2"]
    for values in (memory.calls_of("r"), disk.calls_of("r")):  # type: ignore[attr-defined]
        assert len(values) == 3
        assert all(torch.equal(v, o) for v, o in zip(values, oracle, strict=True))


def test_a_capture_entered_again_starts_anew() -> None:
    """A second block overwrote the first block's values in the dict already handed out."""
    model = nn.Linear(2, 2)
    cap = hookscope.Capture(model, select="<root>")
    with cap, torch.no_grad():
        model(torch.ones(1, 2))
    first = cap.activations
    kept = first[""].clone()  # the root's call
    with cap, torch.no_grad():
        model(torch.full((1, 2), 100.0))
    assert first[""].equal(kept)
    assert not cap.activations[""].equal(kept)


def test_the_meta_device_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """On meta a capture failed mid-forward as a probe error (``Cannot copy out of meta
    tensor``) and left an interrupted index; ``to="meta"`` kept tensors of no values."""
    model = nn.Linear(2, 2)
    with pytest.raises(hookscope.SpecError, match="meta device has shapes but no values"):
        hookscope.capture(model, torch.randn(1, 2), select="<root>", to="meta")
    with pytest.raises(hookscope.SpecError, match="meta device"):
        hookscope.capture(model, torch.randn(1, 2, device="meta"), select="<root>")
    with pytest.raises(hookscope.SpecError, match="meta device"):
        hookscope.capture(model.to("meta"), torch.randn(1, 2, device="meta"),
                          select="<root>", save_to=tmp_path / "acts")
    assert not (tmp_path / "acts").exists()


def test_a_capture_inside_vmap_is_refused_not_a_leaked_batch_wrapper(tmp_path: Path) -> None:
    """Around ``torch.func.vmap(model)(x)`` the capture kept vmap's wrapper of one
    sample (shape [4] for a batch of [3, 4]), which no op could use after the block,
    and ``save_to`` failed in safetensors."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    x = torch.randn(3, 4)
    for save in ({}, {"save_to": tmp_path / "c"}):
        with pytest.raises(hookscope.ProbeError, match=r"inside torch\.func\.vmap") as e, \
                hookscope.Capture(model, select="0", **save):
            torch.func.vmap(model)(x)
        assert isinstance(e.value.__cause__, hookscope.SpecError)
        assert total_hooks(model) == 0
    with hookscope.Capture(model, select="0") as cap:  # other transforms: copies that work
        torch.func.grad(lambda w: model(w).sum())(x)
    with torch.no_grad():
        assert torch.equal(cap.activations["0"], model[0](x))
