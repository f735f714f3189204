"""Records: the calls the fast path builds inline are whole ``Call`` dataclasses."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

import hookscope
from hookscope.core.records import Call


def _nested() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 2)))


def test_every_field_of_a_fast_path_call_is_set() -> None:
    """``core/fast_path.py`` sets each slot of ``Call`` by hand: a new field forgotten
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
