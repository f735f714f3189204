"""What ``hookscope grads`` shows of a :class:`~hookscope.cli.grads_training.Training`.

Where it sits: after ``cli/grads_training.py`` has run the steps. :func:`shown_history`
picks the values of the table (the norms, or with ``--relative`` each norm over its
weight's norm, whose thresholds :func:`relative_anomalies` checks) and its rows
(``--top N``: the N largest at the last step); :func:`caption` says how they were
made; :func:`grads_json` is ``--format json``; :func:`fail_code` is ``--fail-on``.
The table itself is ``render/grads_table.py``'s.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from hookscope.cli.grads_training import Training
from hookscope.core.records.value_json import float_out
from hookscope.monitor import GradAnomaly, GradHistory

__all__ = ["GRADS_SCHEMA_VERSION", "caption", "fail_code", "grads_json", "relative_anomalies",
           "shown_history"]

GRADS_SCHEMA_VERSION = 2
"""The version of ``grads --format json``'s document (2: a non-finite number is
``{"$float": "nan"}``, as in every hookscope document)."""

FAIL_KINDS = {"exploding": {"explode"}, "vanishing": {"vanish"},
              "nonfinite": {"nonfinite"}, "any": {"explode", "vanish", "nonfinite"}}
"""``--fail-on`` value -> the anomaly kinds that make the command exit with 1."""


def ratio_history(training: Training) -> GradHistory:
    """Each gradient norm over its weight's norm at that step (absent where the
    parameter had no gradient; ``inf`` where its weight is all zeros and its gradient
    is not, NaN where both are)."""
    h = training.monitor.history
    norms = [[_ratio(g, w) for g, w in zip(row, weights, strict=True)]
             for row, weights in zip(h.norms, training.weight_norms, strict=True)]
    return GradHistory(list(h.names), list(h.steps), norms,
                       present=[h.had_gradient(r) for r in range(len(h))])


def _ratio(grad: float, weight: float) -> float:
    """``grad / weight``; a zero-initialised weight (a bias) with a gradient is
    ``inf``, not "no gradient"; a non-finite gradient norm stays itself."""
    if weight > 0 or not math.isfinite(grad):
        return grad / weight if weight > 0 else grad
    return math.inf if grad > 0 else math.nan


def relative_anomalies(history: GradHistory, *, explode_above: float | None,
                       vanish_below: float | None) -> list[GradAnomaly]:
    """The finite ratios of ``history`` above or below the thresholds (the monitor has
    already flagged the non-finite norms)."""
    found = []
    for step, row in enumerate(history.norms):
        had = history.had_gradient(step)
        for name, value, there in zip(history.names, row, had, strict=True):
            if not there or not math.isfinite(value):
                continue
            if explode_above is not None and value > explode_above:
                found.append(GradAnomaly(step, name, "explode", value, explode_above))
            elif vanish_below is not None and value < vanish_below:
                found.append(GradAnomaly(step, name, "vanish", value, vanish_below))
    return found


def shown_history(history: GradHistory, top: int | None) -> GradHistory:
    """``history`` with only its ``top`` largest parameters at the last step, largest
    first (a non-finite value counts as the largest; no gradient, as the smallest)."""
    if top is None or not history.norms:
        return history
    last, had = history.norms[-1], history.had_gradient(len(history) - 1)

    def key(i: int) -> float:
        value = last[i]
        if not had[i]:
            return -math.inf
        return math.inf if not math.isfinite(value) else value

    keep = sorted(range(len(history.names)), key=key, reverse=True)[:top]
    return GradHistory(
        [history.names[i] for i in keep], list(history.steps),
        [[row[i] for i in keep] for row in history.norms],
        present=[[history.had_gradient(r)[i] for i in keep] for r in range(len(history))],
    )


def caption(training: Training, anomalies: Sequence[GradAnomaly], *, lr: float, seed: int,
            inputs: str, clip: float | None, relative: bool, shown: int) -> list[str]:
    """The caption parts: loss, optimizer, steps and batch, clip, anomalies."""
    steps = len(training.losses)
    parts = [f"loss: {training.loss.description}, {_first_last(training.losses, at=True)}",
             f"optimizer: SGD, lr {lr:g}",
             f"{steps} step{'s' if steps > 1 else ''}, a new random batch "
             f"{'each ' if steps > 1 else ''}(--seed {seed}): {inputs}",
             _clip_part(training, clip)]
    if relative:
        parts.append("values: gradient norm / weight norm (weights before the step's "
                     "update; inf where the weight is all zeros); "
                     "--explode-above/--vanish-below apply to that ratio")
    total = len(training.monitor.names)
    if shown < total:
        parts.append(f"the {shown} of {total} parameters largest at the last step")
    parts.append(_anomalies_part(anomalies))
    return parts


def _clip_part(training: Training, clip: float | None) -> str:
    before = training.total_norms
    if clip is None:
        return f"total gradient norm: {_first_last(before, at=False)}"
    clipped = sum(1 for n in before if not n <= clip)  # a NaN total is "clipped" to NaN
    return (f"--clip {clip:g}: total norm clipped at {clipped} of {len(before)} steps "
            f"(before: max {_g(_largest(before))}; after: max "
            f"{_g(_largest(training.clipped_norms))})")


def _first_last(values: Sequence[float], *, at: bool) -> str:
    """``7.021 at step 0 -> 7.019 at step 2`` (``at``: the last step named too), or
    ``7.021 at step 0`` for a single step."""
    first = f"{_g(values[0])} at step 0"
    if len(values) == 1:
        return first
    return f"{first} -> {_g(values[-1])}" + (f" at step {len(values) - 1}" if at else "")


def _largest(values: Sequence[float]) -> float:
    """The largest of ``values``, a non-finite one first (``max`` skips a NaN or not,
    by where it is)."""
    return max(values, key=lambda v: v if math.isfinite(v) else math.inf)


def _anomalies_part(anomalies: Sequence[GradAnomaly]) -> str:
    """``3 anomalies flagged: 3 explode: conv1.weight (steps 0, 1, 2)``: per kind, the
    first two parameters and their steps."""
    if not anomalies:
        return "no anomaly flagged"
    kinds: dict[str, dict[str, list[int]]] = {}
    for a in anomalies:
        kinds.setdefault(a.kind, {}).setdefault(a.path, []).append(a.step)
    said = []
    for kind, paths in kinds.items():
        count = sum(map(len, paths.values()))
        where = [f"{path} ({_steps(steps)})" for path, steps in list(paths.items())[:2]]
        more = len(paths) - len(where)
        said.append(f"{count} {kind}: {', '.join(where)}"
                    + (f" and {more} more parameter{'s' if more > 1 else ''}" if more else ""))
    total = len(anomalies)
    return f"{total} anomal{'y' if total == 1 else 'ies'} flagged: {'; '.join(said)}"


def _steps(steps: list[int]) -> str:
    shown = ", ".join(map(str, steps[:3])) + (", ..." if len(steps) > 3 else "")
    return f"step{'s' if len(steps) > 1 else ''} {shown}"


def fail_code(anomalies: Sequence[GradAnomaly], fail_on: str | None) -> int:
    """1 when an anomaly of a ``--fail-on`` kind was flagged, else 0."""
    kinds = FAIL_KINDS.get(fail_on or "", set())
    return 1 if any(a.kind in kinds for a in anomalies) else 0


def grads_json(training: Training, shown: GradHistory, anomalies: Sequence[GradAnomaly],
               **run: Any) -> str:
    """``--format json``: the run's settings, per step the loss and total norms, per
    shown parameter its norms (``null`` where it had no gradient; ``{"$float": "nan"}``
    for a non-finite one, ``core/records/value_json.float_out``), and the anomalies.
    ``run``: the settings (lr, seed, ...)."""
    h = training.monitor.history
    full = {name: i for i, name in enumerate(h.names)}
    params = []
    for name in shown.names:
        i = full[name]
        entry: dict[str, Any] = {"path": name, "grad_norms": _column(h, i)}
        if training.weight_norms:
            entry["weight_norms"] = [float_out(row[i]) for row in training.weight_norms]
            entry["ratios"] = _column(shown, shown.names.index(name))
        params.append(entry)
    steps = [{"step": k, "loss": float_out(training.losses[k]),
              "total_norm": float_out(training.total_norms[k]),
              **({"total_norm_clipped": float_out(training.clipped_norms[k])}
                 if training.clipped_norms else {})}
             for k in range(len(training.losses))]
    doc = {"schema_version": GRADS_SCHEMA_VERSION, "command": "grads", "loss": training.loss.kind,
           "loss_description": training.loss.description, "optimizer": "SGD", **run,
           "steps": steps, "parameters": params,
           "anomalies": [{"step": a.step, "path": a.path, "kind": a.kind,
                          "value": float_out(a.value), "threshold": float_out(a.threshold)}
                         for a in anomalies]}
    return json.dumps(doc, indent=2, sort_keys=True, allow_nan=False)


def _column(history: GradHistory, i: int) -> list[Any]:
    return [float_out(row[i]) if history.had_gradient(r)[i] else None
            for r, row in enumerate(history.norms)]


def _g(value: float) -> str:
    return f"{value:.4g}"
