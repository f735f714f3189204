"""The probes that find the first non-finite value: which module call, which output,
which aten op.

:class:`NonFiniteProbe` checks every module call's output when the call ends
(``debug/checks.py``: one sum per tensor, exact) and, while the run lasts, an
:class:`~hookscope.debug.op_check.OpCheckMode` holds the output of every op, checking
them, to name the first non-finite one, only in a call whose output is not finite.
At the first call whose output holds a NaN or an Inf it raises
:class:`NonFiniteError` (a :class:`~hookscope.errors.RunStopped`): the rest of the
model does not run and the caller gets the partial trace. With ``backward=True``
(:class:`NonFiniteGradProbe`) the gradients are checked as the backward delivers
them (``debug/grad_probe.py``). The entry points that run them are
``debug/anomaly.py``'s.

The op check runs during the forward itself, never by re-running a module, so
what it reports is what the model computed, with the model's own RNG draws, buffers
and in-place writes. The input statistics of the anomalous call are read when the
call ends: an input the call wrote into shows what it holds then (the record says so,
``InputCheck.changed_in_place``).
"""

from __future__ import annotations

import bdb
import contextlib
import sys
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hookscope.core.engine.handles import CallbackHandle
from hookscope.core.engine.probe import Probe
from hookscope.core.records.tensor_paths import iter_call_inputs, iter_tensors
from hookscope.core.torch_private import version_counter as _version
from hookscope.debug.anomaly_records import (
    Anomaly,
    AnomalyKind,
    AnomalyReport,
    InputCheck,
    OpFinding,
)
from hookscope.debug.checks import all_finite, checkable, counts
from hookscope.debug.op_check import OpCheckMode, OpFindings
from hookscope.debug.stops import debugger_disabled, in_call
from hookscope.errors import RunStopped
from hookscope.probes.moments import make_stats, tensor_moments

if TYPE_CHECKING:
    from hookscope.core.engine.handles import Removable
    from hookscope.core.engine.tracer import Tracer
    from hookscope.core.records.trace import Call
    from hookscope.core.records.values import TensorStats


class NonFiniteError(RunStopped):
    """The first non-finite value was found; the run stopped there.

    Attributes:
        anomalies: what was found (one).
        report: the :class:`~hookscope.debug.anomaly_records.AnomalyReport`, with the partial
            trace once the tracer has ended.
    """

    def __init__(self, anomalies: tuple[Anomaly, ...]) -> None:
        from hookscope.render.anomaly_report import anomaly_line

        super().__init__(anomaly_line(anomalies[0]))
        self.anomalies = anomalies

    @property
    def report(self) -> AnomalyReport:
        """The anomalies found, as the report ``find_anomaly`` returns."""
        return AnomalyReport(self.anomalies, trace=self.trace, stopped=True)


class NonFiniteProbe(Probe):
    """Checks every module call's output (and every op's) for NaN and Inf.

    Args:
        collect_all: record every anomalous call instead of stopping at the first.
        ops: also find the first aten op that produced the value (a dispatch mode).
        pdb: open the debugger at the first anomaly, in a frame of its call's values
            (``debug/stops.py``).
    """

    name = "nonfinite"
    install_touches_modules = False
    order = 5
    watches_ops = True  # the engine then marks other probes' work, which the mode skips

    def __init__(self, *, collect_all: bool = False, ops: bool = True, pdb: bool = False) -> None:
        self.collect_all = collect_all
        self.ops = ops
        self.pdb = pdb
        self.anomalies: list[Anomaly] = []
        self.findings = OpFindings()
        self._mode: OpCheckMode | None = None
        self._tracer: Tracer | None = None
        self._versions: dict[int, tuple[int | None, ...]] = {}
        self._root_inputs: list[int] = []
        #: The last tensors found finite, each with the version it had then.
        self._finite: list[tuple[weakref.ref[torch.Tensor], int, int]] = []

    def install(self, tracer: Tracer) -> list[Removable]:
        """Keeps the tracer and, with ``ops``, enters the mode that checks each op's outputs."""
        self._tracer = tracer
        if not self.ops:
            return []
        mode = self._mode = OpCheckMode(tracer, self.findings)
        mode.__enter__()  # type: ignore[no-untyped-call]  # torch leaves it untyped
        return [CallbackHandle(
            lambda: mode.__exit__(None, None, None)  # type: ignore[no-untyped-call]
        )]

    def on_enter(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """A call starts: its ops are held until it ends."""
        if call.parent is None:  # the model's own inputs: made by no op of the run
            self._root_inputs = [id(t) for _, t in iter_call_inputs(args, kwargs)]
        if len(args) == 1 and not kwargs and isinstance(args[0], torch.Tensor):
            self._versions[call.index] = (_version(args[0]),)
        else:
            tensors = iter_call_inputs(args, kwargs)
            self._versions[call.index] = tuple(_version(t) for _, t in tensors)

    def on_exit(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
        output: Any, failed: bool,
    ) -> None:
        """A call ended: checks its output, and its held ops when it is not finite."""
        versions = self._versions.pop(call.index, None)
        mode = self._mode
        if failed:
            if mode is not None:
                mode.ended_finite(call.index)  # no output to blame its ops for
            return
        for path, t in iter_tensors(output, "out"):
            if self.checked(t, _version(t)) or _kept_finite(module, args, t, versions, self):
                continue
            if not all_finite(t):
                made: OpFinding | bool = True
                if mode is not None:
                    came_in = [x for _, x in iter_call_inputs(args, kwargs)
                               if checkable(x) and not all_finite(x)]
                    # what made a value that came in: read before the held ops go
                    made = mode.maker_of(
                        came_in, call.index, nan=bool(counts(t)[0]),
                        outside=self._outside(),
                    ) if came_in else True
                    mode.flush()  # the ops held since the call started: which one did it
                anomaly = _output_anomaly(call, path, t, args, kwargs, versions,
                                          self.findings, made)
                if self.pdb:
                    self._debug(anomaly, in_call, module, call.path, args, kwargs, output)
                self._found(anomaly)
                return
            self.remember(t)
        if mode is not None:
            mode.ended_finite(call.index)

    def _outside(self) -> set[int]:
        """The ids of the tensors no op of the run made: the model's inputs (its root
        call's), parameters and buffers."""
        model = None if self._tracer is None else self._tracer.model
        found = set(self._root_inputs)
        if model is not None:
            found |= {id(t) for t in (*model.parameters(), *model.buffers())}
        return found

    def checked(self, t: torch.Tensor, version: int | None, writes_since: int = 0) -> bool:
        """Whether ``t`` was found finite when it was at ``version``, with exactly
        ``writes_since`` ops writing into any tensor since: a container's output is
        usually its last child's, checked already. Only with the op check on: it
        counts the writes (a write through ``.data`` bumps no version)."""
        mode = self._mode
        if mode is None or version is None:
            return False
        writes = mode.writes - writes_since
        return any(
            seen == version and at == writes and ref() is t for ref, seen, at in self._finite
        )

    def remember(self, t: torch.Tensor) -> None:
        """Note that ``t`` is finite at its current version (for :meth:`checked`)."""
        mode, version = self._mode, _version(t)
        if mode is None or version is None:
            return
        finite = self._finite
        if len(finite) >= _REMEMBERED:
            del finite[0]
        finite.append((weakref.ref(t), version, mode.writes))

    def _debug(self, anomaly: Anomaly, frame: Callable[..., None], *values: Any) -> None:
        """Open the debugger in ``frame(*values)`` at the first anomaly, after a banner
        that names it; ``q`` only ends the session (the run stops there anyway)."""
        if self.anomalies or debugger_disabled():
            return
        from hookscope.render.anomaly_report import anomaly_line

        sys.stderr.write(f"hookscope.find_anomaly: {anomaly_line(anomaly)}; locals: "
                         f"{', '.join(frame.__code__.co_varnames[:len(values)])}\n")
        sys.stderr.flush()
        with contextlib.suppress(bdb.BdbQuit):
            frame(*values)

    def _found(self, anomaly: Anomaly) -> None:
        self.anomalies.append(anomaly)
        if not self.collect_all:
            raise NonFiniteError((anomaly,))

    def report(self, trace: Any) -> AnomalyReport | None:
        """What was found (``None``: nothing), with ``trace``."""
        if not self.anomalies:
            return None
        return AnomalyReport(tuple(self.anomalies), trace=trace, stopped=not self.collect_all)


#: How many finite tensors a probe remembers (weakly): enough for a container's
#: output, which is its last child's.
_REMEMBERED = 4

#: Elementwise modules whose output is finite wherever their input is (a clamp, a
#: maximum, ``x * sigmoid(x)``); run in place, their output need not be read again.
_KEEPS_FINITE: frozenset[type[nn.Module]] = frozenset({nn.ReLU, nn.ReLU6, nn.Hardtanh, nn.SiLU})


def _kept_finite(
    module: nn.Module, args: tuple[Any, ...], t: torch.Tensor,
    versions: tuple[int | None, ...] | None, probe: NonFiniteProbe,
) -> bool:
    """Whether ``t`` is finite without reading it: ``module`` (an exact
    :data:`_KEEPS_FINITE` type, not a subclass, no ``forward`` patched on the instance)
    wrote it in place, once, into its one input, which was found finite at the version
    it had when the call started, with that one write the only one since. A hook or a
    patch that wrote into it too, or replaced it, leaves a different tensor, version
    or count of writes, and the output is read."""
    if type(module) not in _KEEPS_FINITE or not getattr(module, "inplace", False):
        return False
    if "forward" in module.__dict__:
        return False
    if versions is None or len(versions) != 1 or len(args) != 1 or args[0] is not t:
        return False
    before = versions[0]
    if before is None or _version(t) != before + 1 or not probe.checked(t, before, writes_since=1):
        return False
    probe.remember(t)
    return True


def _output_anomaly(
    call: Call, path: str, t: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any],
    versions: tuple[int | None, ...] | None, findings: OpFindings,
    made: OpFinding | bool = True,
) -> Anomaly:
    """The anomaly of ``call``'s output ``t``. ``made``: the op that made a non-finite
    value the call received (:meth:`OpCheckMode.maker_of`), ``False`` when none of its
    callers' ops did, ``True`` when that is not known."""
    nans, infs = counts(t)
    inputs = []
    for i, (in_path, x) in enumerate(iter_call_inputs(args, kwargs)):
        before = versions[i] if versions is not None and i < len(versions) else None
        changed = before is not None and before != _version(x)
        inputs.append(InputCheck(tensor_stats(in_path, x), changed))
    op = findings.inside(call.index)
    # the value came in with the call's inputs (not with a parameter of its own): name
    # the op that made it before the call, found by identity, or else the callers' first
    # non-finite op, if that one made its value (its inputs were finite)
    origin: OpFinding | None = None
    if any(i.finite is False for i in inputs):
        if isinstance(made, OpFinding):
            origin = made
        elif made:  # not known: the callers' first finding, if it made this kind
            first = findings.before(call.index)
            kind = "nan_count" if nans else "inf_count"
            origin = first if first is not None and all(
                i.finite for i in first.inputs) and any(
                getattr(o, kind) for o in first.outputs) else None
    return Anomaly(
        AnomalyKind.OUTPUT, "forward", call.path, call.module_class, call.call_index,
        call.index, path, t.numel(), nans or 0, infs or 0, tuple(inputs),
        op=op, origin=origin,
    )


def tensor_stats(path: str, t: torch.Tensor) -> TensorStats:
    """The statistics of ``t`` (named ``path``) that a report shows, NaN and Inf counted."""
    with torch.no_grad():
        kind, moments = tensor_moments(t)
    values = moments.tolist() if isinstance(moments, torch.Tensor) else moments
    try:
        numel = t.numel()
    except RuntimeError:  # a tensor without a size (uninitialised lazy parameter)
        numel = -1
    return make_stats(path, numel, kind, values)
