"""Every assumption ``core/torch_private/`` makes about torch, checked against the
installed release: a torch that changes one fails the test named after it, instead of
hookscope degrading silently. Each wrapper's fallback warns once (checked too)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.modules import module as torch_module
from torch.nn.modules.module import register_module_forward_hook

from hookscope.core import torch_private
from hookscope.core.torch_private import _warnings as private_warnings
from hookscope.core.torch_private import autograd as private_autograd
from hookscope.core.torch_private import call_impl as private_call_impl
from hookscope.core.torch_private import dispatch as private_dispatch
from hookscope.core.torch_private import jit as private_jit
from hookscope.core.torch_private import tensor_internals as private_tensors


def test_module_calls_look_call_impl_up_at_call_time() -> None:
    assert torch_private.call_impl_replaceable()
    assert nn.Module.__dict__["_call_impl"] is torch_private.torch_call_impl()
    seen: list[nn.Module] = []

    def standin(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        seen.append(module)
        return torch_private.torch_call_impl()(module, *args, **kwargs)

    model = nn.Sequential(nn.ReLU())
    assert torch_private.replace_call_impl(torch_private.torch_call_impl(), standin)
    try:
        assert not torch_private.replace_call_impl(torch_private.torch_call_impl(), standin)
        model(torch.randn(2))
    finally:
        assert torch_private.replace_call_impl(standin, torch_private.torch_call_impl())
    assert seen == [model, model[0]]
    assert nn.Module.__dict__["_call_impl"] is torch_private.torch_call_impl()


def test_global_module_hooks_are_seen() -> None:
    handle = register_module_forward_hook(lambda *a: None, with_kwargs=True, always_call=True)
    assert torch_private.global_module_hooks_present()
    handle.remove()
    torch_module._global_forward_hooks_with_kwargs.pop(handle.id, None)
    assert not torch_private.global_module_hooks_present()


def test_sequence_numbers_order_the_nodes_autograd_makes() -> None:
    x = torch.randn(3, requires_grad=True)
    first = torch_private.next_sequence_nr()
    y = x * 2
    second = torch_private.next_sequence_nr()
    assert first is not None and second is not None and second > first
    assert torch_private.node_sequence_nr(y.grad_fn) == first
    # an AccumulateGrad node has the "no sequence number" marker
    acc = y.grad_fn.next_functions[0][0]
    assert torch_private.node_sequence_nr(acc) is None


def test_the_current_node_and_graph_task_are_visible_inside_a_backward() -> None:
    seen: list[Any] = []
    x = torch.randn(3, requires_grad=True)
    y = x * 2
    task = torch_private.graph_task_id_function()
    y.register_hook(lambda g: seen.append(
        (torch_private.graph_task_running(), torch_private.current_autograd_node(), task())
    ))
    assert not torch_private.graph_task_running() and task() == -1
    y.sum().backward()
    assert seen and seen[0][0] is True and seen[0][2] != -1


def test_end_of_backward_callbacks_run_after_the_pass() -> None:
    order: list[str] = []
    x = torch.randn(3, requires_grad=True)
    y = x * 2

    def hook(grad: torch.Tensor) -> None:
        assert torch_private.queue_end_of_backward(lambda: order.append("end"))
        order.append("hook")

    y.register_hook(hook)
    y.sum().backward()
    assert order == ["hook", "end"]


def test_the_users_saved_tensor_hooks_are_visible() -> None:
    assert torch_private.saved_tensor_default_hooks() is None
    with torch.autograd.graph.save_on_cpu():
        found = torch_private.saved_tensor_default_hooks()
    assert found is not None and all(callable(f) for f in found)


def test_functorch_wrappers_are_recognised() -> None:
    seen: list[bool] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        seen.append(torch_private.is_functorch_wrapped(x))
        return x.sin().sum()

    torch.func.grad(f)(torch.randn(3))
    assert seen == [True]
    assert not torch_private.is_functorch_wrapped(torch.randn(3))


def test_vmap_is_told_from_other_torch_func_transforms() -> None:
    seen: list[bool] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        seen.append(torch_private.vmap_running())
        return x.sin().sum()

    torch.func.grad(f)(torch.randn(3))
    torch.func.vmap(torch.func.grad(f))(torch.randn(2, 3))
    torch.func.vmap(f)(torch.randn(2, 3))
    assert seen == [False, True, True]
    assert not torch_private.vmap_running()


def test_without_the_interpreter_stack_vmap_is_not_seen_and_that_is_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(private_dispatch, "_functorch_stack", None)
    monkeypatch.setattr(private_warnings, "_warned", set())
    with pytest.warns(torch_private.HookscopeTorchWarning, match="inside torch.func.vmap"):
        assert torch_private.vmap_running() is False


def test_batched_tensors_of_either_vmap_are_recognised() -> None:
    seen: list[bool] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        seen.append(torch_private.batched(x))
        return x.sin()

    torch.func.vmap(f)(torch.randn(2, 3))
    torch.autograd.functional.jacobian(f, torch.randn(3), vectorize=True)
    assert seen[0] is True and False in seen[1:]  # jacobian's own forward is not batched
    seen.clear()
    x = torch.randn(3, requires_grad=True)
    y = x.sin()
    y.register_hook(lambda g: seen.append(torch_private.batched(g)))
    torch.autograd.grad(y, x, torch.eye(3), is_grads_batched=True)
    assert seen == [True]
    assert not torch_private.batched(torch.randn(3))


def test_a_buffer_s_version_can_be_set_back() -> None:
    t = torch.zeros(3)
    t.add_(1)
    assert t._version == 1
    assert torch_private.set_versions([t], [0]) is True
    assert t._version == 0


def test_without_the_version_setter_buffers_keep_their_version_and_that_is_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(private_dispatch, "_set_versions", None)
    monkeypatch.setattr(private_warnings, "_warned", set())
    with pytest.warns(torch_private.HookscopeTorchWarning, match="buffers back"):
        assert torch_private.set_versions([torch.zeros(1)], [0]) is False


def test_composite_kernels_are_found_in_the_dispatcher() -> None:
    assert torch_private.dispatch_has_composite_kernel(torch.ops.aten.linear.default)
    assert not torch_private.dispatch_has_composite_kernel(torch.ops.aten.mm.default)


def test_dispatch_off_hides_ops_from_an_active_dispatch_mode() -> None:
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    class Recorder(TorchDispatchMode):  # type: ignore[misc]
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    x = torch.randn(4)
    with Recorder():
        x.sum()
        with torch_private.dispatch_off():
            total = x.cos().sum()
        x.neg()
    assert seen == ["aten.sum.default", "aten.neg.default"]
    assert torch.equal(total, x.cos().sum())


def test_a_dispatch_mode_keeps_its_torch_dispatch_unwrapped() -> None:
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    def handler(self: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        seen.append(str(func))
        return func(*args, **(kwargs or {}))

    class Plain(TorchDispatchMode):  # type: ignore[misc]
        __torch_dispatch__ = handler

    # torch wraps it (torch._disable_dynamo): the wrapper is what we take off
    assert Plain.__dict__["__torch_dispatch__"] is not handler
    assert Plain.__dict__["__torch_dispatch__"].__wrapped__ is handler

    @torch_private.unwrapped_dispatch_mode
    class Fast(TorchDispatchMode):  # type: ignore[misc]
        __torch_dispatch__ = handler

    assert Fast.__dict__["__torch_dispatch__"] is handler
    with Fast():
        torch.randn(2).neg()
    assert "aten.neg.default" in seen


def test_a_missing_private_api_degrades_with_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(private_autograd, "_get_sequence_nr", None)
    monkeypatch.setattr(private_warnings, "_warned", set())
    with pytest.warns(torch_private.HookscopeTorchWarning, match="_get_sequence_nr"):
        assert torch_private.next_sequence_nr() is None
    model = nn.Linear(2, 2)
    x = torch.randn(1, 2, requires_grad=True)
    import hookscope

    # the ops probe still runs; backward ops are then attributed to no call
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch_private.HookscopeTorchWarning)
        trace = hookscope.trace(model, x, ops=True, backward=True, time=False, stats=False)
    assert trace.totals_flops is not None and trace.totals_flops.backward > 0


def test_call_impl_calls_forward_and_nothing_else_without_hooks() -> None:
    """The shortcut the fast path takes: torch's ``_call_impl`` reads as expected, and
    the dicts it checks are torch's process-wide hook dicts, filled in place."""
    dicts = torch_private.call_impl_shortcut()
    assert dicts is not None
    assert dicts == (torch_module._global_forward_pre_hooks, torch_module._global_forward_hooks,
                     torch_module._global_backward_pre_hooks,
                     torch_module._global_backward_hooks)
    assert all(d is getattr(torch_module, n) for d, n in zip(
        dicts, ("_global_forward_pre_hooks", "_global_forward_hooks",
                "_global_backward_pre_hooks", "_global_backward_hooks"), strict=True))
    handle = register_module_forward_hook(lambda *a: None)
    try:
        assert dicts[1]  # registered into the same dict object
    finally:
        handle.remove()
    assert torch_private.jit_trace_scopes()._trace_module_map is None


def test_a_changed_call_impl_turns_the_shortcut_off_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def changed(self: nn.Module, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover
        return self.forward(*args, **kwargs)

    monkeypatch.setattr(private_call_impl, "_TORCH_CALL_IMPL", changed)
    monkeypatch.setattr(private_call_impl, "_shortcut", [])
    monkeypatch.setattr(private_warnings, "_warned", set())
    with pytest.warns(torch_private.HookscopeTorchWarning, match="hook-free path"):
        assert torch_private.call_impl_shortcut() is None
    monkeypatch.undo()
    import hookscope

    asked: list[int] = []
    real = torch._C._get_tracing_state

    def counted() -> Any:  # torch's _call_impl asks it on every call it makes
        asked.append(1)
        return real()

    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    monkeypatch.setattr(torch._C, "_get_tracing_state", counted)
    hookscope.trace(model, torch.randn(1, 2), time=False, stats=False)
    assert asked == []  # the shortcut: forward called without torch's _call_impl
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch_private.HookscopeTorchWarning)
        monkeypatch.setattr(private_call_impl, "_shortcut", [None])
        trace = hookscope.trace(model, torch.randn(1, 2), time=False, stats=False)
    assert [c.path for c in trace.calls] == ["", "0", "1"]
    assert len(asked) == 3  # without it: torch's _call_impl for every call


def test_the_jit_scope_check_is_torch_jit_trace_s_own_module_map() -> None:
    """The fast path asks ``torch.jit._trace._trace_module_map`` on every call: it is
    set exactly while ``torch.jit.trace`` records module scopes (``_slow_forward``
    then pushes them), and ``None`` otherwise, also while a function is traced."""
    scopes = torch_private.jit_trace_scopes()
    assert scopes is torch.jit._trace
    seen: list[bool] = []

    class Look(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(scopes._trace_module_map is not None)
            return x + 1

    look = Look()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.trace is deprecated
        torch.jit.trace(look, torch.randn(2), check_trace=False)
        torch.jit.trace(lambda x: look(x) * 2, torch.randn(2), check_trace=False)
    look(torch.randn(2))
    assert seen == [True, False, False]


def test_a_changed_slow_forward_falls_back_to_the_tracing_state_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def changed(self: nn.Module, *input: Any, **kwargs: Any) -> Any:  # pragma: no cover
        return self.forward(*input, **kwargs)

    monkeypatch.setattr(nn.Module, "_slow_forward", changed)
    monkeypatch.setattr(private_jit, "_jit_scopes", [])
    monkeypatch.setattr(private_warnings, "_warned", set())
    with pytest.warns(torch_private.HookscopeTorchWarning, match="_slow_forward"):
        scopes = torch_private.jit_trace_scopes()
    assert scopes is not torch.jit._trace
    assert scopes._trace_module_map is None
    seen: list[bool] = []

    class Look(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(scopes._trace_module_map is not None)
            return x + 1

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.trace(lambda x: Look()(x), torch.randn(2), check_trace=False)
    assert seen == [True]  # the tracing state itself: torch's path, always correct


def test_a_module_with_its_own_slow_forward_keeps_torch_s_call_path() -> None:
    """Under ``torch.jit.trace`` torch's ``_call_impl`` calls ``_slow_forward``, scopes
    recorded or not: a class that overrides it is left to torch's path."""
    called: list[int] = []

    class Own(nn.Linear):
        def _slow_forward(self, *input: Any, **kwargs: Any) -> Any:
            called.append(1)
            return super()._slow_forward(*input, **kwargs)

    assert torch_private.overrides_call_impl(Own)
    assert not torch_private.overrides_call_impl(nn.Linear)
    import hookscope

    model = nn.Sequential(Own(2, 2), nn.ReLU()).requires_grad_(False)
    traces: list[Any] = []

    def traced(x: torch.Tensor) -> torch.Tensor:
        traces.append(hookscope.trace(model, x, time=False, stats=False))
        return x * 2

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.trace is deprecated; constants
        torch.jit.trace(traced, torch.randn(1, 2), check_trace=False)
    assert called == [1]
    assert [c.path for c in traces[0].calls] == ["", "0", "1"]


def test_a_module_call_inside_another_is_told_from_a_top_level_one() -> None:
    """``inside_another_module_call`` counts ``Module.__call__`` frames: torch's
    ``__call__`` must still be ``_wrapped_call_impl``, with its own code object."""
    assert private_call_impl._WRAPPED_CALL_CODE is not None
    seen: list[bool] = []

    class Probe(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(torch_private.inside_another_module_call())
            return x

    probe = Probe()
    probe(torch.ones(1))
    nn.Sequential(probe)(torch.ones(1))
    assert seen == [False, True]


def test_torch_jit_trace_can_be_paused_inside_a_traced_forward() -> None:
    """``jit_tracing_paused`` sets torch._C's tracing state aside: the work inside is
    not in the graph (a torch that changes these functions fails here)."""
    assert hasattr(torch._C, "_get_tracing_state") and hasattr(torch._C, "_set_tracing_state")
    seen: list[object] = []

    class Probe(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch_private.jit_tracing_paused():
                seen.append(torch._C._get_tracing_state())
                x.abs().sum()  # not recorded
            seen.append(torch._C._get_tracing_state())
            return x + 1

    traced = torch.jit.trace(Probe(), torch.randn(2), check_trace=False)
    assert seen[0] is None and seen[1] is not None  # paused, then tracing again
    assert "aten::abs" not in str(traced.graph) and "aten::add" in str(traced.graph)


def test_a_tensor_hook_can_tell_whether_the_pass_accumulates_into_the_leaf() -> None:
    p, x = nn.Parameter(torch.randn(3)), nn.Parameter(torch.randn(3))
    seen: list[bool | None] = []
    handle = p.register_hook(lambda g: seen.append(torch_private.accumulates_now(p)))
    try:
        (p * x).sum().backward()
        torch.autograd.grad((p * x).sum(), [p])
        torch.autograd.grad((p * x).sum(), [x, p])
        (p * x).sum().backward(inputs=[p])
    finally:
        handle.remove()
    assert seen == [True, False, False, True]


def test_a_tensor_hook_can_tell_which_nodes_the_pass_runs_but_not_its_root() -> None:
    """What ``grad_hooks.on_gradients`` counts on: a node the pass runs reads True, one
    it does not False, and so does the node a pass starts from when nothing else
    reaches it (the reason hookscope does not use ``register_multi_grad_hook`` there)."""
    runs = torch_private.node_runs_function()
    assert runs is not None
    x = torch.randn(3, requires_grad=True)
    y = torch.tanh(x)
    z, unused = y * 2, y * 3
    seen: dict[str, tuple[bool, bool, bool]] = {}
    handles = [
        t.register_hook(lambda g, name=name: seen.__setitem__(
            name, (runs(y.grad_fn), runs(z.grad_fn), runs(unused.grad_fn))))
        for name, t in [("y", y), ("z", z)]
    ]
    try:
        z.backward(torch.ones(3), retain_graph=True)  # z is the root
        first = dict(seen)
        z.sum().backward()  # z is reached from the sum
    finally:
        for handle in handles:
            handle.remove()
    assert first == {"y": (True, False, False), "z": (True, False, False)}
    assert seen == {"y": (True, True, False), "z": (True, True, False)}


def test_without_the_node_check_a_call_with_two_outputs_falls_back_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fallback: torch's own multi-grad hook, which still starts the backward of a call
    whose outputs are both reached from the loss."""
    import hookscope

    monkeypatch.setattr(private_autograd, "_will_run", None)
    monkeypatch.setattr(private_warnings, "_warned", set())

    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            y = self.lin(x)
            return y * 2, y * 3

    model, x = Two(), torch.randn(3, 2)
    warned = pytest.warns(torch_private.HookscopeTorchWarning, match="_will_engine_execute_node")
    with warned, hookscope.Tracer(model, grads=True) as tracer:
        a, b = model(x)
        (a + b).sum().backward()
    assert tracer.trace is not None
    # d sum / d a and d sum / d b: ones, 3 x 2 each
    assert tracer.trace[""].grad_output_norm == pytest.approx(12 ** 0.5, rel=1e-6)


def test_a_tensor_s_hooks_run_in_the_order_of_their_dict_which_can_be_rebuilt() -> None:
    """``hooks_first``: autograd runs a tensor's hooks in the insertion order of the
    ``OrderedDict`` behind the handle (``move_to_end`` alone does not reorder them)."""
    from torch.autograd.graph import register_multi_grad_hook

    x = torch.randn(3, requires_grad=True)
    y = x * 2
    order: list[str] = []
    y.register_hook(lambda g: order.append("first registered"))
    handle = register_multi_grad_hook([y], lambda grads: order.append("ours"))
    assert isinstance(y._backward_hooks, dict)
    assert torch_private.hooks_first(handle) is True
    y.sum().backward()
    assert order == ["ours", "first registered"]
    handle.remove()


def test_hooks_first_warns_when_it_cannot_reorder() -> None:
    class Opaque:
        id = 1

        def hooks_dict_ref(self) -> None:
            return None

    private_warnings._warned.clear()
    with pytest.warns(torch_private.HookscopeTorchWarning, match="cannot reorder"):
        assert torch_private.hooks_first(Opaque()) is False


def test_a_grad_scaler_s_overflow_flags_are_readable_after_unscale() -> None:
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    (scaler.scale(model(torch.randn(3, 2)).sum()) * float("inf")).backward()
    scaler.unscale_(opt)
    flags = torch_private.scaler_found_inf(scaler, opt)
    assert flags is not None and any(bool(f.item()) for f in flags)
    private_warnings._warned.clear()
    with pytest.warns(torch_private.HookscopeTorchWarning, match="overflow flags"):
        assert torch_private.scaler_found_inf(object(), opt) is None


def test_scaler_scale_is_the_loss_scale_get_scale_reads() -> None:
    """GradientMonitor divides backward's norms by it: a torch release that keeps the
    scale elsewhere must fail here (the monitor then reads ``get_scale()``)."""
    scaler = torch.amp.GradScaler("cpu", init_scale=512.0)
    scaler.scale(torch.ones(1))
    scale = torch_private.scaler_scale(scaler)
    assert isinstance(scale, torch.Tensor) and float(scale) == scaler.get_scale() == 512.0
    from hookscope.monitor.scaler import loss_scale

    assert loss_scale(torch.amp.GradScaler("cpu")) is None  # before its first scale()


def test_a_scaler_without_its_private_scale_falls_back_to_get_scale_with_a_warning(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    from hookscope.monitor.scaler import loss_scale

    scaler = torch.amp.GradScaler("cpu", init_scale=256.0)
    scaler.scale(torch.ones(1))
    monkeypatch.delattr(scaler, "_scale")  # a torch that keeps it elsewhere
    monkeypatch.setattr(scaler, "get_scale", lambda: 128.0)
    monkeypatch.setattr(private_warnings, "_warned", set())
    with pytest.warns(torch_private.HookscopeTorchWarning, match="loss scale"):
        scale = loss_scale(scaler)
    assert scale is not None and float(scale) == 128.0
    with warnings.catch_warnings():  # once per process
        warnings.simplefilter("error")
        assert float(torch_private.scaler_scale(scaler)) == 128.0


def test_raised_in_call_of_names_the_module_whose_call_impl_the_exception_left() -> None:
    """The failure report reads torch's ``_call_impl`` frames: a torch release that
    renames or restructures it must fail here."""

    def hook(module: nn.Module, args: Any) -> None:
        raise ValueError("in a pre-hook")

    inner = nn.Linear(2, 2)
    model = nn.Sequential(nn.Sequential(inner))
    handle = inner.register_forward_pre_hook(hook)
    try:
        model(torch.randn(1, 2))
    except ValueError as e:
        found = torch_private.raised_in_call_of(e.__traceback__)
    finally:
        handle.remove()
    assert found is not None
    assert found[0] is inner and found[1] is hook.__code__
    try:
        model(torch.randn(1, 3))  # raised in Linear's forward
    except RuntimeError as e:
        found = torch_private.raised_in_call_of(e.__traceback__)
    assert found is not None and found[0] is inner
    assert found[1] is nn.Linear.forward.__code__
    assert torch_private.raised_in_call_of(None) is None


# -- ops.py, tensors.py, modules.py -------------------------------------------------------


def test_operators_have_the_classes_and_schemas_the_op_log_reads() -> None:
    mm = torch.ops.aten.mm
    assert isinstance(mm, torch_private.OpOverloadPacket)
    assert isinstance(mm.default, torch_private.OpOverload)
    assert mm.default.overloadpacket is mm
    assert isinstance(torch.ops.higher_order.cond, torch_private.HigherOrderOperator)
    schema = torch_private.op_schema(torch.ops.aten.add_.Tensor)
    assert schema is not None and schema.name == "aten::add_"
    assert schema.arguments[0].alias_info.is_write  # what the op checks read
    assert [str(r.type) for r in torch_private.op_schema(mm.default).returns] == ["Tensor"]
    assert torch_private.op_schema(torch.ops.higher_order.cond) is None


def test_a_custom_op_s_overload_is_found() -> None:
    @torch.library.custom_op("hookscope_test::double", mutates_args=())
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    overload = torch_private.custom_op_overload(double)
    assert overload is torch.ops.hookscope_test.double.default
    assert torch_private.custom_op_overload(torch.ops.aten.mm.default) is None


def test_a_dispatch_mode_sees_each_op() -> None:
    seen: list[Any] = []

    class Log(torch_private.TorchDispatchMode):  # type: ignore[misc]
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Log():
        torch.ones(2).neg()
    assert torch.ops.aten.neg.default in seen


def test_version_counters_count_in_place_writes_but_not_of_inference_tensors() -> None:
    t = torch.zeros(3)
    before = torch_private.version_counter(t)
    t.add_(1)
    t[0] = 5
    assert before is not None and torch_private.version_counter(t) == before + 2
    assert torch_private.version_counter(t.view(3)) == before + 2  # views share it
    with torch.inference_mode():
        assert torch_private.version_counter(torch.zeros(3)) is None


def test_a_storage_key_is_shared_by_every_view_of_the_storage() -> None:
    for device in ("cpu", "meta"):
        t = torch.zeros(4, 4, device=device)
        key = torch_private.storage_key(t.untyped_storage())
        assert torch_private.storage_key(t[1:].untyped_storage()) == key
        assert torch_private.storage_key(t.t().untyped_storage()) == key
        assert torch_private.storage_key(t.clone().untyped_storage()) != key


def test_an_uncoalesced_sparse_tensor_gives_its_parts() -> None:
    indices = torch.tensor([[0, 0, 1], [1, 1, 2]])
    t = torch.sparse_coo_tensor(indices, torch.tensor([1.0, 2.0, 3.0]), (2, 3))
    assert not t.is_coalesced()
    got_indices, got_values = torch_private.sparse_coo_parts(t)
    assert torch.equal(got_indices, indices)
    assert torch.equal(got_values, torch.tensor([1.0, 2.0, 3.0]))


def test_foreach_norm_and_mul_match_their_one_tensor_versions() -> None:
    tensors = [torch.randn(3), torch.randn(2, 2, dtype=torch.float16)]
    norms = torch_private.foreach_norm(tensors, 2.0)
    for t, n in zip(tensors, norms, strict=True):
        assert torch.equal(n, torch.linalg.vector_norm(t, 2.0))
    wide = torch_private.foreach_norm(tensors[1:], 2.0, dtype=torch.float32)
    assert wide[0].dtype == torch.float32
    expected = [t * 3 for t in tensors]
    torch_private.foreach_mul_(tensors, [torch.tensor(3.0), torch.tensor(3.0)])
    assert all(torch.equal(t, e) for t, e in zip(tensors, expected, strict=True))


def test_without_foreach_kernels_norms_and_scaling_still_work_and_that_is_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(private_tensors, "_foreach_norm", None)
    monkeypatch.setattr(private_tensors, "_foreach_mul_", None)
    monkeypatch.setattr(private_warnings, "_warned", set())
    t = torch.randn(5)
    with pytest.warns(torch_private.HookscopeTorchWarning, match="_foreach_norm"):
        [norm] = torch_private.foreach_norm([t], 2.0)
    assert torch.equal(norm, torch.linalg.vector_norm(t, 2.0))
    expected = t * 2
    with pytest.warns(torch_private.HookscopeTorchWarning, match="_foreach_mul_"):
        torch_private.foreach_mul_([t], [torch.tensor(2.0)])
    assert torch.equal(t, expected)


def test_every_batch_norm_derives_from_the_base_class() -> None:
    norms = [nn.BatchNorm1d(2), nn.BatchNorm2d(2), nn.BatchNorm3d(2), nn.LazyBatchNorm2d(),
             nn.SyncBatchNorm(2)]
    assert all(isinstance(m, torch_private.BatchNormBase) for m in norms)
    assert not isinstance(nn.LayerNorm(2), torch_private.BatchNormBase)
    assert not isinstance(nn.GroupNorm(1, 2), torch_private.BatchNormBase)


@pytest.mark.parametrize(("name", "register"), [
    ("forward_pre_hooks", "register_module_forward_pre_hook"),
    ("forward_hooks", "register_module_forward_hook"),
    ("backward_pre_hooks", "register_module_full_backward_pre_hook"),
    ("backward_hooks", "register_module_full_backward_hook"),
    ("module_registration_hooks", "register_module_module_registration_hook"),
    ("parameter_registration_hooks", "register_module_parameter_registration_hook"),
    ("buffer_registration_hooks", "register_module_buffer_registration_hook"),
])
def test_global_hooks_are_the_registries_torch_fills(
    name: str, register: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # registering a full backward hook sets this flag for good: keep it to this test
    monkeypatch.setattr(torch_module, "_global_is_full_backward_hook", None)

    def fn(*args: Any) -> None:
        return None

    handle = getattr(torch_module, register)(fn)
    try:
        assert torch_private.global_hooks(name)[handle.id] is fn
    finally:
        handle.remove()
    assert handle.id not in torch_private.global_hooks(name)
    assert torch_private.global_hooks("no_such_hooks") == {}


def test_global_forward_hook_flags_and_legacy_backward_hooks_are_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch_module, "_global_is_full_backward_hook", None)
    handle = register_module_forward_hook(lambda *a: None, with_kwargs=True, always_call=True)
    try:
        assert torch_private.global_hooks("forward_hooks_with_kwargs").get(handle.id)
        assert torch_private.global_hooks("forward_hooks_always_called").get(handle.id)
    finally:
        handle.remove()
        torch_module._global_forward_hooks_with_kwargs.pop(handle.id, None)  # torch keeps it
    assert not torch_private.global_backward_hooks_are_legacy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch deprecates the non-full backward hook
        legacy = torch_module.register_module_backward_hook(lambda *a: None)
    try:
        assert torch_private.global_backward_hooks_are_legacy()
    finally:
        legacy.remove()


def test_anomaly_mode_keeps_the_forward_stack_on_each_node_it_makes() -> None:
    """What the backward hunt of ``find_anomaly`` reads for the model's line."""
    x = torch.ones(2, requires_grad=True)
    assert torch_private.node_forward_stack(x.sqrt().grad_fn) is None  # mode off: none
    torch.autograd.set_detect_anomaly(True, check_nan=False)
    try:
        y = x.sqrt()  # the line
    finally:
        torch.autograd.set_detect_anomaly(False)
    stack = torch_private.node_forward_stack(y.grad_fn)
    assert stack is not None
    assert f'File "{__file__}"' in stack[-1] and "y = x.sqrt()  # the line" in stack[-1]


class _Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * 2


def test_a_custom_function_s_node_names_its_class() -> None:
    x = torch.ones(2, requires_grad=True)
    assert torch_private.custom_function_class(_Twice.apply(x).grad_fn) is _Twice
    assert torch_private.custom_function_class(x.sqrt().grad_fn) is None


def test_a_node_hook_s_handle_tells_when_the_node_is_gone() -> None:
    import gc

    x = torch.ones(2, requires_grad=True)
    y = x.sqrt()
    assert y.grad_fn is not None
    handle = y.grad_fn.register_hook(lambda gi, go: None)
    assert torch_private.hook_table_alive(handle)
    del y
    gc.collect()
    assert not torch_private.hook_table_alive(handle)


def test_torch_machinery_holds_the_files_a_module_call_and_a_backward_run_through() -> None:
    """A breakpoint's stack hides these files: a torch release that moves the module
    call or the backward pass to other files must fail here."""
    from torch.autograd import graph

    for code in (nn.Module.__call__.__code__, nn.Module._call_impl.__code__,
                 torch.Tensor.backward.__code__, torch.autograd.backward.__code__,
                 graph._engine_run_backward.__code__):
        assert torch_private.is_torch_machinery(code.co_filename), code.co_filename
    assert not torch_private.is_torch_machinery(__file__)
    assert not torch_private.is_torch_machinery(nn.Linear.forward.__code__.co_filename)


def test_torch_machinery_in_unknown_files_is_added_with_a_warning(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    from hookscope.core.torch_private import frames

    monkeypatch.setattr(frames, "_MACHINERY", (frames._TORCH_DIR + "autograd/",))
    monkeypatch.setattr(frames, "_machinery", None)
    monkeypatch.setattr(private_warnings, "_warned", set())
    with pytest.warns(torch_private.HookscopeTorchWarning, match="breakpoint"):
        assert torch_private.is_torch_machinery(nn.Module.__call__.__code__.co_filename)
    with warnings.catch_warnings():  # once
        warnings.simplefilter("error")
        assert torch_private.is_torch_machinery(torch.autograd.backward.__code__.co_filename)



def test_fake_tensors_have_storages_of_the_real_size_that_die_with_their_last_tensor() -> None:
    import gc
    import weakref

    from hookscope.core.torch_private import fake

    mode = fake.fake_mode()
    with mode:
        t = torch.empty(3, 5)
        view = t[1:]
    assert fake.is_fake(t) and not fake.is_fake(torch.empty(1))
    storage = t.untyped_storage()
    assert storage.nbytes() == 3 * 5 * 4
    assert view.untyped_storage() is storage  # one Python object per storage
    died: list[bool] = []
    ref = weakref.ref(storage, lambda _r: died.append(True))
    del storage, t
    gc.collect()
    assert not died  # the view keeps it
    del view
    assert died and ref() is None


def test_fake_tensors_refuse_to_read_values() -> None:
    from hookscope.core.torch_private import fake

    with fake.fake_mode():
        t = torch.empty(4)
        with pytest.raises(fake.VALUE_DEPENDENT):
            t.nonzero()


def test_the_cpu_recurrent_kernel_keeps_a_workspace_its_fake_kernel_reports_empty() -> None:
    """The assumption the memory plan's workspace query rests on, and the query against
    the real kernel's own answer."""
    from hookscope.core.torch_private import fake

    op = torch.ops.aten.mkldnn_rnn_layer.default
    assert op in fake.WORKSPACE_OPS

    def args(make: Any) -> list[Any]:
        tensors = [make(12, 3, 8), make(64, 8), make(64, 16), make(64), make(64),
                   make(3, 16), make(3, 16)]
        #        reverse batch_sizes mode(LSTM) hidden layers biases bidir batch_first train
        return [*tensors, False, [], 2, 16, 1, True, False, False, True]

    real = op(*args(torch.randn))[3]
    assert real.numel() > 0
    with fake.fake_mode():
        fake_args = args(torch.empty)
        assert op(*fake_args)[3].numel() == 0
        asked = fake.real_workspace_nbytes(op, tuple(fake_args), {})
    assert asked == real.untyped_storage().nbytes()
    with torch.no_grad():  # the kernel keeps no workspace without gradients
        assert op(*args(torch.randn))[3] is None


def test_a_workspace_kernel_that_refuses_zeros_is_not_asked() -> None:
    from hookscope.core.torch_private import fake

    def refuses(*_: Any, **__: Any) -> Any:
        raise RuntimeError("not on zeros")

    with fake.fake_mode():
        x = torch.empty(3, 4)
    assert fake.real_workspace_nbytes(refuses, (x,), {}) is None
