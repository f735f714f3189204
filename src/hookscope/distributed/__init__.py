"""Jobs under ``torchrun``: every rank's trace on one rank, and weights compared across
ranks.

hookscope starts no process and makes no process group: it runs inside the user's
``torch.distributed`` job and uses that job's collectives. ``Trace.gather``
(``distributed/gather.py``) collects each rank's :class:`~hookscope.Trace` on one rank
into a :class:`GatheredTrace` (``distributed/gathered.py``, drawn by
``distributed/gathered_table.py``); :func:`check_divergence` (``distributed/divergence.py``)
compares a checksum of every parameter and buffer across the ranks. Importing this
package registers ``Trace.gather`` (the records live in core, which imports nothing
above it).
"""

from hookscope.core.records.trace import PRESENTERS as _PRESENTERS
from hookscope.distributed.divergence import Divergence, DivergenceReport, check_divergence
from hookscope.distributed.gather import gather_trace
from hookscope.distributed.gathered import CallAcrossRanks, GatheredTrace

_PRESENTERS.update(gather=gather_trace)

__all__ = [
    "CallAcrossRanks",
    "Divergence",
    "DivergenceReport",
    "GatheredTrace",
    "check_divergence",
    "gather_trace",
]
