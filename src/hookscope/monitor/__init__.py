"""Gradient monitoring for training loops: :class:`GradientMonitor` (``monitor.py``)
records per-step norms (``norms.py``) of the parameters it watches
(``watched_params.py``) into a :class:`GradHistory` (``history.py``), checks thresholds
(``thresholds.py``), clips (``clipping.py``), unscales a ``GradScaler``'s step
(``scaler.py``), draws them (``plots.py``) and logs them to TensorBoard
(``history_output.py``). An API-layer package: it reads each ``.grad`` as backward made it
(``backward_stats.py``) and where the user's step is done with it (``steps.py``), and
registers no module hook."""

from hookscope.monitor.histograms import Histogram
from hookscope.monitor.history import GradAnomaly, GradHistory
from hookscope.monitor.monitor import GradientMonitor
from hookscope.monitor.thresholds import GradientAnomalyError, GradientAnomalyWarning

__all__ = [
    "GradAnomaly",
    "GradHistory",
    "GradientAnomalyError",
    "GradientAnomalyWarning",
    "GradientMonitor",
    "Histogram",
]
