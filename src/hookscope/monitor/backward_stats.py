"""What backward made of each watched gradient, read before the loop's code runs.

A training loop often changes its gradients between ``backward()`` and
``optimizer.step()`` (``clip_grad_norm_``, a ``GradScaler``'s unscale): read at the
step, an explosion the clip hid is a small norm. So :class:`BackwardStats` registers a
post-accumulate-grad hook on each watched parameter (torch calls it once ``.grad`` holds
this backward's sum) that only notes the parameter; the first one of a backward pass
queues a callback at the pass's end, which takes the statistics of every noted gradient
in one batch (``monitor/norms.py``: one ``torch._foreach_norm`` per dtype), on the
device. Each parameter keeps the statistics of its last backward: under gradient
accumulation, those of the summed gradient after the last micro-batch. The monitor
(``monitor/monitor.py``) takes them at its step and clears them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial

import torch

from hookscope.core import torch_private
from hookscope.core.engine.handles import HandleGroup
from hookscope.monitor.norms import grad_norms

__all__ = ["BackwardStats", "grad_stats"]


def grad_stats(grads: list[torch.Tensor], *, flow: bool) -> list[list[torch.Tensor]]:
    """Per statistic, the 0-d values of every gradient: the L2 norm, and with ``flow``
    the max |grad| and the mean |grad| (L1 norm / number of elements)."""
    norms = grad_norms(grads, 2)
    if not flow:
        return [norms]
    l1 = grad_norms(grads, 1)
    sizes = [max(1, g.numel()) for g in grads]
    return [norms, grad_norms(grads, math.inf), [n / k for n, k in zip(l1, sizes, strict=True)]]


class BackwardStats:
    """The statistics of each watched gradient as its last backward pass left it.

    Args:
        params: the watched parameters, in the monitor's order.
        flow: also take max |grad| and mean |grad|.
    """

    def __init__(self, params: Sequence[torch.Tensor], *, flow: bool,
                 begun: Callable[[], None] | None = None) -> None:
        self._params = list(params)
        self._begun = begun  # called as a backward pass accumulates its first gradient
        self._flow = flow
        self._noted: list[int] = []  # accumulated in the running backward pass
        self._queued_for: int | None = None  # the graph task whose end is queued
        #: parameter index -> its statistics (as ``grad_stats``, one per statistic)
        self._latest: dict[int, list[torch.Tensor]] = {}

    def install(self, handles: HandleGroup) -> None:
        """Register the hooks, each handle into ``handles`` as soon as it is made."""
        for i, p in enumerate(self._params):
            hook = partial(self._accumulated, i)
            # torch leaves this method unannotated
            handles.add(p.register_post_accumulate_grad_hook(hook))  # type: ignore[no-untyped-call]

    def _accumulated(self, i: int, param: torch.Tensor) -> None:
        if not self._noted and self._begun is not None:
            self._begun()
        self._noted.append(i)
        task = torch_private.current_graph_task_id()
        # by graph task, not a flag: a pass that raised never runs its end callback
        if task is not None and task == self._queued_for:
            return
        if task is not None and torch_private.queue_end_of_backward(self._backward_ended):
            self._queued_for = task
        else:  # no end-of-backward queue in this torch: this gradient alone, now
            self._backward_ended()

    def _backward_ended(self) -> None:
        self._queued_for = None
        noted, self._noted = list(dict.fromkeys(self._noted)), []
        index = [i for i in noted if self._params[i].grad is not None]
        if not index:
            return
        grads = [self._params[i].grad for i in index]
        with torch.no_grad():
            stats = grad_stats(grads, flow=self._flow)  # type: ignore[arg-type]
        for k, i in enumerate(index):
            self._latest[i] = [s[k] for s in stats]

    @property
    def open(self) -> bool:
        """Whether a backward pass left statistics no step has taken yet."""
        return bool(self._latest)

    def take(self) -> dict[int, list[torch.Tensor]]:
        """The statistics noted since the last call, by parameter index (and forget them)."""
        latest, self._latest = self._latest, {}
        return latest
