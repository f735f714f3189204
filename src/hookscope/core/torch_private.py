"""Every use of a private torch API, in one module.

hookscope relies on a few things torch does not promise: that every module call looks
``Module._call_impl`` up when it runs (the exclusive fast path stands in for it), the
registries of global module hooks, the sources of ``Module._call_impl`` and
``Module._slow_forward`` and ``torch.jit.trace``'s scope map
(``torch.jit._trace._trace_module_map``), autograd's node sequence numbers and
current node, the saved-tensor hooks currently active, the execution engine's
end-of-backward callback queue, functorch's wrapper check, the dispatcher's kernel
table and the guard that turns Python dispatch off. Each is wrapped here with a
fallback for a torch release that changed it: the fallback **warns once**
(``HookscopeTorchWarning``) and degrades that one feature, never silently.
``tests/core/test_torch_private.py`` checks every assumption against the installed
torch, so a release that breaks one fails a test by name.

Nothing outside this module touches these APIs; ``torch.utils._pytree`` (the
documented way to walk nested values) is imported here too.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext, suppress
from types import CodeType, TracebackType
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as _torch_module
from torch.utils import _pytree as pytree

__all__ = [
    "HookscopeTorchWarning",
    "accumulates_now",
    "batched",
    "call_impl_replaceable",
    "call_impl_shortcut",
    "current_autograd_node",
    "current_graph_task_id",
    "dispatch_has_composite_kernel",
    "dispatch_off",
    "global_module_hooks_present",
    "graph_task_id_function",
    "graph_task_running",
    "hooks_first",
    "is_functorch_wrapped",
    "jit_trace_scopes",
    "jit_tracing_paused",
    "next_sequence_nr",
    "node_sequence_nr",
    "overrides_call_impl",
    "pytree",
    "queue_end_of_backward",
    "raised_in_call_of",
    "replace_call_impl",
    "saved_tensor_default_hooks",
    "scaler_found_inf",
    "set_versions",
    "stand_in_call_impl",
    "torch_call_impl",
    "unwrapped_dispatch_mode",
    "vmap_running",
]


class HookscopeTorchWarning(UserWarning):
    """This torch release changed a private API hookscope uses; one feature degrades."""


_warned: set[str] = set()


def _warn_once(feature: str, what: str) -> None:
    key = f"{feature}: {what}"
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(
        f"hookscope: torch {torch.__version__} {what}; {feature} is degraded "
        "(please report this to hookscope)",
        HookscopeTorchWarning,
        stacklevel=3,
    )


# -- Module._call_impl -------------------------------------------------------------------

_TORCH_CALL_IMPL: Callable[..., Any] = nn.Module._call_impl
_call_impl_lock = threading.Lock()
_CALL_IMPL_CODE = getattr(_TORCH_CALL_IMPL, "__code__", None)
_CALL_IMPL_FILE = getattr(_CALL_IMPL_CODE, "co_filename", None)


def torch_call_impl() -> Callable[..., Any]:
    """torch's own ``Module._call_impl``, as it was when hookscope was imported."""
    return _TORCH_CALL_IMPL


def raised_in_call_of(tb: TracebackType | None) -> tuple[nn.Module, CodeType | None] | None:
    """The module of the innermost ``Module._call_impl`` frame of the traceback ``tb``,
    and the code of the frame it called that the exception left (``None``: it was
    raised there); ``None`` when no module call is on it.

    NB: reads torch's frames: ``_call_impl``'s code (as torch defines it; a stand-in
    calls it too) and its ``self``."""
    found: tuple[nn.Module, CodeType | None] | None = None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code is _CALL_IMPL_CODE:
            module = frame.f_locals.get("self")
            following = tb.tb_next  # past torch's own (``_call_impl``'s ``inner``)
            while following is not None and \
                    following.tb_frame.f_code.co_filename == _CALL_IMPL_FILE:
                following = following.tb_next
            if isinstance(module, nn.Module):
                found = (module, None if following is None else following.tb_frame.f_code)
        tb = tb.tb_next
    return found


def replace_call_impl(expected: Callable[..., Any], new: Callable[..., Any]) -> bool:
    """Set ``Module._call_impl`` to ``new`` if it is ``expected`` now (atomically);
    whether it was. ``nn.Module.__call__`` (``_wrapped_call_impl``) looks it up on the
    module for every call that is not compiled.

    NB: ``torch._dynamo.utils`` keeps the ``_call_impl`` it finds when first imported
    (``unpatched_nn_module_call_impl``); an import during a run (transformers imports
    dynamo lazily) would keep the stand-in for good, so it is put back here too."""
    with _call_impl_lock:
        if nn.Module.__dict__.get("_call_impl") is not expected:
            return False
        nn.Module._call_impl = new  # type: ignore[method-assign]
        dynamo_utils: Any = sys.modules.get("torch._dynamo.utils")
        if getattr(dynamo_utils, "unpatched_nn_module_call_impl", None) is expected and (
            new is _TORCH_CALL_IMPL
        ):
            dynamo_utils.unpatched_nn_module_call_impl = new
        return True


def stand_in_call_impl(
    classes: Iterable[type], new: Callable[..., Any]
) -> Callable[[], None] | None:
    """Make ``new`` the ``_call_impl`` of the module ``classes``, set on each class, so
    only their modules' calls reach it (setting a class attribute invalidates the type
    caches of every subclass, and ``nn.Module`` has hundreds); a function that puts
    torch's back. Atomically, while ``Module._call_impl`` is torch's and no class has a
    ``_call_impl`` of its own or of a base below ``nn.Module`` (another stand-in, or a
    class's own: :func:`overrides_call_impl`): else ``None``, and nothing is set. So is
    a class whose metaclass does not store the function as given. With ``nn.Module``
    itself among them (a model holding a plain ``nn.Module``) it is set there alone:
    every other class finds it there."""
    classes = list(classes)
    targets = [nn.Module] if nn.Module in classes else classes
    done: list[type] = []

    def put_back() -> None:
        with _call_impl_lock:
            for cls in reversed(done):
                if cls is nn.Module:
                    if nn.Module.__dict__.get("_call_impl") is new:
                        nn.Module._call_impl = _TORCH_CALL_IMPL  # type: ignore[method-assign]
                        _unpatch_dynamo(new)
                elif "_call_impl" in cls.__dict__:  # ours, or what a metaclass made of it
                    with suppress(Exception):  # a metaclass may refuse: leave it then
                        delattr(cls, "_call_impl")

    with _call_impl_lock:
        if nn.Module.__dict__.get("_call_impl") is not _TORCH_CALL_IMPL or any(
            overrides_call_impl(cls) for cls in classes if cls is not nn.Module
        ):
            return None
        try:
            for cls in targets:
                done.append(cls)
                setattr(cls, "_call_impl", new)  # noqa: B010  (mypy: a type has no such attribute)
                if cls.__dict__.get("_call_impl") is not new:  # a metaclass changed it
                    raise _Refused
        except Exception:  # _Refused, or a metaclass that refuses outright
            pass
        else:
            return put_back
    put_back()
    return None


class _Refused(Exception):
    """A class that cannot take the stand-in."""


def _unpatch_dynamo(stand_in: Callable[..., Any]) -> None:
    """``torch._dynamo.utils`` keeps the ``_call_impl`` it finds when first imported
    (``unpatched_nn_module_call_impl``): an import while ``stand_in`` stood in for
    ``nn.Module``'s would keep it for good."""
    dynamo_utils: Any = sys.modules.get("torch._dynamo.utils")
    if getattr(dynamo_utils, "unpatched_nn_module_call_impl", None) is stand_in:
        dynamo_utils.unpatched_nn_module_call_impl = _TORCH_CALL_IMPL


def inside_another_module_call() -> bool:
    """Whether the module call now ending (its ``Module.__call__`` frame is on the stack)
    was made inside another module's call: a second ``_wrapped_call_impl`` frame further
    up. (An error leaving a tracer's root is then in that module's hands, not the
    caller's.) ``False`` where torch's ``__call__`` is not ``_wrapped_call_impl``."""
    code = _WRAPPED_CALL_CODE
    if code is None:
        return False
    seen, frame = 0, sys._getframe(1)
    while frame:
        if frame.f_code is code:
            seen += 1
            if seen > 1:
                return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


_WRAPPED_CALL_CODE = getattr(getattr(nn.Module, "_wrapped_call_impl", None), "__code__", None)


def overrides_call_impl(cls: type) -> bool:
    """Whether a module class has a ``_call_impl`` of its own (``torch.compiler.disable``
    on the class puts one there: its calls never reach the stand-in), or a
    ``_slow_forward`` of its own (which torch's ``_call_impl`` calls under
    ``torch.jit.trace``, recording scopes or not: :func:`jit_trace_scopes`)."""
    return any(
        "_call_impl" in k.__dict__ or "_slow_forward" in k.__dict__
        for k in cls.__mro__ if k is not nn.Module
    )


_replaceable: bool | None = None


def call_impl_replaceable() -> bool:
    """Whether a module call goes through ``Module._call_impl`` looked up at call
    time, with the module and its arguments. Checked once per process (not while
    another stand-in is there: then ``False``, asked again next time); without it the
    exclusive fast path is off (per-module hooks, with a warning)."""
    global _replaceable
    if _replaceable is not None:
        return _replaceable
    seen: list[Any] = []
    # NB: the marker is no tensor: this runs inside the first run, where the ops probe's
    # dispatch mode would record making one as an op of the model
    probe, marker, thread = nn.Identity(), object(), threading.get_ident()

    def standin(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        if module is probe and threading.get_ident() == thread:  # not another thread's
            seen.append((args, kwargs))
        return _TORCH_CALL_IMPL(module, *args, **kwargs)

    if not replace_call_impl(_TORCH_CALL_IMPL, standin):
        return False  # someone's stand-in is there now: not an answer about torch
    try:
        out = probe(input=marker)
    finally:
        replace_call_impl(standin, _TORCH_CALL_IMPL)
    _replaceable = out is marker and len(seen) == 1 and seen[0][1].get("input") is marker
    if not _replaceable:
        _warn_once("the speed of trace() and summary()",
                   "does not call modules through Module._call_impl")
    return _replaceable


HookDicts = tuple[dict[int, Any], dict[int, Any], dict[int, Any], dict[int, Any]]
_GLOBAL_HOOK_NAMES = ("_global_forward_pre_hooks", "_global_forward_hooks",
                      "_global_backward_pre_hooks", "_global_backward_hooks")
# NB: the start of torch's ``_call_impl``, whitespace removed: with no hook anywhere it
# calls ``forward`` (``_slow_forward`` under ``torch.jit.trace``) and does nothing else
_CALL_IMPL_SHORTCUT = (
    "forward_call=(self._slow_forwardiftorch._C._get_tracing_state()elseself.forward)"
    "ifnot(self._backward_hooksorself._backward_pre_hooksorself._forward_hooks"
    "orself._forward_pre_hooksor_global_backward_pre_hooksor_global_backward_hooks"
    "or_global_forward_hooksor_global_forward_pre_hooks):"
    "returnforward_call(*args,**kwargs)"
)
_shortcut: list[HookDicts | None] = []


def call_impl_shortcut() -> HookDicts | None:
    """The process-wide forward pre-hook, forward hook, backward pre-hook and backward
    hook dicts, when torch's ``_call_impl`` is known to call ``module.forward(*args,
    **kwargs)`` and nothing else for a module without hooks while all four are empty
    and ``torch.jit.trace`` records no module scopes (:func:`jit_trace_scopes`). The fast
    path then calls ``forward`` itself: one interpreter frame less per module call. ``None``
    (with a warning) when this torch's ``_call_impl`` reads differently. Checked once
    per process, from its source."""
    if not _shortcut:
        import inspect

        try:
            source = inspect.getsource(_TORCH_CALL_IMPL)
        except (OSError, TypeError):
            source = ""
        body = "".join(
            line.split("#", 1)[0].strip() for line in source.splitlines()[1:]
        ).replace(" ", "")
        dicts = tuple(getattr(_torch_module, name, None) for name in _GLOBAL_HOOK_NAMES)
        if body.startswith(_CALL_IMPL_SHORTCUT) and all(isinstance(d, dict) for d in dicts):
            _shortcut.append(dicts)  # type: ignore[arg-type]
        else:
            _shortcut.append(None)
            _warn_once("the speed of trace() and summary()",
                       "changed the hook-free path of Module._call_impl")
    return _shortcut[0]


# NB: torch's ``_slow_forward``, comments and whitespace removed: unless
# ``torch.jit.trace`` records module scopes, it calls ``forward`` and nothing else
_SLOW_FORWARD = (
    "tracing_state=torch._C._get_tracing_state()"
    "ifnottracing_stateorisinstance(self.forward,torch._C.ScriptMethod):"
    "returnself.forward(*input,**kwargs)"
    "recording_scopes=torch.jit._trace._trace_module_mapisnotNone"
    "ifrecording_scopes:name=torch.jit._trace._trace_module_map.get(self,None)"
    "ifname:tracing_state.push_scope(name)else:recording_scopes=False"
    "try:result=self.forward(*input,**kwargs)"
    "finally:ifrecording_scopes:tracing_state.pop_scope()returnresult"
)
_jit_scopes: list[Any] = []


class _TracingStateAsMap:
    """Stands in for ``torch.jit._trace`` where ``_slow_forward`` reads differently:
    its ``_trace_module_map`` is torch.jit.trace's state (``None`` when not tracing)."""

    @property
    def _trace_module_map(self) -> Any:
        return torch._C._get_tracing_state()


@contextlib.contextmanager
def jit_tracing_paused() -> Iterator[None]:
    """``torch.jit.trace`` stops recording while the block runs (``torch._C``'s tracing
    state set aside): probes' work on tensors inside a traced forward (statistics, a
    copy) is not recorded into the user's graph, where torch's alias analysis fails on
    it. Without the private functions, nothing is paused (a warning, once)."""
    get = getattr(torch._C, "_get_tracing_state", None)
    put = getattr(torch._C, "_set_tracing_state", None)
    if get is None or put is None:
        _warn_once("probes inside torch.jit.trace", "has no torch._C._get_tracing_state")
        yield
        return
    state = get()
    put(None)
    try:
        yield
    finally:
        put(state)


def jit_trace_scopes() -> Any:
    """An object whose ``_trace_module_map`` is not ``None`` exactly when torch's
    ``_call_impl`` would call ``_slow_forward`` to some effect: while ``torch.jit.trace``
    records module scopes (``torch.jit._trace`` itself; without scopes to record,
    ``_slow_forward`` only calls ``forward``). The fast path reads it on every module
    call. NB: a module attribute read instead of ``torch._C._get_tracing_state()``, a
    pybind11 call that costs several µs with cold caches, between two kernels. Where
    ``_slow_forward`` reads differently (checked once per process, from its source),
    an object whose ``_trace_module_map`` is the tracing state, with a warning."""
    if not _jit_scopes:
        import inspect

        trace_module = getattr(torch.jit, "_trace", None)
        try:
            source = inspect.getsource(nn.Module._slow_forward)
        except (OSError, TypeError, AttributeError):
            source = ""
        body = "".join(
            line.split("#", 1)[0].strip() for line in source.splitlines()[1:]
        ).replace(" ", "")
        if body == _SLOW_FORWARD and hasattr(trace_module, "_trace_module_map"):
            _jit_scopes.append(trace_module)
        else:
            _jit_scopes.append(_TracingStateAsMap())
            _warn_once("the speed of trace() and summary()",
                       "changed how Module._slow_forward records torch.jit.trace scopes"
                       if source else "has no readable source for Module._slow_forward")
    return _jit_scopes[0]


# -- global module hooks ---------------------------------------------------------------


def hooks_first(handle: Any) -> bool:
    """Make the tensor hooks behind ``handle`` (``Tensor.register_hook``'s, or
    ``register_multi_grad_hook``'s: ``_MultiHandle.handles``) run before the hooks their
    tensors had: an input hook of a call (registered when the call starts) then runs
    before the output hook of the call that made the tensor (registered when that one
    ended), in the order autograd's work happens: the consumer's backward made the
    gradient, the producer's backward receives it.

    Private: a tensor's hooks are the ``OrderedDict`` the handle's ``hooks_dict_ref``
    points to, which autograd iterates in its insertion order (``move_to_end`` does not
    change that order: the dict is rebuilt). ``False``, with a warning, where that does
    not hold: the hooks then run in registration order."""
    for h in getattr(handle, "handles", None) or (handle,):
        ref, key = getattr(h, "hooks_dict_ref", None), getattr(h, "id", None)
        hooks = ref() if callable(ref) else None
        if not isinstance(hooks, dict) or key not in hooks:
            _warn_once("the order of backward events on one tensor",
                       "keeps a tensor's hooks where hookscope cannot reorder them")
            return False
        if next(iter(hooks)) == key:
            continue
        items = list(hooks.items())
        hooks.clear()
        hooks[key] = dict(items)[key]
        hooks.update((k, v) for k, v in items if k != key)
    return True


def scaler_found_inf(scaler: Any, optimizer: Any) -> list[torch.Tensor] | None:
    """After ``scaler.unscale_(optimizer)``: the scaler's per-device flags of an
    Inf/NaN among *all* the optimizer's gradients (device tensors, not read here), which
    decide whether ``scaler.step`` skips the step. ``None``, with a warning, where
    torch keeps them elsewhere (``GradScaler._per_optimizer_states``, private)."""
    try:
        found = scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
        flags = list(found.values())
    except (AttributeError, KeyError, TypeError):
        flags = None
    if flags is None or not all(isinstance(f, torch.Tensor) for f in flags):
        _warn_once("whether a GradScaler skipped a step (GradientMonitor(scaler=...))",
                   "keeps a GradScaler's overflow flags where hookscope cannot read them")
        return None
    return flags


def accumulates_now(p: torch.Tensor) -> bool | None:
    """Read in a tensor hook on the leaf ``p`` during a backward pass: whether this pass
    accumulates into ``p.grad`` (its ``AccumulateGrad`` node runs: ``.backward()``),
    False when it does not (``torch.autograd.grad``, ``backward(inputs=...)`` without
    ``p``); ``None`` when this torch cannot tell (the caller keeps the gradient, which
    costs autograd a copy of it, and warns once). Uses
    ``torch._C._will_engine_execute_node``, which refuses a leaf's node inside
    ``autograd.grad`` (that refusal is the answer: it never accumulates)."""
    try:
        from torch.autograd.graph import get_gradient_edge

        node = get_gradient_edge(p).node
        will_run = torch._C._will_engine_execute_node
    except (ImportError, AttributeError, RuntimeError) as e:
        _warn_once("the memory of gradient recording (grads=True, on_param_grad)",
                   f"cannot tell whether a backward accumulates a gradient ({e})")
        return None
    try:
        return bool(will_run(node))
    except RuntimeError as e:
        if "autograd.grad" in str(e):
            return False
        _warn_once("the memory of gradient recording (grads=True, on_param_grad)",
                   f"cannot tell whether a backward accumulates a gradient ({e})")
        return None


def global_module_hooks_present() -> bool:
    """Whether forward (pre-)hooks registered for every module exist."""
    return bool(
        getattr(_torch_module, "_global_forward_pre_hooks", None)
        or getattr(_torch_module, "_global_forward_hooks", None)
    )


# -- autograd: sequence numbers, current node, graph tasks -----------------------------

_get_sequence_nr: Callable[[], int] | None = getattr(torch._C._autograd, "_get_sequence_nr", None)
_current_node: Callable[[], Any] | None = getattr(torch._C, "_current_autograd_node", None)
_graph_task_id: Callable[[], int] | None = getattr(torch._C, "_current_graph_task_id", None)

#: ``AccumulateGrad`` nodes carry this sequence number: they belong to no call.
NO_SEQUENCE_NR = 2**63


def next_sequence_nr() -> int | None:
    """The sequence number the next autograd node made on this thread will get."""
    if _get_sequence_nr is None:
        _warn_once("attributing backward work to module calls", "has no _get_sequence_nr")
        return None
    return _get_sequence_nr()


def current_autograd_node() -> Any:
    """The autograd node running now on this thread (``None`` outside a backward)."""
    if _current_node is None:
        _warn_once("attributing backward work to module calls", "has no _current_autograd_node")
        return None
    return _current_node()


def node_sequence_nr(node: Any) -> int | None:
    """``node._sequence_nr()``, ``None`` for a node without one (``AccumulateGrad``)."""
    seq = getattr(node, "_sequence_nr", None)
    if seq is None:
        return None
    value: int = seq()
    return None if value >= NO_SEQUENCE_NR else value


def current_graph_task_id() -> int | None:
    """The id of the autograd graph task (backward pass) running on this thread."""
    if _graph_task_id is None:
        _warn_once("telling backward passes apart", "has no _current_graph_task_id")
        return None
    task = _graph_task_id()
    return None if task == -1 else task


def graph_task_id_function() -> Callable[[], int]:
    """A function giving the id of the graph task (backward pass) running on this thread,
    ``-1`` for none: for the hooks, which ask on every module call."""
    if _graph_task_id is None:
        _warn_once("telling backward ops from forward ops", "has no _current_graph_task_id")
        return lambda: -1
    return _graph_task_id


def graph_task_running() -> bool:
    """Whether an autograd graph task (a backward pass) runs on this thread."""
    if _graph_task_id is None:
        _warn_once("telling backward ops from forward ops", "has no _current_graph_task_id")
        return False
    return _graph_task_id() != -1


def queue_end_of_backward(fn: Callable[[], None]) -> bool:
    """Run ``fn`` when the running backward pass ends (call from inside a backward).

    Returns False (and warns once) where the execution engine has no callback queue.
    """
    engine = getattr(torch.autograd.Variable, "_execution_engine", None)
    queue = getattr(engine, "queue_callback", None)
    if queue is None:
        _warn_once("end-of-backward events", "has no _execution_engine.queue_callback")
        return False
    queue(fn)
    return True


# -- saved tensors ----------------------------------------------------------------------

_top_hooks: Callable[[bool], Any] | None = getattr(
    torch._C._autograd, "_top_saved_tensors_default_hooks", None
)


def saved_tensor_default_hooks() -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """The saved-tensor hooks the user has active now (``save_on_cpu``), if any."""
    if _top_hooks is None:
        _warn_once(
            "wrapping the user's saved-tensor hooks", "has no _top_saved_tensors_default_hooks"
        )
        return None
    hooks = _top_hooks(False)
    return None if hooks is None else (hooks[0], hooks[1])


# -- tensors and the dispatcher ---------------------------------------------------------

_functorch_wrapped: Callable[[torch.Tensor], bool] | None = getattr(
    getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor", None
)


def is_functorch_wrapped(t: torch.Tensor) -> bool:
    """Whether ``t`` is a functorch wrapper (``vmap``/``grad`` level): no local data."""
    if _functorch_wrapped is None:
        _warn_once("statistics inside torch.func transforms", "has no is_functorch_wrapped_tensor")
        return False
    return _functorch_wrapped(t)


_functorch_stack: Callable[[], Any] | None = getattr(
    getattr(torch._C, "_functorch", None), "get_interpreter_stack", None
)
_VMAP = getattr(getattr(getattr(torch._C, "_functorch", None), "TransformType", None), "Vmap", None)


def vmap_running() -> bool:
    """Whether a ``torch.func.vmap`` transform runs on this thread (``jacrev`` and
    per-sample gradients use one): each of its tensors holds a batch of values, so a
    norm of one is a batch too, and reading it as a number raises."""
    if _functorch_stack is None or _VMAP is None:
        _warn_once("gradient norms inside torch.func.vmap", "has no get_interpreter_stack")
        return False
    stack = _functorch_stack()
    return bool(stack) and any(level.key() == _VMAP for level in stack)


_set_versions: Callable[..., None] | None = getattr(
    getattr(torch._C, "_autograd", None), "_unsafe_set_version_counter", None
)


def set_versions(tensors: list[torch.Tensor], versions: list[int]) -> bool:
    """Set the version counters of ``tensors`` (a buffer written back to the values it
    had, with the version it had: a graph that saved it before still runs its
    backward). False (and a warning once) where torch has no such function."""
    if _set_versions is None:
        _warn_once("putting buffers back under a saved graph",
                   "has no _autograd._unsafe_set_version_counter")
        return False
    _set_versions(tuple(tensors), tuple(versions))
    return True


def batched(t: torch.Tensor) -> bool:
    """Whether ``t`` is a batch of tensors of a vmap, functorch's or the older one that
    ``torch.autograd.functional.jacobian(vectorize=True)`` and ``is_grads_batched`` use."""
    return any(check is not None and check(t) for check in _BATCHED)


_BATCHED = tuple(
    getattr(getattr(torch._C, "_functorch", None), name, None)
    for name in ("is_batchedtensor", "is_legacy_batchedtensor")
)


def dispatch_has_composite_kernel(func: Any) -> bool:
    """Whether op ``func`` has a ``CompositeImplicitAutograd`` decomposition."""
    key = torch._C.DispatchKey.CompositeImplicitAutograd
    if key in getattr(func, "py_kernels", {}):
        return True
    has_kernel = getattr(torch._C, "_dispatch_has_kernel_for_dispatch_key", None)
    if has_kernel is None:
        _warn_once("decomposing ops without a FLOP formula", "has no dispatcher kernel query")
        return False
    return bool(has_kernel(func._name, key))


# -- Python dispatch -------------------------------------------------------------------

_disable_dispatch: Callable[[], AbstractContextManager[None]] | None = getattr(
    torch._C, "_DisableTorchDispatch", None)


def dispatch_off() -> AbstractContextManager[None]:
    """A guard under which ops skip every ``__torch_dispatch__`` (modes and subclasses).

    For a probe's own check of a plain ``torch.Tensor`` while a dispatch mode is
    active: without it each of the check's ops comes back through the mode's Python
    ``__torch_dispatch__``, only to be recognised as hookscope's work and skipped.
    NB: never around work on tensor subclasses, whose ops need their dispatch.
    """
    if _disable_dispatch is None:
        _warn_once("the speed of finiteness checks", "has no _DisableTorchDispatch")
        return nullcontext()
    return _disable_dispatch()


def unwrapped_dispatch_mode(cls: type[Any]) -> type[Any]:
    """Class decorator for a ``TorchDispatchMode`` subclass: keep its
    ``__torch_dispatch__`` as written (two Python frames fewer per op).

    torch wraps a mode's ``__torch_dispatch__`` in ``torch._disable_dynamo`` when the
    class's ``_should_skip_dynamo()`` is true (the default), so that a compiled region
    never traces it. hookscope's modes run only while a tracer is active, and then
    ``torch.compile`` runs eagerly (``core/process.py``): nothing compiles to keep out.
    """
    raw = cls.__dict__.get("__torch_dispatch__")
    wrapped_by_torch = getattr(raw, "__wrapped__", None)
    if wrapped_by_torch is None:
        _warn_once("the speed of the op log", "no longer wraps __torch_dispatch__")
        return cls
    cls.__torch_dispatch__ = wrapped_by_torch
    cls._should_skip_dynamo = classmethod(lambda c: False)
    return cls
