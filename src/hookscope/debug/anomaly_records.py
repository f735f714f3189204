"""What an anomaly hunt finds: plain, typed records (they never format themselves).

:class:`NonFiniteProbe` (``debug/nonfinite.py``) fills them while the model runs;
``hookscope.render.anomaly_report`` turns them into text and JSON. They hold no tensor and no
module: shapes, dtypes, counts and :class:`~hookscope.core.records.values.TensorStats`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hookscope.core.records.trace import Trace
    from hookscope.core.records.values import TensorStats


class AnomalyKind(str, Enum):
    """Which value went non-finite."""

    OUTPUT = "output"  # a module call's output (forward)
    GRAD_OUTPUT = "grad_output"  # the gradient arriving at a call's outputs (backward)
    GRAD_INPUT = "grad_input"  # the gradient a call's backward computed for its inputs
    PARAM_GRAD = "param_grad"  # the gradient of a parameter
    BACKWARD_NODE = "backward_node"  # an autograd node made it from finite gradients


@dataclass(frozen=True, slots=True)
class TensorCheck:
    """Shape, dtype and non-finite counts of one tensor (an op's input or output).

    Attributes:
        path: where it sits: ``args[0]``, ``out``, ``out[1]``.
        shape: its size.
        dtype: dtype name without ``torch.`` (``float16``).
        numel: number of elements.
        nan_count: NaN elements (``None``: not a floating tensor, not counted).
        inf_count: infinite elements (``None``: not counted).
    """

    path: str
    shape: tuple[int, ...]
    dtype: str
    numel: int
    nan_count: int | None
    inf_count: int | None

    @property
    def finite(self) -> bool:
        """No NaN and no Inf (a tensor that was not counted counts as finite)."""
        return not self.nan_count and not self.inf_count


@dataclass(frozen=True, slots=True)
class OpFinding:
    """The first aten op that produced a non-finite value inside a call.

    Attributes:
        name: the overload, ``aten.log.default``.
        phase: ``forward`` or ``backward``.
        call: index in ``Trace.calls`` of the innermost call it ran in (forward), or of
            the call whose forward made the autograd node that ran it (backward).
        path: that call's module path (``None``: outside any module).
        inputs: the op's tensor arguments, counted once it ran (the same values it
            read, except for an in-place op, ``inplace``: the argument it wrote into
            holds its result).
        outputs: its tensor outputs.
        inplace: the op wrote into an argument (``add_``, ``out=``).
    """

    name: str
    phase: str
    call: int | None
    path: str | None
    inputs: tuple[TensorCheck, ...]
    outputs: tuple[TensorCheck, ...]
    inplace: bool = False


@dataclass(frozen=True, slots=True)
class SourceLine:
    """A line of the user's code: where the forward called an op.

    Attributes:
        file: the file's path.
        line: the line number.
        function: the function the line is in.
        code: the line's text, stripped (``""`` when the file cannot be read).
    """

    file: str
    line: int
    function: str
    code: str


@dataclass(frozen=True, slots=True)
class BackwardNode:
    """The first autograd node that made a non-finite gradient from finite ones.

    Attributes:
        name: the node, as autograd names it (``SqrtBackward0``; a custom
            ``autograd.Function``'s is ``MyFnBackward``).
        forward_op: the forward op whose gradient the node computes (``sqrt``;
            ``MyFn.apply`` for a custom function).
        source: the line of the model's code (the innermost frame outside torch and
            hookscope) whose forward made the node; ``None`` when it was not recorded.
        grad_outputs: statistics of the gradients the node received (of the forward
            op's outputs: all finite), ``grad_out[i]``.
        grad_inputs: statistics of the gradients it computed (of the forward op's
            inputs), ``grad_in[i]``: at least one is not finite.
    """

    name: str
    forward_op: str
    source: SourceLine | None
    grad_outputs: tuple[TensorStats, ...]
    grad_inputs: tuple[TensorStats, ...]


@dataclass(frozen=True, slots=True)
class InputCheck:
    """One input of the anomalous call: its statistics and whether it was finite.

    Attributes:
        stats: statistics of the input (``stats.nan_count``/``inf_count``), read when
            the call ended.
        changed_in_place: the call wrote into this input (its version counter moved):
            the statistics are of what it holds after the call, not of what the call
            received.
    """

    stats: TensorStats
    changed_in_place: bool = False

    @property
    def finite(self) -> bool | None:
        """Whether it held no NaN and no Inf (``None``: not readable, unknown)."""
        s = self.stats
        if s.nan_count is None or s.inf_count is None:
            return None
        return s.nan_count == 0 and s.inf_count == 0


@dataclass(frozen=True, slots=True)
class Anomaly:
    """One non-finite value and where it appeared.

    Attributes:
        kind: output, gradient of outputs or inputs, or a parameter's gradient.
        phase: ``forward`` or ``backward``.
        path: module path of the call (for a parameter: of the module that owns it;
            for a ``backward_node``: of the call whose forward made the node, ``""``
            with ``call`` ``None`` when no call did: the loss).
        module_class: that module's class name.
        call_index: how many times that module had run before this call.
        call: index in ``Trace.calls`` (``None`` for a parameter's gradient).
        tensor: which value: ``out["logits"]``, ``grad_out[0]``, ``grad_in[1]`` or the
            parameter's path (``layers.2.weight``); for a ``backward_node``, the
            node's first non-finite output, ``grad_in[i]``.
        numel: its number of elements.
        nan_count: how many are NaN.
        inf_count: how many are infinite.
        inputs: the call's inputs (forward anomalies only).
        op: the first aten op inside the call that produced a non-finite value
            (``None``: none of its ops did; the value came in from outside, or the
            forward was observed without the op check).
        parameter: the parameter's path (``param_grad`` only).
        origin: when the value came into the call with its inputs (no op inside it
            produced it from finite values): the first op before the call, in its
            callers' own code, that produced a non-finite value (``aten.log`` in the
            parent's ``forward``, between two of its submodules); ``None`` otherwise.
            An in-place op's inputs are counted after it wrote, so for one the op
            before is named too.
        node: the autograd node that made the value (``backward_node`` only).
    """

    kind: AnomalyKind
    phase: str
    path: str
    module_class: str
    call_index: int | None
    call: int | None
    tensor: str
    numel: int
    nan_count: int
    inf_count: int
    inputs: tuple[InputCheck, ...] = ()
    op: OpFinding | None = None
    parameter: str | None = None
    origin: OpFinding | None = None
    node: BackwardNode | None = None


@dataclass(frozen=True)
class AnomalyReport:
    """What :func:`hookscope.find_anomaly` found: the first non-finite value (or all).

    ``print(report)`` shows it as a short text, ``report.to_json()`` as JSON (both from
    ``hookscope.render.anomaly_report``).

    Attributes:
        anomalies: in execution order; one unless every anomaly was collected.
        trace: the (partial) trace of the run: the calls that ran, up to the stop.
        stopped: the run stopped at the first anomaly (the rest did not run).
    """

    anomalies: tuple[Anomaly, ...]
    trace: Trace | None = None
    stopped: bool = True

    @property
    def first(self) -> Anomaly:
        """The first anomaly, in execution order."""
        return self.anomalies[0]

    def __str__(self) -> str:
        from hookscope.render.anomaly_report import render_anomaly_text

        return render_anomaly_text(self)

    def to_json(self, *, indent: int | None = 2) -> str:
        """The report as a JSON document (a non-finite float as ``{"$float": "nan"}``)."""
        from hookscope.render.anomaly_report import anomaly_to_json

        return anomaly_to_json(self, indent=indent)

    def to_html(self, path: Any = None) -> str:
        """One self-contained HTML page: the first non-finite value (its call, inputs
        and op) above the report of the partial trace; written to ``path`` when given.

        Raises:
            SpecError: ``path``'s folder does not exist, or ``path`` is a folder.
        """
        from hookscope.render.report import anomaly_report, write_html

        html = anomaly_report(self)
        if path is not None:
            write_html(html, path)
        return html

    def to_dict(self) -> dict[str, Any]:
        """The report as plain JSON-ready data."""
        from hookscope.render.anomaly_report import anomaly_to_dict

        return anomaly_to_dict(self)
