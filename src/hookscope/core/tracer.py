"""The engine: the one place that registers hooks on a user's model.

:class:`Tracer` is a context manager. On entry it registers, on every module of the
model, a forward pre-hook and a forward hook (``with_kwargs=True``,
``always_call=True``, so it also runs when ``forward`` raises), keeps the runtime call
stack, creates a :class:`~hookscope.core.records.Call` per module execution and hands
it to the probes (``hookscope.probes``). On exit, in a ``finally``, it removes every
handle it registered (with ``restore_state=True``, as ``hookscope.trace`` uses it, it
also puts ``training`` flags and ``requires_grad`` back), and lets the probes finalise
the :class:`~hookscope.core.records.Trace`.

The hooks return ``None``, so the model computes exactly what it computes without
hookscope: outputs are bit-identical.

``trace()`` (in ``hookscope/api.py``) is the one-call form: it runs a forward (and
optionally a backward) under a tracer and returns the trace.
"""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from enum import Enum
from time import perf_counter_ns
from types import TracebackType
from typing import Any

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_hook
from torch.utils.hooks import RemovableHandle

from hookscope.core.handles import CallbackHandle, HandleGroup
from hookscope.core.records import Call, Trace, TraceError, started_call
from hookscope.core.selectors import Selector, compile_selector
from hookscope.core.structure import ModuleTable, module_table
from hookscope.errors import HookscopeError, SpecError
from hookscope.probes.base import PROBES, Probe, overrides

EnterFn = Callable[[Call, nn.Module, tuple[Any, ...], dict[str, Any]], None]
ExitFn = Callable[[Call, nn.Module, tuple[Any, ...], dict[str, Any], Any, bool], None]


class _SharedState(threading.local):
    """What every tracer in this thread must see, so that nested tracers (two tracers on
    one model, or one on a submodule) do not record each other's work as the model's.

    ``internal`` > 0 while any tracer's probe computes on tensors; ``watchers`` counts
    the active tracers with a probe that watches dispatched ops.
    """

    internal = 0
    watchers = 0


_shared = _SharedState()


# One entry of the runtime call stack: the call, its module, and the exception already
# being handled when the call started (the model runs inside an ``except`` block): the
# call failed only if a *different* one is active when it ends. A tuple, not a class:
# one is made per module call, in a hook that runs with cold caches.
_Frame = tuple[Call, nn.Module, "BaseException | None"]


class _ModelState:
    """``training`` flags and ``requires_grad`` of a model, to restore them on exit."""

    def __init__(self, table: ModuleTable) -> None:
        self.modules = [m for _, m in table.members]
        self.training = [m.training for m in self.modules]
        self.parameters = table.parameters
        self.requires_grad = [p.requires_grad for p in self.parameters]

    def restore(self) -> None:
        for m, flag in zip(self.modules, self.training, strict=True):
            if m.training is not flag:
                m.training = flag
        for p, rg in zip(self.parameters, self.requires_grad, strict=True):
            if p.requires_grad is not rg:
                p.requires_grad_(rg)


class Tracer:
    """Observe every module call of ``model`` while the ``with`` block runs.

    Args:
        model: the model to observe. It is not modified: every hook is removed on exit,
            also when the block raises.
        shapes: record input and output shapes and dtypes of every call.
        time: record inclusive and self time per call.
        stats: record activation statistics of every output tensor.
        memory: record output bytes, saved-for-backward bytes and CUDA memory.
        ops: record every aten op with its FLOPs.
        probes: extra :class:`~hookscope.probes.Probe` instances.
        select: only observe modules whose path matches (glob string, list of globs,
            or ``fn(path: str) -> bool``); ``None`` observes every module.
        restore_state: on exit, put every module's ``training`` flag and every
            parameter's ``requires_grad`` back as they were on entry. Off by default:
            hookscope itself changes neither, and what your own code inside the
            ``with`` block changes (``model.eval()``, freezing a layer) is yours to
            keep. ``hookscope.trace`` turns it on, so the forward it runs leaves no trace.

    NB: while the tracer is active, ``torch.compile``d code runs eagerly (compiled code
    skips the hooks of the modules it inlined), TorchScript submodules run unobserved
    (their work counts as their caller's), and a forward pre-hook you register inside
    the block runs after hookscope's (probes that measure on entry, such as timing,
    include it; the inputs recorded are those ``forward`` received).

    Raises:
        SpecError: ``model`` is not an ``nn.Module`` or is a TorchScript module, or an
            option is wrong.

    Example:
        >>> with hookscope.Tracer(model, time=True) as tracer:
        ...     loss = model(x).sum()
        ...     loss.backward()
        >>> print(tracer.trace)
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        shapes: bool = True,
        time: bool = False,
        stats: bool = False,
        memory: bool = False,
        ops: bool = False,
        probes: Iterable[Probe] = (),
        select: Selector | None = None,
        restore_state: bool = False,
        **options: bool,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise SpecError(
                f"hookscope expects a torch.nn.Module, got {type(model).__name__}; "
                "pass the model object, not its output or its class"
            )
        if isinstance(model, torch.jit.ScriptModule):
            raise SpecError(
                f"hookscope cannot observe the TorchScript module {type(model).__name__} "
                "(torch.jit.script/trace): it runs compiled code that calls no module hooks; "
                "pass the nn.Module you scripted instead"
            )
        flags = {"shapes": shapes, "time": time, "stats": stats, "memory": memory, "ops": ops}
        for key, value in options.items():
            if key not in PROBES:
                known = ", ".join(sorted({*PROBES, *flags}))
                raise SpecError(f"unknown probe option {key!r}; known options: {known}")
            flags[key] = value
        for key, value in flags.items():
            if not isinstance(value, bool):
                raise SpecError(
                    f"probe option {key}= must be True or False, got {value!r}; "
                    f"write {key}=True to record it or {key}=False to skip it"
                )
        self.model = model
        self.probes: list[Probe] = _build_probes(flags, probes)
        self._matches = compile_selector(select) if select is not None else None
        self._enters: list[EnterFn] = [
            p.on_enter for p in self.probes if overrides(p, "on_enter")
        ]
        self._exits: list[ExitFn] = [
            _exit_callback(p) for p in reversed(self.probes) if overrides(p, "on_exit")
        ]
        # Hot-path switches: keep the overhead clock only for probes that subtract it
        # (timing), and mark probe work as internal only while a probe that watches the
        # dispatched ops (ops) is active, in this tracer or in one it is nested in: with
        # neither, a hook does only the call bookkeeping.
        self._clocked = any(p.uses_overhead_clock for p in self.probes)
        self._guarded = any(p.watches_ops for p in self.probes)
        self._handles = HandleGroup()
        self._stack: list[_Frame] = []
        self._restore_state = restore_state
        #: Set by ``trace()``/``summary()``, which run nothing but the model inside the
        #: tracer: no user code can add a hook between two calls. See ``_make_leaf_hook``.
        self._exclusive = False
        self._state: _ModelState | None = None
        self._lazy = False
        # Innermost call where the exception now propagating started, and that exception.
        self._failure: tuple[Call, BaseException] | None = None
        self._active = False
        #: Bookkeeping clock (``time.perf_counter_ns``): when the running hook began, and
        #: the total time spent in finished hooks (tracer and probe work). The timing
        #: probe subtracts it, so hookscope's own work is not timed as the model's; a
        #: probe working inside a module's forward (a saved-tensor hook, a dispatch
        #: mode) adds its own time to ``overhead_ns`` for the same reason.
        self.chain_start_ns = 0
        self.overhead_ns = 0
        self.trace: Trace | None = None

    # -- lifecycle ---------------------------------------------------------------

    def __enter__(self) -> Tracer:
        if self._active:
            raise HookscopeError("this Tracer is already active; create a new Tracer instead")
        table = module_table(self.model, extra_repr=False)
        # A lazy module's parameters have no shape until the first forward (counted as
        # 0 elements): count them again on exit, once materialised.
        self._lazy = table.lazy
        self.trace = Trace(
            model=table.summary,
            modules=table.modules,
            probes=[p.name for p in self.probes],
            meta={"torch_version": torch.__version__},
        )
        self._stack.clear()
        self._failure = None
        self._state = _ModelState(table) if self._restore_state else None
        try:
            self._register_module_hooks(table.members)
            for probe in self.probes:
                self._handles.extend(probe.install(self))
            if self._guarded:
                _shared.watchers += 1
                self._handles.add(CallbackHandle(_unwatch))
            depth = max((m.depth for m in table.modules.values()), default=0)
            self._handles.add(_process.acquire(depth + 1))
        except BaseException:
            self._handles.remove()
            raise
        self._active = True
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._active = False
        try:
            self._handles.remove()
        finally:
            if self._state is not None:
                self._state.restore()
            # Calls still on the stack never finished: a BaseException (KeyboardInterrupt)
            # skips torch's always-call hooks.
            if exc is not None:
                for call, _, _ in reversed(self._stack):
                    self._record_failure(call, exc)
            self._stack.clear()
        trace = self.trace
        assert trace is not None
        if exc is not None and trace.error is None:
            # The block failed: name the innermost call where this exception started.
            origin = self._failure
            if origin is not None and _caused_by(exc, origin[1]):
                call = origin[0]
                trace.error = TraceError(call.index, call.path, type(exc).__name__, _message(exc))
            else:
                trace.error = TraceError(None, None, type(exc).__name__, _message(exc))
        if self._lazy:
            table = module_table(self.model, extra_repr=False)
            trace.model, trace.modules = table.summary, table.modules
        for probe in self.probes:
            probe.finalize(trace)
        if exc is not None and trace.error is not None and trace.error.call is not None:
            _add_note(exc, f"hookscope: {describe_failure(trace)}")

    @property
    def active(self) -> bool:
        return self._active

    @property
    def internal(self) -> int:
        """> 0 while a probe computes on tensors itself; the ops probe ignores those ops.

        Shared by every tracer of the thread: a tracer's ops probe also ignores the work
        of the probes of a tracer nested in it."""
        return _shared.internal

    @internal.setter
    def internal(self, value: int) -> None:
        _shared.internal = value

    @property
    def current_call(self) -> Call | None:
        """The innermost module call running now (``None`` outside any module)."""
        return self._stack[-1][0] if self._stack else None

    @contextmanager
    def internal_work(self) -> Iterator[None]:
        """Mark tensor work done by a probe itself, so it is not recorded as the model's."""
        self.internal += 1
        try:
            yield
        finally:
            self.internal -= 1

    # -- hooks -------------------------------------------------------------------

    def _register_module_hooks(self, members: Iterable[tuple[str, nn.Module]]) -> None:
        post_hook = self._make_post_hook()  # one function: it finds its call on the stack
        add, matches = self._handles.add, self._matches
        kinds: dict[type, _Kind] = {}
        # When no probe needs to see a call start and nothing but the model runs, a
        # plain torch.nn leaf module gets only a forward hook (see ``_make_leaf_hook``).
        leaf_exits = self._exclusive and not self._enters and not _global_module_hooks()
        leaves: dict[int, list[Any]] = {}  # id(module) -> [path, class name, calls so far]
        leaf_hook = self._make_leaf_hook(leaves) if leaf_exits else None
        for path, module in members:
            if matches is not None and not matches(path):
                continue
            cls = type(module)
            kind = kinds.get(cls)
            if kind is None:
                kind = kinds[cls] = _kind_of(cls)
            if kind is _Kind.SCRIPTED:
                continue  # NB: TorchScript runs no module hooks; its work is its caller's
            if (
                leaf_hook is not None and kind is _Kind.TORCH_NN and not module._modules
                and not module._forward_hooks and not module._forward_pre_hooks
                and "forward" not in module.__dict__  # NB: a forward patched on the instance
            ):
                leaves[id(module)] = [path, cls.__name__, 0]
                continue
            post = module.register_forward_hook(post_hook, with_kwargs=True, always_call=True)
            add(post)
            pre_hook = self._make_pre_hook(path, cls.__name__, post.id)
            add(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
        if leaf_hook is not None and leaves:
            # NB: one global forward hook serves every leaf: one registration instead of
            # one per leaf (a ResNet-50 has 126). Global forward hooks run before a
            # module's own, and these leaves have none (nor can get any: the run is
            # exclusive); other modules, in this model or elsewhere, are not in
            # ``leaves`` and return at once.
            handle = register_module_forward_hook(leaf_hook, with_kwargs=True, always_call=True)
            add(CallbackHandle(lambda: _remove_global_forward_hook(handle)))

    def _make_pre_hook(
        self, path: str, cls: str, post_id: int
    ) -> Callable[[nn.Module, tuple[Any, ...], dict[str, Any]], None]:
        stack, enters = self._stack, self._enters
        clocked, shared, exc_info = self._clocked, _shared, sys.exc_info
        trace = self.trace
        assert trace is not None
        calls = trace.calls
        count = 0  # calls of this module so far (a module is registered once)

        def pre_hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            nonlocal count
            if clocked:
                start = self.chain_start_ns = perf_counter_ns()
            hooks = module._forward_hooks
            if next(reversed(hooks), post_id) != post_id and post_id in hooks:
                # A forward hook registered after ours (inside the ``with`` block) may
                # replace the output: run ours last, to record what the caller receives.
                # The order of the user's own hooks is unchanged.
                _move_to_end(hooks, post_id)
            index = len(calls)
            if stack:
                parent = stack[-1][0]
                parent.children.append(index)
                call = started_call(index, path, cls, count, len(stack), parent.index)
            else:
                call = started_call(index, path, cls, count, 0, None)
            count += 1
            calls.append(call)
            stack.append((call, module, exc_info()[1]))
            if not enters:
                pass
            elif shared.watchers:  # an ops probe (of this tracer or another) is on
                shared.internal += 1
                try:
                    for fn in enters:
                        fn(call, module, args, kwargs)
                finally:
                    shared.internal -= 1
            else:
                for fn in enters:
                    fn(call, module, args, kwargs)
            if clocked:
                self.overhead_ns += perf_counter_ns() - start

        return pre_hook

    def _make_post_hook(self) -> Callable[[nn.Module, tuple[Any, ...], dict[str, Any], Any], None]:
        stack, exits = self._stack, self._exits
        clocked, shared, exc_info = self._clocked, _shared, sys.exc_info

        def post_hook(
            module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
        ) -> None:
            if clocked:
                start = self.chain_start_ns = perf_counter_ns()
            if stack and stack[-1][1] is module:
                call, _, outer_exc = stack.pop()
            else:
                frame = self._unwind(module)
                if frame is None:
                    return
                call, _, outer_exc = frame
            exc = exc_info()[1]
            failed = exc is not None and exc is not outer_exc
            if failed:
                self._record_failure(call, exc)
            if not exits:
                pass
            elif shared.watchers:
                shared.internal += 1
                try:
                    for fn in exits:
                        fn(call, module, args, kwargs, output, failed)
                finally:
                    shared.internal -= 1
            else:
                for fn in exits:
                    fn(call, module, args, kwargs, output, failed)
            if clocked:
                self.overhead_ns += perf_counter_ns() - start

        return post_hook

    def _make_leaf_hook(self, leaves: dict[int, list[Any]]) -> Callable[..., None]:
        """The one hook of the leaf modules of ``torch.nn`` (``Linear``, ``Conv2d``,
        ``ReLU``, ...) in an exclusive run where no probe has ``on_enter``: a call is
        recorded whole when it ends, saving a pre-hook per call (a quarter of hookscope's
        cost on a ResNet-50 at batch 1). ``leaves`` maps ``id(module)`` to the module's
        ``[path, class name, calls so far]``: one function for every leaf, not a closure
        each, is registered once, globally, and stays in the cache.

        This is exact because such a module's ``forward`` calls no other module, so no
        call can start between its start and its end: the index it gets at the end is
        the one it would have got at the start, and its parent is the call on top of
        the stack. A module with hooks of its own (which may call modules), a user
        subclass, or any module when global module hooks exist, keeps both hooks.
        """
        stack, exits = self._stack, self._exits
        shared, exc_info, caller = _shared, sys.exc_info, sys._getframe
        trace = self.trace
        assert trace is not None and not self._clocked
        calls = trace.calls

        # NB: the pre-hook's call bookkeeping and the post-hook's exit dispatch, inlined
        # on purpose: one more Python call per module call is measurable at batch 1
        # (benchmarks/README.md), and these hooks are the whole hot path.
        def leaf_hook(module: nn.Module, args: tuple[Any, ...], *rest: Any) -> None:
            leaf = leaves.get(id(module))
            if leaf is None:  # not one of this model's leaves
                return
            if len(rest) == 2:
                kwargs, output = rest
            else:
                # NB: when forward raised, torch calls global always-call hooks without
                # the kwargs; they are a local of the frame that calls this hook
                output = rest[0]
                found = caller(1).f_locals.get("kwargs")
                kwargs = found if isinstance(found, dict) else {}
            path, cls, count = leaf
            leaf[2] = count + 1
            index = len(calls)
            if stack:
                parent = stack[-1][0]
                parent.children.append(index)
                call = started_call(index, path, cls, count, len(stack), parent.index)
            else:
                call = started_call(index, path, cls, count, 0, None)
            calls.append(call)
            exc = exc_info()[1]
            # With no pre-hook there is no record of an exception already being handled
            # when the call started (the model calling it in an ``except`` block). The
            # call raised exactly when the exception was caught by the frame that runs
            # this hook: torch runs always-call hooks in the ``except`` of its call.
            tb = None if exc is None else exc.__traceback__
            failed = tb is not None and tb.tb_frame is caller(1)
            if failed:
                assert exc is not None
                self._record_failure(call, exc)
            if shared.watchers:  # an ops probe of an enclosing tracer is on
                shared.internal += 1
                try:
                    for fn in exits:
                        fn(call, module, args, kwargs, output, failed)
                finally:
                    shared.internal -= 1
            else:
                for fn in exits:
                    fn(call, module, args, kwargs, output, failed)

        return leaf_hook

    def _unwind(self, module: nn.Module) -> _Frame | None:
        """The frame of ``module``'s call when it is not on top of the stack: a pre-hook
        registered before ours raised, so our pre-hook never ran for this call; or
        frames above were left by such calls. Unwind to the matching frame."""
        stack = self._stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i][1] is module:
                frame = stack[i]
                del stack[i:]
                return frame
        return None

    def _record_failure(self, call: Call, exc: BaseException | None) -> None:
        """Mark ``call`` failed. ``trace.error`` is set on exit, and only if the exception
        left the block: one that the model catches itself does not fail the trace."""
        assert exc is not None
        if call.error is None:
            call.error = f"{type(exc).__name__}: {_message(exc)}"
        failure = self._failure
        if failure is not None and failure[1] is exc:
            return  # the same exception propagating outwards: keep the innermost call
        if failure is not None and _caused_by(exc, failure[1]) and self._encloses(call, failure[0]):
            return  # re-raised by an enclosing call (``raise ... from e``): keep the origin
        self._failure = (call, exc)

    def _encloses(self, outer: Call, inner: Call) -> bool:
        assert self.trace is not None
        calls = self.trace.calls
        parent = inner.parent
        while parent is not None:
            if parent == outer.index:
                return True
            parent = calls[parent].parent
        return False


def _exit_callback(probe: Probe) -> ExitFn:
    """``probe.on_exit``; one written as ``on_exit(call, module, output, failed)`` (the
    signature before the exit event carried ``args``/``kwargs``) is adapted to it."""
    fn = probe.on_exit
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # no signature to read: assume the current one
        return fn
    positional = [
        p for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if len(positional) != 4 or any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return fn
    old: Callable[[Call, nn.Module, Any, bool], None] = fn  # type: ignore[assignment]

    def adapted(
        call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
        output: Any, failed: bool,
    ) -> None:
        old(call, module, output, failed)

    return adapted


def _move_to_end(hooks: dict[int, Any], key: int) -> None:
    hooks[key] = hooks.pop(key)


class _Kind(Enum):
    """What the tracer needs to know about a module class."""

    SCRIPTED = "scripted"  # TorchScript: runs no module hooks
    TORCH_NN = "torch.nn"  # a class of torch.nn itself, not a subclass of the user's
    OTHER = "other"


def _kind_of(cls: type) -> _Kind:
    if issubclass(cls, torch.jit.ScriptModule):
        return _Kind.SCRIPTED
    if cls.__module__.startswith("torch.nn.modules."):
        return _Kind.TORCH_NN
    return _Kind.OTHER


def _remove_global_forward_hook(handle: RemovableHandle) -> None:
    handle.remove()
    # NB: torch's handle of a global forward hook registered ``with_kwargs=True`` leaves
    # its id in ``_global_forward_hooks_with_kwargs`` (the handle's extra dicts omit
    # it, torch 2.14): take it out too, so the registries are exactly as before.
    from torch.nn.modules import module as torch_module

    torch_module._global_forward_hooks_with_kwargs.pop(handle.id, None)


def _global_module_hooks() -> bool:
    """Whether module hooks registered for every module exist (``register_module_*``):
    they run inside every call and may call other modules."""
    from torch.nn.modules import module as torch_module

    return bool(
        torch_module._global_forward_pre_hooks or torch_module._global_forward_hooks
    )


def _unwatch() -> None:
    _shared.watchers -= 1


class _ProcessSettings:
    """Interpreter and compiler settings hookscope changes while any tracer is active.

    They are process-wide, so they are set when the first tracer starts and put back
    when the last one ends, whatever order tracers end in:

    - the recursion limit: torch runs a module that has hooks through one more inner
      function, so a model nested ``n`` deep needs ``n`` more frames when observed;
      the limit is raised by the depth of the deepest model observed (and room for the
      probes' own frames), so a deep model that runs unobserved runs observed;
    - ``torch.compile``'s stance, ``force_eager``: compiled code skips the hooks of the
      modules it inlined (and, when it compiles, traces hookscope's own hooks), so
      compiled models and submodules run eagerly and every module call is seen. Only
      when dynamo was imported (nothing can have been compiled otherwise), and not
      inside a compiled region.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._limit_before = 0
        self._limit_set = 0
        self._stance: Any = None

    def acquire(self, depth: int) -> CallbackHandle:
        with self._lock:
            if self._active == 0:
                self._limit_before = sys.getrecursionlimit()
            self._active += 1
            needed = self._limit_before + depth + 64
            if sys.getrecursionlimit() < needed:
                sys.setrecursionlimit(needed)
                self._limit_set = needed
            if self._stance is None and "torch._dynamo" in sys.modules:
                with suppress(RuntimeError):  # inside a compiled region: leave it alone
                    self._stance = torch.compiler.set_stance("force_eager")
        return CallbackHandle(self._release)

    def _release(self) -> None:
        with self._lock:
            self._active -= 1
            if self._active:
                return
            stance, self._stance = self._stance, None
            if stance is not None:
                stance.__exit__(None, None, None)
            if self._limit_set and sys.getrecursionlimit() == self._limit_set:
                sys.setrecursionlimit(self._limit_before)  # unless someone changed it since
            self._limit_set = 0


_process = _ProcessSettings()


def _message(exc: BaseException) -> str:
    """``str(exc)``, also for an exception whose ``__str__`` raises (as ``traceback`` does)."""
    try:
        return str(exc)
    except Exception:
        return f"<exception str() failed: {type(exc).__name__} object>"


def _caused_by(exc: BaseException, origin: BaseException) -> bool:
    """Whether ``exc`` is ``origin`` or was raised while handling it (``raise ... from``)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if cur is origin:
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def _build_probes(flags: dict[str, bool], extra: Iterable[Probe]) -> list[Probe]:
    _load_builtin_probes()
    probes: list[Probe] = [PROBES[name]() for name, on in flags.items() if on and name in PROBES]
    missing = [name for name, on in flags.items() if on and name not in PROBES]
    if missing:
        raise SpecError(f"probe(s) {missing} are not available in this version of hookscope")
    for p in extra:
        if not isinstance(p, Probe):
            raise SpecError(f"probes= expects hookscope.probes.Probe instances, got {p!r}")
        if p.name in PROBES and any(q.name == p.name for q in probes):
            # both would write the same fields of every call (``Call.stats`` twice over)
            raise SpecError(
                f"two {p.name} probes in one tracer ({p.name}=True and a "
                f"{type(p).__name__} in probes=, or two in probes=); pass only one of them"
            )
        probes.append(p)
    return sorted(probes, key=lambda p: p.order)


def _load_builtin_probes() -> None:
    import hookscope.probes  # noqa: F401  (registers the built-in probes)


def _add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)`` where Python has it (3.11+)."""
    add_note = getattr(exc, "add_note", None)
    if add_note is not None:
        add_note(note)


def describe_failure(trace: Trace) -> str:
    """One line naming the failing module call and its input shapes."""
    err = trace.error
    if err is None:
        return "no failure recorded"
    if err.call is None:
        return f"{err.exception_type}: {err.message} (outside any module call)"
    call = trace.calls[err.call]
    shapes = ", ".join(f"{m.path}={list(m.shape)}" for m in call.inputs) or "no tensor inputs"
    where = call.path or "<root>"
    return (
        f"{err.exception_type} in module {where!r} ({call.module_class}, call {call.call_index}) "
        f"with inputs {shapes}: {err.message}"
    )
