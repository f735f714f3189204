"""Every tensor of nested inputs and outputs, with a path a user can type.

The oracle for a path is Python itself: ``eval(path, {"out": output})`` must give back
the very tensor object it names, and the shape recorded must be that tensor's shape.
The number of tensors is checked against an independent recursive walk.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, NamedTuple

import pytest
import torch
from torch import nn

import hookscope
import zoo
from hookscope.core.records.tensor_paths import call_input_metas, iter_tensors, metas


def walk(value: Any) -> list[torch.Tensor]:
    """Independent walk: every tensor in tuples, lists, dicts and dataclasses."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in walk(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in walk(v)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [t for f in dataclasses.fields(value) for t in walk(getattr(value, f.name))]
    return []


def assert_paths_resolve(value: Any, root: str = "out") -> list[str]:
    found = list(iter_tensors(value, root))
    for path, t in found:
        assert eval(path, {root: value}) is t, path  # the oracle: the path is code
    recorded = metas(value, root)
    assert [m.path for m in recorded] == [p for p, _ in found]
    for m, (_, t) in zip(recorded, found, strict=True):
        assert m.shape == tuple(t.shape)
        assert m.dtype == str(t.dtype).removeprefix("torch.")
        assert m.device == str(t.device)
        assert m.requires_grad == t.requires_grad
    assert sorted(id(t) for _, t in found) == sorted(id(t) for t in walk(value))
    return [p for p, _ in found]


class Point(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor


@dataclasses.dataclass
class Box:
    a: torch.Tensor
    rest: list[Any]
    note: str = "n"


T = torch.zeros


@pytest.mark.parametrize(
    ("value", "paths"),
    [
        (T(2), ["out"]),
        ((T(1), T(2)), ["out[0]", "out[1]"]),
        ([T(1), [T(2), (T(3),)]], ["out[0]", "out[1][0]", "out[1][1][0]"]),
        ({"logits": T(1), "aux": {"h": T(2)}}, ['out["logits"]', 'out["aux"]["h"]']),
        (collections.OrderedDict(b=T(1), a=T(2)), ['out["b"]', 'out["a"]']),
        ({3: T(1), "k": [T(2)]}, ["out[3]", 'out["k"][0]']),
        ({'q"uote': T(1), "back\\slash": T(2), "new\nline": T(3)},
         ['out["q\\"uote"]', 'out["back\\\\slash"]', 'out["new\\nline"]']),
        (Point(T(1), T(2)), ["out.x", "out.y"]),
        (Box(T(1), [T(2), {"z": T(3)}]), ["out.a", "out.rest[0]", 'out.rest[1]["z"]']),
        ([Box(T(1), []), Point(T(2), T(3))], ["out[0].a", "out[1].x", "out[1].y"]),
        ((T(1), None, 3, "s", 2.5, True), ["out[0]"]),
        ((), []),
        (None, []),
        ({}, []),
    ],
    ids=["tensor", "tuple", "nested-list", "dict", "ordered-dict", "int-key", "odd-keys",
         "namedtuple", "dataclass", "mixed", "non-tensors", "empty-tuple", "none",
         "empty-dict"],
)
def test_nested_paths(value: Any, paths: list[str]) -> None:
    assert assert_paths_resolve(value) == paths


def test_same_tensor_twice_is_listed_twice() -> None:
    t = torch.ones(2)
    assert assert_paths_resolve((t, {"again": t})) == ["out[0]", 'out[1]["again"]']


def test_special_tensors() -> None:
    sparse = torch.eye(3).to_sparse()
    value = {
        "int": torch.arange(3), "bool": torch.ones(2, dtype=torch.bool),
        "complex": torch.zeros(2, dtype=torch.complex64), "empty": torch.zeros(0, 5),
        "scalar": torch.tensor(1.5), "sparse": sparse,
        "meta": torch.empty(4, 4, device="meta"), "param": nn.Parameter(torch.ones(2)),
    }
    assert_paths_resolve(value)
    by_path = {m.path: m for m in metas(value, "out")}
    assert by_path['out["sparse"]'].layout == "sparse_coo"
    assert by_path['out["empty"]'].shape == (0, 5) and by_path['out["empty"]'].numel == 0
    assert by_path['out["scalar"]'].shape == () and by_path['out["scalar"]'].numel == 1
    assert by_path['out["meta"]'].device == "meta"
    assert by_path['out["param"]'].requires_grad
    assert by_path['out["complex"]'].dtype == "complex64"


def test_transformers_model_output() -> None:
    pytest.importorskip("transformers")
    from transformers.modeling_outputs import CausalLMOutputWithPast

    out = CausalLMOutputWithPast(
        logits=torch.zeros(1, 2, 3), hidden_states=(torch.zeros(1, 2, 4), torch.zeros(1, 2, 4))
    )
    assert assert_paths_resolve(out) == [
        'out["logits"]', 'out["hidden_states"][0]', 'out["hidden_states"][1]']


def test_call_input_metas() -> None:
    args = (torch.zeros(2, 3), [torch.ones(1)], 7)
    kwargs = {"mask": torch.ones(2, dtype=torch.bool), "cfg": {"t": torch.zeros(4)}, "n": None}
    found = call_input_metas(args, kwargs)
    assert [m.path for m in found] == [
        "args[0]", "args[1][0]", 'kwargs["mask"]', 'kwargs["cfg"]["t"]']
    scope = {"args": args, "kwargs": kwargs}
    for m in found:
        assert tuple(eval(m.path, scope).shape) == m.shape


# -- in a trace: every call's recorded shapes against the real values ------------------------


@pytest.mark.parametrize("cls", zoo.RUNNING_ZOO, ids=lambda c: c.__name__)
def test_recorded_shapes_equal_the_real_tensors(cls: type[zoo.ZooModel]) -> None:
    model = zoo.materialize(zoo.build(cls)).eval()
    starts: list[tuple[str, Any, Any]] = []
    ends: dict[int, Any] = {}
    stack: list[int] = []
    handles = []
    for path, module in model.named_modules():
        def pre(m: nn.Module, a: Any, k: Any, path: str = path) -> None:
            starts.append((path, a, k))
            stack.append(len(starts) - 1)

        def post(m: nn.Module, a: Any, k: Any, out: Any) -> None:
            ends[stack.pop()] = out

        handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(module.register_forward_hook(post, with_kwargs=True))
    args, kwargs = cls.example_inputs()
    trace = hookscope.trace(model, *args, kwargs=kwargs, time=False, stats=False, memory=False)
    for h in handles:
        h.remove()
    assert [c.path for c in trace.calls] == [p for p, _, _ in starts]
    for i, call in enumerate(trace.calls):
        _, a, k = starts[i]
        scope = {"args": a, "kwargs": k, "out": ends[i]}
        assert [m.path for m in call.inputs] == [m.path for m in call_input_metas(a, k)]
        assert len(call.inputs) == len(walk((a, k)))
        assert len(call.outputs) == len(walk(ends[i]))
        for m in [*call.inputs, *call.outputs]:
            real = eval(m.path, scope)
            assert m.shape == tuple(real.shape), (call.name, m.path)
            assert m.dtype == str(real.dtype).removeprefix("torch.")
    # the model-level outputs are the root call's outputs
    assert trace.outputs == trace.calls[0].outputs
    assert [m.path for m in trace.inputs] == [m.path for m in trace.calls[0].inputs]


def test_kwargs_only_inputs_recorded_by_name() -> None:
    model = zoo.build(zoo.KwargsOnlyForward)
    _, kwargs = zoo.KwargsOnlyForward.example_inputs()
    trace = hookscope.trace(model, kwargs=kwargs, time=False, stats=False, memory=False)
    assert [(m.path, m.shape, m.dtype) for m in trace.calls[0].inputs] == [
        ('kwargs["x"]', (2, 4), "float32"), ('kwargs["mask"]', (2, 4), "bool")]
    assert [m.path for m in trace.find("fc").inputs] == ["args[0]"]


def test_lstm_nested_outputs() -> None:
    model = zoo.build(zoo.LSTMModel)
    trace = hookscope.trace(model, *zoo.LSTMModel.example_inputs()[0],
                            time=False, stats=False, memory=False)
    assert [(m.path, m.shape) for m in trace.find("lstm").outputs] == [
        ("out[0]", (2, 3, 6)), ("out[1][0]", (1, 2, 6)), ("out[1][1]", (1, 2, 6))]


# -- shared facts: one read-only list for every call with the same fields -------------------


def test_shared_shape_facts_are_read_only_lists() -> None:
    """Calls with the same input and output fields share their lists (within a trace and
    between traces); a change to one raises instead of changing every call, and a copy
    is a plain list the caller owns."""
    import copy
    import pickle

    from hookscope.core.records.readonly import ReadOnlyList

    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.ReLU()).eval()
    x = torch.randn(2, 4)
    first = hookscope.trace(model, x, time=False, stats=False, memory=False)
    again = hookscope.trace(model, x, time=False, stats=False, memory=False)
    a, b = first.find("0"), first.find("1")
    assert type(a.inputs) is ReadOnlyList and type(a.outputs) is ReadOnlyList
    assert a.inputs is b.inputs and a.outputs is again.find("0").outputs
    # the recorded values are the real ones (the oracle: the tensors themselves)
    assert a.inputs == [m for m in a.inputs] and a.inputs[0].shape == tuple(x.shape)
    assert a.outputs[0].shape == tuple(model[0](x).shape)
    for change in (
        lambda v: v.append(v[0]), lambda v: v.extend([]), lambda v: v.insert(0, v[0]),
        lambda v: v.pop(), lambda v: v.remove(v[0]), lambda v: v.clear(),
        lambda v: v.sort(), lambda v: v.reverse(), lambda v: v.__setitem__(0, v[0]),
        lambda v: v.__delitem__(0), lambda v: v.__iadd__([]), lambda v: v.__imul__(2),
    ):
        with pytest.raises(TypeError, match="read-only"):
            change(a.inputs)
    assert len(b.inputs) == 1 and b.inputs[0].shape == (2, 4)  # nothing changed
    for made in (list(a.inputs), a.inputs.copy(), copy.copy(a.inputs),
                 copy.deepcopy(a.inputs), pickle.loads(pickle.dumps(a.inputs))):
        assert type(made) is list and made == a.inputs
        made.append(made[0])  # the copy is the caller's
    assert len(a.inputs) == 1
    # a record copied whole (deepcopy, pickle) holds plain lists, equal to the first
    assert pickle.loads(pickle.dumps(first)).calls == first.calls
