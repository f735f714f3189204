"""Edge cases of the Python API, as a hostile user would write them.

Each test names the promise it checks: the model is left exactly as it was (hooks,
flags, values, ``.grad``, ``requires_grad``), observed outputs are bit-identical to
unobserved ones, bad input is one ``SpecError`` naming the value and the fix, and the
numbers match an independent oracle (float64 torch on the same tensor). Every trace
also goes through its JSON round trip and its CSV export.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import io
import math
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

import hookscope
from helpers import (
    assert_outputs_identical,
    assert_state_unchanged,
    install_user_hooks,
    snapshot_state,
    total_hooks,
)

QUIET = {"time": False, "stats": False, "memory": False}
ALL_PROBES = {"time": True, "stats": True, "memory": True, "ops": True}


def _x(*shape: int, seed: int = 0, **kw: Any) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), **kw)


def check_exports(trace: hookscope.Trace) -> None:
    """JSON round trip is exact, the CSV parses with one row per call, text renders."""
    assert hookscope.Trace.from_json(trace.to_json()) == trace
    rows = list(csv.reader(io.StringIO(trace.to_csv())))
    assert len(rows) == len(trace.calls) + 1
    str(trace)


def oracle_stats(t: torch.Tensor) -> tuple[float, float, float, float]:
    """mean, std, min, max in float64 (magnitude for complex), independent of hookscope."""
    d = (t.abs() if t.is_complex() else t).detach().to(torch.float64)
    return d.mean().item(), d.std().item(), d.min().item(), d.max().item()


def assert_stats_close(stats: hookscope.TensorStats, t: torch.Tensor, rel: float) -> None:
    mean, std, lo, hi = oracle_stats(t)
    assert stats.numel == t.numel()
    assert stats.min == pytest.approx(lo, rel=rel) and stats.max == pytest.approx(hi, rel=rel)
    assert stats.mean == pytest.approx(mean, rel=rel, abs=rel)
    assert stats.std == pytest.approx(std, rel=rel)


def saved_hooks_and_modes_clean() -> None:
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    assert not _get_current_dispatch_mode_stack()


class Returns(nn.Module):
    """A linear layer whose module returns ``fn(linear(x))``: any value at all."""

    def __init__(self, fn: Callable[[torch.Tensor], Any]) -> None:
        super().__init__()
        self.fn = fn
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> Any:
        return self.fn(self.lin(x))


# -- odd outputs --------------------------------------------------------------------------


def _gen(y: torch.Tensor) -> Iterator[torch.Tensor]:
    yield y


ODD_OUTPUTS: dict[str, Callable[[torch.Tensor], Any]] = {
    "generator": _gen,
    "str": lambda y: "text",
    "set": lambda y: {1, 2},
    "none": lambda y: None,
    "int": lambda y: 7,
    "non-str-keys": lambda y: {1: y, (2, "a"): [y * 2, {None: y}], 'q"uote': y},
    "scalar": lambda y: y.sum(),
    "int-tensor": lambda y: (y > 0).long(),
    "bool-tensor": lambda y: y > 0,
    "empty": lambda y: y[:0],
    "sparse-coo": lambda y: y.to_sparse(),
    "complex": lambda y: torch.complex(y, -y),
    "mixed-tuple": lambda y: (None, y, 3, "s", b"b"),
}


@pytest.mark.parametrize("name", list(ODD_OUTPUTS))
@pytest.mark.parametrize("grad", [False, True])
def test_odd_outputs_trace_and_export(name: str, grad: bool) -> None:
    model = Returns(ODD_OUTPUTS[name])
    before = snapshot_state(model)
    x = _x(3, 4)
    trace = hookscope.trace(model, x, grad=grad, **ALL_PROBES)
    assert_state_unchanged(before, model)
    assert total_hooks(model) == 0
    check_exports(trace)
    assert [c.path for c in trace.calls] == ["", "lin"]
    if name in ("scalar", "int-tensor", "bool-tensor", "complex"):
        expected = ODD_OUTPUTS[name](model.lin(x)).detach()
        assert trace.find("").outputs[0].shape == tuple(expected.shape)
        if name == "complex":
            assert_stats_close(trace.find("").stats[0], expected, rel=1e-6)
    if name == "non-str-keys":
        paths = [m.path for m in trace.find("").outputs]
        assert paths == ["out[1]", "out[(2, 'a')][0]", "out[(2, 'a')][1][None]",
                         'out["q\\"uote"]']


def test_odd_outputs_are_bit_identical_under_a_tracer() -> None:
    for name in ("non-str-keys", "scalar", "sparse-coo", "complex", "mixed-tuple"):
        model = Returns(ODD_OUTPUTS[name])
        x = _x(3, 4)
        expected = model(x)
        with hookscope.Tracer(model, stats=True, memory=True, ops=True, time=True) as tracer:
            got = model(x)
        assert_outputs_identical(expected, got)
        assert tracer.trace is not None
        check_exports(tracer.trace)


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64, torch.int8])
def test_unsigned_and_small_integer_outputs(dtype: torch.dtype) -> None:
    """Regression: uint16/32/64 have no ``count_nonzero`` kernel; the stats probe crashed
    and the crash was reported as the model's failure."""
    values = torch.tensor([0, 1, 2, 3, 60, 0]).to(dtype)
    trace = hookscope.trace(Returns(lambda y: values), _x(3, 4))
    stats = trace.find("").stats[0]
    mean, std, lo, hi = oracle_stats(values)
    assert (stats.mean, stats.min, stats.max) == (mean, lo, hi)
    assert stats.std == pytest.approx(std, rel=1e-12)
    assert stats.zero_fraction == 2 / 6
    check_exports(trace)


def test_float32_sum_overflow_keeps_finite_statistics() -> None:
    """Regression: every value finite, but their float32 sum overflows: the mean and std
    were ``inf`` (the std of a constant tensor!)."""
    for values in ([3e38] * 4, [3e38, 1e38, 2e38, 3e38]):
        t = torch.tensor(values)
        stats = hookscope.trace(Returns(lambda y, t=t: t), _x(3, 4)).find("").stats[0]
        assert_stats_close(stats, t, rel=1e-6)
        assert stats.nan_count == stats.inf_count == 0


@pytest.mark.parametrize("layout", [torch.strided, torch.jagged])
def test_nested_tensor_output(layout: torch.layout) -> None:
    """Regression: a strided nested tensor has no ``shape`` (the trace crashed); a jagged
    one has a symbolic size, which leaked into the records and broke ``to_json``."""

    def nested(y: torch.Tensor) -> torch.Tensor:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.nested.nested_tensor([y[0], y[1, :2]], layout=layout)

    trace = hookscope.trace(Returns(nested), _x(3, 4), **ALL_PROBES)
    out = trace.find("").outputs[0]
    assert out.shape == (2, -1) and out.numel == -1
    assert trace.find("").stats[0].numel == 6 and trace.find("").stats[0].mean is None
    check_exports(trace)


def test_packed_sequence_through_an_lstm() -> None:
    class Packed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(2, 3, batch_first=True)

        def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> Any:
            packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            return self.lstm(packed)

    model = Packed()
    x, lengths = _x(3, 4, 2), torch.tensor([4, 2, 3])
    expected = model(x, lengths)
    before = snapshot_state(model)
    trace = hookscope.trace(model, x, lengths, backward=True, **ALL_PROBES)
    assert_state_unchanged(before, model)
    with hookscope.Tracer(model, **ALL_PROBES):
        got = model(x, lengths)
    assert isinstance(got[0], PackedSequence)
    assert_outputs_identical(expected, got)
    assert [m.path for m in trace.find("lstm").inputs][:2] == ["args[0].data",
                                                              "args[0].batch_sizes"]
    assert trace.find("lstm").outputs[0].shape == tuple(expected[0].data.shape)
    check_exports(trace)


# -- dtypes and layouts -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "rel"),
    [(torch.float16, 2e-3), (torch.bfloat16, 1e-2), (torch.float64, 1e-12),
     (torch.complex64, 1e-5)],
)
def test_models_in_other_dtypes(dtype: torch.dtype, rel: float) -> None:
    warns = pytest.warns(UserWarning, match="Complex modules are a new feature")
    with warns if dtype.is_complex else contextlib.nullcontext():  # torch's, not ours
        model = nn.Sequential(nn.Linear(8, 16), nn.Linear(16, 4)).to(dtype)
    x = _x(5, 8).to(dtype)
    expected = model(x)
    before = snapshot_state(model)
    trace = hookscope.trace(model, x, backward=dtype is not torch.complex64, **ALL_PROBES)
    assert_state_unchanged(before, model)
    stats = trace.find("0").stats[0]
    assert_stats_close(stats, model[0](x), rel=rel)
    assert trace.find("").outputs[0].dtype == str(dtype).removeprefix("torch.")
    with hookscope.Tracer(model, stats=True, memory=True):
        got = model(x)
    assert_outputs_identical(expected, got)
    check_exports(trace)


def test_channels_last_input() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())
    x = _x(2, 3, 5, 5).to(memory_format=torch.channels_last)
    conv = model[0](x).detach()
    assert conv.is_contiguous(memory_format=torch.channels_last)
    trace = hookscope.trace(model, x, backward=True, **ALL_PROBES)
    assert_stats_close(trace.find("0").stats[0], conv, rel=1e-5)
    assert trace.find("0").memory is not None
    assert trace.find("0").memory.output_bytes == conv.numel() * 4
    check_exports(trace)


def test_sparse_coo_input() -> None:
    class SparseMM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 2)

        def forward(self, a: torch.Tensor) -> torch.Tensor:
            return torch.sparse.mm(a, self.lin.weight.t())

    x = _x(3, 4).to_sparse()
    trace = hookscope.trace(SparseMM(), x, backward=True, **ALL_PROBES)
    assert trace.inputs[0].layout == "sparse_coo"
    check_exports(trace)


def test_zero_element_batch() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    trace = hookscope.trace(model, torch.randn(0, 4), backward=True, **ALL_PROBES)
    stats = trace.find("0").stats[0]
    assert stats.numel == 0 and stats.mean is None and stats.nan_count == 0
    assert trace.find("").outputs[0].shape == (0, 2)
    check_exports(trace)


def test_nan_and_inf_produced_mid_model() -> None:
    class Log(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.b = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.a(x).log()  # NaN for negative values
            return self.b(y) / torch.tensor([0.0, 1.0])  # Inf or NaN in column 0

    model = Log()
    x = _x(6, 4)
    out = model(x).detach()
    trace = hookscope.trace(model, x, backward=True, **ALL_PROBES)
    stats = trace.find("").stats[0]
    assert stats.nan_count == int(out.isnan().sum()) > 0
    assert stats.inf_count == int(out.isinf().sum())
    assert math.isnan(stats.mean)
    check_exports(trace)


def test_transformer_fast_path_on_nested_tensors_with_ops() -> None:
    """Regression: in eval mode with a padding mask the encoder runs on nested tensors;
    the ops probe decomposed ``aten.linear`` into dense ops, which fail on them, so
    ``ops=True`` broke a model that runs fine unobserved."""
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).eval()
    x = _x(2, 5, 8)
    mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    with torch.no_grad():
        expected = model(x, src_key_padding_mask=mask)
    trace = hookscope.trace(model, x, kwargs={"src_key_padding_mask": mask}, **ALL_PROBES)
    assert trace.find("layers.0").outputs[0].shape == (2, -1, 8)  # nested inside
    assert trace.totals_flops is not None and trace.totals_flops.partial  # never a silent 0
    with torch.no_grad(), hookscope.Tracer(model, **ALL_PROBES):
        got = model(x, src_key_padding_mask=mask)
    assert_outputs_identical(expected, got)
    check_exports(trace)


def test_parametrized_weights_match_an_unobserved_twin() -> None:
    from torch.nn.utils import parametrizations

    layer = nn.Linear(4, 4)
    parametrizations.orthogonal(layer)
    model = nn.Sequential(layer, nn.Tanh(), parametrizations.spectral_norm(nn.Linear(4, 2)))
    twin = copy.deepcopy(model)
    before = snapshot_state(model)
    x = _x(3, 4)
    expected = twin(x)  # spectral norm's power iteration updates buffers in train mode
    trace = hookscope.trace(model, x, backward=True, **ALL_PROBES)
    # a traced forward in training mode puts the buffers back (README): the power
    # iteration's update of `_u`/`_v`, which the twin keeps, is undone
    assert_state_unchanged(before, model)
    plist = trace.find("0.parametrizations.weight")  # runs when forward reads .weight
    assert plist.parent == trace.find("0").index
    assert trace.find("0.parametrizations.weight.0").parent == plist.index
    assert_stats_close(trace.find("").stats[0], expected.detach(), rel=1e-6)
    check_exports(trace)


# -- containers and unusual call paths -----------------------------------------------------


class Containers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.md = nn.ModuleDict({"a": nn.Linear(4, 4), "b": nn.Linear(4, 4)})
        self.pl = nn.ParameterList([nn.Parameter(torch.ones(4)), nn.Parameter(torch.ones(4))])
        self.pd = nn.ParameterDict(
            {"w": nn.Parameter(torch.ones(4)), "v": nn.Parameter(torch.zeros(4), False)}
        )
        self.ml = nn.ModuleList([nn.Linear(4, 4)])
        self.plain = [nn.Linear(4, 4)]  # not registered: never hooked

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.md["a"](x) * self.pl[0] + self.pd["w"] + self.pd["v"]
        x = self.md["b"].forward(x)  # bypasses __call__: no hook fires
        for m in self.ml:
            x = m(x)
        return self.plain[0](x) + self.pl[1]


def test_module_and_parameter_containers() -> None:
    model = Containers()
    x = _x(3, 4)
    expected = model(x)
    before = snapshot_state(model)
    trace = hookscope.trace(model, x, backward=True, **ALL_PROBES)
    assert_state_unchanged(before, model)
    assert [c.path for c in trace.calls] == ["", "md.a", "ml.0"]
    registered = sum(p.numel() for p in model.parameters())
    assert trace.model.params_total == hookscope.inspect(model).total_params == registered
    assert trace.model.params_trainable == registered - 4
    # md.b ran through .forward and plain[0] is unregistered: their work is the root's
    root = trace.find("")
    assert root.self_flops is not None and root.self_flops.forward == 2 * (2 * 3 * 4 * 4)
    with hookscope.Tracer(model, **ALL_PROBES):
        got = model(x)
    assert_outputs_identical(expected, got)
    check_exports(trace)


def test_depth_200_sequential() -> None:
    model: nn.Module = nn.Linear(4, 4)
    for _ in range(200):
        model = nn.Sequential(model)
    before = snapshot_state(model)
    trace = hookscope.trace(model, _x(2, 4), backward=True, **ALL_PROBES)
    assert_state_unchanged(before, model)
    assert len(trace.calls) == 201 and trace.calls[-1].depth == 200
    check_exports(trace)
    hookscope.annotated_repr(model, trace)
    str(hookscope.inspect(model))


def test_one_module_shared_by_two_parents() -> None:
    shared = nn.Linear(4, 4)
    model = nn.Sequential(nn.Sequential(shared, nn.ReLU()), nn.Sequential(nn.Tanh(), shared))
    trace = hookscope.trace(model, _x(2, 4), **ALL_PROBES)
    calls = [(c.path, c.call_index, c.parent) for c in trace.calls]
    assert ("0.0", 0, 1) in calls and ("0.0", 1, 4) in calls
    assert trace.modules["0.0"].aliases == ("1.1",)
    assert trace.model.params_total == 20
    check_exports(trace)


def test_forward_without_arguments_needs_explicit_empty_kwargs() -> None:
    """Regression: a model whose forward takes no argument could not be traced at all."""

    class Source(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(3))

        def forward(self) -> torch.Tensor:
            return self.w * 2

    with pytest.raises(hookscope.SpecError, match=r"kwargs=\{\}"):
        hookscope.trace(Source())
    trace = hookscope.trace(Source(), kwargs={}, backward=True)
    assert trace.find("").outputs[0].shape == (3,)
    assert trace.inputs == []


# -- scripted and compiled modules ----------------------------------------------------------


def test_scripted_submodule_runs_unobserved_inside_an_eager_model() -> None:
    """Regression: ``inspect`` raised a TypeError on TorchScript modules, and hook
    registration failed with a RuntimeError reported as 'the model raised no failure'."""
    model = nn.Sequential(
        nn.Linear(4, 4), torch.jit.script(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
    )
    x = _x(3, 4)
    expected = model(x)
    before = snapshot_state(model)
    info = hookscope.inspect(model)
    assert info.total_params == 40 and info["1"].own_params == 0
    trace = hookscope.trace(model, x, **ALL_PROBES)
    assert_state_unchanged(before, model)
    assert [c.path for c in trace.calls] == ["", "0"]  # TorchScript calls no module hooks
    root = trace.find("")
    assert root.self_flops is not None and root.self_flops.forward == 2 * 3 * 4 * 4
    with hookscope.Tracer(model, **ALL_PROBES):
        got = model(x)
    assert_outputs_identical(expected, got)
    assert "not called" in hookscope.annotated_repr(model, trace)
    check_exports(trace)


@pytest.mark.parametrize("make", [torch.jit.script, lambda m: torch.jit.trace(m, _x(3, 4))])
def test_scripted_root_is_a_spec_error(make: Callable[[nn.Module], nn.Module]) -> None:
    scripted = make(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
    with pytest.raises(hookscope.SpecError, match=r"TorchScript.*nn\.Module you scripted"):
        hookscope.trace(scripted, _x(3, 4))
    with pytest.raises(hookscope.SpecError, match="TorchScript"):
        hookscope.Tracer(scripted)
    assert hookscope.inspect(scripted).total_params == 20


def test_torch_jit_trace_inside_a_tracer_records_none_of_the_probes_work() -> None:
    """The statistics probe's ops went into the user's graph: a dozen TracerWarnings
    pointing at hookscope, then an internal assert in torch's alias analysis."""
    import warnings

    model, x = nn.Sequential(nn.Linear(4, 4), nn.ReLU()), _x(3, 4)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with hookscope.Tracer(model, **ALL_PROBES) as tracer:
            traced = torch.jit.trace(model, x)
    assert not [w for w in seen if "hookscope" in str(w.filename)]
    assert_outputs_identical(model(x), traced(x))
    assert tracer.trace is not None
    assert tracer.trace.find("0").facts.get("stats") is not None  # the probes still ran
    assert "aten::count_nonzero" not in str(traced.graph)


@pytest.mark.parametrize("grad", [True, False])
def test_torch_jit_trace_inside_a_patch_block_traces_the_patch(grad: bool) -> None:
    """Pausing jit for the probes took a patch's returned value out of the graph: with
    grad a RuntimeError, under no_grad a constant (wrong for every other input)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    x, y = _x(3, 4), torch.randn(3, 4)
    with torch.set_grad_enabled(grad), hookscope.patch(model, {"0": hookscope.patches.scale(0.5)}):
        traced = torch.jit.trace(model, x, check_trace=False)
        expected = model(y)
    assert torch.allclose(traced(y), expected)


def test_meta_analysis_of_a_model_with_a_scripted_submodule_is_a_spec_error() -> None:
    """Regression: the meta copy kept the scripted submodule's real weights, and the
    run failed inside the TorchScript interpreter."""
    model = nn.Sequential(nn.Linear(4, 4), torch.jit.script(nn.Linear(4, 4)))
    with pytest.raises(hookscope.SpecError, match="TorchScript submodule '1'"):
        hookscope.trace(model, _x(3, 4), device="meta")


def test_hook_registration_failure_is_not_a_model_error() -> None:
    """Regression: an error while the tracer starts (nothing of the model ran) became
    ``ModelRunError: the model raised no failure recorded``."""

    class NoHooks(nn.Linear):
        def register_forward_hook(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("this module refuses hooks")

    class ReadsInputs(hookscope.Probe):  # may replace values: per-module hooks
        name = "reads_inputs_test"
        replaces = True

        def on_enter(self, call: Any, module: Any, args: Any, kwargs: Any) -> None:
            return None

    model = nn.Sequential(nn.Linear(4, 4), NoHooks(4, 4))
    before = snapshot_state(model)
    with pytest.raises(RuntimeError, match="refuses hooks") as info:
        hookscope.trace(model, _x(3, 4), probes=[ReadsInputs()])
    assert not isinstance(info.value, hookscope.ModelRunError)
    assert_state_unchanged(before, model)
    assert total_hooks(model) == 0


def _dynamo_stance() -> Any:
    import torch._dynamo.eval_frame as eval_frame

    return eval_frame._stance


def test_compiled_model_shows_every_call() -> None:
    """Regression: after the compiled model ran once, its cached code skipped the hooks
    of every inlined module: the trace had the root call only. hookscope now runs
    compiled code eagerly while it observes, and puts the compiler's stance back."""
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    compiled = torch.compile(model, backend="eager")
    x = _x(3, 4)
    expected = compiled(x)  # compile now: the cached code has no hooks
    stance = _dynamo_stance()
    before = snapshot_state(model)
    trace = hookscope.trace(compiled, x, backward=True, **ALL_PROBES)
    assert_state_unchanged(before, model)
    # the module torch.compile wraps, by its own paths
    assert [c.path for c in trace.calls] == ["", "0", "1", "2"]
    assert trace.meta["compiled"] == "torch.compile(model)"
    assert trace.totals_flops is not None and trace.totals_flops.forward == 2 * 3 * (16 + 8)
    with hookscope.Tracer(compiled, stats=True) as tracer:
        got = compiled(x)
    assert tracer.trace is not None and len(tracer.trace.calls) == 4
    assert_outputs_identical(expected, got)
    assert _dynamo_stance() == stance
    assert_outputs_identical(expected, compiled(x))
    check_exports(trace)


# -- user hooks ------------------------------------------------------------------------------


def test_seed_style_output_replacing_hook_and_arg_changing_pre_hooks() -> None:
    """The seeds replace a layer's output in a forward hook (``input @ W.T + b``); a
    pre-hook can change the arguments. Recorded shapes are what the modules received and
    what the caller got; outputs equal the unobserved run."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    w, b = torch.ones(3, 4), torch.zeros(3)
    handles = [
        model[1].register_forward_hook(lambda m, args, out: args[0] @ w.T + b),
        model[1].register_forward_pre_hook(lambda m, args: (args[0][:2],), prepend=True),
        model.register_forward_pre_hook(
            lambda m, args, kw: ((args[0] * 2,), kw), with_kwargs=True, prepend=True
        ),
    ]
    x = _x(5, 4)
    expected = model(x)
    before = snapshot_state(model)
    trace = hookscope.trace(model, x, backward=True, **ALL_PROBES)
    assert_state_unchanged(before, model)
    with hookscope.Tracer(model, **ALL_PROBES):
        got = model(x)
    assert_outputs_identical(expected, got)
    assert trace.find("1").inputs[0].shape == (2, 4)
    assert trace.find("1").outputs[0].shape == (2, 3) == tuple(expected.shape)
    assert trace.outputs[0].shape == (2, 3)
    assert_stats_close(trace.find("1").stats[0], expected.detach(), rel=1e-6)
    for h in handles:
        h.remove()
    assert total_hooks(model) == 0


def test_input_replacing_pre_hook_registered_inside_the_tracer_block() -> None:
    """A pre-hook the user adds inside the ``with`` block runs after hookscope's; the
    inputs recorded are still those ``forward`` received (read when the call ends)."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    x = _x(3, 4)
    with hookscope.Tracer(model) as tracer:
        handle = model[1].register_forward_pre_hook(lambda m, args: (args[0][:1],))
        y = model(x)
    handle.remove()
    assert tracer.trace is not None and y.shape == (1, 2)
    assert tracer.trace.find("1").inputs[0].shape == (1, 4)
    assert tracer.trace.find("1").outputs[0].shape == (1, 2)
    assert total_hooks(model) == 0


def test_output_replacing_hook_registered_inside_the_tracer_block() -> None:
    """Regression: a forward hook the user adds inside the ``with`` block ran after
    hookscope's, so the trace recorded the output from before the replacement."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    user = install_user_hooks(model)
    x = _x(3, 4)
    before = snapshot_state(model)
    with hookscope.Tracer(model) as tracer:
        handle = model[1].register_forward_hook(lambda m, a, out: out.sum(-1))
        y = model(x)
        y2 = model(x)
    assert y.shape == y2.shape == (3,)
    assert tracer.trace is not None
    assert [c.outputs[0].shape for c in tracer.trace.calls_of("1")] == [(3,), (3,)]
    assert [c.outputs[0].shape for c in tracer.trace.calls_of("")] == [(3,), (3,)]
    handle.remove()
    assert_state_unchanged(before, model)  # the user's hooks in their own order
    user.remove()
    assert total_hooks(model) == 0


def test_exception_from_a_user_forward_hook_names_the_module() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))

    def bad(module: nn.Module, args: Any, out: Any) -> None:
        raise ValueError("user hook failed")

    handle = model[0].register_forward_hook(bad)
    before = snapshot_state(model)
    with pytest.raises(hookscope.ModelRunError, match="user hook failed") as info:
        hookscope.trace(model, _x(3, 4), **ALL_PROBES)
    assert info.value.path == "0"
    assert_state_unchanged(before, model)
    check_exports(info.value.trace)
    handle.remove()
    saved_hooks_and_modes_clean()


def test_exception_whose_str_raises_still_names_the_module() -> None:
    """Regression: hookscope's hook failed on ``str(exc)``: ``trace`` said 'no failure
    recorded' and ``Tracer`` replaced the model's exception with its own."""

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("str() failed")

    class Raises(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise Unprintable

    model = nn.Sequential(nn.Linear(4, 4), Raises())
    before = snapshot_state(model)
    with pytest.raises(hookscope.ModelRunError, match="Unprintable in module '1'") as info:
        hookscope.trace(model, _x(3, 4))
    assert info.value.path == "1"
    check_exports(info.value.trace)
    with pytest.raises(Unprintable), hookscope.Tracer(model):
        model(_x(3, 4))
    assert_state_unchanged(before, model)
    assert total_hooks(model) == 0


def test_keyboard_interrupt_from_a_user_hook_leaves_nothing_behind() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))

    def interrupt(module: nn.Module, args: Any, out: Any) -> None:
        raise KeyboardInterrupt

    handle = model[1].register_forward_hook(interrupt)
    before = snapshot_state(model)
    with pytest.raises(KeyboardInterrupt):
        hookscope.trace(model, _x(3, 4), grad=True, **ALL_PROBES)
    assert_state_unchanged(before, model)
    saved_hooks_and_modes_clean()
    handle.remove()
    assert total_hooks(model) == 0


# -- training-mode state, RNG, grad modes ------------------------------------------------------


@pytest.mark.parametrize("backward", [False, True])
def test_batchnorm_and_dropout_in_train_mode_match_an_unobserved_twin(backward: bool) -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5), nn.Linear(4, 2))
    twin = copy.deepcopy(model)
    before = snapshot_state(model)
    x = _x(6, 4)
    torch.manual_seed(1)
    untouched = torch.rand(3)
    torch.manual_seed(1)
    with torch.set_grad_enabled(backward):
        expected = twin(x)  # the same draws as the traced forward's
    torch.manual_seed(1)
    trace = hookscope.trace(model, x, backward=backward, **ALL_PROBES)
    # a forward run for the caller leaves the random stream where it was
    assert torch.equal(torch.rand(3), untouched)
    # trace ran the forward for its caller: the running statistics are put back
    assert_state_unchanged(before, model)
    assert not torch.equal(twin[1].running_mean, model[1].running_mean)
    twin.load_state_dict(model.state_dict())
    assert_stats_close(trace.find("").stats[0], expected.detach(), rel=1e-6)
    # The same again around the user's own training step
    torch.manual_seed(2)
    twin(x).sum().backward()
    torch.manual_seed(2)
    with hookscope.Tracer(model, **ALL_PROBES):
        model(x).sum().backward()
    assert_state_unchanged(before, model, expected=snapshot_state(twin))


def _calibrated() -> nn.Module:
    """A model prepared for post-training quantization (``torch.ao.quantization``) and
    calibrated: its observers hold min/max and histograms, in eval mode."""
    from torch.ao import quantization as q

    torch.manual_seed(3)
    model = nn.Sequential(q.QuantStub(), nn.Conv2d(3, 4, 3), nn.ReLU(), q.DeQuantStub())
    model.eval()
    model.qconfig = q.get_default_qconfig("x86")
    q.prepare(model, inplace=True)
    model.eval()  # prepare() makes its observers in training mode: they record either way
    assert not any(m.training for m in model.modules())
    with torch.no_grad():
        model(torch.rand(2, 3, 8, 8))
    return model


def test_quantization_observers_keep_their_calibration() -> None:
    """Observers record statistics in eval mode too: a summary on random inputs moved a
    calibrated model's ranges (what the quantized model would then be converted with)."""
    model = _calibrated()
    twin = copy.deepcopy(model)
    assert any("min_val" in k for k in model.state_dict())
    before = snapshot_state(model)
    x = torch.randn(1, 3, 8, 8) * 50  # far outside the calibration range
    hookscope.summary(model, input_size=(1, 3, 8, 8))
    hookscope.trace(model, x)
    hookscope.capture(model, x, select="1")
    hookscope.find_anomaly(model, x)
    assert_state_unchanged(before, model)
    with torch.no_grad():  # the oracle: a twin's observers do move on the same input
        twin(x)
    assert not all(torch.equal(a, b) for a, b in
                   zip(twin.state_dict().values(), model.state_dict().values(), strict=True))


def test_grad_modes_around_trace() -> None:
    model = nn.Linear(4, 2)
    x = _x(3, 4)
    with torch.no_grad():
        trace = hookscope.trace(model, x, backward=True)
        assert not torch.is_grad_enabled()
    assert trace.outputs[0].requires_grad
    with torch.inference_mode():
        assert hookscope.trace(model, x).outputs[0].shape == (3, 2)
        # Regression: this said "are all parameters frozen?"
        with pytest.raises(hookscope.SpecError, match="inference_mode"):
            hookscope.trace(model, x, backward=True)


def test_inputs_that_require_grad_keep_their_grad() -> None:
    model = nn.Linear(4, 2)
    x = _x(3, 4, requires_grad=True)
    before = snapshot_state(model)
    trace = hookscope.trace(model, x, backward=True, **ALL_PROBES)
    assert x.grad is None
    assert_state_unchanged(before, model)
    assert trace.inputs[0].requires_grad
    assert trace.totals_flops is not None
    assert trace.totals_flops.backward == 2 * 2 * (3 * 4 * 2)  # grad of weight and of x


def test_backward_with_frozen_model_and_non_leaf_input() -> None:
    """Regression: with every parameter frozen, an input computed from a tensor that
    requires grad gave 'grad() inputs cannot be empty' as a ModelRunError."""
    model = nn.Linear(4, 2).requires_grad_(False)
    w = torch.ones(4, requires_grad=True)
    x = _x(3, 4) * w
    trace = hookscope.trace(model, x, backward=True, **ALL_PROBES)
    assert w.grad is None
    assert trace.totals_flops is not None and trace.totals_flops.backward == 2 * 3 * 4 * 2


def test_backward_with_nothing_to_differentiate_is_a_spec_error() -> None:
    class Inner(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 2).requires_grad_(False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x) * torch.ones(2, requires_grad=True)

    with pytest.raises(hookscope.SpecError, match="nothing to differentiate"):
        hookscope.trace(Inner(), _x(3, 4), backward=True)
    model = nn.Linear(4, 2).requires_grad_(False)
    with pytest.raises(hookscope.SpecError, match="frozen"):
        hookscope.trace(model, _x(3, 4), backward=True)


def test_double_backward_under_a_tracer_is_unchanged() -> None:
    """A gradient penalty differentiates through saved tensors that the memory probe
    packed: second-order gradients must equal the unobserved ones."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    twin = copy.deepcopy(model)

    def penalty_step(m: nn.Module) -> list[torch.Tensor | None]:
        x = _x(3, 4, requires_grad=True)
        (g,) = torch.autograd.grad(m(x).sum(), x, create_graph=True)
        g.pow(2).sum().backward()
        return [p.grad for p in m.parameters()]

    expected = penalty_step(twin)
    with hookscope.Tracer(model, **ALL_PROBES):
        got = penalty_step(model)
    assert_outputs_identical(expected, got)
    saved_hooks_and_modes_clean()


def test_torch_func_transforms_run_under_a_tracer_with_memory() -> None:
    """Regression: the memory probe's saved-tensor hooks stayed installed for the whole
    block, and ``torch.func.grad`` refuses to run while any are installed."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    params = {k: v.detach() for k, v in model.named_parameters()}
    x = _x(3, 4)

    def loss(p: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.func.functional_call(model, p, (x,)).sum()

    expected = torch.func.grad(loss)(params)
    with hookscope.Tracer(model, memory=True, stats=True, time=True) as tracer:
        got = torch.func.grad(loss)(params)
        # the model's own calls outside the transform are still measured
        model(x.requires_grad_()).sum()
    assert_outputs_identical(expected, got)
    assert tracer.trace is not None
    saved = [c.memory.saved_bytes for c in tracer.trace.calls_of("2") if c.memory]
    assert saved == [None, 3 * 4 * 4 + 4 * 4]  # no hooks inside torch.func; then x and w
    saved_hooks_and_modes_clean()


def test_saved_tensor_hooks_disabled_inside_the_tracer_block() -> None:
    """Regression: ``disable_saved_tensors_hooks`` (what torch.func and FSDP use) raised
    inside a ``Tracer(memory=True)`` block, because hookscope's hooks were installed."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    x = _x(3, 4, requires_grad=True)
    with hookscope.Tracer(model, memory=True) as tracer:
        with torch.autograd.graph.disable_saved_tensors_hooks("no hooks here"):
            model(x).sum().backward()
        model(x).sum()
    assert tracer.trace is not None
    assert [c.memory.saved_bytes for c in tracer.trace.calls_of("2") if c.memory] == [
        None, 3 * 4 * 4 + 4 * 4
    ]
    saved_hooks_and_modes_clean()


def test_save_on_cpu_entered_inside_the_tracer_block_is_wrapped() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    twin = copy.deepcopy(model)
    x = _x(3, 4)
    with torch.autograd.graph.save_on_cpu():
        twin(x).sum().backward()
    with hookscope.Tracer(model, memory=True) as tracer, torch.autograd.graph.save_on_cpu():
        model(x).sum().backward()
    assert_outputs_identical([p.grad for p in twin.parameters()],
                             [p.grad for p in model.parameters()])
    assert tracer.trace is not None
    memory = tracer.trace.find("2").memory
    assert memory is not None and memory.saved_bytes == 3 * 4 * 4 + 4 * 4  # tanh out + weight
    saved_hooks_and_modes_clean()


def test_activation_checkpointing_under_a_tracer() -> None:
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
            self.b = nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(checkpoint(self.a, x, use_reentrant=False))

    model = Checkpointed()
    twin = copy.deepcopy(model)
    x = _x(3, 4, requires_grad=True)
    twin(x).sum().backward()
    with hookscope.Tracer(model, **ALL_PROBES) as tracer:
        model(x).sum().backward()
    assert_outputs_identical([p.grad for p in twin.parameters()],
                             [p.grad for p in model.parameters()])
    assert tracer.trace is not None
    # the recomputation in backward is not a call of the run: ``a`` ran once, inside ""
    assert [(c.path, c.call_index, c.parent) for c in tracer.trace.calls] == [
        ("", 0, None), ("a", 0, 0), ("a.0", 0, 1), ("a.1", 0, 1), ("b", 0, 0)
    ]
    check_exports(tracer.trace)


# -- several tracers, several roots, selectors -----------------------------------------------


def test_nested_tracers_do_not_record_each_others_work() -> None:
    """Regression: the outer tracer's ops probe recorded the inner tracer's statistics
    reductions (aminmax, sum, dot, ...) as the model's ops."""
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    x = _x(3, 4)
    with hookscope.Tracer(model, ops=True) as alone:
        model(x)
    with (
        hookscope.Tracer(model, ops=True) as outer,
        hookscope.Tracer(model, stats=True, memory=True, time=True, ops=True) as inner,
    ):
        model(x)
    with (
        hookscope.Tracer(model, ops=True) as outer_only,
        hookscope.Tracer(model, stats=True, memory=True),
    ):
        model(x)
    assert alone.trace is not None and outer.trace is not None
    assert inner.trace is not None and outer_only.trace is not None
    names = [o.name for o in alone.trace.ops]
    assert names == ["aten.t.default", "aten.addmm.default", "aten.relu.default",
                     "aten.t.default", "aten.addmm.default"]
    for trace in (outer.trace, inner.trace, outer_only.trace):
        assert [o.name for o in trace.ops] == names
        assert trace.totals_flops == alone.trace.totals_flops
    assert total_hooks(model) == 0


def test_tracer_on_a_submodule_while_the_parent_runs() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 2)))
    x = _x(3, 4)
    expected = model(x)
    with hookscope.Tracer(model[1], **ALL_PROBES) as tracer:
        got = model(x)
    assert_outputs_identical(expected, got)
    trace = tracer.trace
    assert trace is not None
    assert [(c.path, c.parent) for c in trace.calls] == [("", None), ("0", 0), ("1", 0)]
    assert trace.find("").inputs[0].shape == (3, 4)
    assert trace.find("").flops is not None and trace.find("").flops.forward == 2 * 3 * 4 * 2
    check_exports(trace)


def test_two_root_calls_in_one_tracer() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with hookscope.Tracer(model, **ALL_PROBES) as tracer:
        model(_x(3, 4))
        model(_x(1, 4))
    trace = tracer.trace
    assert trace is not None
    assert [(c.path, c.call_index) for c in trace.roots] == [("", 0), ("", 1)]
    assert trace.find("", 1).inputs[0].shape == (1, 4)
    assert trace.find("0", 1).parent == trace.find("", 1).index
    assert trace.total_time_ns == sum(c.time_ns or 0 for c in trace.roots)
    check_exports(trace)
    assert "calls=2" in hookscope.annotated_repr(model, trace)
    assert len(trace.to_dataframe()) == 6


def test_selector_narrows_the_calls() -> None:
    def block() -> nn.Module:
        return nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    model = nn.Sequential()
    model.add_module("layer1", nn.Sequential(block(), block()))
    model.add_module("layer2", nn.Sequential(block(), block()))
    trace = hookscope.trace(model, _x(2, 4), select=["layer?.0"], **ALL_PROBES)
    assert [(c.path, c.parent) for c in trace.calls] == [("layer1.0", None), ("layer2.0", None)]
    # ``*`` stays inside one segment (issue 11); ``**`` crosses dots
    trace = hookscope.trace(model, _x(2, 4), select="layer*.0", **ALL_PROBES)
    assert [(c.path, c.parent) for c in trace.calls] == [("layer1.0", None), ("layer2.0", None)]
    trace = hookscope.trace(model, _x(2, 4), select="layer**.0", **ALL_PROBES)
    assert [(c.path, c.parent) for c in trace.calls] == [
        ("layer1.0", None), ("layer1.0.0", 0), ("layer1.1.0", None),
        ("layer2.0", None), ("layer2.0.0", 3), ("layer2.1.0", None),
    ]
    assert total_hooks(model) == 0
    check_exports(trace)


# -- bad input: one SpecError naming the value and the fix -----------------------------------


def test_bad_options_are_spec_errors() -> None:
    model = nn.Linear(4, 2)
    x = _x(3, 4)
    with pytest.raises(hookscope.SpecError, match=r"kwargs keys .* got 1"):
        hookscope.trace(model, x, kwargs={1: x})  # type: ignore[dict-item]
    with pytest.raises(hookscope.SpecError, match="'nonsense' is not a torch device"):
        hookscope.trace(model, x, device="nonsense")
    with pytest.raises(hookscope.SpecError, match=r"depth .* got True"):
        hookscope.summary(model, x, depth=True)
    from hookscope.probes.stats import StatsProbe

    with pytest.raises(hookscope.SpecError, match="two stats probes"):
        hookscope.trace(model, x, probes=[StatsProbe()])
    assert total_hooks(model) == 0


def test_device_given_with_tensors_on_another_device() -> None:
    """Regression: ``device=`` was silently ignored when tensors were given."""
    model = nn.Linear(4, 2)
    x = _x(3, 4)
    assert hookscope.trace(model, x, device="cpu").outputs[0].device == "cpu"
    assert hookscope.trace(model, x, device="meta").outputs[0].device == "meta"
    with pytest.raises(hookscope.SpecError, match=r"input args\[0\] is on meta"):
        hookscope.trace(model, torch.empty(3, 4, device="meta"), device="cpu")


def test_model_whose_forward_takes_only_kwargs() -> None:
    class KwOnly(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 2)

        def forward(self, *, x: torch.Tensor, mask: torch.Tensor | None = None) -> Any:
            y = self.lin(x)
            return {"y": y if mask is None else y * mask}

    model = KwOnly()
    x, mask = _x(3, 4), torch.ones(3, 2)
    expected = model(x=x, mask=mask)
    trace = hookscope.trace(model, kwargs={"x": x, "mask": mask}, backward=True, **ALL_PROBES)
    with hookscope.Tracer(model, **ALL_PROBES):
        got = model(x=x, mask=mask)
    assert_outputs_identical(expected, got)
    assert [m.path for m in trace.find("").inputs] == ['kwargs["x"]', 'kwargs["mask"]']
    assert [m.path for m in trace.outputs] == ['out["y"]']
    check_exports(trace)


def test_tracers_ending_out_of_order_put_process_settings_back() -> None:
    """The recursion limit and the compiler stance are process-wide: they come back when
    the last tracer ends, also when tracers end in another order than they started."""
    torch.compile(nn.Linear(2, 2), backend="eager")  # dynamo is imported
    stance, limit = _dynamo_stance(), sys.getrecursionlimit()
    model = nn.Sequential(nn.Sequential(nn.Linear(4, 4)))
    first, second = hookscope.Tracer(model), hookscope.Tracer(model[0])
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert _dynamo_stance().stance == "force_eager"  # ``second`` is still active
    model(_x(3, 4))
    second.__exit__(None, None, None)
    assert _dynamo_stance() == stance
    assert sys.getrecursionlimit() == limit
    assert second.trace is not None and [c.path for c in second.trace.calls] == ["", "0"]
    assert total_hooks(model) == 0
