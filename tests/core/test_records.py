"""Records: the tracer's fast ``Call`` constructor is the dataclass's, field for field."""

from __future__ import annotations

import dataclasses

import hookscope.probes  # noqa: F401  (defines the built-in facts read below: inputs, outputs)
from hookscope.core.records import Call, started_call


def test_started_call_equals_the_dataclass_constructor() -> None:
    for parent in (None, 3):
        fast = started_call(7, "layer1.0", "Bottleneck", 2, 3, parent)
        slow = Call(7, "layer1.0", "Bottleneck", 2, 3, parent)
        assert fast == slow
        for f in dataclasses.fields(Call):  # every slot is set (a missing one raises)
            assert getattr(fast, f.name) == getattr(slow, f.name), f.name


def test_started_calls_do_not_share_their_lists() -> None:
    a = started_call(0, "", "M", 0, 0, None)
    b = started_call(1, "x", "L", 0, 1, 0)
    a.children.append(1)
    a.inputs.append("meta")  # type: ignore[arg-type]
    assert b.children == [] and b.inputs == [] and b.outputs == []
