"""hookscope: see inside every forward and backward pass of a PyTorch model.

Importing hookscope registers nothing and imports no optional dependency.
"""

from hookscope.api import summary, trace
from hookscope.core.records import (
    Call,
    FlopCount,
    FlopRule,
    OpRecord,
    TensorMeta,
    TensorStats,
    Trace,
)
from hookscope.core.selectors import Selector
from hookscope.core.structure import ModelInfo, inspect
from hookscope.core.tracer import Tracer
from hookscope.errors import HookscopeError, ModelRunError, RenderError, SpecError
from hookscope.flops import register_flop_formula
from hookscope.probes.base import Probe, register_probe
from hookscope.render.annotate import annotated_repr
from hookscope.render.summary import Summary

__all__ = [
    "Call",
    "FlopCount",
    "FlopRule",
    "HookscopeError",
    "ModelInfo",
    "ModelRunError",
    "OpRecord",
    "Probe",
    "RenderError",
    "Selector",
    "SpecError",
    "Summary",
    "TensorMeta",
    "TensorStats",
    "Trace",
    "Tracer",
    "__version__",
    "annotated_repr",
    "inspect",
    "register_flop_formula",
    "register_probe",
    "summary",
    "trace",
]


def __getattr__(name: str) -> str:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("hookscope")
        except PackageNotFoundError:  # running from a source checkout
            return "0.0.0+unknown"
    raise AttributeError(f"module 'hookscope' has no attribute {name!r}")
