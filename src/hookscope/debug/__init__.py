"""Debugging a model run: the first non-finite value and breakpoints inside layers.

``hookscope.find_anomaly``/``hookscope.detect_anomaly`` (``debug/anomaly.py``; the
probes are ``debug/nonfinite.py``'s) find the first module call, in execution order,
whose output (or gradient) holds NaN or Inf, and the aten op inside it that produced
the value; ``hookscope.breakpoint``
(``debug/breakpoints.py``) opens the debugger inside a matching call. Both are probes
on the engine (``hookscope.core.engine.tracer``); the report's text and JSON are in
``hookscope.render.anomaly_report``.

A package named ``debug``, not a module ``hookscope/breakpoint.py``: importing a
submodule binds its name on the parent package, which would replace the function
``hookscope.breakpoint`` by the module.
"""

from hookscope.debug.anomaly import (
    NonFiniteError,
    NonFiniteGradProbe,
    NonFiniteProbe,
    detect_anomaly,
    find_anomaly,
)
from hookscope.debug.anomaly_records import (
    Anomaly,
    AnomalyKind,
    AnomalyReport,
    InputCheck,
    OpFinding,
    TensorCheck,
)
from hookscope.debug.breakpoints import breakpoint

__all__ = [
    "Anomaly",
    "AnomalyKind",
    "AnomalyReport",
    "InputCheck",
    "NonFiniteError",
    "NonFiniteGradProbe",
    "NonFiniteProbe",
    "OpFinding",
    "TensorCheck",
    "breakpoint",
    "detect_anomaly",
    "find_anomaly",
]
