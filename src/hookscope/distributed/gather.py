"""``Trace.gather``: every rank's trace on one rank, through an object collective.

Each rank sends its trace as its JSON document (``Trace.to_json``: plain data, the
same on every version of the records) with ``torch.distributed.gather_object``; the
destination reads them back into :class:`~hookscope.Trace`\\ s, one per rank, in a
:class:`~hookscope.distributed.gathered.GatheredTrace`.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from hookscope.core.records.trace import Trace
from hookscope.distributed.gathered import GatheredTrace
from hookscope.distributed.process_group import check_initialized, check_rank

__all__ = ["gather_trace"]


def gather_trace(trace: Trace, *, dst: int = 0, group: Any = None) -> GatheredTrace | None:
    """Collect every rank's trace on rank ``dst`` (a collective: every rank calls it).

    Args:
        trace: this rank's trace.
        dst: the rank that receives them.
        group: the process group (``None``: the default one).

    Returns:
        On ``dst``, a :class:`GatheredTrace` with one trace per rank of the group, in
        rank order; ``None`` on every other rank.

    Raises:
        SpecError: no process group is initialised, or ``dst`` is not one of its ranks.
    """
    check_initialized("trace.gather()")
    dst = check_rank(dst)
    here = dist.get_rank()
    size = dist.get_world_size(group)
    documents: list[Any] | None = [None] * size if here == dst else None
    dist.gather_object(trace.to_json(indent=None), documents, dst=dst, group=group)
    if documents is None:
        return None
    return GatheredTrace([Trace.from_json(d) for d in documents])
