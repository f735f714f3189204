"""``module_notes``: the annotated print's notes, from a trace alone (no model needed)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hookscope
from hookscope.core.records.trace import Trace
from hookscope.render.annotate import NOT_CALLED, module_notes


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.act = nn.Tanh()
        self.alias = self.act  # the same module under a second name
        self.fc = nn.Linear(4, 4)
        self.unused = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(self.act(x)))


def test_notes_come_from_the_trace_alone_even_after_a_json_round_trip() -> None:
    trace = hookscope.trace(Net(), torch.randn(2, 4))
    notes = module_notes(Trace.from_json(trace.to_json()), ["output", "params"])
    assert notes == module_notes(trace, ["output", "params"])
    assert notes["fc"] == "output=[2, 4], params=20"
    assert notes["act"] == notes["alias"] == "output=[2, 4], params=0, calls=2"
    assert notes["unused"] == NOT_CALLED == "not called"
    assert set(notes) == {"", "act", "alias", "fc", "unused"}


def test_fields_are_checked() -> None:
    trace = hookscope.trace(nn.Linear(2, 2), torch.zeros(1, 2))
    with pytest.raises(hookscope.RenderError, match="list of column names"):
        module_notes(trace, [])
    with pytest.raises(hookscope.RenderError, match="unknown trace column 'shape'"):
        module_notes(trace, ["shape"])
