"""``hookscope.inspect``: module tree, parameters, buffers, tied tensors, look-up by path.

Oracles are torch's own accessors: ``parameters()`` (which deduplicates tied tensors),
``named_children``/``named_modules``, ``get_parameter``/``get_buffer``, ``state_dict``
(which tells persistent buffers), ``numel() * element_size()``.
"""

from __future__ import annotations

import gc
import weakref
from dataclasses import replace
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
import zoo
from helpers import assert_state_unchanged, snapshot_state
from hookscope.core.model.module_table import module_table
from hookscope.core.model.structure import BufferInfo, ParamInfo
from hookscope.core.records.module_records import ModuleInfo

ZOO_IDS = {"ids": lambda c: c.__name__}


def unique_params(module: nn.Module) -> list[nn.Parameter]:
    return list(module.parameters())  # torch deduplicates by identity


@pytest.mark.parametrize("cls", zoo.ALL_ZOO, **ZOO_IDS)
def test_totals_match_torch(cls: type[zoo.ZooModel]) -> None:
    model = zoo.materialize(zoo.build(cls))
    before = snapshot_state(model)
    info = hookscope.inspect(model)
    assert_state_unchanged(before, model)
    params = unique_params(model)
    assert info.total_params == sum(p.numel() for p in params)
    assert info.trainable_params == sum(p.numel() for p in params if p.requires_grad)
    assert info.frozen_params == sum(p.numel() for p in params if not p.requires_grad)
    assert info.param_bytes == sum(p.numel() * p.element_size() for p in params)
    buffers = list(model.buffers())
    assert info.total_buffers == sum(b.numel() for b in buffers)
    assert info.buffer_bytes == sum(b.numel() * b.element_size() for b in buffers)
    assert set(info.parameters) | set(info.tied) >= {n for n, _ in model.named_parameters()}
    assert len(info.parameters) == len(params)
    assert info.class_name == cls.__name__
    summary = info.summary()
    assert (summary.params_total, summary.params_trainable) == (
        info.total_params, info.trainable_params)


@pytest.mark.parametrize("cls", zoo.ALL_ZOO, **ZOO_IDS)
def test_per_module_counts_match_torch(cls: type[zoo.ZooModel]) -> None:
    model = zoo.materialize(zoo.build(cls))
    info = hookscope.inspect(model)
    assert list(info.modules) == [p for p, _ in model.named_modules()]
    counted: set[int] = set()
    for path, module in model.named_modules():
        m = info[path]
        assert isinstance(m, ModuleInfo)
        assert m.class_name == type(module).__name__
        assert m.depth == (0 if not path else len(path.split(".")))
        assert m.parent == (None if not path else path.rpartition(".")[0])
        sub = unique_params(module)
        assert m.total_params == sum(p.numel() for p in sub), path
        assert m.trainable_params == sum(p.numel() for p in sub if p.requires_grad), path
        own = [p for p in module.parameters(recurse=False) if id(p) not in counted]
        # own params: a tied tensor counts at its first path (named_parameters order)
        assert m.own_params <= sum(p.numel() for p in module.parameters(recurse=False))
        counted.update(id(p) for p in own)
        assert m.own_buffers == sum(b.numel() for b in module.buffers(recurse=False))
    assert sum(m.own_params for m in info) == info.total_params


@pytest.mark.parametrize("cls", zoo.ALL_ZOO, **ZOO_IDS)
def test_children_and_descendants_like_torch(cls: type[zoo.ZooModel]) -> None:
    model = zoo.materialize(zoo.build(cls))
    info = hookscope.inspect(model)
    canonical = {id(m): p for p, m in model.named_modules()}
    for path, module in model.named_modules():
        prefix = f"{path}." if path else ""
        children = [canonical[id(c)] for _, c in module.named_children()]
        assert [c.path for c in info.children(path)] == children
        assert info[path].children == tuple(children)
        below = [prefix + p for p, _ in module.named_modules() if p]
        below_canonical = [canonical[id(m)] for p, m in module.named_modules() if p]
        if below == below_canonical:  # no alias reaching outside this subtree
            assert [d.path for d in info.descendants(path)] == below


def test_seeds_lookup_like_get_parameter_and_get_buffer() -> None:
    model = zoo.build(zoo.NestedSeeds)
    info = hookscope.inspect(model)
    w1 = info["ab.b.W1"]
    assert isinstance(w1, ParamInfo)
    real = model.get_parameter("ab.b.W1")
    assert real.item() == 10
    assert (w1.path, w1.shape, w1.numel, w1.dtype) == (
        "ab.b.W1", tuple(real.shape), real.numel(), "float32")
    assert w1.nbytes == real.numel() * real.element_size() and w1.trainable
    duck = info["cd.c.duck"]
    assert isinstance(duck, BufferInfo)
    buf = model.get_buffer("cd.c.duck")
    assert buf.item() == 7
    assert (duck.shape, duck.numel, duck.persistent) == (tuple(buf.shape), 1, True)
    assert isinstance(info["ab.b"], ModuleInfo) and info["ab.b"].class_name == "Function_B"
    assert isinstance(info[""], ModuleInfo) and info[""].class_name == "NestedSeeds"
    assert "ab.b.W1" in info and "cd.c.duck" in info and "ab.b" in info
    assert "ab.b.W3" not in info and 3 not in info
    with pytest.raises(KeyError, match=r"'ab.b.W3' is not a module.*close matches"):
        info["ab.b.W3"]
    assert [c.path for c in info.children()] == ["ab", "cd"]
    assert [m.path for m in info.descendants("cd")] == ["cd.c", "cd.d"]
    assert [m.path for m in info.descendants()] == [
        p for p, _ in model.named_modules() if p]


def test_trainable_and_frozen() -> None:
    model = zoo.build(zoo.FrozenParams)
    info = hookscope.inspect(model)
    assert info.total_params == 4 * 8 + 8 + 8 * 2 + 2
    assert info.trainable_params == 8 * 2  # head.weight only
    assert info.frozen_params == 4 * 8 + 8 + 2
    assert info["head"].trainable_params == 16 and info["head"].total_params == 18
    assert info["backbone"].trainable_params == 0
    assert not info["head.bias"].trainable and info["head.weight"].trainable


def test_tied_weights_counted_once_and_shown_as_tied() -> None:
    model = zoo.build(zoo.TiedWeights)
    info = hookscope.inspect(model)
    v, d = zoo.TiedWeights.VOCAB, zoo.TiedWeights.DIM
    assert info.total_params == v * d + 2 * d == sum(p.numel() for p in model.parameters())
    assert info.tied == {"head.weight": "embed.weight"}
    assert "head.weight" not in info.parameters
    # the tied path reads as the same tensor, and says where it is counted (issue 13)
    tied, first = info["head.weight"], info["embed.weight"]
    assert tied.tied_to == "embed.weight" and first.tied_to is None
    assert (tied.shape, tied.numel) == (first.shape, first.numel)
    assert info["head"].total_params == v * d  # the head's own subtree does hold it
    assert info["head"].own_params == 0  # counted at its first path
    assert info["embed"].own_params == v * d
    assert "tied" in str(info)


def test_shared_module_aliases() -> None:
    model = zoo.build(zoo.SharedModule)
    info = hookscope.inspect(model)
    assert list(info.modules) == ["", "fc", "head"]
    assert info["fc"].aliases == ("alias",)
    # named_children yields a shared module once, under its first name
    assert info[""].children == ("fc", "head") == tuple(n for n, _ in model.named_children())
    assert info.total_params == 4 * 4 + 4 + 4 * 3 + 3


def test_buffers_persistent_and_not() -> None:
    model = zoo.build(zoo.BufferModel)
    info = hookscope.inspect(model)
    state = model.state_dict()
    assert set(info.buffers) == {n for n, _ in model.named_buffers()} == {"mean", "scale"}
    for path, b in info.buffers.items():
        assert b.persistent == (path in state)
    assert info["mean"].persistent and not info["scale"].persistent  # type: ignore[union-attr]
    assert "unused" not in info  # a None buffer slot holds nothing
    assert info.total_buffers == 8 and info.total_params == 4 * 2 + 2
    assert info[""].own_buffers == 8


def test_tied_buffers_counted_once() -> None:
    model = nn.Sequential(nn.BatchNorm1d(3), nn.BatchNorm1d(3))
    model[1].running_mean = model[0].running_mean
    info = hookscope.inspect(model)
    assert info.total_buffers == sum(b.numel() for b in model.buffers())
    assert info.tied["1.running_mean"] == "0.running_mean"


def test_bytes_by_dtype() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2).to(torch.float16),
                          nn.Linear(2, 2).to(torch.float64))
    info = hookscope.inspect(model)
    expected: dict[str, int] = {}
    for p in model.parameters():
        name = str(p.dtype).removeprefix("torch.")
        expected[name] = expected.get(name, 0) + p.numel() * p.element_size()
    assert info.param_bytes_by_dtype() == dict(sorted(expected.items()))
    assert info.param_bytes == sum(expected.values())
    assert {p.dtype for p in info.parameters.values()} == {"float32", "float16", "float64"}


def test_meta_device_model() -> None:
    with torch.device("meta"):
        model = nn.Sequential(zoo.NestedSeeds(), nn.Linear(2, 4096), nn.Linear(4096, 4096))
    info = hookscope.inspect(model)
    assert info.total_params == sum(p.numel() for p in model.parameters())
    assert info.param_bytes == sum(p.numel() * 4 for p in model.parameters())
    assert {p.device for p in info.parameters.values()} == {"meta"}
    assert info["0.cd.c.duck"].device == "meta"
    trace = hookscope.trace(model, torch.empty(3, 2, device="meta"),
                            time=False, stats=False, memory=False)
    assert [o.shape for o in trace.outputs] == [(3, 4096)]
    assert trace.outputs[0].device == "meta"
    assert trace.model.params_total == info.total_params


def test_inspect_rejects_a_non_module() -> None:
    with pytest.raises(hookscope.SpecError, match=r"torch\.nn\.Module"):
        hookscope.inspect(nn.Linear)  # type: ignore[arg-type]


def test_broken_extra_repr_does_not_break_inspection() -> None:
    class Broken(nn.Linear):
        def extra_repr(self) -> str:
            raise RuntimeError("bad repr")

    info = hookscope.inspect(nn.Sequential(Broken(2, 2)))
    assert info["0"].extra_repr == ""
    assert hookscope.inspect(nn.Linear(2, 3))[""].extra_repr == nn.Linear(2, 3).extra_repr()


@pytest.mark.parametrize("cls", zoo.ALL_ZOO, **ZOO_IDS)
def test_walk_is_named_modules_without_deduplication(cls: type[zoo.ZooModel]) -> None:
    from hookscope.core.model.module_table import _walk

    model = zoo.build(cls)
    assert _walk(model) == list(model.named_modules(remove_duplicate=False))


def test_a_trace_records_tied_paths_and_the_summary_names_them() -> None:
    model = zoo.build(zoo.TiedWeights)
    args, kwargs = zoo.TiedWeights.example_inputs()
    summary = hookscope.summary(model, *args, kwargs=kwargs)
    assert summary.trace.meta["tied"] == hookscope.inspect(model).tied == {
        "head.weight": "embed.weight"
    }
    assert "head.weight is embed.weight" in str(summary)
    untied = hookscope.summary(zoo.build(zoo.SharedModule),
                               *zoo.SharedModule.example_inputs()[0])
    assert "tied" not in untied.trace.meta


def _records(model: nn.Module) -> tuple[Any, dict[str, Any]]:
    x = torch.randn(2, 4, dtype=next(model.parameters()).dtype)
    trace = hookscope.trace(model, x, time=False, stats=False, memory=False)
    return trace.model, trace.modules


@pytest.mark.parametrize("change", [
    "replace a submodule", "freeze a parameter", "add a submodule", "change the dtype",
    "resize a parameter", "change a class", "resize a parameter in place",
    "reorder the submodules", "move a submodule", "register a buffer", "retype a buffer",
    "unfreeze a parameter", "rename a submodule",
])
def test_the_module_records_of_a_later_run_see_every_change_to_the_model(change: str) -> None:
    # a tracer reuses the records of its last run of a model when nothing they are made
    # of changed: the oracle is a table made from scratch (extra_repr=True never reuses)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
    model.register_buffer("scale", torch.ones(3))
    model[2].weight.requires_grad_(False)
    for _ in range(2):  # the second run reuses the first run's table
        _records(model)
    if change == "replace a submodule":
        model[2] = nn.Linear(4, 4, bias=False)
    elif change == "freeze a parameter":
        model[0].weight.requires_grad_(False)
    elif change == "add a submodule":
        model.append(nn.Tanh())
    elif change == "change the dtype":
        model.double()
    elif change == "resize a parameter":
        with torch.no_grad():
            model[0].bias.data = torch.zeros(4)  # same size: no change expected
            model[2].bias = nn.Parameter(torch.zeros(4))
    elif change == "resize a parameter in place":
        with torch.no_grad():
            model[2].weight.data = torch.zeros(2, 4)  # the same Parameter objects
            model[2].bias.data = torch.zeros(2)
    elif change == "reorder the submodules":  # same names and modules, another order
        model._modules = dict(reversed(list(model._modules.items())))
    elif change == "move a submodule":  # same modules, another parent
        relu = model._modules.pop("1")
        model._modules["2"] = nn.Sequential(relu, model._modules["2"])
    elif change == "register a buffer":
        model[1].register_buffer("offset", torch.zeros(5))
    elif change == "retype a buffer":
        model.scale = model.scale.half()
    elif change == "rename a submodule":  # same modules, in the same order
        model._modules = {("first" if k == "0" else k): v for k, v in model._modules.items()}
    elif change == "unfreeze a parameter":
        model[2].weight.requires_grad_(True)
    else:
        model[1].__class__ = nn.Tanh  # a class swapped on the instance
    summary, modules = _records(model)
    fresh = module_table(model)
    assert summary == fresh.summary
    assert {p: replace(m, extra_repr=None) for p, m in modules.items()} == {
        p: replace(m, extra_repr=None) for p, m in fresh.modules.items()}


def test_a_reused_table_holds_the_model_s_current_tensors() -> None:
    # a parameter replaced by one of equal value and size: the counts are the same, but
    # what a tracer watches and restores (requires_grad, gradients) is the new tensor
    model = nn.Sequential(nn.Linear(4, 1))
    module_table(model, extra_repr=False)
    old = model[0].bias
    model[0].bias = nn.Parameter(old.detach().clone())
    parameters = module_table(model, extra_repr=False).parameters
    assert any(p is model[0].bias for p in parameters)
    assert not any(p is old for p in parameters)
    trace = hookscope.trace(model, torch.randn(2, 4), backward=True)
    assert model[0].bias.grad is None  # trace() computes gradients without .grad
    (bias,) = [g for g in trace.param_grads if g.path == "0.bias"]
    assert bias.norm == pytest.approx(2.0)  # d(sum)/d(bias) at batch 2


def test_the_table_kept_for_reuse_keeps_neither_the_model_nor_what_it_let_go_of() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
    _records(model)
    dropped, weight = weakref.ref(model[2]), weakref.ref(model[0].weight)
    model[2] = nn.Linear(4, 4)
    model[0].weight = nn.Parameter(torch.zeros(4, 4))
    gc.collect()
    assert dropped() is None and weight() is None
    _records(model)
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None


def test_reused_module_records_are_a_new_dict_each_run() -> None:
    model = nn.Sequential(nn.Linear(4, 4))
    _, first = _records(model)
    first.pop("0")
    _, second = _records(model)
    assert "0" in second


def test_a_traced_model_s_tensors_can_still_be_swapped() -> None:
    # torch.utils.swap_tensors refuses a tensor someone holds a weak reference to:
    # load_state_dict and .to()/.double() use it with this torch option (and DTensor)
    model = nn.Sequential(nn.Linear(4, 2), nn.BatchNorm1d(2))
    _records(model)
    previous = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        model.double()
        model.load_state_dict({k: v.clone() for k, v in model.state_dict().items()})
    finally:
        torch.__future__.set_swap_module_params_on_conversion(previous)
    assert model[0].weight.dtype == torch.float64
    summary, _ = _records(model)
    assert summary == module_table(model).summary


class _EqualToAnyOther(nn.Module):
    """A module class whose instances compare equal and hash alike."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(4, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return 1


class _Unhashable(nn.Module):
    __hash__ = None  # type: ignore[assignment]  # as a @dataclass module has

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = self.a  # shared: never reused, but asked

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


def test_a_model_equal_to_another_gets_its_own_table_and_an_unhashable_one_a_table() -> None:
    small, large = _EqualToAnyOther(2), _EqualToAnyOther(3)
    for model in (small, large, small, large):
        table = module_table(model, extra_repr=False)
        assert table.walk[0][1] is model
        assert table.summary == module_table(model).summary
    assert module_table(large, extra_repr=False).summary.params_total == 4 * 3 + 3
    odd = _Unhashable()
    for _ in range(2):
        assert module_table(odd, extra_repr=False).summary.params_total == 20


class _ExtraFirst(nn.Module):
    """A parameter slot ``extra`` (None) registered before ``weight``."""

    def __init__(self) -> None:
        super().__init__()
        self.register_parameter("extra", None)
        self.weight = nn.Parameter(torch.zeros(4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


def test_a_parameter_that_moves_to_another_module_as_none_moves_changes_the_table() -> None:
    # in walk order the counts read 16, 4, 16 before and after: only where the None
    # entries sit tells that 4 elements moved from module 0 to module 1
    model = nn.Sequential(nn.Linear(4, 4), _ExtraFirst())
    _records(model)
    model[0].bias = None
    model[1].extra = nn.Parameter(torch.zeros(4))
    _, modules = _records(model)
    fresh = module_table(model)
    assert modules["0"].own_params == fresh.modules["0"].own_params == 16
    assert modules["1"].own_params == fresh.modules["1"].own_params == 20


class _KeepsItsParent(nn.Module):
    """A child that keeps its parent as an attribute, which registers the parent as a
    submodule of the child: a cycle (torch's named_modules(remove_duplicate=False) and
    print(model) raise RecursionError on it)."""

    def __init__(self, parent: nn.Module) -> None:
        super().__init__()
        self.owner = parent
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class _CyclicNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.child = _KeepsItsParent(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.child(self.lin(x))


def test_a_module_registered_inside_itself_is_traced_and_counted_as_torch_counts_it() -> None:
    model = _CyclicNet()
    x = torch.randn(2, 4)
    summary = hookscope.summary(model, x)
    oracle = sum(p.numel() for p in model.parameters())
    assert summary.trace.model.params_total == oracle == 40
    modules = summary.trace.modules
    assert modules["child"].total_params == sum(p.numel() for p in model.child.parameters())
    assert [c.path for c in summary.trace.calls] == ["", "lin", "child", "child.fc"]
    assert hookscope.inspect(model).modules[""].aliases == ("child.owner",)
