"""Safety: observing a model changes nothing about it (every hook removed and every flag
restored on each exit path, also when the model raises).

For every public entry point and every zoo model, in train and in eval mode, with and
without ``.grad`` already present on the parameters:

- no hook is left behind (module, tensor and global hook dicts, by id and function);
- the model's state is unchanged: parameter and buffer objects and values (bit for
  bit), ``.grad``, ``requires_grad``, ``training`` flags, module attributes, grad mode;
- outputs are bit-identical to an unobserved run of the same code, and torch's RNG is
  left where the unobserved run leaves it;
- the user's own hooks, registered before, stay registered and run exactly as often
  as in the unobserved run, during and after tracing.

The oracle for "unchanged" is an identical twin (a deep copy made before anything ran)
that runs the same code without hookscope; where the code itself cannot change the
model (no user backward, no BatchNorm/lazy model), the state is also compared with the
snapshot from before. The same holds when the model raises (``RaisingModel``).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
import zoo
from helpers import (
    assert_outputs_identical,
    assert_state_unchanged,
    count_hooks,
    install_user_hooks,
    snapshot_state,
    state_differences,
    tensors_in,
    total_hooks,
)

Args = tuple[Any, ...]
Kwargs = dict[str, Any]
OPTIONAL_PROBES = ("time", "stats", "memory", "ops")


def _available_probes() -> set[str]:
    import hookscope.probes

    return set(hookscope.probes.PROBES)


def require_probes(*names: str) -> None:
    missing = sorted(set(names) - _available_probes())
    if missing:
        pytest.skip(f"probe(s) {missing} are not implemented in this checkout yet")


# -- what the user's code and its unobserved twin do -----------------------------------





def grad_roots(output: Any) -> list[torch.Tensor]:
    return [
        t for t in tensors_in(output)
        if t.requires_grad and (t.is_floating_point() or t.is_complex())
    ]


def user_forward_backward(model: nn.Module, args: Args, kwargs: Kwargs) -> Any:
    """A user's training step: forward, a scalar loss, ``loss.backward()``."""
    out = model(*args, **kwargs)
    roots = grad_roots(out)
    if roots:
        torch.stack([r.float().sum() for r in roots]).sum().backward()
    return out


def user_two_forwards(model: nn.Module, args: Args, kwargs: Kwargs) -> Any:
    with torch.no_grad():
        model(*args, **kwargs)
        return model(*args, **kwargs)


def plain_forward_no_grad(model: nn.Module, args: Args, kwargs: Kwargs) -> Any:
    with torch.no_grad():
        return model(*args, **kwargs)


def plain_forward_and_grad(model: nn.Module, args: Args, kwargs: Kwargs) -> Any:
    """What ``trace(backward=True)`` documents: a forward, then gradients of every
    floating output with ``torch.autograd.grad`` (no ``.grad`` changes)."""
    with torch.enable_grad():
        out = model(*args, **kwargs)
        roots = grad_roots(out)
        if not roots:
            raise hookscope.SpecError("no output requires grad")  # what hookscope raises
        targets = [p for p in model.parameters() if p.requires_grad]
        targets += [t for t in tensors_in((args, kwargs)) if t.requires_grad and t.is_leaf]
        torch.autograd.grad(roots, targets, [torch.ones_like(r) for r in roots],
                            allow_unused=True)
    return out


def plain_nothing(model: nn.Module, args: Args, kwargs: Kwargs) -> Any:
    return None


def keeping_buffers(plain: Callable[[nn.Module, Args, Kwargs], Any]
                    ) -> Callable[[nn.Module, Args, Kwargs], Any]:
    """``plain``, then every buffer's value as it was before (also when it raises): what
    an entry point that runs the forward for its caller promises (``trace``,
    ``summary``, ``capture``, ``find_anomaly``): a forward in training mode does not move
    BatchNorm's running statistics, nor, for a model in training mode, the random number
    generator (dropout's draws)."""

    def run(model: nn.Module, args: Args, kwargs: Kwargs) -> Any:
        saved = [(b, b.detach().clone()) for b in model.buffers()
                 if not isinstance(b, nn.parameter.UninitializedBuffer)]
        rng = torch.get_rng_state() if any(m.training for m in model.modules()) else None
        try:
            return plain(model, args, kwargs)
        finally:
            with torch.no_grad():
                for b, value in saved:
                    b.copy_(value)
            if rng is not None:
                torch.set_rng_state(rng)

    return run


# -- the public entry points -------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """A way to call hookscope on a model, and the same work without hookscope."""

    id: str
    observe: Callable[[nn.Module, Args, Kwargs], Any]
    plain: Callable[[nn.Module, Args, Kwargs], Any]
    probes: tuple[str, ...] = ()
    #: the code under observation is the user's own (a ``with Tracer`` block)
    user_code: bool = False
    #: the work legitimately changes the model (a user's backward fills ``.grad``)
    changes_model: bool = False
    #: observed and plain outputs were made in the same grad mode
    same_grad_mode: bool = True
    #: which module paths the trace observes (``None``: all)
    select: Callable[[str], bool] | None = None


def _trace_entry(name: str, *, backward: bool = False, select: Any = None,
                 **flags: bool) -> Entry:
    probes = tuple(k for k in OPTIONAL_PROBES if flags.get(k, k != "ops"))

    def observe(model: nn.Module, args: Args, kwargs: Kwargs) -> Any:
        return hookscope.trace(model, *args, kwargs=kwargs, backward=backward, select=select,
                               **flags)

    return Entry(
        name, observe,
        keeping_buffers(plain_forward_and_grad if backward else plain_forward_no_grad),
        probes=probes, same_grad_mode=False, select=select,
    )


def _tracer_entry(name: str, user: Callable[..., Any], *, changes_model: bool,
                  **flags: bool) -> Entry:
    probes = tuple(k for k in OPTIONAL_PROBES if flags.get(k))

    def observe(model: nn.Module, args: Args, kwargs: Kwargs) -> Any:
        with hookscope.Tracer(model, **flags) as tracer:
            user(model, args, kwargs)
        return tracer.trace

    return Entry(name, observe, user, probes=probes, user_code=True,
                 changes_model=changes_model)


def _summary_entry(name: str, **options: Any) -> Entry:
    def observe(model: nn.Module, args: Args, kwargs: Kwargs) -> Any:
        return hookscope.summary(model, *args, kwargs=kwargs, **options)

    probes = ("ops",) if options.get("ops") else ()
    return Entry(name, observe, keeping_buffers(plain_forward_no_grad), probes=probes)


def _every_other(path: str) -> bool:
    return len(path) % 2 == 0


ALL_ON = {"shapes": True, "time": True, "stats": True, "memory": True, "ops": True}
NO_OPTIONAL = {"time": False, "stats": False, "memory": False}

ENTRIES: list[Entry] = [
    Entry("inspect", lambda m, a, k: hookscope.inspect(m), plain_nothing),
    Entry("hooks", lambda m, a, k: hookscope.hooks(m), plain_nothing),
    Entry("lint", lambda m, a, k: hookscope.lint(m), plain_nothing),
    _summary_entry("summary"),
    _summary_entry("summary-depth1-ops", depth=1, ops=True),
    _trace_entry("trace-shapes", **NO_OPTIONAL),
    _trace_entry("trace-default"),
    _trace_entry("trace-all", **ALL_ON),
    _trace_entry("trace-all-backward", backward=True, **ALL_ON),
    _trace_entry("trace-select", select=_every_other, **NO_OPTIONAL),
    _tracer_entry("tracer-fwd-bwd-shapes", user_forward_backward, changes_model=True),
    _tracer_entry("tracer-fwd-bwd-all", user_forward_backward, changes_model=True, **ALL_ON),
    _tracer_entry("tracer-two-forwards", user_two_forwards, changes_model=False,
                  time=True, stats=True),
    Entry("annotated-repr", lambda m, a, k: annotate(m, a, k),
          keeping_buffers(plain_forward_no_grad), probes=("time",), same_grad_mode=False),
]


def monitored_step(model: nn.Module, args: Args, kwargs: Kwargs) -> Any:
    """A user's training step (forward, backward) with a GradientMonitor recording it."""
    if not any(p.requires_grad for p in model.parameters()):
        return user_forward_backward(model, args, kwargs)
    with hookscope.GradientMonitor(model, on_anomaly=lambda a: None) as mon:
        out = user_forward_backward(model, args, kwargs)
        mon.step()
    return out


ENTRIES.append(Entry("monitor-step", monitored_step, user_forward_backward, user_code=True,
                     changes_model=True))


def _capture_entry(name: str, *, to_disk: bool = False) -> Entry:
    def observe(model: nn.Module, args: Args, kwargs: Kwargs) -> Any:
        if not to_disk:
            return dict(hookscope.capture(model, *args, kwargs=kwargs, select="**"))
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            acts = hookscope.capture(model, *args, kwargs=kwargs, select="**",
                                     save_to=f"{tmp}/acts", shard_mib=0.01)
            return {k: acts[k] for k in acts}

    return Entry(name, observe, keeping_buffers(plain_forward_no_grad))


def _in_block(name: str, block: Callable[[nn.Module], Any]) -> Entry:
    """A user's training step inside an intervention block. The patches used here
    replace each value by an equal one (x * 1.0, gradient * 1.0, the same arguments),
    so outputs inside the block equal the twin's; check_still_works then checks the
    model after the block."""

    def observe(model: nn.Module, args: Args, kwargs: Kwargs) -> Any:
        with block(model):
            return user_forward_backward(model, args, kwargs)

    return Entry(name, observe, user_forward_backward, user_code=True, changes_model=True)


def _scale_one(m: nn.Module) -> Any:
    return hookscope.patch(m, {"**": hookscope.patches.scale(1.0)})


def _scale_grad_one(m: nn.Module) -> Any:
    return hookscope.patch(m, {"**": hookscope.patches.scale_grad(1.0)})


def _same_inputs(m: nn.Module) -> Any:
    return hookscope.patch_inputs(m, {"**": lambda mod, a, k: (a, k)})


INTERVENTION_ENTRIES: list[Entry] = [
    _capture_entry("capture"),
    _capture_entry("capture-to-disk", to_disk=True),
    _in_block("capture-ctx", lambda m: hookscope.Capture(m, select="**", what="both")),
    _in_block("patch-values", _scale_one),
    _in_block("patch-grad", _scale_grad_one),
    _in_block("patch-inputs", _same_inputs),
]
ENTRIES += INTERVENTION_ENTRIES


@contextlib.contextmanager
def _breaking(model: nn.Module, phase: str) -> Any:
    """hookscope.breakpoint stopping at every call, with a debugger that returns at once."""
    import sys

    saved, sys.breakpointhook = sys.breakpointhook, lambda *a, **k: None
    try:
        with hookscope.breakpoint(model, when=lambda m, v: True, phase=phase):
            yield
    finally:
        sys.breakpointhook = saved


DEBUG_ENTRIES: list[Entry] = [
    Entry("find-anomaly", lambda m, a, k: hookscope.find_anomaly(m, *a, kwargs=k),
          keeping_buffers(plain_forward_no_grad), same_grad_mode=False),
    Entry("find-anomaly-backward",
          lambda m, a, k: hookscope.find_anomaly(m, *a, kwargs=k, backward=True),
          keeping_buffers(plain_forward_and_grad), same_grad_mode=False),
    _in_block("detect-anomaly", lambda m: hookscope.detect_anomaly(m)),
    _in_block("breakpoint-forward", lambda m: _breaking(m, "forward")),
    _in_block("breakpoint-backward", lambda m: _breaking(m, "backward")),
]
ENTRIES += DEBUG_ENTRIES


def annotate(model: nn.Module, args: Args, kwargs: Kwargs) -> str:
    text_before = repr(model)
    trace = hookscope.trace(model, *args, kwargs=kwargs)
    text = hookscope.annotated_repr(model, trace)
    assert repr(model) == text_before  # the annotation was undone
    assert text != text_before
    return text


def _public_entry_points() -> set[str]:
    """Callables in ``hookscope.__all__`` that take a model (not classes of records)."""
    return {
        name for name in hookscope.__all__
        if callable(getattr(hookscope, name)) and name in KNOWN_MODEL_ENTRY_POINTS
    }


#: Public names that take a model, and the entries above that exercise them.
KNOWN_MODEL_ENTRY_POINTS = {
    "inspect": "inspect",
    "summary": "summary",
    "trace": "trace-",
    "Tracer": "tracer-",
    "annotated_repr": "annotated-repr",
    "hooks": "hooks",
    "lint": "lint",
    "capture": "capture",
    "Capture": "capture-ctx",
    "patch": "patch-",
    "patch_inputs": "patch-inputs",
    "GradientMonitor": "monitor-",
    "find_anomaly": "find-anomaly",
    "detect_anomaly": "detect-anomaly",
    "breakpoint": "breakpoint-",
}

#: Public names that do not observe a model (records, errors, registries).
NOT_MODEL_ENTRY_POINTS = {
    "Call", "FlopCount", "HookscopeError", "ModelInfo", "ModelRunError", "OpRecord",
    "Probe", "RenderError", "Selector", "SpecError", "Summary", "TensorMeta",
    "TensorStats", "Trace", "__version__", "register_probe", "FlopRule",
    "register_flop_formula", "HookInventory",
    "median_times",  # folds traces; it takes no model
    # records, declarations and exceptions of the engine: they take no model
    "Column", "Fact", "FailureRecord", "Field", "MissingDependencyError", "ParamGrad",
    "ProbeError", "RunStopped", "StopRecord", "Unit",
    "Finding", "Severity",  # lint's records
    # read a capture directory, draw captured tensors, make patch functions: no model
    "load_activations", "plot_feature_maps", "patches",
    "GradAnomaly", "GradientAnomalyError",  # the gradient monitor's record and error
    "AnomalyReport", "NonFiniteError",  # find_anomaly's report and detect_anomaly's error
    "diff", "TraceDiff",  # two finished traces compared: no model
    "GatheredTrace", "DivergenceReport",  # records of a torchrun job
    # a collective of a torchrun job (reads the model, registers nothing): its safety
    # is checked on two spawned ranks (tests/distributed/test_ddp.py)
    "check_divergence",
    # compare runs the model more than once (two sides, each call again on side A's
    # inputs), so the user's hooks run more often than in any one plain forward: its
    # matrix (every zoo model, train and eval, state and hooks) is
    # tests/compare/test_compare_safety.py
    "compare", "CompareResult",
    "write_chrome_trace",  # writes finished traces: no model
    "CompileReport",  # dynamo's explanation of a compiled model, as a record
    # the memory plan runs a fake-tensor copy, never the model: its check that every zoo
    # model is left unchanged is tests/memory_plan/test_memory_plan.py
    "memory_plan", "MemoryPlan",
}


def test_every_public_entry_point_is_covered() -> None:
    """A new public name must be added to the safety matrix (or declared harmless)."""
    unknown = set(hookscope.__all__) - set(KNOWN_MODEL_ENTRY_POINTS) - NOT_MODEL_ENTRY_POINTS
    assert not unknown, (
        f"new public names {sorted(unknown)}: add them to the safety entries in "
        "tests/test_safety.py (or to NOT_MODEL_ENTRY_POINTS when they take no model)"
    )
    ids = [e.id for e in ENTRIES]
    for name in KNOWN_MODEL_ENTRY_POINTS:
        if name in hookscope.__all__:
            prefix = KNOWN_MODEL_ENTRY_POINTS[name]
            assert any(i.startswith(prefix) for i in ids), name


# -- the fixtures of one test: a model, its twin, user hooks ------------------------------


@dataclass
class Setup:
    model: nn.Module
    twin: nn.Module
    user: Any
    twin_user: Any
    seen: list[Any]
    twin_seen: list[Any]
    capture_handles: list[Any]


def _capture_outputs(model: nn.Module) -> tuple[list[Any], Any]:
    seen: list[Any] = []
    handle = model.register_forward_hook(lambda m, a, out: seen.append(out))
    return seen, handle


def make_setup(cls: type[zoo.ZooModel], *, mode: str = "train", pregrad: bool = False,
               user_hooks: bool = True) -> Setup:
    model = zoo.materialize(zoo.build(cls))
    model.train(mode == "train")
    if pregrad:
        gen = torch.Generator().manual_seed(7)
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype)
    twin = copy.deepcopy(model)
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):  # deepcopy drops .grad
        q.grad = None if p.grad is None else p.grad.clone()
    user = install_user_hooks(model) if user_hooks else None
    twin_user = install_user_hooks(twin) if user_hooks else None
    seen, handle = _capture_outputs(model)
    twin_seen, twin_handle = _capture_outputs(twin)
    return Setup(model, twin, user, twin_user, seen, twin_seen, [handle, twin_handle])


def run_both(entry: Entry, s: Setup, cls: type[zoo.ZooModel]) -> tuple[Any, Any, Any, Any]:
    """Run the observed and the plain version from the same RNG state.

    Returns ``(observed result, observed exception, plain result, plain exception)``.
    """
    results: list[Any] = []
    for fn, model in ((entry.observe, s.model), (entry.plain, s.twin)):
        args, kwargs = cls.example_inputs()
        torch.manual_seed(1)
        try:
            results += [fn(model, args, kwargs), None]
        except Exception as e:
            results += [None, e]
        results.append(torch.get_rng_state())
    obs, obs_exc, rng_obs, plain, plain_exc, rng_plain = results
    assert torch.equal(rng_obs, rng_plain), "hookscope consumed random numbers"
    return obs, obs_exc, plain, plain_exc


def check_untouched(entry: Entry, s: Setup, cls: type[zoo.ZooModel], before: Any) -> None:
    # Hooks: exactly the user's, by id and function; values: those of the twin.
    assert_state_unchanged(before, s.model, expected=snapshot_state(s.twin))
    if not entry.changes_model and not cls.MUTATES_STATE:
        assert_state_unchanged(before, s.model)
    assert count_hooks(s.model) == count_hooks(s.twin)
    assert_outputs_identical(s.seen, s.twin_seen, requires_grad=entry.same_grad_mode)
    if s.user is not None:
        assert s.user.pre == s.twin_user.pre
        assert s.user.post == s.twin_user.post
        assert s.user.grad == s.twin_user.grad


def check_still_works(s: Setup, cls: type[zoo.ZooModel]) -> None:
    """After hookscope, the model (and its user hooks) behave exactly like the twin."""
    for model, user in ((s.model, s.user), (s.twin, s.twin_user)):
        if user is not None:
            user.reset()
        args, kwargs = cls.example_inputs()
        torch.manual_seed(2)
        try:
            model(*args, **kwargs)
        except Exception:
            assert cls.RAISES
    if s.user is not None:
        assert s.user.pre == s.twin_user.pre and s.user.post == s.twin_user.post
        assert s.user.pre[""] == 1  # the root ran once, and the user's hook saw it once
    assert_outputs_identical(s.seen[-1:], s.twin_seen[-1:])
    for user in (s.user, s.twin_user):
        if user is not None:
            user.remove()
    for handle in s.capture_handles:
        handle.remove()
    assert total_hooks(s.model) == 0, count_hooks(s.model)


def _n_calls_expected(s: Setup, entry: Entry) -> int:
    assert s.user is not None
    return sum(n for path, n in s.user.pre.items()
               if entry.select is None or entry.select(path))


# -- the matrix ----------------------------------------------------------------------------


@pytest.mark.parametrize("pregrad", [False, True], ids=["no-grad", "pregrad"])
@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.id)
@pytest.mark.parametrize("cls", zoo.RUNNING_ZOO, ids=lambda c: c.__name__)
def test_entry_point_leaves_model_untouched(
    cls: type[zoo.ZooModel], entry: Entry, mode: str, pregrad: bool
) -> None:
    require_probes(*entry.probes)
    s = make_setup(cls, mode=mode, pregrad=pregrad)
    before = snapshot_state(s.model)
    obs, obs_exc, _, plain_exc = run_both(entry, s, cls)
    if plain_exc is not None:  # only: backward=True on a model with no output needing grad
        assert isinstance(plain_exc, hookscope.SpecError)
        assert isinstance(obs_exc, hookscope.SpecError)
    else:
        assert obs_exc is None, f"{entry.id} raised {obs_exc!r}"
    check_untouched(entry, s, cls, before)
    trace = getattr(obs, "trace", obs)
    if isinstance(trace, hookscope.Trace):
        # One Call per module execution: the user's own pre-hooks are the oracle.
        assert len(trace.calls) == _n_calls_expected(s, entry)
        assert trace.error is None
    check_still_works(s, cls)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.id)
@pytest.mark.parametrize("cls", zoo.RUNNING_ZOO, ids=lambda c: c.__name__)
def test_no_hook_left_on_a_model_without_hooks(cls: type[zoo.ZooModel], entry: Entry) -> None:
    require_probes(*entry.probes)
    model = zoo.materialize(zoo.build(cls))
    assert total_hooks(model) == 0
    args, kwargs = cls.example_inputs()
    with contextlib.suppress(hookscope.SpecError):
        entry.observe(model, args, kwargs)
    leftover = {k: n for k, n in count_hooks(model).items() if n}
    assert not leftover


# Every combination of probes, with and without backward, on models with one pitfall
# each that touches the probes: in-place ops, nested tuple outputs, tied weights,
# train-mode buffers and RNG.
PROBE_COMBOS = [
    dict(zip(OPTIONAL_PROBES, bits, strict=True))
    for bits in itertools.product([False, True], repeat=len(OPTIONAL_PROBES))
]


def _combo_id(flags: dict[str, bool]) -> str:
    return "+".join(k for k, on in flags.items() if on) or "shapes-only"


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("flags", PROBE_COMBOS, ids=_combo_id)
@pytest.mark.parametrize(
    "cls", [zoo.InplaceReLU, zoo.LSTMModel, zoo.TiedWeights, zoo.TrainModeModel,
            zoo.NestedSeeds],
    ids=lambda c: c.__name__,
)
def test_every_probe_combination(
    cls: type[zoo.ZooModel], flags: dict[str, bool], backward: bool
) -> None:
    require_probes(*(k for k, on in flags.items() if on))
    entry = _trace_entry("combo", backward=backward, **flags)
    s = make_setup(cls, mode="train", pregrad=True)
    before = snapshot_state(s.model)
    obs, obs_exc, _, plain_exc = run_both(entry, s, cls)
    assert obs_exc is None and plain_exc is None
    check_untouched(entry, s, cls, before)
    assert len(obs.calls) == _n_calls_expected(s, entry)
    assert {k for k, on in flags.items() if on} <= set(obs.probes)
    check_still_works(s, cls)


@pytest.mark.parametrize("flags", PROBE_COMBOS, ids=_combo_id)
def test_tracer_probe_combination_with_user_backward(flags: dict[str, bool]) -> None:
    require_probes(*(k for k, on in flags.items() if on))
    entry = _tracer_entry("combo", user_forward_backward, changes_model=True, **flags)
    s = make_setup(zoo.InplaceReLU, mode="train", pregrad=True)
    before = snapshot_state(s.model)
    _, obs_exc, _, plain_exc = run_both(entry, s, zoo.InplaceReLU)
    assert obs_exc is None and plain_exc is None
    check_untouched(entry, s, zoo.InplaceReLU, before)
    check_still_works(s, zoo.InplaceReLU)


# -- the model raises -----------------------------------------------------------------------

RUN_NOTHING = ("inspect", "hooks", "lint")
# NB: the gradient monitor observes no module call, so it cannot name the failing one
# in a note; test_monitor_leaves_a_raising_model_untouched covers it
NO_CALLS_OBSERVED = ("monitor-step",)
# NB: capture and patch let the model's own exception through (with the tracer's note);
# test_interventions_on_a_raising_model covers them
RAISES_AS_IS = tuple(e.id for e in INTERVENTION_ENTRIES)
# NB: the anomaly and breakpoint entries record no shapes, which the checks of a partial
# trace below read; tests/debug/test_anomaly.py covers them on a raising model
RAISES_AS_IS += tuple(e.id for e in DEBUG_ENTRIES)
RAISING_ENTRIES = [e for e in ENTRIES
                   if e.id not in RUN_NOTHING + NO_CALLS_OBSERVED + RAISES_AS_IS] + [
    _trace_entry(f"trace-{_combo_id(f)}-{'bwd' if b else 'fwd'}", backward=b, **f)
    for f in PROBE_COMBOS for b in (False, True)
]


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("entry", RAISING_ENTRIES, ids=lambda e: e.id)
def test_model_that_raises(entry: Entry, mode: str) -> None:
    require_probes(*entry.probes)
    cls = zoo.RaisingModel
    s = make_setup(cls, mode=mode, pregrad=True)
    before = snapshot_state(s.model)
    _, obs_exc, _, plain_exc = run_both(entry, s, cls)
    assert isinstance(plain_exc, RuntimeError)
    if entry.user_code:
        # The user's own exception propagates unchanged, with a note naming the module.
        assert type(obs_exc) is type(plain_exc)
        assert str(obs_exc) == str(plain_exc)
        notes = " ".join(getattr(obs_exc, "__notes__", []))
        assert cls.FAILING_PATH in notes and "[2, 8]" in notes
    else:
        assert isinstance(obs_exc, hookscope.ModelRunError)
        assert isinstance(obs_exc, RuntimeError)  # still catchable as the builtin
        assert isinstance(obs_exc.__cause__, RuntimeError)
        assert str(obs_exc.__cause__) == str(plain_exc)
        assert obs_exc.path == cls.FAILING_PATH
        message = str(obs_exc)
        assert repr(cls.FAILING_PATH) in message or cls.FAILING_PATH in message
        assert "[2, 8]" in message  # the failing module's input shape
        check_partial_trace(obs_exc.trace, cls, entry.select)
    check_untouched(entry, s, cls, before)
    check_still_works(s, cls)


@pytest.mark.parametrize("entry", INTERVENTION_ENTRIES, ids=lambda e: e.id)
def test_interventions_on_a_raising_model(entry: Entry) -> None:
    cls = zoo.RaisingModel
    s = make_setup(cls, mode="train", pregrad=True)
    before = snapshot_state(s.model)
    _, obs_exc, _, plain_exc = run_both(entry, s, cls)
    if entry.id in ("capture", "capture-to-disk"):
        # the one-call form runs the model itself: like trace(), a ModelRunError naming
        # the module, the model's own exception as its cause
        assert isinstance(obs_exc, hookscope.ModelRunError), obs_exc
        assert cls.FAILING_PATH in str(obs_exc)
        obs_exc = obs_exc.__cause__
    assert type(obs_exc) is type(plain_exc) and str(obs_exc) == str(plain_exc)
    assert cls.FAILING_PATH in " ".join(getattr(obs_exc, "__notes__", []))
    check_untouched(entry, s, cls, before)
    check_still_works(s, cls)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_monitor_leaves_a_raising_model_untouched(mode: str) -> None:
    cls = zoo.RaisingModel
    s = make_setup(cls, mode=mode, pregrad=True)
    before = snapshot_state(s.model)
    entry = next(e for e in ENTRIES if e.id == "monitor-step")
    _, obs_exc, _, plain_exc = run_both(entry, s, cls)
    assert type(obs_exc) is type(plain_exc) and str(obs_exc) == str(plain_exc)
    check_untouched(entry, s, cls, before)
    check_still_works(s, cls)


def check_partial_trace(
    trace: hookscope.Trace, cls: type[zoo.ZooModel], select: Callable[[str], bool] | None
) -> None:
    """RaisingModel runs stem, block(act, proj!); head never runs."""
    selected = select or (lambda path: True)
    assert selected(cls.FAILING_PATH)
    assert trace.error is not None
    assert trace.error.path == cls.FAILING_PATH
    assert trace.error.exception_type == "RuntimeError"
    by_path = {c.path: c for c in trace.calls}
    assert set(by_path) == {p for p in ("", "stem", "block", "block.act", "block.proj")
                            if selected(p)}
    # Calls that finished before the failure are present with their outputs.
    for path in ("stem", "block.act"):
        if selected(path):
            assert [o.shape for o in by_path[path].outputs] == [(2, 8)]
            assert by_path[path].error is None
    failing = by_path[cls.FAILING_PATH]
    assert trace.calls[trace.error.call] is failing
    assert [i.shape for i in failing.inputs] == [(2, 8)]
    assert failing.error is not None and failing.outputs == []
    # The failure propagated through its ancestors; the module after it never ran.
    for path in ("block", ""):
        if selected(path):
            assert by_path[path].error is not None


@pytest.mark.parametrize("cls", [zoo.InplaceReLU, zoo.LSTMModel, zoo.TrainModeModel],
                         ids=lambda c: c.__name__)
def test_on_device(cls: type[zoo.ZooModel], device: str) -> None:
    """``pytest --device cuda`` runs this on the GPU (CUDA timing and memory paths)."""
    model = zoo.build(cls).to(device)
    twin = copy.deepcopy(model)
    before = snapshot_state(model)
    args, kwargs = cls.example_inputs()
    args = tuple(a.to(device) for a in args)
    torch.manual_seed(3)
    with hookscope.Tracer(model, **ALL_ON) as tracer:
        out = user_forward_backward(model, args, kwargs)
    torch.manual_seed(3)
    expected = user_forward_backward(twin, args, kwargs)
    assert_outputs_identical(out, expected)
    assert_state_unchanged(before, model, expected=snapshot_state(twin))
    assert total_hooks(model) == 0
    assert tracer.trace is not None and tracer.trace.error is None
    assert {o.device for c in tracer.trace.calls for o in c.outputs} == {
        str(torch.empty(0, device=device).device)}
    trace = hookscope.trace(model, *args, kwargs=kwargs, **ALL_ON, backward=True)
    assert hookscope.Trace.from_json(trace.to_json()) == trace
    assert total_hooks(model) == 0


def test_annotated_repr_of_a_partial_trace() -> None:
    model = zoo.build(zoo.RaisingModel)
    before = snapshot_state(model)
    text_before = repr(model)
    with pytest.raises(hookscope.ModelRunError) as info:
        hookscope.trace(model, *zoo.RaisingModel.example_inputs()[0])
    text = hookscope.annotated_repr(model, info.value.trace)
    assert repr(model) == text_before
    assert_state_unchanged(before, model)
    lines = {line.strip().split(":")[0]: line for line in text.splitlines()}
    assert "[2, 8]" in lines["(stem)"]  # a finished call is annotated with its output


def test_tracer_error_outside_any_module_propagates_unchanged() -> None:
    model = zoo.build(zoo.NestedSeeds)
    before = snapshot_state(model)
    args, _ = zoo.NestedSeeds.example_inputs()
    error = ValueError("the user's own bug")
    with pytest.raises(ValueError) as info, hookscope.Tracer(model) as tracer:
        model(*args)
        raise error
    assert info.value is error
    assert not getattr(error, "__notes__", None)  # no module to name
    assert tracer.trace is not None and tracer.trace.error is not None
    assert tracer.trace.error.call is None and tracer.trace.error.path is None
    assert len(tracer.trace.calls) == 7 and all(c.error is None for c in tracer.trace.calls)
    assert_state_unchanged(before, model)


def test_keyboard_interrupt_inside_model_still_cleans_up() -> None:
    """A BaseException skips torch's always-call hooks; hooks must still be removed."""

    class Interrupting(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise KeyboardInterrupt

    model = nn.Sequential(nn.Linear(2, 2), Interrupting(), nn.Linear(2, 2))
    before = snapshot_state(model)
    with pytest.raises(KeyboardInterrupt):
        hookscope.trace(model, torch.randn(1, 2), time=False, stats=False, memory=False)
    assert_state_unchanged(before, model)
    assert total_hooks(model) == 0
    # the same tracer machinery is usable again afterwards
    t = hookscope.trace(nn.Sequential(nn.Linear(2, 2)), torch.randn(1, 2),
                        time=False, stats=False, memory=False)
    assert [c.path for c in t.calls] == ["", "0"] and t.calls[1].parent == 0


# -- exception context ------------------------------------------------------------------------


def test_model_run_inside_an_except_block_is_not_marked_failed() -> None:
    model = zoo.build(zoo.NestedSeeds)
    (x,), _ = zoo.NestedSeeds.example_inputs()
    try:
        raise KeyError("an exception the user is handling")
    except KeyError:
        trace = hookscope.trace(model, x, time=False, stats=False, memory=False)
        with hookscope.Tracer(model) as tracer:
            model(x)
    for t in (trace, tracer.trace):
        assert t is not None and t.error is None
        assert len(t.calls) == 7
        assert all(c.error is None for c in t.calls)
        assert [o.shape for o in t.calls[0].outputs] == [(2, 2)]


class Recovering(nn.Module):
    """A parent that catches its child's exception and falls back to another child,
    calling it from inside the ``except`` block."""

    def __init__(self) -> None:
        super().__init__()
        self.fragile = nn.Linear(3, 2)
        self.fallback = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            return self.fragile(x)
        except RuntimeError:
            return self.fallback(x)


def test_exception_caught_inside_the_model_marks_only_the_raising_call() -> None:
    model = nn.Sequential(Recovering(), nn.ReLU())
    x = torch.randn(2, 4)
    with torch.no_grad():
        expected = model(x)
    before = snapshot_state(model)
    trace = hookscope.trace(model, x, time=False, stats=False, memory=False)
    assert_state_unchanged(before, model)
    by_path = {c.path: c for c in trace.calls}
    assert by_path["0.fragile"].error is not None and "RuntimeError" in by_path["0.fragile"].error
    for path in ("", "0", "0.fallback", "1"):
        assert by_path[path].error is None, path
    assert [o.shape for o in by_path["0.fallback"].outputs] == [(2, 2)]
    assert [o.shape for o in by_path[""].outputs] == [tuple(expected.shape)]
    # The run succeeded: the trace does not claim the model failed.
    assert trace.error is None


class FailingFallback(Recovering):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            return self.fragile(x)
        except RuntimeError:
            return self.fallback(x[:, :3])  # raises again, inside the except block


class Wrapping(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            return self.inner(x)
        except RuntimeError as e:
            raise ValueError("wrapped") from e


def test_failure_origin_is_the_call_that_raised_last() -> None:
    model = nn.Sequential(FailingFallback())
    with pytest.raises(hookscope.ModelRunError) as info:
        hookscope.trace(model, torch.randn(2, 4), time=False, stats=False, memory=False)
    assert info.value.path == "0.fallback"
    assert info.value.trace.error is not None and info.value.trace.error.path == "0.fallback"
    assert "[2, 3]" in str(info.value)  # the fallback's input shape, not the first one's


def test_failure_origin_survives_a_wrapping_parent() -> None:
    model = nn.Sequential(Wrapping())
    with pytest.raises(hookscope.ModelRunError) as info:
        hookscope.trace(model, torch.randn(2, 4), time=False, stats=False, memory=False)
    assert info.value.path == "0.inner"
    assert info.value.trace.error is not None
    assert info.value.trace.error.exception_type == "ValueError"
    assert isinstance(info.value.__cause__, ValueError)


def test_caught_model_error_inside_tracer_block_does_not_fail_the_trace() -> None:
    model = zoo.build(zoo.RaisingModel)
    (x,), _ = zoo.RaisingModel.example_inputs()
    with hookscope.Tracer(model) as tracer, pytest.raises(RuntimeError):
        model(x)
    assert tracer.trace is not None and tracer.trace.error is None
    assert tracer.trace.find("block.proj").error is not None
    assert total_hooks(model) == 0


def test_keyboard_interrupt_names_the_interrupted_call() -> None:
    class Interrupting(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise KeyboardInterrupt

    model = nn.Sequential(nn.Linear(2, 2), Interrupting())
    with pytest.raises(KeyboardInterrupt), hookscope.Tracer(model) as tracer:
        model(torch.randn(1, 2))
    assert tracer.trace is not None and tracer.trace.error is not None
    assert tracer.trace.error.path == "1"
    assert tracer.trace.find("").error is not None and tracer.trace.find("0").error is None
    assert total_hooks(model) == 0


# -- the user's hooks ---------------------------------------------------------------------------


def test_user_hooks_run_once_per_call_while_tracing() -> None:
    model = zoo.build(zoo.MultiCall)
    calls: list[tuple[str, str]] = []
    handles = [
        model.block.register_forward_pre_hook(lambda m, a: calls.append(("pre", "block"))),
        model.block.register_forward_hook(lambda m, a, o: calls.append(("post", "block"))),
        model.register_forward_hook(lambda m, a, o: calls.append(("post", "root"))),
    ]
    (x,), _ = zoo.MultiCall.example_inputs()
    with hookscope.Tracer(model) as tracer:
        model(x)
        assert calls == [("pre", "block"), ("post", "block")] * 3 + [("post", "root")]
    assert tracer.trace is not None and len(tracer.trace.calls) == 4
    calls.clear()
    model(x)
    assert calls == [("pre", "block"), ("post", "block")] * 3 + [("post", "root")]
    for h in handles:
        h.remove()
    assert total_hooks(model) == 0


def test_user_hook_registered_inside_the_tracer_block_survives() -> None:
    model = zoo.build(zoo.SharedModule)
    (x,), _ = zoo.SharedModule.example_inputs()
    seen: list[int] = []
    with hookscope.Tracer(model):
        handle = model.fc.register_forward_hook(lambda m, a, o: seen.append(1))
        model(x)
    assert seen == [1, 1]
    model(x)
    assert seen == [1, 1, 1, 1]
    assert total_hooks(model) == 1
    handle.remove()
    assert total_hooks(model) == 0


def test_user_hook_that_replaces_the_output_is_respected() -> None:
    """The seeds' last exercise: a forward hook that returns a new output. hookscope
    records what the model really returned and does not change it."""
    model = zoo.build(zoo.NestedSeeds)
    handle = model.cd.d.register_forward_hook(lambda m, a, out: out.sum(-1, keepdim=True))
    (x,), _ = zoo.NestedSeeds.example_inputs()
    with torch.no_grad():
        expected = model(x)
    trace = hookscope.trace(model, x, time=False, stats=False, memory=False)
    assert expected.shape == (2, 1)
    assert [o.shape for o in trace.outputs] == [(2, 1)]
    assert trace.find("").outputs[0].shape == (2, 1)
    handle.remove()


def test_user_pre_hook_that_raises_before_ours_leaves_nothing() -> None:
    model = zoo.build(zoo.NestedSeeds)

    def bad_pre_hook(module: nn.Module, args: Any) -> None:
        raise ValueError("user pre-hook failed")

    handle = model.cd.c.register_forward_pre_hook(bad_pre_hook)
    before = snapshot_state(model)
    (x,), _ = zoo.NestedSeeds.example_inputs()
    with pytest.raises(hookscope.ModelRunError) as info:
        hookscope.trace(model, x, time=False, stats=False, memory=False)
    assert_state_unchanged(before, model)
    trace = info.value.trace
    assert [c.path for c in trace.calls][:4] == ["", "ab", "ab.a", "ab.b"]
    assert trace.calls[0].error is not None
    # the call of cd.c never started: the failure is its caller's, and names it
    assert info.value.path == "cd"
    assert trace.error is not None and trace.error.before_forward == "cd.c"
    assert "in a hook of module 'cd.c', before its forward ran, called by module 'cd'" \
        in str(info.value)
    assert hookscope.Trace.from_json(trace.to_json()).error == trace.error
    handle.remove()
    assert total_hooks(model) == 0


def test_a_failure_in_a_module_not_selected_names_that_module() -> None:
    """It was "(outside any module call)" with no path: no recorded call had raised."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 3), nn.Linear(4, 2)))
    for run in (
        lambda: hookscope.capture(model, torch.randn(2, 4), select="0"),
        lambda: hookscope.trace(model, torch.randn(2, 4), select="0"),
    ):
        with pytest.raises(hookscope.ModelRunError) as info:
            run()
        assert info.value.path == "1.1"
        assert "in module '1.1' (not recorded: outside select=)" in str(info.value)
        assert "outside any module call" not in str(info.value)
        error = info.value.trace.error
        assert error is not None and (error.call, error.path) == (None, "1.1")
    assert total_hooks(model) == 0


def test_a_failure_inside_a_modules_forward_names_no_hook() -> None:
    """Only a call that never started is said to have failed before its forward: one
    that raised in its forward is the failing call itself, also under select=."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 3), nn.Linear(4, 2)))
    with pytest.raises(hookscope.ModelRunError) as info:
        hookscope.trace(model, torch.randn(2, 4))
    assert info.value.path == "1.1" and info.value.trace.error is not None
    assert info.value.trace.error.before_forward is None
    with pytest.raises(hookscope.ModelRunError) as info:
        hookscope.trace(model, torch.randn(2, 4), select=["1"])
    assert info.value.trace.error is not None
    assert info.value.trace.error.before_forward is None  # 1.1 is not recorded


# -- lazy modules ------------------------------------------------------------------------------


def test_a_run_for_the_caller_leaves_a_lazy_model_lazy() -> None:
    """``trace``, ``summary``, ``capture`` and ``lint`` run a forward for their caller, on
    its inputs or random ones: a lazy module stays as it was (its class, its
    uninitialised parameters and buffers, its initialising hooks), as BatchNorm
    statistics do; the trace counts what the forward materialised."""
    args, _ = zoo.LazyModel.example_inputs()
    runs: dict[str, Callable[[nn.Module], Any]] = {
        "trace": lambda m: hookscope.trace(m, *args, time=False, stats=False, memory=False),
        "summary": lambda m: hookscope.summary(m, *args),
        "capture": lambda m: hookscope.capture(m, *args, select="lazy"),
        "lint": lambda m: hookscope.lint(m, *args),
        "find_anomaly": lambda m: hookscope.find_anomaly(m, *args),
    }
    for name, run in runs.items():
        model = zoo.build(zoo.LazyModel)
        before = snapshot_state(model)
        hooks = count_hooks(model)
        result = run(model)
        assert type(model.lazy) is nn.LazyLinear, name
        assert isinstance(model.lazy.weight, nn.parameter.UninitializedParameter), name
        # its settings too: in_features was left at what the forward made it
        assert vars(model.lazy)["in_features"] == 0, name
        assert repr(model.lazy) == repr(zoo.build(zoo.LazyModel).lazy), name
        assert count_hooks(model) == hooks, name  # its own initialising hooks, no other
        assert_state_unchanged(before, model)
        if name == "trace":  # the trace counts the parameters the forward materialised
            assert result.model.params_total == 43
            assert result.modules["lazy"].total_params == 5 * 3 + 3
            assert result.find("lazy").outputs[0].shape == (2, 3)
        # and the model's own first forward still materialises it, as without hookscope
        twin = zoo.build(zoo.LazyModel)
        torch.manual_seed(5)
        with torch.no_grad():
            got = model(*args)
        torch.manual_seed(5)
        with torch.no_grad():
            expected = twin(*args)
        assert type(model.lazy) is nn.Linear and torch.equal(got, expected), name


def test_a_tracer_around_the_user_s_first_forward_lets_it_materialise() -> None:
    """In a ``Tracer`` block the forward is the user's own: materialising is its doing,
    exactly as unobserved (same class, values from the same RNG state, same hooks)."""
    model = zoo.build(zoo.LazyModel)
    twin = copy.deepcopy(model)
    args, _ = zoo.LazyModel.example_inputs()
    torch.manual_seed(5)
    with hookscope.Tracer(model, time=False, stats=False, memory=False) as tracer, \
            torch.no_grad():
        model(*args)
    torch.manual_seed(5)
    with torch.no_grad():
        twin(*args)
    assert type(model.lazy) is type(twin.lazy) is nn.Linear
    diffs = [d for d in state_differences(snapshot_state(twin), snapshot_state(model))
             if not d.startswith(("hooks", "object"))]
    assert not diffs
    assert count_hooks(model) == count_hooks(twin)
    assert tracer.trace is not None and tracer.trace.model.params_total == 43


def test_gradients_of_a_lazy_module_before_its_first_forward_are_a_clear_error() -> None:
    model = zoo.build(zoo.LazyModel)
    args, _ = zoo.LazyModel.example_inputs()
    before, hooks = snapshot_state(model), count_hooks(model)
    with pytest.raises(hookscope.SpecError, match="lazy module that has not run yet"):
        hookscope.trace(model, *args, backward=True)
    assert_state_unchanged(before, model)
    assert count_hooks(model) == hooks


def test_inspect_a_lazy_model_before_its_first_forward() -> None:
    model = zoo.build(zoo.LazyModel)
    before = snapshot_state(model)
    info = hookscope.inspect(model)
    assert_state_unchanged(before, model)
    assert info.total_params == sum(p.numel() for p in model.fc.parameters())
    zoo.materialize(model)
    assert hookscope.inspect(model).total_params == sum(p.numel() for p in model.parameters())


# -- grad mode and flags --------------------------------------------------------------------------


@pytest.mark.parametrize("grad_enabled", [True, False])
def test_grad_mode_and_flags_restored(grad_enabled: bool) -> None:
    model = zoo.build(zoo.TrainModeModel)
    model.eval()
    model.bn.train()  # mixed flags must come back exactly
    model.fc.weight.requires_grad_(False)
    before = snapshot_state(model)
    (x,), _ = zoo.TrainModeModel.example_inputs()
    with torch.set_grad_enabled(grad_enabled):
        hookscope.trace(model, x, backward=True, time=False, stats=False, memory=False)
        assert torch.is_grad_enabled() is grad_enabled
        hookscope.summary(model, x)
        assert torch.is_grad_enabled() is grad_enabled
    twin_check = snapshot_state(model)
    assert twin_check.training == before.training
    assert twin_check.requires_grad == before.requires_grad


def test_inference_mode_inputs() -> None:
    model = zoo.build(zoo.InplaceReLU)
    before = snapshot_state(model)
    with torch.inference_mode():
        x = torch.randn(2, 4)
        expected = model(x)
        trace = hookscope.trace(model, x, time=False, stats=False, memory=False)
    assert [o.shape for o in trace.outputs] == [tuple(expected.shape)]
    assert_state_unchanged(before, model)


@pytest.mark.parametrize("run", ["trace", "summary", "capture"])
def test_a_tensor_attribute_a_pre_hook_sets_is_put_back(run: str) -> None:
    """``spectral_norm`` sets the plain attribute ``weight`` in a forward pre-hook, from
    the ``weight_u`` buffer it updates in training mode: both as they were."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    nn.utils.spectral_norm(model[2])
    model.train()
    x = torch.randn(3, 4)
    with torch.no_grad():
        model(x)
    weight, u = model[2].weight, model[2].weight_u.clone()
    if run == "capture":
        hookscope.capture(model, x, select="2")
    else:
        getattr(hookscope, run)(model, x)
    assert model[2].weight is weight
    assert torch.equal(model[2].weight_u, u)


def test_a_tracer_around_the_user_s_own_loop_keeps_what_the_loop_set() -> None:
    """restore_state puts back flags, not what the user's own forward set: spectral
    norm's weight was put back while its weight_u kept the loop's updates."""
    def steps(model: nn.Module, tracer: bool) -> torch.Tensor:
        torch.manual_seed(1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with (hookscope.Tracer(model, restore_state=True) if tracer
              else contextlib.nullcontext()):
            for _ in range(3):
                model(torch.randn(3, 4)).sum().backward()
                opt.step()
                opt.zero_grad()
        return model.weight.detach().clone()

    torch.manual_seed(0)
    plain = nn.utils.spectral_norm(nn.Linear(4, 2)).train()
    traced = copy.deepcopy(plain)
    assert torch.equal(steps(traced, True), steps(plain, False))


# -- parameters the forward writes in place ----------------------------------------------------


class _ClampsItsWeight(nn.Linear):
    """A max-norm constraint applied in ``forward``: the weight is written in place."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.weight.clamp_(-0.1, 0.1)
        return super().forward(x)


def _run_for_the_caller(run: str, model: nn.Module, x: torch.Tensor) -> None:
    """One of the entry points that run a forward for their caller, on ``x``."""
    runs: dict[str, Callable[[], Any]] = {
        "trace": lambda: hookscope.trace(model, x),
        "summary": lambda: hookscope.summary(model, x),
        "capture": lambda: hookscope.capture(model, x, select="1"),
        "find_anomaly": lambda: hookscope.find_anomaly(model, x),
        "lint": lambda: hookscope.lint(model, x),
    }
    runs[run]()


@pytest.mark.parametrize("run", ["trace", "summary", "capture", "find_anomaly", "lint"])
def test_an_embedding_s_max_norm_renormalisation_is_put_back(run: str) -> None:
    """``nn.Embedding(max_norm=...)`` renormalises the rows it looks up, in place, in its
    forward: a run for the caller left the weight changed."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 4, max_norm=0.5), nn.Linear(4, 2))
    ids = torch.tensor([[1, 2, 3]])
    before = snapshot_state(model)
    version = model[0].weight._version
    with torch.no_grad():
        twin = copy.deepcopy(model)
        twin(ids)
    assert not torch.equal(twin[0].weight, model[0].weight)  # the forward does write it
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # put back exactly: nothing to warn about
        _run_for_the_caller(run, model, ids)
    assert_state_unchanged(before, model)
    assert model[0].weight._version == version


@pytest.mark.parametrize("run", ["trace", "summary", "capture", "find_anomaly", "lint"])
def test_a_parameter_written_in_place_by_a_forward_is_named_in_a_warning(run: str) -> None:
    """... at the user's call, whichever entry point ran the forward."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), _ClampsItsWeight(4, 2))
    x = torch.randn(2, 4)
    named = r"wrote into 1 parameter\(s\) in place \(1\.weight\)"
    with pytest.warns(UserWarning, match=named) as got:
        _run_for_the_caller(run, model, x)
    assert {w.filename for w in got if "wrote into" in str(w.message)} == {__file__}


class _PositionEmbedding(nn.Embedding):
    """A subclass, as transformers' positional embeddings are."""


def test_a_max_norm_embedding_subclass_is_put_back_too() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(_PositionEmbedding(10, 4, max_norm=0.5), nn.Linear(4, 2))
    before = snapshot_state(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hookscope.trace(model, torch.tensor([[1, 2, 3]]))
    assert_state_unchanged(before, model)
