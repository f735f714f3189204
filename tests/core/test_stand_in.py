"""The stand-in for ``Module._call_impl`` is set on the model's own classes.

``trace()``/``summary()`` set it on each class of the modules they observe
(``torch_private.stand_in_call_impl``), not on ``nn.Module``: setting a class attribute
invalidates the type caches of every subclass. These tests hold what that must not
change: a class's own call path runs, another run's stand-in is never shadowed or
overwritten (threads, nested runs), a metaclass that will not take it leaves nothing
behind, and a lazy module keeps being seen after it becomes its final class. The
oracle is the normal path (a ``Tracer`` block, which never takes the stand-in) or the
model's own output.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from helpers import is_stand_in, total_hooks

SHAPES_ONLY = {"time": False, "stats": False, "memory": False}


def paths(trace: hookscope.Trace) -> list[str]:
    return [c.name for c in trace.calls]


def normal_paths(model: nn.Module, x: torch.Tensor) -> list[str]:
    with torch.no_grad(), hookscope.Tracer(model, **SHAPES_ONLY) as tracer:
        model(x)
    assert tracer.trace is not None
    return paths(tracer.trace)


class Doubling(nn.Module):
    """A class with a call path of its own: every subclass's output is doubled."""

    def _call_impl(self, *args: Any, **kwargs: Any) -> Any:
        return nn.Module._call_impl(self, *args, **kwargs) * 2


class DoublingBlock(Doubling):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class Outputs(hookscope.Probe):
    name = ""

    def __init__(self) -> None:
        self.outputs: dict[str, torch.Tensor] = {}

    def on_exit(self, call: Any, module: Any, args: Any, kwargs: Any, output: Any,
                failed: bool) -> None:
        self.outputs[call.name] = output.detach().clone()


def test_a_base_class_s_own_call_impl_still_runs_for_its_subclasses() -> None:
    torch.manual_seed(0)
    model, x = nn.Sequential(DoublingBlock(), nn.ReLU()), torch.randn(2, 3)
    expected = model(x)
    probe, normal = Outputs(), Outputs()
    hookscope.trace(model, x, probes=[probe], **SHAPES_ONLY)
    assert torch.equal(probe.outputs[""], expected)  # doubled, as without hookscope
    with torch.no_grad(), hookscope.Tracer(model, probes=[normal], **SHAPES_ONLY):
        model(x)
    assert probe.outputs.keys() == normal.outputs.keys()
    assert all(torch.equal(probe.outputs[k], normal.outputs[k]) for k in normal.outputs)
    assert "_call_impl" not in DoublingBlock.__dict__
    assert total_hooks(model) == 0


@torch.compiler.disable
class NotCompiled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class SeesItsCallPath(nn.Module):
    """Notes what its submodule's class calls as ``_call_impl`` during the run."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner, self.seen = inner, []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(type(self).__dict__.get("_call_impl"))
        return self.inner(x)


def test_a_class_with_a_call_impl_of_its_own_keeps_the_rest_of_the_model_on_the_stand_in(
) -> None:
    model = SeesItsCallPath(nn.Sequential(NotCompiled(), nn.ReLU()))
    x = torch.randn(2, 3)
    trace = hookscope.trace(model, x, **SHAPES_ONLY)
    assert is_stand_in(model.seen[-1])  # the fast path is on for every other class
    assert paths(trace) == normal_paths(model, x) == ["", "inner", "inner.0", "inner.0.fc",
                                                     "inner.1"]


class TracesInside(nn.Module):
    """Traces another model of the same classes from inside its forward."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.other = SeesItsCallPath(nn.Sequential(nn.Linear(3, 3)))
        self.inner_trace: hookscope.Trace | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.inner_trace = hookscope.trace(self.other, x, **SHAPES_ONLY)
        return self.fc(x)


def test_a_nested_run_keeps_the_stand_in_for_the_classes_the_outer_run_left_free() -> None:
    model = TracesInside()
    outer = hookscope.trace(model, torch.randn(2, 3), **SHAPES_ONLY)
    assert model.inner_trace is not None
    assert paths(model.inner_trace) == ["", "inner", "inner.0"]
    # the outer run stands in for nn.Linear, SeesItsCallPath... and the inner run took
    # hooks for those; its own classes may still get a stand-in once the outer's is gone
    assert paths(outer) == ["", "other", "other.inner", "other.inner.0", "fc"]
    assert total_hooks(model) == 0


class WrapsFunctions(type):
    """A metaclass that wraps every function set on the class (a registry would)."""

    def __setattr__(cls, name: str, value: Any) -> None:
        if callable(value) and not isinstance(value, type):
            inner = value

            @functools.wraps(inner)
            def value(*args: Any, **kwargs: Any) -> Any:
                return inner(*args, **kwargs)

        super().__setattr__(name, value)


class IgnoresPrivateNames(type):
    """A metaclass that silently keeps private names as they are."""

    def __setattr__(cls, name: str, value: Any) -> None:
        if not name.startswith("_"):
            super().__setattr__(name, value)


class Wrapped(nn.Module, metaclass=WrapsFunctions):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class Ignoring(nn.Module, metaclass=IgnoresPrivateNames):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


@pytest.mark.parametrize("cls", [Wrapped, Ignoring], ids=lambda c: c.__name__)
def test_a_class_whose_metaclass_will_not_take_the_stand_in(cls: type[nn.Module]) -> None:
    model, x = nn.Sequential(cls(), nn.ReLU()), torch.randn(2, 3)
    trace = hookscope.trace(model, x, **SHAPES_ONLY)
    assert paths(trace) == normal_paths(model, x) == ["", "0", "0.fc", "1"]
    assert "_call_impl" not in cls.__dict__
    assert total_hooks(model) == 0


class HoldsAPlainModule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.box = nn.Module()  # a container: its class is nn.Module itself
        self.box.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.box.fc(x)


class Slow(nn.Module):
    """Its forward lasts, with nn.Linear stood in for, until told to go on."""

    def __init__(self, running: threading.Event) -> None:
        super().__init__()
        self.fc, self.running = nn.Linear(3, 3), running

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        self.running.set()
        time.sleep(0.3)
        return y


def test_a_run_that_stands_in_for_nn_module_never_hides_another_threads_stand_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # thread A stands in for nn.Linear while thread B, whose model holds a plain
    # nn.Module, is between its plan and its install: B must see A's stand-in there
    import hookscope.core.engine.observe as observe_module

    running, planned = threading.Event(), threading.Event()
    install = observe_module.install_call_path

    def install_later(tracer: Any, plan: Any) -> Any:
        if threading.current_thread().name == "B":
            planned.set()
            running.wait(5)
        return install(tracer, plan)

    monkeypatch.setattr(observe_module, "install_call_path", install_later)
    x, found = torch.randn(2, 3), {}

    def run_a() -> None:
        planned.wait(5)
        found["A"] = hookscope.trace(Slow(running), x, **SHAPES_ONLY)

    def run_b() -> None:
        found["B"] = hookscope.trace(HoldsAPlainModule(), x, **SHAPES_ONLY)

    threads = [threading.Thread(target=run_a, name="A"), threading.Thread(target=run_b, name="B")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert paths(found["A"]) == ["", "fc"]
    assert paths(found["B"]) == ["", "box.fc"]
    assert "_call_impl" not in nn.Linear.__dict__


class LazyTwice(nn.Module):
    """A lazy layer called twice in one forward: it becomes nn.Linear in the first (its
    initialising pre-hook gives it hooks of the tracer's: they stay on the instance)."""

    def __init__(self) -> None:
        super().__init__()
        self.lazy = nn.LazyLinear(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lazy(self.lazy(x))


def test_a_lazy_module_called_again_after_it_became_its_final_class() -> None:
    model = LazyTwice()
    trace = hookscope.trace(model, torch.randn(2, 3), **SHAPES_ONLY)
    assert paths(trace) == ["", "lazy", "lazy#1"]
    assert type(model.lazy) is nn.LazyLinear  # a run for the caller leaves it lazy
    assert "_call_impl" not in nn.Linear.__dict__


class RepeatsInput(hookscope.Probe):
    """A probe whose install adds a forward pre-hook (the tracer's job, but possible)."""

    name = ""

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def install(self, tracer: Any) -> list[Any]:
        return [self.module.register_forward_pre_hook(lambda m, a: (a[0].repeat(2, 1),))]


class CallsAct(hookscope.Probe):
    """A probe whose install patches a forward to call another module."""

    name = ""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def install(self, tracer: Any) -> list[Any]:
        model, forward = self.model, type(self.model.fc).forward
        model.fc.forward = lambda x: model.act(forward(model.fc, x))

        class PutBack:
            def remove(self) -> None:
                del model.fc.forward

        return [PutBack()]


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.act = nn.Linear(3, 4), nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x))


def test_what_a_probe_s_install_does_to_the_modules_is_planned_for() -> None:
    # runs before these reuse the model's table and plan, read before any install
    model, x = Net(), torch.randn(2, 3)
    for _ in range(3):
        hookscope.summary(model, x)
    repeated = hookscope.trace(model, x, probes=[RepeatsInput(model.fc)], **SHAPES_ONLY)
    assert repeated.find("fc").inputs[0].shape == (4, 3)  # what forward received
    patched = hookscope.trace(model, x, probes=[CallsAct(model)], **SHAPES_ONLY)
    assert [(c.name, c.depth) for c in patched.calls] == [
        ("", 0), ("fc", 1), ("act", 2), ("act#1", 1)]
    assert total_hooks(model) == 0 and "forward" not in vars(model.fc)


def test_a_built_in_probe_s_subclass_with_an_install_of_its_own_is_planned_for() -> None:
    from hookscope.probes.timing import TimingProbe

    class RepeatingTimes(TimingProbe):  # its install adds a hook: not the parent's
        name = "repeating_times"

        def __init__(self, module: nn.Module) -> None:
            super().__init__()
            self.module = module

        def install(self, tracer: Any) -> list[Any]:
            hook = self.module.register_forward_pre_hook(lambda m, a: (a[0].repeat(2, 1),))
            return [*super().install(tracer), hook]

    assert RepeatingTimes.install_touches_modules and not TimingProbe.install_touches_modules
    model, x = Net(), torch.randn(2, 3)
    for _ in range(3):
        hookscope.summary(model, x)
    trace = hookscope.trace(model, x, time=False, stats=False, memory=False,
                            probes=[RepeatingTimes(model.fc)])
    assert trace.find("fc").inputs[0].shape == (4, 3)
    assert total_hooks(model) == 0
