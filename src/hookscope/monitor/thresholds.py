"""Thresholds and actions of a :class:`~hookscope.GradientMonitor`, on host values.

The monitor hands every step's host row of norms to :class:`AnomalyChecker`, which
finds the non-finite gradients (always), the ones above ``explode_above`` and below
``vanish_below`` (absolute, or relative to the parameter's running median), and acts:
one warning per step naming its worst parameters (only for a step with a parameter
and kind not warned about before), an exception (the worst anomaly), or the user's
function (each one). The options are checked here too (:func:`check_threshold`,
:func:`check_action`, :func:`clip_limits`).
"""

from __future__ import annotations

import inspect
import math
import os
import statistics
import warnings
from collections import deque
from collections.abc import Callable, Mapping, Sequence

import torch

from hookscope.core.model.selectors import compile_selector
from hookscope.errors import HookscopeError, SpecError
from hookscope.monitor.history import GradAnomaly
from hookscope.monitor.steps import HostStep

__all__ = [
    "AnomalyChecker", "GradientAnomalyError", "GradientAnomalyWarning", "severity", "worst_first",
]

Action = str | Callable[[GradAnomaly], None]
"""``"warn"``, ``"raise"``, or ``fn(anomaly: GradAnomaly) -> None``."""

_MIN_HISTORY = 3  # a relative threshold needs this many earlier values of the parameter


class GradientAnomalyWarning(UserWarning):
    """A gradient was non-finite or crossed a threshold (``on_anomaly="warn"``)."""


class GradientAnomalyError(HookscopeError, FloatingPointError):
    """A gradient was non-finite or crossed a threshold (``on_anomaly="raise"``).

    Attributes:
        anomaly: the :class:`~hookscope.monitor.GradAnomaly`.
    """

    def __init__(self, anomaly: GradAnomaly) -> None:
        super().__init__(f"gradient anomaly at {anomaly.describe()}")
        self.anomaly = anomaly


def check_action(action: object) -> Action:
    if action in ("warn", "raise") or callable(action):
        return action
    raise SpecError(
        f"on_anomaly= must be 'warn', 'raise' or a function fn(anomaly), got {action!r}"
    )


def check_steps(optimizer: object, scaler: object, *, updates: bool, log_every: object,
                window: object) -> None:
    """The options about steps: the optimizer and scaler (:func:`check_optimizer`),
    what needs an optimizer, and the positive counts.

    Raises:
        SpecError: naming the option.
    """
    if scaler is not None and optimizer is None:
        raise SpecError("scaler= needs optimizer= too (the scaler unscales its gradients)")
    if updates and optimizer is None:
        raise SpecError("updates=True needs optimizer= (the update is measured around its "
                        "step)")
    check_optimizer(optimizer, scaler)
    for name, value in (("log_every", log_every), ("window", window)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SpecError(f"{name}= must be a positive integer, got {value!r}")


def check_optimizer(optimizer: object, scaler: object) -> None:
    """Refuse an ``optimizer=`` that is not an optimizer (the monitor hooks its
    ``step``) and a ``scaler=`` that is not a scaler instance, when the monitor is made,
    not at the first step.

    Raises:
        SpecError: naming the option and what was passed.
    """
    if optimizer is not None and (
        isinstance(optimizer, type) or not hasattr(optimizer, "param_groups")
        or not callable(getattr(optimizer, "register_step_pre_hook", None))
    ):
        raise SpecError(
            f"optimizer= must be a torch.optim.Optimizer instance (the monitor checks and "
            f"clips before its step), got {_kind(optimizer)}"
        )
    if scaler is not None and (isinstance(scaler, type) or not all(
        callable(getattr(scaler, name, None)) for name in ("is_enabled", "unscale_", "step")
    )):
        raise SpecError(
            f"scaler= must be a torch.amp.GradScaler instance, got {_kind(scaler)}"
        )


def _kind(value: object) -> str:
    if isinstance(value, type):
        return f"the class {value.__name__}; pass an instance: {value.__name__}(...)"
    return f"a {type(value).__name__}"


def check_threshold(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise SpecError(f"{name}= must be a positive number or None, got {value!r}")
    return float(value)


class AnomalyChecker:
    """Finds anomalies in each step's norms and applies the action."""

    def __init__(
        self, names: Sequence[str], *, explode_above: float | None,
        vanish_below: float | None, relative: bool, window: int, action: Action,
    ) -> None:
        self.names = list(names)
        self.explode_above, self.vanish_below = explode_above, vanish_below
        self.relative, self.action = relative, action
        self._recent = [deque[float](maxlen=window) for _ in names]
        self._warned: set[tuple[str, str]] = set()
        self.found: list[GradAnomaly] = []

    def check(self, step: HostStep) -> None:
        """Check one step's norms (as backward made them; a gradient the loop left
        non-finite for the optimizer is one too); raises :class:`GradientAnomalyError`
        for ``on_anomaly="raise"``."""
        new: list[GradAnomaly] = []
        for i, value in enumerate(step.norms):
            if not step.present[i]:
                continue
            found = self._one(step.step, i, value, step.skipped)
            at_step = step.step_norms[i]
            if found is None and not math.isfinite(at_step):
                found = GradAnomaly(step.step, self.names[i], "nonfinite", at_step,
                                    skipped=step.skipped)
            if found is not None:
                new.append(found)
            if math.isfinite(value):
                self._recent[i].append(value)
        self.found += new
        self._act(new)

    def check_updates(self, step: int, ratios: Sequence[float], checked: Sequence[bool],
                      band: tuple[float, float]) -> None:
        """Check one optimizer step's update-to-weight ratios against ``band`` (those
        ``checked``; a NaN ratio, of a zero weight, is not)."""
        low, high = band
        new = [
            GradAnomaly(step, name, "update_large", r, high) if r > high
            else GradAnomaly(step, name, "update_small", r, low)
            for name, r, c in zip(self.names, ratios, checked, strict=True)
            if c and not low <= r <= high and not math.isnan(r)
        ]
        self.found += new
        self._act(new)

    def _one(self, step: int, i: int, value: float, skipped: bool) -> GradAnomaly | None:
        name = self.names[i]
        if not math.isfinite(value):
            return GradAnomaly(step, name, "nonfinite", value, skipped=skipped)
        scale = self._scale(i)
        if scale is None:
            return None
        high = None if self.explode_above is None else self.explode_above * scale
        if high is not None and value > high:
            return GradAnomaly(step, name, "explode", value, high)
        low = None if self.vanish_below is None else self.vanish_below * scale
        if low is not None and value < low:
            return GradAnomaly(step, name, "vanish", value, low)
        return None

    def _scale(self, i: int) -> float | None:
        """1 for absolute thresholds; the running median for relative ones (``None``:
        no threshold yet, with too short a history, or a median of 0, of which any
        gradient is an infinite factor: an expert that got zero gradients for a while)."""
        if not self.relative:
            return 1.0
        recent = self._recent[i]
        if len(recent) < _MIN_HISTORY:
            return None
        median = statistics.median(recent)
        return median if median > 0 else None

    def _act(self, new: list[GradAnomaly]) -> None:
        """One step's anomalies: raise the worst, warn once naming the worst, or call
        the user's function with each."""
        action = self.action
        if not new:
            return
        if action == "raise":
            raise GradientAnomalyError(worst_first(new)[0])
        if action == "warn":
            self._warn(new)
            return
        assert callable(action)
        for anomaly in new:
            action(anomaly)

    def _warn(self, new: list[GradAnomaly]) -> None:
        """One warning for the step, naming its worst parameters, when the step has an
        anomaly of a parameter and kind not warned about before (a GradScaler's skipped
        overflow is expected: recorded, not warned about)."""
        shown = [a for a in new if not a.skipped]
        keys = {(a.path, a.kind) for a in shown}
        if not keys - self._warned:
            return
        self._warned |= keys
        ranked = worst_first(shown)
        named = "; ".join(_short(a) for a in ranked[:_NAMED])
        if len(ranked) > 1:
            more = f" (+{len(ranked) - _NAMED} more)" if len(ranked) > _NAMED else ""
            named = f"{len(ranked)} gradient anomalies, worst first: {named}{more}"
        warnings.warn(
            f"hookscope: step {ranked[0].step}: {named}; every one is in "
            "GradientMonitor.anomalies (warned once per parameter and kind)",
            GradientAnomalyWarning, stacklevel=user_stacklevel(),
        )


_NAMED = 3  # parameters a step's warning names


def user_stacklevel() -> int:
    """The ``stacklevel`` of the loop's line: the first frame outside hookscope and
    torch (a step is checked inside ``optimizer.step()``'s hook, or ``mon.step()``)."""
    skip = (os.path.dirname(os.path.dirname(__file__)), os.path.dirname(torch.__file__))
    frame, level = inspect.currentframe(), 0
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        frame, level = frame.f_back, level + 1
    return max(level, 1)


def worst_first(anomalies: Sequence[GradAnomaly]) -> list[GradAnomaly]:
    """``anomalies`` from the worst: non-finite first, then by how many times past its
    threshold (an exploding norm over its limit, the limit over a vanishing norm)."""
    return sorted(anomalies, key=severity, reverse=True)


def severity(a: GradAnomaly) -> tuple[bool, float]:
    """How bad ``a`` is, for sorting: non-finite above any factor."""
    if a.kind == "nonfinite" or a.threshold is None:
        return (True, 0.0)
    if a.kind in ("vanish", "update_small"):
        return (False, a.threshold / a.value if a.value > 0 else math.inf)
    return (False, a.value / a.threshold)


def _short(a: GradAnomaly) -> str:
    return a.describe().partition(": ")[2]


def clip_limits(names: list[list[str]], clip: Mapping[str, float] | None) -> dict[int, float]:
    """``clip=`` as index of the parameter in ``names`` (each parameter's paths: a tied
    one has several) -> its limit (the first selector that matches one of its paths
    wins)."""
    if clip is None:
        return {}
    if not isinstance(clip, Mapping):
        raise SpecError(f"clip= must map selectors to limits, like {{'fc.*': 1.0}}, got {clip!r}")
    rules = []
    for pattern, limit in clip.items():
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not limit > 0:
            raise SpecError(f"clip limit for {pattern!r} must be a positive number, "
                            f"got {limit!r}")
        rules.append((compile_selector(pattern), float(limit)))
    limits: dict[int, float] = {}
    for i, paths in enumerate(names):
        for matches, limit in rules:
            if any(map(matches, paths)):
                limits[i] = limit
                break
    if not limits:
        raise SpecError(f"clip={dict(clip)!r} matches no watched parameter; paths look like "
                        f"{names[0][0]!r}")
    return limits
