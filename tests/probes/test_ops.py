"""The ops probe: which aten ops ran, where, in which phase, and what they cost.

Oracles: an independent ``TorchDispatchMode`` logger for the op sequence and shapes;
``FlopCounterMode`` (with ``custom_mapping``) for FLOPs of custom formulas; the
structure of autograd itself (a ``Linear``'s backward is one ``mm`` per gradient) for
backward attribution; and bit-identical outputs of unobserved twins for safety.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

import hookscope
import zoo
from helpers import assert_outputs_identical, assert_state_unchanged, snapshot_state, total_hooks
from hookscope.core.records.values import FlopRule, Phase
from hookscope.flops.registry import by_op, ops_of
from hookscope.probes import OpsProbe, Probe
from hookscope.render.ops_table import calls_flops_table, render_call_flops, render_ops

OPS_ONLY = {"ops": True, "time": False, "stats": False, "memory": False}


# A custom operator without a FLOP formula (matmul-like work FlopCounterMode can't see).
@torch.library.custom_op("hookscope_tests::mix", mutates_args=())
def mix(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x @ w


@mix.register_fake
def _mix_fake(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], w.shape[1])


MIX = "hookscope_tests.mix.default"


def mix_flop(x_shape: Any, w_shape: Any, *, out_shape: Any = None) -> int:
    return 2 * x_shape[0] * x_shape[1] * w_shape[1]


class Mixer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return mix(x, self.w)


class MixNet(nn.Module):
    """``head`` calls the custom op inside ``block``; ``stem`` is a plain Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(4, 4)
        self.block = nn.Sequential(nn.ReLU(), Mixer())
        self.tail = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tail(self.block(self.stem(x)))


class OpLogger(TorchDispatchMode):
    """The oracle: every op below autograd with its input and output shapes."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, list[tuple[int, ...]], list[tuple[int, ...]]]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        flat_in = torch.utils._pytree.tree_leaves((args, kwargs or {}))
        flat_out = torch.utils._pytree.tree_leaves(out)
        self.ops.append((
            str(func),
            [tuple(t.shape) for t in flat_in if isinstance(t, torch.Tensor)],
            [tuple(t.shape) for t in flat_out if isinstance(t, torch.Tensor)],
        ))
        return out


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


# -- what is recorded ----------------------------------------------------------------


def test_records_every_op_with_its_shapes_like_a_plain_dispatch_mode() -> None:
    model, x = _mlp(), torch.randn(4, 8)
    with torch.no_grad(), OpLogger() as logger:
        model(x)
    trace = hookscope.trace(model, x, **OPS_ONLY)
    recorded = [
        (op.name, [m.shape for m in op.inputs], [m.shape for m in op.outputs])
        for op in trace.ops
    ]
    assert recorded == logger.ops
    assert [op.index for op in trace.ops] == list(range(len(trace.ops)))


def test_forward_ops_belong_to_the_innermost_call() -> None:
    model = _mlp()
    trace = hookscope.trace(model, torch.randn(4, 8), **OPS_ONLY)
    names = {c.path: [op.name for op in ops_of(trace, c)] for c in trace.calls}
    assert names[""] == []
    assert names["0"] == ["aten.t.default", "aten.addmm.default"]
    assert names["1"] == ["aten.relu.default"]
    assert len(ops_of(trace, trace.find(""), subtree=True)) == len(trace.ops)
    assert all(op.phase is Phase.FORWARD for op in trace.ops)


@pytest.mark.parametrize("style", ["autograd.grad", "backward"])
def test_backward_ops_belong_to_the_module_whose_forward_made_them(style: str) -> None:
    model, x = _mlp(), torch.randn(4, 8)
    with hookscope.Tracer(model, ops=True) as tracer:
        loss = model(x).square().sum()  # outside any module
        if style == "backward":
            loss.backward()
        else:
            torch.autograd.grad(loss, list(model.parameters()))
    trace = tracer.trace
    assert trace is not None
    backward = [op for op in trace.ops if op.phase is Phase.BACKWARD]
    mms = {c.path: [op for op in ops_of(trace, c) if op.name == "aten.mm.default"
                    and op.phase is Phase.BACKWARD] for c in trace.calls}
    # fc0's input does not require grad: only the weight gradient, one mm [16,4]x[4,8]
    assert [[m.shape for m in op.inputs] for op in mms["0"]] == [[(16, 4), (4, 8)]]
    # fc2: input gradient [4,2]x[2,16] and weight gradient [2,4]x[4,16]
    assert sorted([m.shape for m in op.inputs] for op in mms["2"]) == [
        [(2, 4), (4, 16)], [(4, 2), (2, 16)],
    ]
    assert mms[""] == [] and mms["1"] == []
    relu_bwd = [op.call for op in backward if op.name == "aten.threshold_backward.default"]
    assert relu_bwd == [trace.find("1").index]
    loss_bwd = [op for op in backward if op.name == "aten.mul.Tensor"]  # d(square)
    assert loss_bwd and all(op.call is None for op in loss_bwd)
    model.zero_grad(set_to_none=True)


class Busy(Probe):
    """Does tensor work in every event, as the stats and memory probes do."""

    def on_enter(self, call: Any, module: Any, args: Any, kwargs: Any) -> None:
        for a in args:
            if isinstance(a, torch.Tensor):
                (a.float() * 2).abs().max()

    def on_exit(
        self, call: Any, module: Any, args: Any, kwargs: Any, output: Any, failed: bool
    ) -> None:
        if isinstance(output, torch.Tensor):
            torch.linalg.vector_norm(output.float() @ output.float().T)


def _op_rows(**flags: Any) -> list[tuple[str, int | None, str, int | None]]:
    trace = hookscope.trace(_mlp(), torch.randn(4, 8, generator=torch.Generator().manual_seed(0)),
                            backward=True, **{**OPS_ONLY, **flags})
    return [(op.name, op.call, op.phase.value, op.flops) for op in trace.ops]


@pytest.mark.parametrize("flags", [
    {"probes": [Busy()]},
    {"time": True, "stats": True},
    {"memory": True},
])
def test_other_probes_tensor_work_is_not_recorded(flags: dict[str, Any]) -> None:
    alone = _op_rows()
    assert alone
    assert _op_rows(**flags) == alone


def test_a_fast_run_inside_an_ops_tracer_keeps_its_probe_work_out_of_the_op_log() -> None:
    """A model whose forward runs ``hookscope.trace`` on a model of its own (not a
    submodule: the outer tracer hooks none of its modules, so the inner run takes the
    fast path): the outer ops probe records the inner model's ops, which the outer
    call ran, but not the inner statistics probe's reductions."""
    inner = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    class Outer(nn.Module):
        def __init__(self, stats: bool) -> None:
            super().__init__()
            self.stats = stats
            object.__setattr__(self, "hidden", inner)  # not registered

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            hookscope.trace(self.hidden, x, shapes=False, stats=self.stats)
            return x * 2

    def op_names(stats: bool) -> list[str]:
        model = Outer(stats)
        with hookscope.Tracer(model, shapes=False, ops=True) as outer:
            model(torch.randn(2, 4))
        assert outer.trace is not None
        return [op.name for op in outer.trace.ops]

    plain = op_names(False)
    assert "aten.addmm.default" in plain and plain[-1] == "aten.mul.Tensor"
    assert op_names(True) == plain


# -- FLOP rules ------------------------------------------------------------------------


def test_rules_of_free_convention_and_formula_ops() -> None:
    model = _mlp()
    trace = hookscope.trace(model, torch.randn(4, 8), backward=True, **OPS_ONLY)
    rules = {op.name: op.rule for op in trace.ops}
    assert rules["aten.addmm.default"] is FlopRule.FORMULA
    assert rules["aten.t.default"] is FlopRule.FREE
    assert rules["aten.relu.default"] is FlopRule.CONVENTION
    assert rules["aten.threshold_backward.default"] is FlopRule.CONVENTION
    for op in trace.ops:
        assert op.counted and op.flops is not None
        assert op.flops == 0 or op.rule is FlopRule.FORMULA


def test_custom_op_without_formula_is_uncounted_and_marks_ancestors_partial() -> None:
    model = MixNet()
    trace = hookscope.trace(model, torch.randn(5, 4), **OPS_ONLY)
    assert trace.uncounted_ops == {MIX: 1}
    [op] = [op for op in trace.ops if op.name == MIX]
    assert (op.flops, op.counted, op.rule) == (None, False, FlopRule.UNCOUNTED)
    assert op.call == trace.find("block.1").index
    partial = {c.path for c in trace.calls if c.flops is not None and c.flops.partial}
    assert partial == {"block.1", "block", ""}
    self_partial = {c.path for c in trace.calls if c.self_flops and c.self_flops.partial}
    assert self_partial == {"block.1"}
    assert trace.totals_flops is not None and trace.totals_flops.partial
    # the known part is still counted: stem and tail are plain Linear layers
    assert trace.totals_flops.forward == 2 * 5 * 4 * 4 + 2 * 5 * 3 * 2


def test_registered_formula_counts_the_custom_op_like_flop_counter() -> None:
    model, x = MixNet(), torch.randn(5, 4)
    with torch.no_grad(), FlopCounterMode(
        display=False, custom_mapping={torch.ops.hookscope_tests.mix: mix_flop}
    ) as counter:
        model(x)
    with hookscope.register_flop_formula(mix, mix_flop):
        trace = hookscope.trace(model, x, **OPS_ONLY)
    assert trace.uncounted_ops == {}
    assert trace.totals_flops is not None and not trace.totals_flops.partial
    assert trace.totals_flops.forward == counter.get_total_flops()
    # removed again: uncounted in the next run
    assert hookscope.trace(model, x, **OPS_ONLY).uncounted_ops == {MIX: 1}


def test_per_run_formulas_through_the_probe() -> None:
    model, x = MixNet(), torch.randn(5, 4)
    probe = OpsProbe(formulas={torch.ops.hookscope_tests.mix.default: mix_flop})
    trace = hookscope.trace(model, x, probes=[probe], **{**OPS_ONLY, "ops": False})
    [op] = [op for op in trace.ops if op.name == MIX]
    assert op.flops == mix_flop((5, 4), (4, 3))
    # a per-run formula overrides torch's own
    doubled = OpsProbe(formulas={torch.ops.aten.addmm: lambda *a, **k: 7})
    trace = hookscope.trace(_mlp(), torch.randn(4, 8), probes=[doubled],
                            **{**OPS_ONLY, "ops": False})
    assert {op.flops for op in trace.ops if op.name == "aten.addmm.default"} == {7}


def test_register_flop_formula_rejects_duplicates_and_non_operators() -> None:
    with pytest.raises(hookscope.SpecError, match=r"already registered .by torch"):
        hookscope.register_flop_formula(torch.ops.aten.mm, mix_flop)
    with hookscope.register_flop_formula(mix, mix_flop), pytest.raises(
        hookscope.SpecError, match="already registered"
    ):
        hookscope.register_flop_formula(torch.ops.hookscope_tests.mix, mix_flop)
    with pytest.raises(hookscope.SpecError, match="expected an operator"):
        hookscope.register_flop_formula("aten::mm", mix_flop)
    with pytest.raises(hookscope.SpecError, match="two ops probes"):
        hookscope.trace(_mlp(), torch.randn(4, 8), probes=[OpsProbe()], **OPS_ONLY)


def test_a_failing_formula_makes_the_op_uncounted_not_the_run_fail() -> None:
    def broken(*args: Any, **kwargs: Any) -> int:
        raise ValueError("cannot count this")

    probe = OpsProbe(formulas={torch.ops.aten.addmm: broken})
    trace = hookscope.trace(_mlp(), torch.randn(4, 8), probes=[probe],
                            **{**OPS_ONLY, "ops": False})
    assert trace.uncounted_ops == {"aten.addmm.default": 2}
    assert "cannot count this" in trace.flop_formula_errors["aten.addmm.default"]


def test_higher_order_operator_is_one_uncounted_record() -> None:
    class Branchy(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cond(x.sum() > 0, lambda y: y @ y.T, lambda y: y * 2, (x,))

    model, x = Branchy(), torch.ones(3, 3)
    trace = hookscope.trace(model, x, **OPS_ONLY)
    assert trace.uncounted_ops == {"higher_order.cond": 1}
    assert trace.calls[0].flops is not None and trace.calls[0].flops.partial
    with hookscope.Tracer(model, ops=True):
        observed = model(x)
    assert torch.equal(observed, x @ x.T)


# -- aggregates ------------------------------------------------------------------------


def test_aggregates_add_up() -> None:
    model = _mlp()
    trace = hookscope.trace(model, torch.randn(4, 8), backward=True, **OPS_ONLY)
    total = trace.totals_flops
    assert total is not None
    groups = by_op(trace)
    assert sum(g.count for g in groups.values()) == len(trace.ops)
    assert sum(g.forward for g in groups.values()) == total.forward
    assert sum(g.backward for g in groups.values()) == total.backward
    assert next(iter(groups)) == "aten.mm.default"  # heaviest first: 3 backward mms
    assert groups["aten.addmm.default"].count_forward == 2
    assert groups["aten.addmm.default"].macs_forward * 2 == groups["aten.addmm.default"].forward
    for call in trace.calls:
        assert call.flops is not None and call.self_flops is not None
        kids = trace.children(call)
        assert call.flops.forward == call.self_flops.forward + sum(
            k.flops.forward for k in kids if k.flops
        )
        own = sum(op.flops or 0 for op in ops_of(trace, call) if op.phase is Phase.BACKWARD)
        assert call.self_flops.backward == own
    root = trace.find("")
    assert root.flops is not None
    assert (root.flops.forward, root.flops.backward) == (total.forward, total.backward)
    relu = by_op(trace, call=trace.find("1"))
    assert set(relu) == {op.name for op in ops_of(trace, trace.find("1"))}
    assert {"aten.relu.default", "aten.threshold_backward.default"} <= set(relu)


def test_json_round_trip_keeps_ops_and_flops() -> None:
    trace = hookscope.trace(MixNet(), torch.randn(5, 4), **OPS_ONLY)
    doc = json.loads(trace.to_json())
    assert doc["totals"]["flops_forward"] == trace.totals_flops.forward  # type: ignore[union-attr]
    assert doc["totals"]["flops_backward"] == 0
    assert doc["facts"]["uncounted_ops"] == {MIX: 1}
    root = doc["calls"][0]
    assert root["flops"]["forward"] == trace.calls[0].flops.forward  # type: ignore[union-attr]
    assert root["flops"]["partial"] is True
    assert {o["rule"] for o in doc["facts"]["ops"]} >= {"formula", "uncounted"}
    assert hookscope.Trace.from_json(trace.to_json()) == trace


# -- safety ------------------------------------------------------------------------------


def test_outputs_grads_and_state_unchanged_with_ops() -> None:
    model, twin = zoo.build(zoo.NestedSeeds), zoo.build(zoo.NestedSeeds)
    args, kwargs = zoo.NestedSeeds.example_inputs()
    before = snapshot_state(model)
    expected = twin(*args, **kwargs)
    expected.sum().backward()
    hooks = total_hooks(model)
    with hookscope.Tracer(model, ops=True, stats=True, memory=True, time=True):
        observed = model(*args, **kwargs)
        observed.sum().backward()
    assert_outputs_identical(expected, observed)
    for p, q in zip(twin.parameters(), model.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)  # type: ignore[arg-type]
    model.zero_grad(set_to_none=True)
    assert total_hooks(model) == hooks
    assert_state_unchanged(before, model)
    assert torch._C._len_torch_dispatch_stack() == 0


def test_model_that_raises_keeps_the_ops_before_the_failure() -> None:
    model = zoo.build(zoo.RaisingModel)
    args, kwargs = zoo.RaisingModel.example_inputs()
    before = snapshot_state(model)
    with pytest.raises(hookscope.ModelRunError) as info:
        hookscope.trace(model, *args, kwargs=kwargs, **OPS_ONLY)
    assert_state_unchanged(before, model)
    assert torch._C._len_torch_dispatch_stack() == 0
    trace = info.value.trace
    assert trace.totals_flops is not None
    stem = trace.find("stem")
    assert [op.name for op in ops_of(trace, stem)] == ["aten.t.default", "aten.addmm.default"]
    assert stem.flops is not None and stem.flops.forward == 2 * 2 * 4 * 8
    failing = trace.find("block.proj")
    assert [op.name for op in ops_of(trace, failing)] == ["aten.t.default"]  # addmm raised
    assert failing.flops is not None and failing.flops.forward == 0
    assert max(op.call or 0 for op in trace.ops) <= failing.index


# -- rendering -----------------------------------------------------------------------


def test_ops_table_inline() -> None:
    trace = hookscope.trace(_mlp(), torch.randn(4, 8), backward=True, **OPS_ONLY)
    n_t = sum(op.name == "aten.t.default" for op in trace.ops)
    expected = f"""\
                                    Ops
Op                  Count  Phase    FLOPs fwd  FLOPs bwd  Share  FLOPs from
------------------  -----  -------  ---------  ---------  -----  ----------
aten.mm.default         3  bwd                     1,536  54.5%  formula
aten.addmm.default      2  fwd          1,280             45.5%  formula
aten.t.default      {n_t:>5}  fwd+bwd          0          0   0.0%  free"""
    lines = [line.rstrip() for line in render_ops(trace, top=3, width=100).splitlines()]
    assert lines[:6] == expected.splitlines()
    kinds = len({op.name for op in trace.ops})
    assert " ".join(" ".join(lines[6:]).split()) == (
        f"{len(trace.ops)} ops of {kinds} types | showing the 3 heaviest | "
        "FLOPs forward 1,280, backward 1,536 | MACs = FLOPs / 2"
    )


def test_tables_mark_partial_totals_and_list_uncounted_ops() -> None:
    trace = hookscope.trace(MixNet(), torch.randn(5, 4), **OPS_ONLY)
    ops_text = render_ops(trace, width=120)
    assert f"\n{MIX}" in ops_text and "uncounted" in ops_text
    assert f"+ lower bound: no FLOP formula for {MIX} (x1)" in ops_text
    calls_text = render_call_flops(trace, width=120)
    assert "220+" in calls_text  # root: 2*5*4*4 + 2*5*3*2, plus the uncounted op
    assert calls_flops_table(trace).caption is not None
    summary = hookscope.summary(MixNet(), torch.randn(5, 4), ops=True).to_text(width=140)
    assert "FLOPs" in summary and "220+" in summary
    assert f"no FLOP formula for {MIX}" in summary


def test_summary_shows_backward_flops_column_when_present() -> None:
    trace = hookscope.trace(_mlp(), torch.randn(4, 8), backward=True, **OPS_ONLY)
    text = hookscope.Summary(trace).to_text(width=140)
    assert "FLOPs fwd" in text and "FLOPs bwd" in text and "1,536" in text
    forward_only = hookscope.summary(_mlp(), torch.randn(4, 8), ops=True).to_text(width=140)
    assert "FLOPs bwd" not in forward_only and "1,280" in forward_only


def test_render_errors() -> None:
    plain = hookscope.trace(_mlp(), torch.randn(4, 8), **{**OPS_ONLY, "ops": False})
    with pytest.raises(hookscope.RenderError, match="ops=True"):
        render_ops(plain)
    traced = hookscope.trace(_mlp(), torch.randn(4, 8), **OPS_ONLY)
    with pytest.raises(hookscope.SpecError, match="top must be a positive integer"):
        render_ops(traced, top=0)


def test_a_training_step_with_an_optimizer_is_fully_counted() -> None:
    """Optimizers mark ``step()`` with ``record_function`` (``profiler::`` ops): those
    markers are free, so a whole training step is not flagged partial, and the model's
    forward and backward FLOPs equal FlopCounterMode's on the same step."""
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(3, 8)

    def step(m: nn.Module) -> None:
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        loss = m(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    twin = copy.deepcopy(model)
    with FlopCounterMode(display=False) as counter:
        step(twin)
    with hookscope.Tracer(model, **OPS_ONLY) as tracer:
        step(model)
    trace = tracer.trace
    assert trace is not None
    assert trace.uncounted_ops == {}
    assert trace.totals_flops is not None and not trace.totals_flops.partial
    total = trace.totals_flops.forward + trace.totals_flops.backward
    assert total == counter.get_total_flops()
    assert any(o.name.startswith("profiler.") for o in trace.ops)


_FIRST_RUN = """
import torch, hookscope
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

class Names(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))

torch.manual_seed(0)
model, x = nn.Linear(2, 2), torch.randn(1, 2)
trace = hookscope.trace(model, x, ops=True, time=False, stats=False, memory=False)
with torch.no_grad(), Names() as oracle:
    model(x)
print([op.name for op in trace.ops] == oracle.names, [op.name for op in trace.ops])
"""


def test_the_first_trace_of_a_process_records_only_the_model_s_ops() -> None:
    # the once-per-process checks run inside the first run, under the ops probe's mode
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FIRST_RUN], capture_output=True,
                          text=True, timeout=120, check=True)
    assert done.stdout.startswith("True"), done.stdout + done.stderr


def test_a_statically_quantized_layer_is_uncounted_not_free() -> None:
    """quint8 tensors are not floating: quantized.linear was 0 FLOPs, 'free', and the
    total looked exact."""
    import warnings

    import torch.ao.quantization as tq

    class Quantized(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.quant, self.fc, self.dequant = tq.QuantStub(), nn.Linear(64, 64), tq.DeQuantStub()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.dequant(self.fc(self.quant(x)))

    if "fbgemm" not in torch.backends.quantized.supported_engines:
        pytest.skip("no fbgemm quantized engine in this torch")
    x = torch.randn(8, 64)
    model = Quantized().eval()
    model.qconfig = tq.get_default_qconfig("fbgemm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepared = tq.prepare(model)
        prepared(x)
        quantized = tq.convert(prepared)
    trace = hookscope.trace(quantized, x, **OPS_ONLY)
    assert any(name.startswith("quantized.linear") for name in trace.uncounted_ops)
    assert trace.find("fc").flops.partial and trace.totals_flops.partial
