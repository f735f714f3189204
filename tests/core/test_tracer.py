"""The call tree: one Call per module execution, attributed by the runtime call stack.

The oracle is an independent recorder (``record_runtime_tree``) built from plain torch
forward pre-hooks and always-call forward hooks with its own stack: for every zoo
model, hookscope's calls must match it one for one (path, call index, parent, depth).
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
import zoo
from helpers import assert_state_unchanged, snapshot_state, total_hooks

SHAPES_ONLY = {"time": False, "stats": False, "memory": False}


def record_runtime_tree(
    model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> list[tuple[str, int, int | None, int]]:
    """``(path, call_index, parent index, depth)`` for each module execution, in start
    order, from a stack kept by our own hooks."""
    rows: list[list[Any]] = []
    stack: list[int] = []
    counts: dict[str, int] = {}
    handles = []

    def pre(path: str) -> Any:
        def hook(module: nn.Module, a: Any) -> None:
            n = counts.get(path, 0)
            counts[path] = n + 1
            rows.append([path, n, stack[-1] if stack else None, len(stack)])
            stack.append(len(rows) - 1)

        return hook

    def post(module: nn.Module, a: Any, out: Any) -> None:
        stack.pop()

    for path, module in model.named_modules():
        handles.append(module.register_forward_pre_hook(pre(path)))
        handles.append(module.register_forward_hook(post, always_call=True))
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    return [tuple(r) for r in rows]  # type: ignore[misc]


def tree_of(trace: hookscope.Trace) -> list[tuple[str, int, int | None, int]]:
    return [(c.path, c.call_index, c.parent, c.depth) for c in trace.calls]


@pytest.mark.parametrize("cls", zoo.RUNNING_ZOO, ids=lambda c: c.__name__)
def test_call_tree_matches_the_runtime_stack(cls: type[zoo.ZooModel]) -> None:
    model = zoo.materialize(zoo.build(cls))
    args, kwargs = cls.example_inputs()
    expected = record_runtime_tree(model, args, kwargs)
    trace = hookscope.trace(model, *args, kwargs=kwargs, **SHAPES_ONLY)
    assert tree_of(trace) == expected
    assert_tree_consistent(trace)


def assert_tree_consistent(trace: hookscope.Trace) -> None:
    for i, call in enumerate(trace.calls):
        assert call.index == i
        if call.parent is None:
            assert call.depth == 0
        else:
            parent = trace.calls[call.parent]
            assert call.parent < i
            assert call.depth == parent.depth + 1
            assert i in parent.children
        assert call.children == sorted(call.children)
        for child in call.children:
            assert trace.calls[child].parent == i
    indices = [c.call_index for c in trace.calls]
    for path in {c.path for c in trace.calls}:
        assert [c.call_index for c in trace.calls_of(path)] == list(
            range(len(trace.calls_of(path)))
        )
    assert len(indices) == len(trace)


def test_module_called_three_times_gives_three_calls() -> None:
    model = zoo.build(zoo.MultiCall)
    trace = hookscope.trace(model, *zoo.MultiCall.example_inputs()[0], **SHAPES_ONLY)
    calls = trace.calls_of("block")
    assert [c.call_index for c in calls] == [0, 1, 2]
    assert [c.name for c in calls] == ["block", "block#1", "block#2"]
    assert all(c.parent == 0 and c.depth == 1 for c in calls)
    assert trace.calls[0].children == [c.index for c in calls]
    assert trace["block", 2] is calls[2]
    assert trace.find("block", 1) is calls[1]
    assert trace["block"] is calls[0]
    with pytest.raises(KeyError, match="no call 3 of module 'block'"):
        trace.find("block", 3)


def test_shared_module_is_one_module_with_aliases() -> None:
    model = zoo.build(zoo.SharedModule)
    trace = hookscope.trace(model, *zoo.SharedModule.example_inputs()[0], **SHAPES_ONLY)
    assert [c.name for c in trace.calls] == ["", "fc", "fc#1", "head"]
    assert "alias" not in {c.path for c in trace.calls}
    assert trace.modules["fc"].aliases == ("alias",)
    assert "alias" not in trace.modules
    assert trace.model.params_total == sum(p.numel() for p in model.parameters()) == 35


def test_unknown_path_suggests_close_matches() -> None:
    model = zoo.build(zoo.NestedSeeds)
    trace = hookscope.trace(model, *zoo.NestedSeeds.example_inputs()[0], **SHAPES_ONLY)
    with pytest.raises(KeyError, match=r"close matches: \['ab.b'"):
        trace.find("ab.bb")


class CrossCaller(nn.Module):
    """``proj`` is registered on the root but called from inside ``block``'s forward:
    the call tree follows who called whom, not where modules are registered."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.block = _Borrower([self.proj])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.block(x))


class _Borrower(nn.Module):
    def __init__(self, borrowed: list[nn.Module]) -> None:
        super().__init__()
        self.borrowed = borrowed  # a plain list: not registered here
        self.act = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.borrowed[0](x))


def test_calls_are_attributed_by_the_runtime_stack() -> None:
    model = CrossCaller()
    trace = hookscope.trace(model, torch.randn(2, 4), **SHAPES_ONLY)
    rows = [(c.name, c.depth, None if c.parent is None else trace.calls[c.parent].name)
            for c in trace.calls]
    assert rows == [
        ("", 0, None),
        ("block", 1, ""),
        ("proj", 2, "block"),  # registered under the root, called by block
        ("block.act", 2, "block"),
        ("proj#1", 1, ""),
    ]
    assert trace.modules["proj"].depth == 1  # the registration tree is unchanged


def test_unregistered_submodule_runs_inside_its_callers_call() -> None:
    model = zoo.build(zoo.PlainListModel)
    (x,), _ = zoo.PlainListModel.example_inputs()
    trace = hookscope.trace(model, x, **SHAPES_ONLY)
    assert [c.path for c in trace.calls] == ["", "registered.0"]
    assert trace.model.params_total == sum(p.numel() for p in model.parameters()) == 20


# -- select= ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("select", "expected"),
    [
        ("ab.*", ["ab.a", "ab.b"]),
        ("*.c", ["cd.c"]),
        (["ab", "cd.d"], ["ab", "cd.d"]),
        ("<root>", [""]),
        (["<root>", "cd"], ["", "cd"]),
        (lambda path: path.endswith(("a", "d")), ["ab.a", "cd", "cd.d"]),
    ],
    ids=["glob-children", "glob-suffix", "list", "root", "root-and-cd", "callable"],
)
def test_select(select: Any, expected: list[str]) -> None:
    model = zoo.build(zoo.NestedSeeds)
    (x,), _ = zoo.NestedSeeds.example_inputs()
    trace = hookscope.trace(model, x, select=select, **SHAPES_ONLY)
    assert [c.path for c in trace.calls] == expected
    assert_tree_consistent(trace)
    assert total_hooks(model) == 0
    # Only the selected modules carry hooks while tracing.
    with hookscope.Tracer(model, select=select):
        hooked = {p for p, m in model.named_modules() if m._forward_hooks}
    assert hooked == set(expected)


def test_a_selector_that_matches_no_module_is_a_spec_error() -> None:
    model = zoo.build(zoo.NestedSeeds)
    (x,), _ = zoo.NestedSeeds.example_inputs()
    before = snapshot_state(model)
    with pytest.raises(hookscope.SpecError, match=r"select='nothing.matches' matches no module"):
        hookscope.trace(model, x, select="nothing.matches")
    with pytest.raises(hookscope.SpecError, match=r"at='ab\.z\*' matches no module"), \
            hookscope.breakpoint(model, at="ab.z*"):
        pass
    assert_state_unchanged(before, model)
    assert total_hooks(model) == 0


def test_select_parent_is_the_nearest_observed_caller() -> None:
    model = zoo.build(zoo.NestedSeeds)
    (x,), _ = zoo.NestedSeeds.example_inputs()
    trace = hookscope.trace(model, x, select=["<root>", "*.?"], **SHAPES_ONLY)
    assert [(c.path, c.depth, c.parent) for c in trace.calls] == [
        ("", 0, None), ("ab.a", 1, 0), ("ab.b", 1, 0), ("cd.c", 1, 0), ("cd.d", 1, 0),
    ]


@pytest.mark.parametrize(
    "bad",
    [
        5,
        [],
        ["ok", 3],
        [b"bytes"],
    ],
)
def test_bad_selector_is_a_spec_error(bad: Any) -> None:
    model = zoo.build(zoo.NestedSeeds)
    with pytest.raises(hookscope.SpecError, match="selector"):
        hookscope.Tracer(model, select=bad)


# -- Tracer lifecycle --------------------------------------------------------------------


def test_tracer_cannot_be_entered_twice_at_once() -> None:
    model = zoo.build(zoo.NestedSeeds)
    tracer = hookscope.Tracer(model)
    with tracer:
        assert tracer.active
        with pytest.raises(hookscope.HookscopeError, match="already active"), tracer:
            pytest.fail("an active tracer was entered a second time")
        # the failed re-entry did not disturb the running tracer
        model(torch.randn(2, 2))
    assert not tracer.active
    assert tracer.trace is not None and len(tracer.trace.calls) == 7
    assert total_hooks(model) == 0


def test_tracer_reuse_gives_a_fresh_trace() -> None:
    model = zoo.build(zoo.MultiCall)
    tracer = hookscope.Tracer(model)
    (x,), _ = zoo.MultiCall.example_inputs()
    with tracer:
        model(x)
    first = tracer.trace
    with tracer:
        model(x)
        model(x)
    second = tracer.trace
    assert first is not None and second is not None and first is not second
    assert len(first.calls) == 4  # not mutated by the second use
    assert len(second.calls) == 8
    assert [c.call_index for c in second.calls_of("block")] == [0, 1, 2, 3, 4, 5]
    assert [c.call_index for c in second.calls_of("")] == [0, 1]
    assert second.roots == [second.calls[0], second.calls[4]]
    assert total_hooks(model) == 0


def test_nested_tracers_on_one_model_both_record() -> None:
    model = zoo.build(zoo.NestedSeeds)
    (x,), _ = zoo.NestedSeeds.example_inputs()
    with hookscope.Tracer(model) as outer:
        with hookscope.Tracer(model, select="cd.**") as inner:
            model(x)
        model(x)
    assert outer.trace is not None and inner.trace is not None
    assert len(outer.trace.calls) == 14
    assert [c.path for c in inner.trace.calls] == ["cd", "cd.c", "cd.d"]
    assert total_hooks(model) == 0


def test_tracer_rejects_bad_arguments() -> None:
    with pytest.raises(hookscope.SpecError, match=r"torch\.nn\.Module"):
        hookscope.Tracer(torch.randn(2))  # type: ignore[arg-type]
    with pytest.raises(hookscope.SpecError, match="unknown probe option 'colour'"):
        hookscope.Tracer(nn.Linear(2, 2), colour=True)
    with pytest.raises(hookscope.SpecError):
        hookscope.Tracer(nn.Linear(2, 2), probes=[object()])  # type: ignore[list-item]


def test_tracer_exposes_the_current_call() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    seen: list[str | None] = []
    tracer = hookscope.Tracer(model)
    model[0].register_forward_hook(
        lambda m, a, o: seen.append(None if tracer.current_call is None
                                    else tracer.current_call.path)
    )
    with tracer:
        assert tracer.current_call is None
        model(torch.randn(1, 2))
    # the user's hook (registered first) runs before the tracer's exit hook pops "0"
    assert seen == ["0"]


def test_a_user_probe_sees_every_call() -> None:
    events: list[tuple[str, str]] = []

    class Recorder(hookscope.Probe):
        name = "recorder-for-test"

        def on_enter(self, call: Any, module: nn.Module, args: Any, kwargs: Any) -> None:
            events.append(("enter", call.name))

        def on_exit(
            self, call: Any, module: nn.Module, args: Any, kwargs: Any, output: Any, failed: bool
        ) -> None:
            events.append(("exit", call.name))

    model = zoo.build(zoo.MultiCall)
    hookscope.trace(model, *zoo.MultiCall.example_inputs()[0], probes=[Recorder()],
                    **SHAPES_ONLY)
    assert events == [("enter", "")] + [
        e for i in ("block", "block#1", "block#2") for e in (("enter", i), ("exit", i))
    ] + [("exit", "")]


# -- inputs -------------------------------------------------------------------------------


def test_input_size_and_dtypes() -> None:
    model = zoo.build(zoo.TiedWeights)
    trace = hookscope.trace(model, input_size=(3, 7), dtypes=[torch.int64], **SHAPES_ONLY)
    assert [(m.path, m.shape, m.dtype) for m in trace.inputs] == [("args[0]", (3, 7), "int64")]
    assert [o.shape for o in trace.outputs] == [(3, 7, zoo.TiedWeights.VOCAB)]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda m: hookscope.trace(m, torch.randn(2, 4), input_size=(2, 4)), "not both"),
        (lambda m: hookscope.trace(m), "no inputs given"),
        (lambda m: hookscope.trace(m, torch.randn(2, 4), dtypes=[torch.int64]), "dtypes"),
        (lambda m: hookscope.trace(m, input_size=(2, "4")), "input_size"),
        (lambda m: hookscope.trace("model", torch.randn(2)), "torch.nn.Module"),
        (lambda m: hookscope.trace(m, kwargs=[1]), "kwargs"),
        (lambda m: hookscope.summary(m, torch.randn(2, 4), depth=-1), "depth"),
    ],
)
def test_bad_options_are_spec_errors(call: Any, match: str) -> None:
    model = zoo.build(zoo.MultiCall)
    with pytest.raises(hookscope.SpecError, match=match):
        call(model)
    assert total_hooks(model) == 0


def test_backward_with_all_params_frozen_is_a_spec_error() -> None:
    model = zoo.build(zoo.FrozenParams).requires_grad_(False)
    with pytest.raises(hookscope.SpecError, match="requires grad"):
        hookscope.trace(model, torch.randn(2, 4), backward=True, **SHAPES_ONLY)
    assert total_hooks(model) == 0
    assert not any(p.requires_grad for p in model.parameters())


class _FlipsTrainingInForward(nn.Module):
    """A forward with a side effect on the module's own flags."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.fc.train(not self.fc.training)
        self.fc.weight.requires_grad_(False)
        return self.fc(x)


def test_trace_puts_flags_changed_during_its_forward_back() -> None:
    model = _FlipsTrainingInForward().eval()
    hookscope.trace(model, torch.ones(1, 2))
    assert [m.training for m in model.modules()] == [False, False]
    assert model.fc.weight.requires_grad


def test_a_forward_in_training_mode_leaves_batchnorm_statistics_as_they_were() -> None:
    """``summary``/``trace``/``capture`` run the forward for their caller, often on
    random inputs: a trained model's running statistics must not move."""
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.resnet18(num_classes=10).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    hookscope.summary(model, input_size=(2, 3, 32, 32))
    hookscope.trace(model, torch.randn(2, 3, 32, 32), backward=True)
    hookscope.capture(model, torch.randn(2, 3, 32, 32), select="layer1.0.bn1")
    after = model.state_dict()
    assert [k for k in before if not torch.equal(before[k], after[k])] == []
    assert int(model.bn1.num_batches_tracked) == 0
    with hookscope.Tracer(model):  # the user's own forward: its updates are the user's
        model(torch.randn(2, 3, 32, 32))
    assert int(model.bn1.num_batches_tracked) == 1
    assert not torch.equal(model.bn1.running_mean, before["bn1.running_mean"])


def test_a_graph_built_before_the_look_still_runs_its_backward() -> None:
    """BatchNorm saves its running statistics for the backward: written back in place,
    they must get their version back too, or the user's pending backward raises."""
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1)).train()
    x = torch.randn(8, 3)
    out = model(x)  # the user's forward, backward still to come
    stats = model[1].running_mean.clone()
    hookscope.summary(model, input_size=(8, 3))
    hookscope.trace(model, torch.randn(8, 3))
    hookscope.capture(model, torch.randn(8, 3), select="1")
    assert torch.equal(model[1].running_mean, stats)
    out.sum().backward()  # raised "modified by an inplace operation" before
    assert model[0].weight.grad is not None


class _OddBuffers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        with torch.inference_mode():
            self.register_buffer("table", torch.ones(4))
        self.register_buffer("scale", torch.ones(1).expand(4))  # overlapping memory

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.scale + self.table


def test_buffers_that_cannot_be_written_in_place_do_not_fail_the_trace() -> None:
    model = _OddBuffers().train()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # unchanged: nothing to put back, nothing to say
        hookscope.trace(model, torch.randn(2, 4))
        hookscope.summary(model, input_size=(2, 4))


def test_a_tracer_around_a_training_loop_keeps_what_the_loop_did_to_buffers() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).train()
    with hookscope.Tracer(model, restore_state=True):
        for _ in range(3):
            model(torch.randn(8, 3))
        model.eval()
    assert model.training  # the flag is put back
    assert int(model[1].num_batches_tracked) == 3  # the statistics are the loop's


class _ReplacesItsBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("seen", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen = torch.ones(5)  # a new object, another shape
        return x * 2


def test_a_buffer_replaced_in_the_forward_is_put_back() -> None:
    model = _ReplacesItsBuffer().train()
    buffer = model.seen
    hookscope.trace(model, torch.ones(2))
    assert model.seen is buffer and torch.equal(buffer, torch.zeros(3))
    model.eval()  # no torch module changes buffers in eval mode: not copied
    hookscope.trace(model, torch.ones(2))
    assert torch.equal(model.seen, torch.ones(5))


class _RegistersOnFirstCall(nn.Module):
    """A counter made on the first call (as a cache of rotary tables may be)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.register_buffer("kept", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not hasattr(self, "steps"):
            self.register_buffer("steps", torch.zeros((), dtype=torch.long))
            self.register_buffer("cache", torch.ones(2), persistent=False)
            self.proj = nn.Linear(2, 2)  # a layer built on the first call
            self.fc.scale = nn.Parameter(torch.ones(2))
        self.steps += 1
        out: torch.Tensor = self.proj(self.fc(x)) * self.fc.scale
        return out


@pytest.mark.parametrize("training", [True, False])
def test_what_a_run_for_the_caller_registers_is_removed(training: bool) -> None:
    """Buffers, parameters and submodules the forward registers: the state_dict gained
    keys, and loading the model's own checkpoint then failed."""
    model = nn.Sequential(_RegistersOnFirstCall()).train(training)
    checkpoint = model.state_dict()
    for run in (hookscope.summary, hookscope.trace):
        run(model, torch.randn(3, 2))
        assert model.state_dict().keys() == checkpoint.keys()
        assert list(model[0]._buffers) == ["kept"]
        assert not model[0]._non_persistent_buffers_set
        assert list(model[0]._modules) == ["fc"]
        assert list(model[0].fc._parameters) == ["weight", "bias"]
    model.load_state_dict(checkpoint)  # strict
    with hookscope.Tracer(model):  # the user's own forward keeps what it made
        model(torch.randn(3, 2))
    assert int(model[0].steps) == 1 and "0.steps" in model.state_dict()


def test_a_run_for_the_caller_leaves_the_random_stream_where_it_was() -> None:
    """Dropout in training mode draws from the global generator: a summary() in a
    seeded training script changed every draw after it."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train()
    x = torch.randn(8, 4)
    torch.manual_seed(0)
    expected = model(x)  # the oracle: the same seed, no hookscope call before
    runs = {"summary": hookscope.summary, "trace": hookscope.trace,
            "capture": lambda m, x: hookscope.capture(m, x, select="0")}
    for name, run in runs.items():
        torch.manual_seed(0)
        run(model, x)
        assert torch.equal(model(x), expected), name


def test_tracer_keeps_what_the_users_own_code_changed_inside_the_block() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Dropout()).train()
    with hookscope.Tracer(model):
        model.eval()
        model[0].weight.requires_grad_(False)
        model(torch.ones(1, 2))
    assert not any(m.training for m in model.modules())
    assert not model[0].weight.requires_grad


@pytest.mark.parametrize("option", ["time", "stats", "shapes"])
def test_probe_switches_must_be_booleans(option: str) -> None:
    with pytest.raises(hookscope.SpecError, match=f"{option}= must be True or False"):
        hookscope.Tracer(nn.Linear(2, 2), **{option: "yes"})


@pytest.mark.parametrize("options, name", [
    ({"backward": "yes"}, "backward"),  # it named grads=, the option it is passed on as
    ({"grad": "no"}, "grad"),  # "no" is truthy: it ran with autograd on
    ({"grads": 0}, "grads"),
])
def test_trace_refuses_a_flag_that_is_not_a_bool_naming_it(
    options: dict[str, object], name: str
) -> None:
    with pytest.raises(hookscope.SpecError, match=f"^{name}= must be True or False"):
        hookscope.trace(nn.Linear(2, 2), torch.ones(1, 2), **options)  # type: ignore[arg-type]


def test_summary_and_tracer_refuse_a_flag_that_is_not_a_bool() -> None:
    with pytest.raises(hookscope.SpecError, match=r"^fold= must be True or False"):
        hookscope.summary(nn.Linear(2, 2), torch.ones(1, 2), fold="no")  # type: ignore[arg-type]
    with pytest.raises(hookscope.SpecError, match=r"^restore_state= must be True or False"):
        hookscope.Tracer(nn.Linear(2, 2), restore_state="no")  # type: ignore[arg-type]


def test_hooks_refuses_include_hookscope_that_is_not_a_bool() -> None:
    with pytest.raises(hookscope.SpecError, match="include_hookscope= must be True or False"):
        hookscope.hooks(nn.Linear(2, 2), include_hookscope="no")  # type: ignore[arg-type]
