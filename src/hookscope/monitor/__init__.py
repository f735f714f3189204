"""Gradient monitoring for training loops: :class:`GradientMonitor` (``monitor.py``)
records per-step norms into a :class:`GradHistory` (``history.py``), checks thresholds
(``checks.py``) and draws or logs them (``output.py``). An API-layer package: it reads
``.grad`` where the user's step has finished with it and registers no module hook."""

from hookscope.monitor.checks import GradientAnomalyError, GradientAnomalyWarning
from hookscope.monitor.history import GradAnomaly, GradHistory
from hookscope.monitor.monitor import GradientMonitor

__all__ = [
    "GradAnomaly",
    "GradHistory",
    "GradientAnomalyError",
    "GradientAnomalyWarning",
    "GradientMonitor",
]
