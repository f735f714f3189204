"""hookscope.compare: per-call errors of two runs against hand-written hooks and hand
computations (the oracles), where the error starts, memory, and the models left as
they were."""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
import zoo
from helpers import assert_state_unchanged, snapshot_state, tensors_in
from hookscope.compare import compare
from hookscope.errors import ModelRunError, SpecError


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(6, 16), nn.Tanh(),
        nn.Sequential(nn.Linear(16, 16), nn.Tanh()),
        nn.Linear(16, 4),
    ).eval()


def _hand_outputs(model: nn.Module, run: Any) -> dict[tuple[str, int], list[torch.Tensor]]:
    """Every module's outputs per call, recorded with plain forward hooks (cloned at the
    hook, as an in-place op after the call would change them)."""
    seen: dict[tuple[str, int], list[torch.Tensor]] = {}
    count: dict[str, int] = defaultdict(int)
    handles = []
    for path, module in model.named_modules():
        def hook(m: nn.Module, args: Any, out: Any, path: str = path) -> None:
            seen[(path, count[path])] = [t.detach().clone() for t in tensors_in(out)]
            count[path] += 1
        handles.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad():
            run()
    finally:
        for h in handles:
            h.remove()
    return seen


def _hand_inputs(model: nn.Module, run: Any) -> dict[tuple[str, int], torch.Tensor]:
    """Every module's first positional input per call, cloned when the call starts."""
    seen: dict[tuple[str, int], torch.Tensor] = {}
    count: dict[str, int] = defaultdict(int)
    handles = []
    for path, module in model.named_modules():
        def hook(m: nn.Module, args: Any, path: str = path) -> None:
            seen[(path, count[path])] = args[0].detach().clone()
            count[path] += 1
        handles.append(module.register_forward_pre_hook(hook))
    try:
        with torch.no_grad():
            run()
    finally:
        for h in handles:
            h.remove()
    return seen


def _by_hand(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float, float, float]:
    x, y = a.double(), b.double()
    d = (x - y).abs()
    max_abs = d.max().item()
    max_rel = max_abs / x.abs().max().item()
    cosine = torch.nn.functional.cosine_similarity(x.flatten(), y.flatten(), dim=0).item()
    from torch.ao.ns.fx.utils import compute_sqnr

    sqnr = compute_sqnr(a.float(), b.float()).item()
    return max_abs, max_rel, cosine, sqnr


def test_a_model_against_itself_has_no_error_anywhere() -> None:
    model, x = _mlp(), torch.randn(5, 6)
    result = compare(model, None, x)
    assert result.first is None
    calls = _hand_outputs(model, lambda: model(x))
    assert {(r.path, r.call_index) for r in result.rows} == set(calls)
    for r in result.rows:
        assert (r.max_abs, r.max_rel, r.cosine, r.sqnr_db) == (0.0, 0.0, 1.0, math.inf)
        assert r.introduced_max_abs == 0.0
    assert not result.only_a and not result.only_b
    assert str(result).splitlines()[0].startswith("Side A and side B agree exactly")


def test_one_perturbed_layer_is_named_first_and_its_error_propagates() -> None:
    model, x = _mlp(), torch.randn(5, 6)
    other = copy.deepcopy(model)
    delta = torch.full_like(other[2][0].weight, 0.01)
    with torch.no_grad():
        other[2][0].weight += delta
    result = compare(model, other, x)
    assert result.first is not None and result.first.path == "2.0"
    # by hand: the layer's input on side A, through the perturbed weight
    calls = _hand_outputs(model, lambda: model(x))
    layer_in = calls[("1", 0)][0]
    expected = (layer_in @ delta.T).abs().max().item()
    assert result.row("2.0").introduced_max_abs == pytest.approx(expected, rel=1e-5)
    for path in ("0", "1"):  # before it: nothing
        assert result.row(path).max_abs == 0.0
    for path in ("2.1", "3"):  # after it: the error came in with the inputs
        row = result.row(path)
        assert row.max_abs > 1e-4 and row.introduced_max_abs == 0.0
        assert row.origin(result.tolerance) == "propagated"
    assert result.row("2.0").origin(result.tolerance) == "introduced"


def test_first_is_the_first_call_to_end_not_the_block_that_passes_its_output_on() -> None:
    """Cast to bfloat16, a model whose root returns what its last layer returned: the
    root's re-run gives back that layer's side A output rounded to bfloat16, so the
    root's introduced error is above the tolerance too, but it ends after the layers
    inside it; the first is the layer that ended first with an error of its own: the
    embedding, whose bfloat16 weights are where the values part (by hand: the rows
    looked up, rounded)."""

    class Tagger(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(10, 8)
            self.proj = nn.Linear(8, 8)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return self.proj(self.embed(tokens))

    torch.manual_seed(0)
    model, tokens = Tagger(), torch.tensor([[1, 2, 3]])
    result = compare(model, None, tokens, b_dtype=torch.bfloat16)
    root = result.row("")
    assert root.introduced_max_abs is not None and root.introduced_max_abs > result.tolerance
    assert result.first is not None and result.first.path == "embed"
    rows = model.embed.weight.detach()[tokens]
    expected = (rows - rows.to(torch.bfloat16).float()).abs().max().item()
    assert result.first.introduced_max_abs == pytest.approx(expected, rel=1e-6)
    assert "first differs at 'embed'" in str(result)


def _assert_rows_match_hand(result: Any, a: dict[Any, list[torch.Tensor]],
                            b: dict[Any, list[torch.Tensor]]) -> int:
    checked = 0
    for row in result.rows:
        key = (row.path, row.call_index)
        pairs = [(x, y) for x, y in zip(a[key], b[key], strict=True) if x.is_floating_point()]
        if not pairs:
            continue
        hand = [_by_hand(x, y) for x, y in pairs]
        assert row.max_abs == pytest.approx(max(h[0] for h in hand), rel=1e-5, abs=1e-7), key
        assert row.max_rel == pytest.approx(max(h[1] for h in hand), rel=1e-5, abs=1e-7), key
        assert row.cosine == pytest.approx(min(h[2] for h in hand), abs=1e-7), key
        assert row.sqnr_db == pytest.approx(min(h[3] for h in hand), rel=1e-4), key
        checked += 1
    return checked


def test_resnet18_fp32_against_bf16_autocast_equals_hand_hooks() -> None:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    x = torch.randn(1, 3, 64, 64)
    result = compare(model, None, x, b_autocast=torch.bfloat16)
    a = _hand_outputs(model, lambda: model(x))

    def under_autocast() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(x)

    b = _hand_outputs(model, under_autocast)
    assert _assert_rows_match_hand(result, a, b) == len(a)
    assert result.first is not None and result.first.introduced_max_abs > result.tolerance
    assert result.first.path == "conv1"  # the first op that runs in bf16
    # introduced, by hand: each leaf run under autocast on side A's inputs of its call
    inputs = _hand_inputs(model, lambda: model(x))
    leaves = {p for p, m in model.named_modules() if not list(m.children())}
    checked = 0
    for row in result.rows:
        if row.path in leaves:
            module = model.get_submodule(row.path)
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                out = module(inputs[(row.path, row.call_index)].clone())
            hand = (a[(row.path, row.call_index)][0] - out.float()).abs().max().item()
            assert row.introduced_max_abs == pytest.approx(hand, rel=1e-6, abs=1e-9), row.name
            checked += 1
    assert checked == sum(1 for k in a if k[0] in leaves)


def test_small_gpt2_fp32_against_bf16_autocast_equals_hand_hooks() -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, use_cache=False)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, config.vocab_size, (1, 12))
    result = compare(model, None, ids, b_autocast="bf16")
    a = _hand_outputs(model, lambda: model(ids))

    def under_autocast() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(ids)

    b = _hand_outputs(model, under_autocast)
    assert _assert_rows_match_hand(result, a, b) > 20
    assert result.first is not None


class _Wrapper(nn.Module):
    """DistributedDataParallel's layout: the model under ``module``."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x)


def test_a_ddp_style_wrapper_matches_without_a_mapping() -> None:
    model, x = _mlp(), torch.randn(5, 6)
    result = compare(model, _Wrapper(copy.deepcopy(model)), x)
    assert len(result.rows) == len(list(model.modules()))
    assert [r.path_b for r in result.rows][:2] == ["module", "module.0"]
    assert [c.path for c in result.only_b] == [""]
    assert result.first is None and all(r.max_abs == 0 for r in result.rows)


class _ConvBn(nn.Module):
    def __init__(self, fused: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.fc = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn(self.conv(x)))
        return self.fc(x.mean((2, 3)))


class _Fused(nn.Module):
    def __init__(self, model: _ConvBn) -> None:
        super().__init__()
        self.conv = torch.nn.utils.fusion.fuse_conv_bn_eval(model.conv, model.bn)
        self.relu, self.fc = copy.deepcopy(model.relu), copy.deepcopy(model.fc)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.relu(self.conv(x)).mean((2, 3)))


def test_a_fused_conv_bn_model_lists_the_bn_unmatched() -> None:
    model = _ConvBn().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    x = torch.randn(2, 3, 10, 10)
    fused = _Fused(model).eval()
    result = compare(model, fused, x)
    assert [c.path for c in result.only_a] == ["bn"] and not result.only_b
    assert result.first is not None and result.first.path == "conv"  # before vs after bn
    mapped = compare(model, fused, x, match={"bn": "conv"})
    assert [c.path for c in mapped.only_a] == ["conv"]
    for path in ("bn", "relu", "fc"):
        assert mapped.row(path).max_abs < 1e-5
    assert "only on side A (1): bn" in str(result)


def _perturbed(model: nn.Module) -> dict[str, torch.Tensor]:
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["3.weight"] += 0.05
    return state


@pytest.mark.parametrize("kind", ["state_dict", "safetensors", "torch.save"])
def test_b_weights_from_a_state_dict_or_a_file(kind: str, tmp_path: Path) -> None:
    model, x = _mlp(), torch.randn(5, 6)
    state = _perturbed(model)
    before = snapshot_state(model)
    weights: Any = state
    if kind == "safetensors":
        from safetensors.torch import save_file

        weights = tmp_path / "w.safetensors"
        save_file(state, str(weights))
    elif kind == "torch.save":
        weights = tmp_path / "w.pt"
        torch.save(state, weights)
    result = compare(model, None, x, b_weights=weights)
    assert_state_unchanged(before, model)
    assert result.first is not None and result.first.path == "3"
    twin = copy.deepcopy(model)
    twin.load_state_dict(state)
    expected = (model(x) - twin(x)).abs().max().item()
    assert result.row("3").max_abs == pytest.approx(expected, rel=1e-6)
    params = sum(p.nbytes for p in model.parameters())
    assert result.memory.copy_bytes == params


def test_b_dtype_casts_a_copy_and_leaves_the_model() -> None:
    model, x = _mlp(), torch.randn(5, 6)
    before = snapshot_state(model)
    result = compare(model, None, x, b_dtype=torch.float64)
    assert_state_unchanged(before, model)
    assert result.memory.copy_bytes == 2 * sum(p.nbytes for p in model.parameters())
    assert 0 < result.row("").max_abs < 1e-5


def test_stored_bytes_are_side_a_inputs_and_outputs() -> None:
    model, x = _mlp(), torch.randn(5, 6)
    seen: dict[int, torch.Tensor] = {}  # by identity: what one call returns, the next gets

    def _add(values: Any) -> None:
        seen.update((id(t), t) for t in tensors_in(values))

    handles = [h for m in model.modules() for h in (
        m.register_forward_pre_hook(lambda m, args: _add(args)),
        m.register_forward_hook(lambda m, args, out: _add(out)))]
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    result = compare(model, None, x)
    # side B's outputs are measured, not kept; a value kept under two calls counts once
    assert result.memory.stored_bytes == sum(t.nbytes for t in seen.values())
    assert result.memory.extra_peak_bytes == result.memory.stored_bytes


def test_spill_streams_the_values_to_disk_with_the_same_result(tmp_path: Path) -> None:
    model, x = _mlp(), torch.randn(5, 6)
    other = copy.deepcopy(model)
    with torch.no_grad():
        other[0].bias += 0.01
    in_memory = compare(model, other, x)
    spilled = compare(model, other, x, spill=tmp_path / "spill")
    assert spilled.memory.spilled and list((tmp_path / "spill").rglob("*.safetensors"))
    assert spilled.to_dict()["rows"] == in_memory.to_dict()["rows"]
    with pytest.raises(SpecError, match="not a new or empty directory"):
        compare(model, other, x, spill=tmp_path / "spill")
    with pytest.raises(SpecError, match="b_autocast"):  # nothing made for a bad option
        compare(model, other, x, spill=tmp_path / "new", b_autocast="int8")
    assert not (tmp_path / "new").exists()


def test_both_models_are_left_as_they_were_in_train_mode_with_user_hooks() -> None:
    model = _ConvBn().train()
    other = copy.deepcopy(model)
    calls: list[str] = []
    model.fc.register_forward_hook(lambda m, a, o: calls.append("a"))
    x = torch.randn(2, 3, 10, 10)
    before_a, before_b = snapshot_state(model), snapshot_state(other)
    compare(model, other, x, b_autocast="bf16")
    assert_state_unchanged(before_a, model)
    assert_state_unchanged(before_b, other)
    assert "forward" not in vars(model.conv) and "forward" not in vars(other.bn)


def test_a_model_that_raises_is_left_as_it_was() -> None:
    model = zoo.RaisingModel()
    before = snapshot_state(model)
    with pytest.raises(ModelRunError, match="side A"):
        compare(model, None, *model.example_inputs())
    assert_state_unchanged(before, model)


@pytest.mark.parametrize(("option", "value", "message"), [
    ("tolerance", -1.0, "tolerance= must be"),
    ("b_autocast", "int8", "b_autocast= .--b-autocast. must be a floating dtype"),
    ("b_dtype", "float8", "b_dtype= .--b-dtype. must be a floating dtype"),
    ("b_weights", {"nope": torch.zeros(1)}, "b_weights do not fit"),
    ("b_weights", "/nonexistent/w.pt", "is not a file"),
    ("b_compile", "eagr", "not a torch.compile backend here .close matches: eager"),
])
def test_bad_options_are_one_clear_error(option: str, value: Any, message: str) -> None:
    model = _mlp()
    with pytest.raises(SpecError, match=message):
        compare(model, None, torch.randn(2, 6), **{option: value})


def test_the_result_exports_and_displays() -> None:
    pd = pytest.importorskip("pandas")
    model, x = _mlp(), torch.randn(5, 6)
    result = compare(model, None, x, b_autocast="bf16")
    data = result.to_dict()
    assert set(data["rows"][0]) >= {"path", "call_index", "max_abs", "max_rel", "cosine",
                                    "sqnr_db", "introduced_max_abs"}
    assert len(data["rows"]) == len(result.rows)
    import json

    assert json.loads(result.to_json())["first"] == data["first"]
    frame = result.to_dataframe()
    assert isinstance(frame, pd.DataFrame) and len(frame) == len(result.rows)
    assert "<table" in result._repr_html_()
    assert hookscope.compare is compare


def test_b_compile_matches_through_the_compiled_wrapper() -> None:
    model, x = _mlp(), torch.randn(5, 6)
    before = snapshot_state(model)
    result = compare(model, None, x, b_compile="eager")  # the backend that needs no compiler
    assert_state_unchanged(before, model)
    assert {(r.path, r.call_index) for r in result.rows} == set(
        _hand_outputs(model, lambda: model(x)))
    assert result.only_a == result.only_b == []  # the tracer looks through the wrapper
    assert result.first is None and all(r.max_abs == 0 for r in result.rows)


@pytest.mark.cuda
def test_b_device_cuda_against_the_cpu_equals_hand_hooks() -> None:
    model, x = _mlp(), torch.randn(64, 6)
    before = snapshot_state(model)
    result = compare(model, None, x, b_device="cuda")
    assert_state_unchanged(before, model)
    twin = copy.deepcopy(model).cuda()
    a = _hand_outputs(model, lambda: model(x))
    b = {k: [t.cpu() for t in v] for k, v in _hand_outputs(twin, lambda: twin(x.cuda())).items()}
    assert _assert_rows_match_hand(result, a, b) == len(a)
    assert result.settings["device"].startswith("cuda")
    assert result.memory.copy_bytes == sum(p.nbytes for p in model.parameters())


class _Residual(nn.Module):
    """A block that writes in place what its submodules return (ResNet's ``out +=
    identity`` and in-place ReLU): re-runs handed side A's stored values must not
    change what later measures read."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fc(x)
        out += x
        return self.relu(out)


def test_in_place_writes_in_the_re_runs_change_no_measure() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(_Residual(), _Residual(), nn.Linear(6, 2)).eval()
    x = torch.randn(4, 6)
    result = compare(model, None, x)
    assert all(r.max_abs == 0 and r.introduced_max_abs == 0 for r in result.rows)
    other = copy.deepcopy(model)
    with torch.no_grad():
        other[1].fc.bias += 0.25
    result = compare(model, other, x)
    assert result.first is not None and result.first.path == "1.fc"
    assert result.row("1.fc").introduced_max_abs == pytest.approx(0.25, rel=1e-6)
    assert result.row("1").introduced_max_abs == 0.0  # its own += and relu add nothing
    assert result.row("1.relu").introduced_max_abs == 0.0


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.act = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x))


def test_the_folded_table_shows_the_worst_of_the_blocks_it_stands_for() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(*[_Block() for _ in range(5)]).eval()
    other = copy.deepcopy(model)
    with torch.no_grad():
        other[3].fc.bias += 0.125
    result = compare(model, other, torch.randn(4, 6))
    lines = str(result).splitlines()
    folded = next(line for line in lines if "(_Block) x4" in line)
    assert "1 ... 4" in folded  # blocks 1 to 4 folded behind block 0
    worst = max(r.max_abs for r in result.rows if r.path[:1] in "1234" and r.path)
    assert f"{worst:.4g}" in folded and folded.rstrip().endswith("introduced")
    assert result.first is not None and result.first.path == "3.fc"


def test_the_table_text() -> None:
    from hookscope.compare.table import compare_table

    model = _mlp()
    result = compare(model, _Wrapper(copy.deepcopy(model)), torch.randn(5, 6))
    assert result.answer() == ("Side A and side B agree exactly at all 7 matched calls "
                               "(1 call unmatched, listed below)")
    assert compare_table(result).to_text(width=100) == """\
Layer (type)      max abs  max rel  cosine  SQNR dB  introduced max abs  error
----------------  -------  -------  ------  -------  ------------------  -----
Sequential              0        0       1      inf                   0
  0 (Linear)            0        0       1      inf                   0
  1 (Tanh)              0        0       1      inf                   0
  2 (Sequential)        0        0       1      inf                   0
    2.0 (Linear)        0        0       1      inf                   0
    2.1 (Tanh)          0        0       1      inf                   0
  3 (Linear)            0        0       1      inf                   0
side B: model_b _Wrapper | tolerance 0.0001 | extra peak memory 1.45 KiB (values 1.45 KiB, copy 0 B)
only on side B (1): <root>
"""


def test_a_row_at_the_depth_limit_shows_what_was_introduced_below_it() -> None:
    from hookscope.compare.table import compare_table

    torch.manual_seed(0)
    model = nn.Sequential(_Block(), _Block()).eval()
    other = copy.deepcopy(model)
    with torch.no_grad():
        other[1].fc.bias += 0.125
    result = compare(model, other, torch.randn(4, 6))
    text = compare_table(result, depth=1).to_text(width=120)
    row = next(line for line in text.splitlines() if line.lstrip().startswith("1 (_Block)"))
    assert row.rstrip().endswith("introduced") and "<- first" in row
    assert f"{result.row('1.fc').introduced_max_abs:.4g}" in row
    assert result.row("1").introduced_max_abs == 0.0  # its own code added nothing
