"""FLOPs per call from the ops probe's op log: each op's FLOPs go to the call that ran
it (``self_flops``) and to every call above it (``flops``), forward and backward apart;
an op without a formula marks its calls and the totals ``partial`` (a lower bound).
"""

from __future__ import annotations

from collections import Counter

from hookscope.core.records.trace import Trace
from hookscope.core.records.values import FlopCount, Phase


def aggregate_flops(trace: Trace) -> tuple[FlopCount, Counter[str]]:
    """Fill ``self_flops``/``flops`` of every call; return the totals and uncounted ops."""
    calls = trace.calls
    own = [FlopCount() for _ in calls]
    total = FlopCount()
    uncounted: Counter[str] = Counter()
    for op in trace.facts["ops"]:
        target = own[op.call] if op.call is not None else None
        if op.flops is None:
            uncounted[op.name] += 1
            total.partial = True
            if target is not None:
                target.partial = True
            continue
        for count in (total, target):
            if count is None:
                continue
            if op.phase is Phase.BACKWARD:
                count.backward += op.flops
            else:
                count.forward += op.flops
    inclusive = [FlopCount(f.forward, f.backward, f.partial) for f in own]
    for call in reversed(calls):  # children start after, so have larger indices
        mine = inclusive[call.index]
        call.facts["self_flops"], call.facts["flops"] = own[call.index], mine
        if call.parent is not None:
            parent = inclusive[call.parent]
            parent.forward += mine.forward
            parent.backward += mine.backward
            parent.partial = parent.partial or mine.partial
    return total, uncounted
