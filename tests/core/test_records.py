"""Records: the calls the fast path builds inline are whole ``Call`` dataclasses;
statistics records holding a NaN equal each other on every Python."""

from __future__ import annotations

import copy as copy_module
import dataclasses
import math
from typing import Any

import torch
from torch import nn

import hookscope
import hookscope.probes  # defines the built-in facts read below: inputs, outputs
from hookscope.core.records.trace import Call
from hookscope.core.records.values import TensorStats
from hookscope.probes.grad_records import ParamGradStats


def _nested() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 2)))


def test_every_field_of_a_fast_path_call_is_set() -> None:
    """``core/engine/fast_path.py`` sets each slot of ``Call`` by hand: a new field forgotten
    there is unset, and reading it raises."""
    trace = hookscope.trace(_nested(), torch.randn(2, 4), time=False, stats=False,
                            memory=False)
    assert [c.path for c in trace.calls] == [m for m, _ in _nested().named_modules()]
    for call in trace.calls:
        made = Call(call.index, call.path, call.module_class, call.call_index, call.depth,
                    call.parent, list(call.children), call.start_ns, call.error,
                    dict(call.facts))
        for f in dataclasses.fields(Call):
            assert getattr(call, f.name) == getattr(made, f.name), (call.path, f.name)


def test_fast_path_calls_do_not_share_their_lists() -> None:
    trace = hookscope.trace(_nested(), torch.randn(2, 4), time=False, stats=False,
                            memory=False)
    root, inner = trace.find(""), trace.find("1")
    assert root.children is not inner.children and root.facts is not inner.facts
    assert root.children == [1, 2] and inner.children == [3, 4]


def _stats(mean: float | None) -> TensorStats:
    return TensorStats("out", 4, mean, 0.0, -1.0, 1.0, 1.0, 0.25, 0, 0)


def test_statistics_records_holding_a_nan_equal_each_other_and_hash_alike() -> None:
    """A NaN statistic equals a NaN statistic, whichever NaN object each record holds
    (``float("nan")`` makes a new one each time; ``math.nan`` is one object)."""
    nans = [float("nan"), float("nan"), math.nan, -math.nan, float("inf") - float("inf")]
    assert len({id(x) for x in nans}) == len(nans)
    records = [_stats(x) for x in nans]
    assert all(r == records[0] for r in records)
    assert len({hash(r) for r in records}) == 1
    assert len(set(records)) == 1
    assert _stats(math.nan) != _stats(0.0) and _stats(math.nan) != _stats(None)
    assert _stats(0.0) == _stats(-0.0) and hash(_stats(0.0)) == hash(_stats(-0.0))
    assert _stats(math.nan) != ("out", 4, math.nan)  # another type: never equal
    grads = [ParamGradStats("fc.weight", (), (2, 2), "ok", x, x, x, 4, 0, 1) for x in nans]
    assert all(g == grads[0] for g in grads) and len(set(grads)) == 1
    assert grads[0] != dataclasses.replace(grads[0], norm=1.0)
    assert grads[0] != dataclasses.replace(grads[0], events=2)


def test_a_record_reads_its_field_names_once_per_class(monkeypatch: Any) -> None:
    """Comparing and hashing statistics is frequent: ``dataclasses.fields`` runs once
    per record class, not on every compare."""
    from hookscope.core.records import values

    calls: list[type] = []

    def counted(cls: Any) -> Any:
        calls.append(cls)
        return dataclasses.fields(cls)

    monkeypatch.setattr(values, "fields", counted)
    monkeypatch.setattr(values, "_FIELD_NAMES", {})
    for _ in range(3):
        assert _stats(1.0) == _stats(1.0) and hash(_stats(1.0)) == hash(_stats(1.0))
    assert calls == [TensorStats]


def _with_new_nans(record: Any) -> Any:
    values = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    return dataclasses.replace(record, **{
        name: float("nan") for name, v in values.items()
        if isinstance(v, float) and math.isnan(v)})


def test_a_trace_with_nan_statistics_equals_one_holding_other_nan_objects() -> None:
    """Two traces of the same run compare equal although each NaN is a new object."""
    model = nn.Sequential(nn.Linear(2, 2))
    trace = hookscope.trace(model, torch.full((1, 2), math.nan), backward=True)
    copy = copy_module.deepcopy(trace)
    for call in copy.calls:
        call.facts["stats"] = [_with_new_nans(s) for s in call.facts["stats"]]
    copy.facts["param_grads"] = [_with_new_nans(g) for g in copy.facts["param_grads"]]
    assert math.isnan(copy.calls[0].facts["stats"][0].mean)
    assert copy.calls[0].facts["stats"][0].mean is not trace.calls[0].facts["stats"][0].mean
    assert math.isnan(copy.facts["param_grads"][0].norm)
    assert copy == trace
