"""The leaf fast path: in ``trace()``/``summary()`` with no probe that needs a call's
start, the call of a leaf module of ``torch.nn`` stays off the call stack and gets no
start event (``core/engine/fast_path.py``).

The oracle is the normal path: a ``Tracer`` context manager never takes the fast path,
so the same model and inputs must give the same calls, one for one (index, path,
class, call index, depth, parent, children, shapes, errors).
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
import zoo
from helpers import call_rows as rows
from helpers import is_stand_in, total_hooks

SHAPES_ONLY = {"time": False, "stats": False, "memory": False}


def both_paths(
    model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], **flags: bool
) -> tuple[hookscope.Trace, hookscope.Trace]:
    """The trace of ``hookscope.trace`` (fast path) and of a ``Tracer`` (normal path)."""
    options = {**SHAPES_ONLY, **flags}
    fast_error: Exception | None = None
    try:
        fast = hookscope.trace(model, *args, kwargs=kwargs, **options)
    except hookscope.ModelRunError as e:
        fast, fast_error = e.trace, e
    normal_error: Exception | None = None
    with torch.no_grad():
        tracer = hookscope.Tracer(model, restore_state=True, **options)
        try:
            with tracer:
                model(*args, **kwargs)
        except Exception as e:  # the model's own exception, with the trace kept
            normal_error = e
    assert (fast_error is None) == (normal_error is None)
    assert tracer.trace is not None
    return fast, tracer.trace


@pytest.mark.parametrize("cls", zoo.ALL_ZOO, ids=lambda c: c.__name__)
def test_fast_path_records_what_the_normal_path_records(cls: type[zoo.ZooModel]) -> None:
    model = zoo.materialize(zoo.build(cls))
    args, kwargs = cls.example_inputs()
    fast, normal = both_paths(model, args, kwargs)
    assert rows(fast) == rows(normal)
    assert (fast.error is None) == (normal.error is None) == (not cls.RAISES)
    if cls.RAISES:
        assert fast.error is not None and normal.error is not None
        assert fast.error.path == normal.error.path == cls.FAILING_PATH
    assert total_hooks(model) == 0


def test_fast_path_on_a_real_cnn_with_statistics() -> None:
    """The statistics probe has no ``on_enter`` either: it takes the fast path too."""
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    x = torch.randn(1, 3, 64, 64)
    fast, normal = both_paths(model, (x,), {}, stats=True)
    assert rows(fast) == rows(normal)
    assert [c.stats for c in fast.calls] == [c.stats for c in normal.calls]


class Probe(nn.Module):
    """Reports, from inside the forward, how many pre-hooks its leaf child has."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.seen: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(len(self.fc._forward_pre_hooks))
        return self.fc(x)


def test_fast_path_is_taken_only_where_it_is_exact() -> None:
    model = Probe()
    x = torch.randn(2, 3)
    hookscope.summary(model, x)
    with hookscope.Tracer(model):  # user code may run here: the normal path
        model(x)
    # the timing probe needs each call's start, but not its inputs: the global pre-hook
    # sees it, and fc gets no pre-hook of its own
    timed = hookscope.trace(model, x)
    assert timed["fc"].time_ns is not None
    # a probe that reads the inputs on enter: the global pre-hook reads the kwargs from
    # the calling frame of torch's _call_impl (core/fast_path.pre_hook_kwargs_work)
    starts = StartProbe()
    hookscope.trace(model, x, **SHAPES_ONLY, probes=[starts])
    assert model.seen == [0, 1, 0, 0]
    assert starts.entered == ["", "fc"]
    assert total_hooks(model) == 0


class StartProbe(hookscope.Probe):
    """A user probe that needs each call's start."""

    name = ""

    def __init__(self) -> None:
        self.entered: list[str] = []

    def on_enter(self, call: Any, module: Any, args: Any, kwargs: Any) -> None:
        self.entered.append(call.path)


class SubclassedLinear(nn.Linear):
    """A user's subclass of a torch.nn leaf, whose forward calls another module."""

    def __init__(self, other: nn.Module) -> None:
        super().__init__(3, 3)
        self.__dict__["other"] = other  # not registered: not a child

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.other(super().forward(x))


class CallsAcross(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.act = nn.Tanh()
        self.lin = SubclassedLinear(self.act)
        self.plain = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.plain(self.lin(x))


def test_a_users_leaf_that_calls_another_module_keeps_both_hooks() -> None:
    model = CallsAcross()
    fast, normal = both_paths(model, (torch.randn(2, 3),), {})
    assert rows(fast) == rows(normal)
    assert fast.find("act").parent == fast.find("lin").index


def test_a_user_hook_on_a_torch_leaf_that_calls_a_module_keeps_both_hooks() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.Tanh())
    handle = model[0].register_forward_hook(lambda m, a, out: model[1](out))
    try:
        fast, normal = both_paths(model, (torch.randn(2, 3),), {})
    finally:
        handle.remove()
    assert rows(fast) == rows(normal)
    assert [c.name for c in fast.calls] == ["", "0", "1", "1#1"]
    assert fast.find("1").parent == fast.find("0").index
    assert total_hooks(model) == 0


def test_a_torch_leaf_whose_forward_is_patched_on_the_instance_keeps_both_hooks() -> None:
    """As accelerate and hand-written patches do: the new forward may call modules."""
    model = nn.Sequential(nn.Linear(3, 3), nn.Tanh())
    original = model[0].forward
    model[0].forward = lambda x: model[1](original(x))  # type: ignore[method-assign]
    fast, normal = both_paths(model, (torch.randn(2, 3),), {})
    assert rows(fast) == rows(normal)
    assert [c.name for c in fast.calls] == ["", "0", "1", "1#1"]
    assert fast.find("1").parent == fast.find("0").index
    assert total_hooks(model) == 0


def test_global_module_hooks_turn_the_fast_path_off() -> None:
    model = Probe()
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, a, out: None)
    try:
        hookscope.summary(model, torch.randn(2, 3))
    finally:
        handle.remove()
    assert model.seen == [1]


class Fallback(nn.Module):
    """Calls a torch.nn leaf inside an ``except`` block: once after a plain Python
    exception, once to retry the leaf that raised."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.narrow = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            int("not a number")
        except ValueError:
            y = self.fc(x)  # succeeds while a ValueError is being handled
        try:
            z = self.narrow(x)  # raises: 4 features, not 3
        except RuntimeError:
            z = self.narrow(x[:, :3])  # the same leaf again, inside the except
        return y + z


def test_leaf_called_while_an_exception_is_handled_has_not_failed() -> None:
    model = Fallback()
    fast, normal = both_paths(model, (torch.randn(2, 4),), {})
    assert rows(fast) == rows(normal)
    assert fast.error is None
    assert [(c.name, c.error is not None) for c in fast.calls] == [
        ("", False), ("fc", False), ("narrow", True), ("narrow#1", False)
    ]
    assert fast.find("narrow", 1).inputs[0].shape == (2, 3)


def test_a_failing_torch_leaf_is_named_with_its_input_shapes() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(6, 2))
    with pytest.raises(hookscope.ModelRunError, match=r"module '2' \(Linear, call 0\)") as err:
        hookscope.summary(model, torch.randn(5, 4))
    assert err.value.trace.find("2").inputs[0].shape == (5, 8)
    assert err.value.path == "2"
    assert total_hooks(model) == 0


class CopiesALeaf(nn.Module):
    """Deep-copies a leaf inside its forward: the copy carries the hooks of the moment."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import copy

        return copy.deepcopy(self.fc)(self.fc(x))


def test_a_leaf_copied_inside_forward_is_not_the_models_and_breaks_nothing() -> None:
    model = CopiesALeaf()
    x = torch.randn(2, 3)
    with torch.no_grad():
        expected = model(x)
    summary = hookscope.summary(model, x)
    assert [c.name for c in summary.trace.calls] == ["", "fc"]
    assert summary.trace.outputs[0].shape == (2, 3)
    with torch.no_grad():
        assert torch.equal(model(x), expected)
    assert total_hooks(model) == 0


_EXTERNAL = nn.Linear(3, 3)  # called by the model, registered nowhere in it


class KeywordAndExternal(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _EXTERNAL(self.fc(input=x))


@pytest.mark.parametrize("width", [4, 5], ids=["ok", "fc-raises"])
def test_keyword_inputs_and_modules_outside_the_model(width: int) -> None:
    """A leaf called with a keyword argument keeps it among its inputs, also when it
    raises (torch hands a global hook no kwargs then); a module the model calls but
    does not contain is not recorded, as on the normal path."""
    model = KeywordAndExternal(width)
    fast, normal = both_paths(model, (torch.randn(2, 4),), {})
    assert rows(fast) == rows(normal)
    fc = fast.find("fc")
    assert [m.path for m in fc.inputs] == ['kwargs["input"]']
    assert (fc.error is not None) == (width == 5)
    assert [c.path for c in fast.calls] == ["", "fc"]
    assert total_hooks(model) == 0 and total_hooks(_EXTERNAL) == 0


class KwargsProbe(hookscope.Probe):
    """Records the keyword inputs each call's on_enter receives."""

    name = "kwargs_on_enter_test"

    def __init__(self) -> None:
        self.seen: list[tuple[str, list[str]]] = []

    def on_enter(self, call: Any, module: Any, args: Any, kwargs: Any) -> None:
        self.seen.append((call.path, sorted(kwargs)))


class TakesKwargs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Identity()

    def forward(self, x: torch.Tensor, *, scale: float = 1.0) -> torch.Tensor:
        return self.inner(input=x) * scale


def test_on_enter_gets_the_keyword_inputs_on_the_global_path() -> None:
    probe = KwargsProbe()
    hookscope.trace(TakesKwargs(), kwargs={"x": torch.ones(2), "scale": 2.0},
                    **SHAPES_ONLY, probes=[probe])
    assert probe.seen == [("", ["scale", "x"]), ("inner", ["input"])]


class SeesCallImpl(nn.Module):
    """Notes, from inside its forward, what stands in Module._call_impl."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.fail = fail
        self.seen: list[Any] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(type(self.fc)._call_impl)
        if self.fail:
            raise ValueError("boom")
        return self.fc(x)


def test_the_stand_in_for_call_impl_lasts_only_while_the_run_does() -> None:
    from hookscope.core import torch_private

    torchs = torch_private.torch_call_impl()
    model = SeesCallImpl()
    hookscope.summary(model, torch.randn(2, 3))
    assert is_stand_in(model.seen[-1])  # the fast path ran, standing in for nn.Linear's
    assert nn.Linear._call_impl is nn.Module.__dict__["_call_impl"] is torchs
    assert "_call_impl" not in nn.Linear.__dict__ and "_call_impl" not in SeesCallImpl.__dict__
    failing = SeesCallImpl(fail=True)
    with pytest.raises(hookscope.ModelRunError):
        hookscope.trace(failing, torch.randn(2, 3))
    assert is_stand_in(failing.seen[-1]) and nn.Linear._call_impl is torchs
    # a Tracer block (user code runs inside) never replaces it
    with hookscope.Tracer(model):
        model(torch.randn(2, 3))
    assert model.seen[-1] is torchs
    assert total_hooks(model) == total_hooks(failing) == 0


class Bare(nn.Module):
    """A model holding a plain ``nn.Module`` as a container."""

    def __init__(self) -> None:
        super().__init__()
        self.box = nn.Module()
        self.box.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.box.fc(x)


def test_the_stand_in_goes_only_to_the_models_classes() -> None:
    from hookscope.core import torch_private

    seen: dict[str, Any] = {}

    class Inside(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen["inside"] = type(self)._call_impl
            return x

    class Outside(nn.Module):  # no module of the model's: its calls never meet it
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen["outside"] = type(self)._call_impl
            return x

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)
            self.inside = Inside()
            self.__dict__["outside"] = Outside()  # not registered

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.outside(self.inside(self.fc(x)))

    trace = hookscope.trace(Model(), torch.randn(2, 3), **SHAPES_ONLY)
    assert [c.path for c in trace.calls] == ["", "fc", "inside"]
    torchs = torch_private.torch_call_impl()
    assert is_stand_in(seen["inside"]) and seen["outside"] is torchs
    assert nn.Module.__dict__["_call_impl"] is torchs and nn.Linear._call_impl is torchs
    # a model holding a plain nn.Module: nn.Module's own is stood in for, and put back
    bare = hookscope.trace(Bare(), torch.randn(2, 3), **SHAPES_ONLY)
    assert [c.path for c in bare.calls] == ["", "box.fc"]
    assert nn.Module.__dict__["_call_impl"] is torchs


class TracesInside(nn.Module):
    """Runs hookscope.trace on another model from inside its own forward."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
        self.other = nn.Sequential(nn.Linear(3, 2))
        self.inner_trace: hookscope.Trace | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.inner_trace = hookscope.trace(self.other, x, **SHAPES_ONLY)
        return self.inner(x)


def test_a_trace_inside_a_trace_records_both_models_each_in_its_own() -> None:
    model = TracesInside()
    outer = hookscope.trace(model, torch.randn(2, 3), **SHAPES_ONLY)
    inner = model.inner_trace
    assert inner is not None
    # the outer run holds the stand-in, the inner one takes plain hooks: each records
    # its own model's calls (``other`` is part of the outer model too)
    assert [c.path for c in outer.calls] == [
        "", "other", "other.0", "inner", "inner.0", "inner.1"]
    assert [c.path for c in inner.calls] == ["", "0"]
    assert inner["0"].outputs[0].shape == (2, 2)
    assert total_hooks(model) == 0


def test_another_threads_model_is_not_recorded_and_runs_unchanged() -> None:
    import threading

    model = nn.Sequential(nn.Linear(3, 3), nn.Tanh())
    other = nn.Sequential(nn.Linear(3, 3))
    x = torch.randn(2, 3)
    with torch.no_grad():
        expected = other(x)
    started, results = threading.Event(), []

    class Waits(nn.Module):
        def forward(self, t: torch.Tensor) -> torch.Tensor:
            started.set()
            thread.join()  # the other thread runs its model while this run lasts
            return t

    def run_other() -> None:
        started.wait()
        with torch.no_grad():
            results.append(other(x))

    thread = threading.Thread(target=run_other)
    thread.start()
    trace = hookscope.trace(nn.Sequential(model, Waits()), x, **SHAPES_ONLY)
    assert torch.equal(results[0], expected)
    assert [c.path for c in trace.calls] == ["", "0", "0.0", "0.1", "1"]


@pytest.mark.parametrize("how", ["torch.compile", "Module.compile"])
def test_a_compiled_model_gives_every_call_on_the_fast_path(how: str) -> None:
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    x = torch.randn(3, 4)
    eager = hookscope.trace(model, x, **SHAPES_ONLY)
    if how == "torch.compile":
        compiled: nn.Module = torch.compile(model, backend="eager")  # type: ignore[assignment]
    else:
        compiled = model
        compiled.compile(backend="eager")  # in place: calls go to its compiled _call_impl
    compiled(x)  # compile now
    trace = hookscope.trace(compiled, x, **SHAPES_ONLY)
    # the original module's paths either way (torch.compile's wrapper is not a call)
    assert [c.path for c in trace.calls] == [c.path for c in eager.calls]
    assert trace.calls[-1].outputs[0].shape == (3, 2)
    assert total_hooks(model) == 0


@torch.compiler.disable
class NotCompiled(nn.Module):
    """``torch.compiler.disable`` on a class gives it a ``_call_impl`` of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def test_a_class_with_its_own_call_impl_is_recorded_by_hooks() -> None:
    model = nn.Sequential(NotCompiled(), nn.ReLU())
    fast, normal = both_paths(model, (torch.randn(2, 3),), {})
    assert rows(fast) == rows(normal)
    assert [c.path for c in fast.calls] == ["", "0", "0.fc", "1"]


class RaisesOnFailedExit(hookscope.Probe):
    name = ""

    def on_exit(self, call: Any, module: Any, args: Any, kwargs: Any, output: Any,
                failed: bool) -> None:
        if failed:
            raise RuntimeError("probe trouble")


class Fails(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("model trouble")


def test_a_probe_failing_on_a_failed_call_leaves_the_models_exception_to_report() -> None:
    model = nn.Sequential(nn.Linear(3, 3), Fails())
    with pytest.raises(hookscope.ModelRunError) as info:
        hookscope.trace(model, torch.randn(2, 3), probes=[RaisesOnFailedExit()],
                        **SHAPES_ONLY)
    assert "model trouble" in str(info.value)
    assert info.value.trace is not None and info.value.trace.error is not None
    assert info.value.trace.error.path == "1"
    assert any("probe trouble" in note for note in getattr(info.value.__cause__, "__notes__", []))
    assert total_hooks(model) == 0


class ImportsDynamo(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import torch._dynamo.utils  # noqa: F401  (what a lazy import in a library does)

        return x


def test_dynamo_imported_during_a_run_does_not_keep_the_stand_in() -> None:
    import sys

    from hookscope.core import torch_private

    saved = {k: v for k, v in sys.modules.items() if k.startswith("torch._dynamo")}
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is not None:  # already imported: make it look as if it is imported now
        original = utils.unpatched_nn_module_call_impl
    hookscope.trace(nn.Sequential(ImportsDynamo()), torch.randn(2, 3), **SHAPES_ONLY)
    utils = sys.modules["torch._dynamo.utils"]
    assert utils.unpatched_nn_module_call_impl is torch_private.torch_call_impl()
    assert saved or original is None or original is torch_private.torch_call_impl()


class HookedLater(nn.Module):
    """Adds, during its forward, a hook to a leaf that calls another module."""

    def __init__(self) -> None:
        super().__init__()
        self.leaf = nn.Linear(3, 3)
        self.other = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        handle = self.leaf.register_forward_pre_hook(lambda m, a: (self.other(a[0]),))
        try:
            return self.leaf(x)
        finally:
            handle.remove()


def test_a_hook_added_to_a_leaf_during_the_run_keeps_the_call_order() -> None:
    trace = hookscope.trace(HookedLater(), torch.randn(2, 3), **SHAPES_ONLY)
    assert [(c.path, c.parent) for c in trace.calls] == [("", None), ("leaf", 0), ("other", 1)]


class RegistersGlobalHook(nn.Module):
    """Registers a process-wide forward hook between its two children's calls."""

    def __init__(self, seen: list[str]) -> None:
        super().__init__()
        self.first, self.second = nn.ReLU(), nn.Sequential(nn.Tanh())
        self.seen = seen

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.first(x)
        hook = nn.modules.module.register_module_forward_hook(
            lambda m, a, o: self.seen.append(type(m).__name__))
        try:
            return self.second(x)
        finally:
            hook.remove()


def test_a_global_hook_registered_during_the_run_runs_for_the_calls_after_it() -> None:
    """The stand-in calls ``forward`` itself only while torch would (no hook anywhere)."""
    seen: list[str] = []
    trace = hookscope.trace(RegistersGlobalHook(seen), torch.randn(2), **SHAPES_ONLY)
    assert seen == ["Tanh", "Sequential"]
    assert [c.path for c in trace.calls] == ["", "first", "second", "second.0"]


class GradFnProbe(hookscope.Probe):
    """Notes the autograd node type of each call's output."""

    name = "grad_fn_for_tests"

    def install(self, tracer: Any) -> list[Any]:
        self.seen: dict[str, str] = {}
        return []

    def on_exit(self, call: Any, module: nn.Module, args: Any, kwargs: Any, output: Any,
                failed: bool) -> None:
        self.seen[call.path] = type(output.grad_fn).__name__


def test_a_modules_backward_hooks_still_run_on_the_fast_path() -> None:
    """A module with only a backward hook has no forward hook to keep it off the fast
    path: torch's ``_call_impl`` still runs for it, and wraps its output for the hook."""
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 1))
    model[1].register_full_backward_hook(lambda m, gi, go: None)
    probe = GradFnProbe()
    hookscope.trace(model, torch.randn(2, 3), grad=True, probes=[probe], **SHAPES_ONLY)
    assert probe.seen["1"] == "BackwardHookFunctionBackward"


def test_torch_jit_trace_inside_a_trace_gets_its_module_scopes() -> None:
    """Under ``torch.jit.trace`` torch calls ``_slow_forward``, which names each op's
    module scope: the stand-in leaves those calls to torch's ``_call_impl``."""

    class JitInside(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
            self.graphs: list[str] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            traced = torch.jit.trace(self.inner, x)
            self.graphs.append(str(traced.inlined_graph))
            return traced(x)

    model = JitInside()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.trace is deprecated
        trace = hookscope.trace(model, torch.randn(1, 2), **SHAPES_ONLY)
    assert "scope: __module.0" in model.graphs[0] and "scope: __module.1" in model.graphs[0]
    assert trace.calls[0].outputs[0].shape == (1, 2)


def test_every_field_of_a_call_made_on_the_fast_path_is_set() -> None:
    # the stand-in makes Call records inline (core/engine/fast_path.py), leaves when they end,
    # other calls when they start: each must be what the dataclass constructor makes
    import dataclasses

    from hookscope.core.records.trace import Call

    model = nn.Sequential(nn.Linear(3, 3), nn.Sequential(nn.ReLU(), nn.Linear(3, 2)))
    trace = hookscope.trace(model, torch.randn(2, 3), **SHAPES_ONLY)
    assert [c.name for c in trace.calls] == ["", "0", "1", "1.0", "1.1"]
    for call in trace.calls:
        fields = {f.name: getattr(call, f.name) for f in dataclasses.fields(Call)}
        assert Call(**fields) == call
        assert isinstance(call.children, list) and isinstance(call.facts, dict)
        assert call.error is None and call.start_ns is not None
