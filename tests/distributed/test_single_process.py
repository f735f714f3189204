"""What the distributed features do in one process: a gathered view made from two local
traces, clear errors without a process group, the data-parallel wrapper looked through."""

from __future__ import annotations

import json
import time

import pytest
import torch
from torch import nn

import hookscope
from hookscope.core.model.wrappers import unwrap, wrapper_names


class Pause(nn.Module):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return x


def _model(pause: float) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), Pause(pause), nn.Linear(8, 2))


def test_a_gathered_view_of_two_traces_names_the_slow_call() -> None:
    x = torch.randn(3, 4)
    fast = hookscope.trace(_model(0.0), x, backward=True)
    slow = hookscope.trace(_model(0.03), x, backward=True)
    g = hookscope.GatheredTrace([fast, slow])
    top = g.stragglers()[0]
    assert (top.path, top.straggler_rank) == ("1", 1)
    # the call's own time on each rank, as each trace recorded it
    assert top.self_times_ns == (fast["1"].self_time_ns, slow["1"].self_time_ns)
    assert top.excess_ns is not None and top.excess_ns >= 0
    root = next(c for c in g.calls if c.path == "")
    assert root.slowest_rank == 1
    times = [fast[""].time_ns, slow[""].time_ns]
    assert root.ratio == pytest.approx(max(times) / (sum(times) / 2))
    text = str(g)
    assert text.startswith("straggler: 1 (Pause) on rank 1")
    assert "Rank 1 time" in text and "Rank 1 |grad|" in text
    page = g._repr_html_()
    assert page.startswith("<p>straggler: 1 (Pause) on rank 1") and "Rank 1 time" in page
    plain = _model(0.0)
    norm = torch.autograd.grad(plain(x).sum(), plain[0].weight)[0].norm().item()
    assert g.param_grads["0.weight"][0] == pytest.approx(norm, rel=1e-5)


def test_a_gathered_trace_is_one_json_document_that_reads_back() -> None:
    x = torch.randn(3, 4)
    traces = [hookscope.trace(_model(0.0), x) for _ in range(2)]
    doc = hookscope.GatheredTrace(traces).to_json()
    calls = len(list(_model(0.0).modules()))  # each module runs once
    assert [len(r["calls"]) for r in json.loads(doc)["ranks"]] == [calls, calls]
    back = hookscope.GatheredTrace.from_json(doc)
    assert [len(t.calls) for t in back.traces] == [calls, calls]
    with pytest.raises(hookscope.SpecError, match="not a gathered hookscope trace"):
        hookscope.GatheredTrace.from_json(traces[0].to_json())
    with pytest.raises(hookscope.SpecError, match=r"one hookscope\.Trace per rank, got str"):
        hookscope.GatheredTrace([traces[0], traces[0].to_json()])  # type: ignore[list-item]


def test_collectives_without_a_process_group_say_how_to_start_one() -> None:
    model = _model(0.0)
    t = hookscope.trace(model, torch.randn(2, 4))
    with pytest.raises(hookscope.SpecError, match="no process group is initialised"):
        t.gather()
    with pytest.raises(hookscope.SpecError, match="no process group is initialised"):
        hookscope.check_divergence(model)


def test_check_divergence_every_is_validated() -> None:
    with pytest.raises(hookscope.SpecError, match="check_divergence_every="):
        hookscope.GradientMonitor(_model(0.0), check_divergence_every=0)


def test_a_data_parallel_wrapper_is_looked_through() -> None:
    model = _model(0.0)
    wrapped = nn.DataParallel(model)  # on a machine without GPUs: calls the model
    assert unwrap(wrapped) is model and wrapper_names(wrapped) == ["DataParallel"]
    t = hookscope.trace(wrapped, torch.randn(2, 4))
    assert sorted(t.modules) == sorted(n for n, _ in model.named_modules())
    assert t.model.params_total == sum(p.numel() for p in model.parameters())
    assert t.meta["wrappers"] == ["DataParallel"]


def test_a_divergence_report_prints_its_answer_first() -> None:
    from hookscope.distributed import Divergence

    same = hookscope.DivergenceReport(2, 3)
    assert same.ok and str(same) == "all 3 parameters and buffers are the same on the 2 ranks"
    found = hookscope.DivergenceReport(
        4, 3, [Divergence("fc.weight", "parameter", 0, (2, 3), (1e-3, 2e-3))])
    text = str(found)
    assert text.startswith("1 of 3 parameters and buffers differ across ranks; first: "
                           "fc.weight on rank 2, 3 (reference rank 0, max |diff| 0.002)")
    assert "fc.weight" in found._repr_html_()
