"""Interventions (issue 11): patched outputs equal the expected computation; the seed's
Function_A..D made linear through patches, checked against ``nn.Linear``; ready-made
functions against hand-written oracles; gradient patches against autograd; nested
blocks compose in the documented order; a Tracer inside a patch block records the
patched values; every hook is removed, also on exceptions."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, NamedTuple

import pytest
import torch
from torch import nn

import hookscope
import zoo
from helpers import assert_state_unchanged, snapshot_state, total_hooks
from hookscope import patches
from hookscope.examples import Function_A, Function_B, Function_C, Function_D, seed_model

FUNCTIONS = (Function_A, Function_B, Function_C, Function_D)


def _weight(module: nn.Module) -> torch.Tensor:
    return module.W if hasattr(module, "W") else module.W1  # Function_B's is W1


def make_linear(model: nn.Module, weight: torch.Tensor, bias: torch.Tensor) -> None:
    """The seed's ``apply`` steps: each Function gets a 2x2 ``W`` and a new ``b``."""
    for module in model.modules():
        if isinstance(module, FUNCTIONS):
            name = "W" if hasattr(module, "W") else "W1"
            setattr(module, name, nn.Parameter(weight.clone()))
            module.b = nn.Parameter(bias.clone())


def linear(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> torch.Tensor:
    return inputs[0] @ _weight(module).T + module.b


@pytest.mark.parametrize("values", ["ones", "random"])
def test_seed_functions_compute_a_linear_transform_through_patches(values: str) -> None:
    gen = torch.Generator().manual_seed(3)
    if values == "ones":  # the seed's exercise
        weight, bias = torch.ones(2, 2), torch.ones(2)
    else:  # a stronger check: W and b that are not symmetric
        weight, bias = torch.randn(2, 2, generator=gen), torch.randn(2, generator=gen)
    model = seed_model()
    make_linear(model, weight, bias)
    x = torch.randn(2, 2, generator=gen)
    oracle = nn.Linear(2, 2)
    with torch.no_grad():
        oracle.weight.copy_(weight)
        oracle.bias.copy_(bias)
    with hookscope.patch(model, {FUNCTIONS: linear}):
        got = model(x)
    torch.testing.assert_close(got, oracle(oracle(oracle(oracle(x)))))
    assert total_hooks(model) == 0
    assert not torch.allclose(model(x), got)  # unpatched again: x + W - W1 ...


def test_patched_output_equals_the_expected_computation() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    x = torch.randn(3, 4)
    before = snapshot_state(model)
    with hookscope.patch(model, {"0": lambda m, i, out: out * 2 + 1}):
        got = model(x)
    with torch.no_grad():
        expected = model[2](torch.relu(model[0](x) * 2 + 1))
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert_state_unchanged(before, model)


def test_none_keeps_the_output_and_inputs_can_be_patched() -> None:
    model = nn.Sequential(nn.Identity(), nn.Identity())
    x = torch.randn(3)
    with hookscope.patch(model, {"0": lambda m, i, out: None}):
        assert torch.equal(model(x), x)
    with hookscope.patch_inputs(model, {"1": lambda m, args, kwargs: (args[0] * 3,)}):
        assert torch.equal(model(x), x * 3)
    with hookscope.patch_inputs(model, {"1": lambda m, args, kwargs: args[0] - 1}):
        assert torch.equal(model(x), x - 1)


@pytest.mark.parametrize("ready_made", [patches.zero(), patches.clamp(-0.1, 0.1),
                                        patches.scale_grad(2.0)])
def test_patch_inputs_refuses_a_ready_made_patch_of_outputs(ready_made: Any) -> None:
    """It was called with (module, args, kwargs), mapped over the kwargs and replaced the
    input with {}: silently wrong, or a TypeError deep in the model."""
    model = nn.Sequential(nn.Identity(), nn.Linear(2, 2))
    with pytest.raises(hookscope.SpecError, match=r"ready-made patch of outputs"):
        hookscope.patch_inputs(model, {"0": ready_made})
    assert total_hooks(model) == 0


class _TakesADict(nn.Module):
    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return batch["x"] * 2


def test_patch_inputs_may_return_one_dict_as_the_new_first_argument() -> None:
    model = nn.Sequential(_TakesADict())
    x = torch.ones(3)
    with hookscope.patch_inputs(model, {"0": lambda m, args, kwargs: {"x": args[0]["x"] * 0}}):
        assert torch.equal(model({"x": x}), torch.zeros(3))
    assert torch.equal(model({"x": x}), x * 2) and total_hooks(model) == 0


def test_ready_made_functions_against_oracles() -> None:
    model = nn.Sequential(nn.Identity())
    x = torch.randn(2, 4, 3, 3)
    cases = {
        "zero": (patches.zero(), torch.zeros_like(x)),
        "zero-channels": (patches.zero([1, 3]),
                          x * torch.tensor([1.0, 0, 1, 0]).view(1, 4, 1, 1)),
        "ablate-positions": (patches.ablate(0, dim=2),
                             torch.cat([torch.zeros_like(x[:, :, :1]), x[:, :, 1:]], 2)),
        "scale": (patches.scale(0.5), x * 0.5),
        "clamp": (patches.clamp(-0.1, 0.2), x.clamp(-0.1, 0.2)),
        "noise": (patches.noise(0.3, seed=4),
                  x + 0.3 * torch.randn(x.shape, generator=torch.Generator().manual_seed(4))),
        "replace": (patches.replace_with(torch.ones_like(x)), torch.ones_like(x)),
    }
    for name, (fn, expected) in cases.items():
        with hookscope.patch(model, {"0": fn}):
            assert torch.equal(model(x), expected), name
    rng = torch.get_rng_state()
    with hookscope.patch(model, {"0": patches.noise(1.0)}):
        model(x)
    assert torch.equal(torch.get_rng_state(), rng)  # seeded noise leaves torch's RNG


def test_activation_patching_replaces_with_the_captured_call() -> None:
    model = zoo.build(zoo.SharedModule)
    (x,), _ = zoo.SharedModule.example_inputs()
    clean = hookscope.capture(model, x, select="fc")
    with hookscope.patch(model, {"fc": patches.replace_with(clean)}):
        acts = hookscope.capture(model, x + 1, select="fc")
    assert torch.equal(acts["fc"], clean["fc"]) and torch.equal(acts["fc#1"], clean["fc#1"])
    with pytest.raises(hookscope.ProbeError, match="shape"), \
            hookscope.patch(model, {"fc": patches.replace_with(torch.ones(9))}):
        model(x)
    assert total_hooks(model) == 0


def test_a_patch_error_the_loop_caught_is_not_raised_again_at_the_end() -> None:
    """A loop that skips the batch a patch function refused, and goes on: leaving the
    block raised the same ProbeError again."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)).eval()

    def picky(module: nn.Module, inputs: Any, output: torch.Tensor) -> torch.Tensor:
        if inputs[0].shape[0] == 1:
            raise ValueError("batch of one not supported")
        return output * 0

    skipped, outputs = [], []
    with torch.no_grad(), hookscope.patch(model, {"0": picky}):
        for x in (torch.randn(1, 4), torch.randn(3, 4)):
            try:
                outputs.append(model(x))
            except hookscope.ProbeError:
                skipped.append(x.shape[0])
    with torch.no_grad():
        expected = model[2](model[1](torch.zeros(3, 4)))
    assert skipped == [1] and torch.equal(outputs[0], expected)
    assert total_hooks(model) == 0


def test_replace_with_on_a_second_forward_in_one_block_says_why() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    clean = hookscope.capture(model, torch.randn(1, 2), select="0")
    with pytest.raises(hookscope.ProbeError, match="enter one block per forward"), \
            hookscope.patch(model, {"0": patches.replace_with(clean)}):
        model(torch.randn(1, 2))
        model(torch.randn(1, 2))


def test_a_model_writing_into_the_replacement_leaves_the_stored_value() -> None:
    """ResNet's ``out += identity`` and ``ReLU(inplace=True)`` wrote into the captured
    tensor handed to it: the capture changed, and the same patched run gave another
    output the second time."""
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    clean, corrupt = torch.randn(1, 3, 32, 32), torch.randn(1, 3, 32, 32)
    acts = hookscope.capture(model, clean, select="layer1.0.bn2")
    stored = acts["layer1.0.bn2"].clone()
    pair = (stored.clone(), stored.clone())
    with torch.no_grad():
        with hookscope.patch(model, {"layer1.0.bn2": lambda m, i, o: stored.clone()}):
            oracle = model(corrupt)
        for source in (acts, stored.clone()):
            patch = {"layer1.0.bn2": patches.replace_with(source)}
            for _ in range(2):
                with hookscope.patch(model, patch):
                    assert torch.equal(model(corrupt), oracle)
        assert torch.equal(acts["layer1.0.bn2"], stored)
        nested = patches.replace_with(pair)  # a nested value: each tensor copied too
        live = (torch.zeros_like(stored), torch.zeros_like(stored))  # what the model returned
        out = nested(nn.Identity(), (corrupt,), live, call=acts_call(model))
        out[0].add_(1.0)
        assert torch.equal(pair[0], stored)


def acts_call(model: nn.Module) -> Any:
    """A call record to hand a patch function directly."""
    trace = hookscope.trace(model, torch.randn(1, 3, 32, 32), time=False, stats=False,
                            memory=False)
    return trace.calls[0]


def test_gradient_patches_leave_values_and_change_gradients() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(inplace=True), nn.Linear(3, 1))
    x = torch.randn(5, 3, requires_grad=True)
    (plain_grad,) = torch.autograd.grad(model(x).sum(), [x])
    with hookscope.patch(model, {"0": patches.scale_grad(-2.0)}):
        out = model(x)
        (scaled,) = torch.autograd.grad(out.sum(), [x])
    assert torch.equal(out, model(x))  # forward values are bit-identical
    torch.testing.assert_close(scaled, -2.0 * plain_grad)
    with hookscope.patch(model, {"2": patches.clip_grad(1e-3)}):
        (clipped,) = torch.autograd.grad(model(x).sum(), [x])
    # d out/d h2 is 1 per row; clipped to 1e-3, so every gradient shrinks by 1000
    torch.testing.assert_close(clipped, plain_grad * 1e-3)
    with hookscope.patch(model, {"2": patches.clip_grad(0.5, norm=True)}):
        (normed,) = torch.autograd.grad(model(x).sum(), [x])
    torch.testing.assert_close(normed, plain_grad * 0.5 / 5 ** 0.5)


def test_nested_blocks_compose_outer_first() -> None:
    model = nn.Sequential(nn.Identity())
    x = torch.ones(2)
    with hookscope.patch(model, {"0": lambda m, i, out: out + 1}), \
            hookscope.patch(model, {"0": lambda m, i, out: out * 10}):
        assert torch.equal(model(x), (x + 1) * 10)
    with hookscope.patch(model, {"0": lambda m, i, out: out + 1, "?": lambda m, i, o: o * 10}):
        assert torch.equal(model(x), (x + 1) * 10)  # one mapping: in mapping order
    assert total_hooks(model) == 0


def test_a_tracer_inside_a_patch_block_records_the_patched_values() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Identity())
    x = torch.randn(3, 2)
    with hookscope.patch(model, {"0": patches.zero()}):
        trace = hookscope.trace(model, x, stats=True)
        with hookscope.Tracer(model, stats=True) as tracer:
            model(x)
        acts = hookscope.capture(model, x, select="0")
    assert tracer.trace is not None
    for t in (trace, tracer.trace):
        assert t["0"].stats[0].max == 0.0 and t["0"].stats[0].min == 0.0
    assert torch.equal(acts["0"], torch.zeros(3, 2))


def test_a_tracer_entered_before_the_patch_records_the_patched_values() -> None:
    """A replacing-only tracer (the patch) puts its hook before every recording
    tracer's, whichever was entered first (core/engine/module_hooks.py)."""
    model = nn.Sequential(nn.Linear(2, 2), nn.Identity())
    with hookscope.Tracer(model, stats=True) as tracer, \
            hookscope.patch(model, {"0": patches.zero()}):
        model(torch.randn(3, 2))
    assert tracer.trace is not None and tracer.trace["0"].stats[0].max == 0.0


def test_patches_are_removed_on_exceptions_and_by_the_handle() -> None:
    model = zoo.build(zoo.RaisingModel)
    args, kwargs = zoo.RaisingModel.example_inputs()
    before = snapshot_state(model)
    with pytest.raises(RuntimeError), hookscope.patch(model, {"stem": patches.scale(2.0)}):
        model(*args, **kwargs)
    assert_state_unchanged(before, model)
    handle = hookscope.patch(model, {"stem": patches.zero()})
    assert total_hooks(model) > 0
    handle.remove()
    handle.remove()  # idempotent
    assert total_hooks(model) == 0


@pytest.mark.parametrize(
    ("fns", "match"),
    [({}, "non-empty mapping"), ({"nope": patches.zero()}, "matches no module"),
     ({"0": 3}, "must be a function"), ({5: patches.zero()}, "selector")],
)
def test_bad_patches_are_spec_errors(fns: Any, match: str) -> None:
    with pytest.raises(hookscope.SpecError, match=match):
        hookscope.patch(nn.Sequential(nn.Identity()), fns)


class _Pair(NamedTuple):
    a: torch.Tensor
    b: torch.Tensor


@dataclasses.dataclass
class _Out:
    hidden: torch.Tensor
    note: object


class _PairLinear(nn.Linear):
    def forward(self, x: torch.Tensor) -> _Pair:  # type: ignore[override]
        y = super().forward(x)
        return _Pair(y, -y)


class _OutLinear(nn.Linear):
    def forward(self, x: torch.Tensor) -> _Out:  # type: ignore[override]
        return _Out(super().forward(x), note=object())


class _Structured(nn.Module):
    """Its children return a namedtuple and a dataclass holding a non-tensor object."""

    def __init__(self) -> None:
        super().__init__()
        self.pair, self.out = _PairLinear(3, 3), _OutLinear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.pair(x).a * 3).hidden * 2


def _structured() -> nn.Module:
    torch.manual_seed(0)
    return _Structured()


@pytest.mark.parametrize("where", ["memory", "disk"])
def test_replace_with_a_capture_gives_the_model_its_own_classes(
    where: str, tmp_path: Any
) -> None:
    """From disk, a namedtuple came back as a tuple, a dataclass as its fields and a
    ModelOutput as a dict: ``.a``, ``.hidden`` and ``.last_hidden_state`` then broke."""
    model = _structured()
    clean_x, x = torch.randn(2, 3), torch.randn(2, 3)
    save = {"save_to": tmp_path / "c"} if where == "disk" else {}
    stored = hookscope.capture(model, clean_x, select=["pair", "out"], **save)
    with torch.no_grad():
        clean = model(clean_x)
    with hookscope.patch(model, {"pair": patches.replace_with(stored),
                                 "out": patches.replace_with(stored)}), torch.no_grad():
        got = model(x)
    assert torch.equal(got, clean)
    with hookscope.patch(model, {"pair": patches.replace_with(stored)}), torch.no_grad():
        out = model.pair(x)
    assert type(out) is _Pair and torch.equal(out.b, -out.a)
    with hookscope.patch(model, {"out": patches.replace_with(stored)}), torch.no_grad():
        out2 = model.out(x)
    assert type(out2) is _Out and out2.note is not None


@pytest.mark.parametrize("where", ["memory", "disk"])
def test_replace_with_a_capture_of_a_transformers_model(where: str, tmp_path: Any) -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100)
    model = transformers.GPT2LMHeadModel(config).eval()
    clean_ids, ids = torch.randint(0, 100, (1, 6)), torch.randint(0, 100, (1, 6))
    save = {"save_to": tmp_path / "c"} if where == "disk" else {}
    stored = hookscope.capture(model, clean_ids, select="transformer", **save)
    with torch.no_grad():
        clean = model(clean_ids).logits
    with hookscope.patch(model, {"transformer": patches.replace_with(stored)}), \
            torch.no_grad():
        got = model(ids)
    assert type(got).__name__ == "CausalLMOutputWithCrossAttentions"
    assert torch.equal(got.logits, clean)


@pytest.mark.parametrize("order", ["capture outside", "capture inside"])
def test_patched_inputs_are_recorded_whichever_block_was_entered_first(order: str) -> None:
    """A Capture entered before ``patch_inputs`` recorded the input ``forward`` never
    received, beside the output computed from the patched one."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 2))
    x = torch.randn(4, 3)

    def half_zeros(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return (torch.zeros_like(args[0][:2]),)

    capture = hookscope.Capture(model, select="2", what="both")
    tracer = hookscope.Tracer(model, time=False, stats=False, memory=False)
    if order == "capture outside":  # (a patch is active as soon as it is made)
        with capture, tracer, hookscope.patch_inputs(model, {"2": half_zeros}):
            model(x)
    else:
        with hookscope.patch_inputs(model, {"2": half_zeros}), capture, tracer:
            model(x)
    got = capture.activations["2"]
    assert torch.equal(got["input"].args[0], torch.zeros(2, 3))
    assert torch.equal(got["output"], model[2].bias.detach().expand(2, 2))
    assert tracer.trace is not None
    call = next(c for c in tracer.trace.calls if c.path == "2")
    assert [m.shape for m in call.inputs] == [(2, 3)]


@pytest.mark.parametrize(("make", "says"), [
    (lambda: patches.noise(-1), "std must be a number >= 0"),
    (lambda: patches.scale("a"), "factor must be a number"),
    (lambda: patches.zero("a"), "an integer or a list of integers"),
    (lambda: patches.zero([1.5]), "an integer or a list of integers"),
    (lambda: patches.zero(dim="x"), "dim= must be an integer"),
    (lambda: patches.clamp(2, 1), "lower=2 is above upper=1"),
    (lambda: patches.scale_grad(None), "factor must be a number"),
    (lambda: patches.clip_grad("1"), "limit must be a number > 0, got '1'"),
    (lambda: patches.clip_grad(None), "limit must be a number > 0, got None"),
    (lambda: patches.clip_grad(True), "limit must be a number > 0, got True"),
    (lambda: patches.clip_grad(0), "limit must be a number > 0, got 0"),
    (lambda: patches.clip_grad(torch.tensor([1.0, 2.0])), "limit must be one number"),
    (lambda: patches.clamp(torch.tensor([0.0, 3.0]), torch.tensor([1.0, 2.0])),
     "is above upper"),
    (lambda: patches.clamp(torch.zeros(2), torch.ones(3)), "do not broadcast"),
])
def test_ready_made_functions_check_their_arguments_when_made(make: Any, says: str) -> None:
    """``noise(-1)``, ``scale("a")``, ``zero("a")`` were accepted and failed mid-forward."""
    with pytest.raises(hookscope.SpecError, match=re.escape(says)):
        make()


def test_an_index_outside_the_output_names_the_dimension_asked_for() -> None:
    """``zero([7])`` on 5 channels said "index 7 is out of bounds for dimension 0"."""
    model = nn.Conv2d(3, 5, 1)
    with hookscope.patch(model, {"<root>": patches.zero([7])}), \
            pytest.raises(hookscope.ProbeError, match=r"index 7 is out of range for "
                                                      r"dimension 1 of size 5"):
        model(torch.randn(1, 3, 4, 4))


def test_indices_and_numbers_may_be_tensors_and_numpy_values() -> None:
    """The argument checks refused ``zero(scores.topk(2).indices)`` and numpy values,
    which the functions take."""
    np = pytest.importorskip("numpy")
    model = nn.Conv2d(3, 6, 1)
    x = torch.randn(1, 3, 2, 2)
    for index, zeroed in ((torch.tensor([1, 5]), {1, 5}), (np.array([1, 5]), {1, 5}),
                          ([np.int64(2)], {2}), (torch.tensor(4), {4})):
        with hookscope.patch(model, {"<root>": patches.zero(index, dim=np.int64(1))}), \
                torch.no_grad():
            out = model(x)
        assert {i for i in range(6) if not out[0, i].any()} == zeroed, index
    with hookscope.patch(model, {"<root>": patches.scale(np.float32(2.0))}), torch.no_grad():
        doubled = model(x)
    with torch.no_grad():
        assert torch.equal(doubled, model(x) * 2)
    patches.noise(np.float32(0.1))  # accepted


class _Max(nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return torch.max(x, dim=1)  # a torch.return_types structseq


class _UsesMax(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.m = _Max()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.m(x).values  # type: ignore[no-any-return]


@pytest.mark.parametrize("where", ["memory", "disk"])
def test_replace_with_keeps_torch_return_types_and_model_outputs_of_other_fields(
    where: str, tmp_path: Any
) -> None:
    """From disk, ``torch.max(x, dim)`` came back a tuple (``.values`` broke), and a
    ModelOutput whose set fields differed from this call's came back a dict."""
    x = torch.randn(3, 2)
    model = _UsesMax()
    save = {"save_to": tmp_path / "a"} if where == "disk" else {}
    stored = hookscope.capture(model, x, select="m", **save)
    with hookscope.patch(model, {"m": patches.replace_with(stored)}), torch.no_grad():
        assert torch.equal(model(torch.randn(3, 2)), x.max(dim=1).values)
    outputs = pytest.importorskip("transformers.modeling_outputs")

    class Pooled(nn.Module):
        def forward(self, h: torch.Tensor, pool: bool = True) -> Any:
            return outputs.BaseModelOutputWithPooling(
                last_hidden_state=h * 2, pooler_output=h.mean(0) if pool else None)

    class Holder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.p = Pooled()

        def forward(self, h: torch.Tensor, pool: bool = True) -> Any:
            return self.p(h, pool)

    holder = Holder()
    save = {"save_to": tmp_path / "b"} if where == "disk" else {}
    stored = hookscope.capture(holder, x, select="p", **save)
    with hookscope.patch(holder, {"p": patches.replace_with(stored)}), torch.no_grad():
        out = holder(torch.randn(3, 2), pool=False)
    assert type(out) is outputs.BaseModelOutputWithPooling
    assert torch.equal(out.last_hidden_state, x * 2) and torch.equal(out.pooler_output,
                                                                       x.mean(0))


def test_a_range_is_an_index_and_a_fraction_is_not_a_factor() -> None:
    """``zero(range(3))`` was refused by the checks made for it; ``scale(Fraction(1, 2))``
    was accepted, then failed mid-forward (tensors take no Fraction)."""
    from fractions import Fraction

    model = nn.Conv2d(3, 6, 1)
    with hookscope.patch(model, {"<root>": patches.zero(range(3))}), torch.no_grad():
        out = model(torch.randn(1, 3, 2, 2))
    assert [i for i in range(6) if not out[0, i].any()] == [0, 1, 2]
    with pytest.raises(hookscope.SpecError, match="factor must be a number"):
        patches.scale(Fraction(1, 2))


class _SharedAtTwoPaths(nn.Module):
    """One Linear registered as ``a`` and as ``blocks.0`` and ``blocks.2``."""

    def __init__(self) -> None:
        super().__init__()
        shared = nn.Linear(4, 4)
        self.a = shared
        self.blocks = nn.ModuleList([shared, nn.ReLU(), shared])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.a(x)


def test_a_module_registered_at_several_paths_is_chosen_by_any_of_them() -> None:
    """Only its first path matched: select='blocks.0' was 'matches no module', and
    'blocks.*' silently left out the shared Linear."""
    torch.manual_seed(0)
    model, x = _SharedAtTwoPaths(), torch.randn(3, 4)
    assert model.get_submodule("blocks.0") is model.a
    trace = hookscope.trace(model, x, select="blocks.0")
    assert [c.name for c in trace.calls] == ["a", "a#1", "a#2"]  # the module, by its name
    assert sorted(hookscope.capture(model, x, select="blocks.*")) == ["a", "a#1", "a#2",
                                                                     "blocks.1"]
    with torch.no_grad(), hookscope.patch(model, {"blocks.2": patches.zero()}):
        patched = model(x)
    assert torch.equal(patched, torch.zeros_like(patched))  # its last call: zeros
    assert total_hooks(model) == 0


def test_zero_gives_exact_zeros_where_the_output_is_inf_or_nan() -> None:
    """``zero()`` was ``scale(0.0)``: ``-inf * 0`` (a causal mask's scores) and
    ``NaN * 0`` are NaN, not 0."""
    model = nn.Sequential(nn.Identity())
    x = torch.randn(2, 3, 4)
    x[0, 1, 2], x[1, 0, 0], x[1, 2, 3] = float("-inf"), float("nan"), float("inf")
    cases = {
        "zero": (patches.zero(), torch.zeros_like(x)),
        "zero-rows": (patches.zero([0, 2]), x.index_fill(1, torch.tensor([0, 2]), 0.0)),
        "ablate-last": (patches.ablate(-1, dim=2), x.index_fill(2, torch.tensor([3]), 0.0)),
    }
    for name, (fn, expected) in cases.items():
        for dtype in (torch.float32, torch.bfloat16):
            with hookscope.patch(model, {"0": fn}):
                got = model(x.to(dtype))
            # exact, and a NaN that was not zeroed stays NaN (the dtype is checked too)
            torch.testing.assert_close(got, expected.to(dtype), rtol=0, atol=0,
                                       equal_nan=True, msg=f"{name}, {dtype}")


def test_a_zeroed_position_passes_a_zero_gradient_back() -> None:
    """As with ``t * 0``: the output stays in the graph, and positions that were zeroed
    give no gradient to what computed them (autograd on plain torch as the oracle)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Identity())
    x = torch.randn(3, 4, requires_grad=True)
    for fn, oracle in ((patches.zero(), lambda h: h * 0),
                       (patches.zero([1, 3]), lambda h: h.index_fill(1, torch.tensor([1, 3]),
                                                                      0.0))):
        with hookscope.patch(model, {"0": fn}):
            out = model(x)
        (got,) = torch.autograd.grad((out * torch.arange(4.0)).sum(), [x])
        (want,) = torch.autograd.grad((oracle(model[0](x)) * torch.arange(4.0)).sum(), [x])
        assert torch.equal(got, want)
    assert total_hooks(model) == 0


def test_clamp_takes_tensor_bounds_and_clip_grad_one_element_limits() -> None:
    """``clamp`` documents tensor bounds, but a bound of several values raised
    "Boolean value of Tensor ... is ambiguous" in its lower > upper check (and a tensor
    beside a number, or a float32 bound on a bfloat16 output, failed or changed dtype)."""
    model = nn.Sequential(nn.Identity())
    x = torch.randn(2, 3) * 3
    lower, upper = torch.tensor([-1.0, 0.0, 0.5]), torch.tensor([1.0, 0.5, 2.0])
    for bounds in ((lower, upper), (lower, 1.5), (None, upper)):
        for dtype in (torch.float32, torch.bfloat16):
            with hookscope.patch(model, {"0": patches.clamp(*bounds)}):
                got = model(x.to(dtype))
            want = x.to(dtype)  # the oracle: max with the lower, min with the upper bound
            if bounds[0] is not None:
                want = torch.maximum(want, torch.as_tensor(bounds[0], dtype=dtype))
            want = torch.minimum(want, torch.as_tensor(bounds[1], dtype=dtype))
            assert got.dtype == dtype and torch.equal(got, want), (bounds, dtype)
    with hookscope.patch(model, {"0": patches.clamp(torch.zeros(4))}), \
            pytest.raises(hookscope.ProbeError, match=r"bound of shape \[4\] does not "
                                                      r"broadcast to the output's shape \[2, 3\]"):
        model(x)
    y = torch.randn(5, 3, requires_grad=True)
    with hookscope.patch(model, {"0": patches.clip_grad(torch.tensor(1e-3))}):
        (clipped,) = torch.autograd.grad((model(y) * 5).sum(), [y])
    assert torch.equal(clipped, torch.full((5, 3), 1e-3))  # d/dy of 5 * y, clipped


@dataclasses.dataclass
class _Hidden:
    hidden: torch.Tensor


class _HiddenLinear(nn.Linear):
    def forward(self, x: torch.Tensor) -> _Hidden:  # type: ignore[override]
        return _Hidden(super().forward(x))


class _UsesHidden(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner, self.post = _HiddenLinear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.post(self.inner(x).hidden)  # type: ignore[no-any-return]


@pytest.mark.parametrize("where", ["memory", "disk"])
def test_replace_with_a_dataclass_checks_shapes_and_casts_in_memory_as_on_disk(
    where: str, tmp_path: Any
) -> None:
    """From memory, a dataclass's tensors were returned as stored: a batch of 3 went on
    through a model given a batch of 5, and a float32 value into a bfloat16 model."""
    torch.manual_seed(0)
    model, clean = _UsesHidden(), torch.randn(3, 4)
    save = {"save_to": tmp_path / "c"} if where == "disk" else {}
    stored = hookscope.capture(model, clean, select="inner", **save)
    with pytest.raises(hookscope.ProbeError, match=r"has shape \[3, 4\], the output has "
                                                   r"\[5, 4\]"), torch.no_grad(), \
            hookscope.patch(model, {"inner": patches.replace_with(stored)}):
        model(torch.randn(5, 4))
    half = _UsesHidden()
    half.load_state_dict(model.state_dict())
    half.to(torch.bfloat16)
    with torch.no_grad():
        hidden = nn.functional.linear(clean, model.inner.weight, model.inner.bias)
        want = half.post(hidden.to(torch.bfloat16))
        with hookscope.patch(half, {"inner": patches.replace_with(stored)}):
            got = half(torch.randn(3, 4, dtype=torch.bfloat16))
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    assert total_hooks(half) == 0


@pytest.mark.parametrize("where", ["memory", "disk"])
def test_replace_with_a_capture_of_inputs_is_refused_and_of_both_uses_the_output(
    where: str, tmp_path: Any
) -> None:
    """A ``what="input"`` capture's ``ModuleInputs`` (and a ``"both"`` capture's dict)
    was returned as the module's output: a TypeError in the next module."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    clean, corrupt = torch.randn(3, 4), torch.randn(3, 4)
    saves = ({"save_to": tmp_path / w} if where == "disk" else {} for w in ("i", "b"))
    inputs = hookscope.capture(model, clean, select="0", what="input", **next(saves))
    with pytest.raises(hookscope.SpecError, match=r"what='input'.*patch_inputs"):
        patches.replace_with(inputs)
    with pytest.raises(hookscope.SpecError, match=r"what='input'"):
        patches.replace_with(inputs["0"])
    both = hookscope.capture(model, clean, select="0", what="both", **next(saves))
    with torch.no_grad():
        want = model[2](torch.relu(nn.functional.linear(clean, model[0].weight,
                                                        model[0].bias)))
        for source in (both, both["0"]):
            with hookscope.patch(model, {"0": patches.replace_with(source)}):
                assert torch.equal(model(corrupt), want)
    assert total_hooks(model) == 0


@pytest.mark.parametrize("where", ["memory", "disk"])
def test_replace_with_a_model_output_reaches_a_parent_that_indexes_it(
    where: str, tmp_path: Any
) -> None:
    """From memory, the ModelOutput given back had the stored tensor in its attribute
    but the model's own in its items: a parent reading ``out[0]`` (T5 reads
    ``encoder_outputs[0]``) ran on the live value, silently. The oracle: a forward
    hook of the user's returning a ModelOutput of the stored tensor."""
    outputs = pytest.importorskip("transformers.modeling_outputs")

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> Any:
            return outputs.BaseModelOutput(last_hidden_state=self.lin(x))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc, self.head = Encoder(), nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.enc(x)
            return torch.cat([self.head(out[0]), self.head(out["last_hidden_state"]),
                              self.head(out.last_hidden_state)])

    torch.manual_seed(0)
    net = Net().eval()
    clean_x, x = torch.randn(2, 4), torch.randn(2, 4)
    save = {"save_to": tmp_path / "c"} if where == "disk" else {}
    stored = hookscope.capture(net, clean_x, select="enc", **save)
    kept = stored["enc"]["last_hidden_state"].clone()  # a dict, read from disk
    handle = net.enc.register_forward_hook(
        lambda m, a, out: outputs.BaseModelOutput(last_hidden_state=kept.clone()))
    with torch.no_grad():
        want = net(x)
    handle.remove()
    with hookscope.patch(net, {"enc": patches.replace_with(stored)}), torch.no_grad():
        got = net(x)
    assert torch.equal(got, want)
    with hookscope.patch(net, {"enc": patches.replace_with(stored["enc"])}), \
            torch.no_grad():
        assert torch.equal(net(x), want)  # a value rather than a capture
    with torch.no_grad():
        assert not torch.equal(net(x), want)  # the patch is gone
