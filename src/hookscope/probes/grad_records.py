"""The gradients probe's record of one parameter (``probes/grads.py`` fills it).

:class:`ParamGradStats` is what ``trace.param_grads`` holds, one per parameter (a tied
one once, at its first path): plain values, a status that says why a parameter has no
statistics, and its JSON form (``_stats_out``/``_stats_in``, the ``param_grads`` trace
fact's encoder and decoder). ``_ParamSlot`` is the probe's state for one parameter
during a run (its statistics still a tensor on the device) that ``finalize`` turns into
the record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from hookscope.core.records.value_json import float_in, float_out
from hookscope.core.records.values import NanEqualRecord

__all__ = ["ParamGradStats"]

OK, UNUSED, FROZEN, NO_BACKWARD = "ok", "unused", "frozen", "no_backward"


@dataclass(frozen=True, eq=False)
class ParamGradStats(NanEqualRecord):
    """The gradient of one parameter in a trace (a record: plain values only).

    Attributes:
        path: the parameter's first path (``fc.weight``).
        aliases: its other paths when tied (``lm_head.weight``).
        shape: the parameter's shape.
        status: ``"ok"`` (a gradient arrived), ``"unused"`` (requires grad, got none
            although a backward computed other parameters' gradients), ``"frozen"``
            (``requires_grad=False``) or
            ``"no_backward"`` (requires grad; no backward pass computed a parameter's
            gradient while the tracer was active: none ran, or one asked only for the
            inputs', ``torch.autograd.grad(out, x)``). Only ``"ok"`` has statistics.
        norm, max_abs, mean: of the gradient, as floats (on the CPU the mean is torch's
            float32 mean; everything else, and everything on an accelerator, is exact to
            about 1e-6 relative or better); of every element of a sparse gradient;
            of the magnitudes of a complex one (its norm and max-abs are the complex
            tensor's own, the mean is the mean magnitude).
        nan_count, inf_count: non-finite elements of the gradient.
        events: how many gradients arrived (one per backward pass).
    """

    path: str
    aliases: tuple[str, ...] = ()
    shape: tuple[int, ...] = ()
    status: str = OK
    norm: float | None = None
    max_abs: float | None = None
    mean: float | None = None
    nan_count: int | None = None
    inf_count: int | None = None
    events: int = 0

    @property
    def module(self) -> str:
        """Path of the module that owns the parameter (``""``: the root)."""
        return self.path.rpartition(".")[0]


def _stats_out(items: list[ParamGradStats]) -> list[dict[str, Any]]:
    return [
        {"path": s.path, "aliases": list(s.aliases), "shape": list(s.shape),
         "status": s.status, "norm": float_out(s.norm), "max_abs": float_out(s.max_abs),
         "mean": float_out(s.mean), "nan_count": s.nan_count, "inf_count": s.inf_count,
         "events": s.events}
        for s in items
    ]


def _stats_in(items: list[dict[str, Any]]) -> list[ParamGradStats]:
    return [
        ParamGradStats(
            d["path"], tuple(d["aliases"]), tuple(d["shape"]), d["status"],
            float_in(d["norm"]), float_in(d["max_abs"]), float_in(d["mean"]),
            d["nan_count"], d["inf_count"], d["events"],
        )
        for d in items
    ]


@dataclass
class _ParamSlot:
    path: str
    shape: tuple[int, ...]
    requires_grad: bool
    aliases: list[str] = field(default_factory=list)
    values: torch.Tensor | None = None  # [norm, max_abs, mean, nan, inf] on the device
    events: int = 0
    param: torch.Tensor | None = None  # a frozen one: unfrozen by the block's end?

    def record(self, stats: list[float] | None, backward_seen: bool,
               used: bool | None = None) -> ParamGradStats:
        """The parameter's record; ``used``: whether the model's outputs depend on it
        (``None``: not known)."""
        base = ParamGradStats(self.path, tuple(self.aliases), self.shape, events=self.events)
        if stats is None:
            if not self.requires_grad:
                return _replace(base, status=FROZEN)
            if self.events:  # a gradient arrived without values (meta): ok, no numbers
                return base
            unused = backward_seen and not used
            return _replace(base, status=UNUSED if unused else NO_BACKWARD)
        norm, max_abs, mean, nan, inf = stats
        return _replace(base, norm=norm, max_abs=max_abs, mean=mean, nan_count=int(nan),
                        inf_count=int(inf))


def _replace(record: ParamGradStats, **changes: Any) -> ParamGradStats:
    from dataclasses import replace

    return replace(record, **changes)
