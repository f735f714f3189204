"""hookscope: see inside every forward and backward pass of a PyTorch model.

Importing hookscope registers nothing, imports no optional dependency, and imports
torch only when one of its names is first used (PEP 562 ``__getattr__``): the
command line answers ``--help`` and rejects a bad option without loading torch.
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from hookscope.api.aggregate import median_times
    from hookscope.api.annotated_repr import annotated_repr
    from hookscope.api.tracing import summary, trace
    from hookscope.compare import CompareResult, TraceDiff, compare, diff
    from hookscope.core.engine.probe import Probe, register_probe
    from hookscope.core.engine.tracer import Tracer
    from hookscope.core.model.selectors import Selector
    from hookscope.core.model.structure import ModelInfo, inspect
    from hookscope.core.records.compile_report import CompileReport
    from hookscope.core.records.facts import Column, Fact, Field, Unit
    from hookscope.core.records.trace import Call, FailureRecord, StopRecord, Trace
    from hookscope.core.records.values import (
        FlopCount,
        FlopRule,
        OpRecord,
        ParamGrad,
        TensorMeta,
        TensorStats,
    )
    from hookscope.debug import (
        AnomalyReport,
        NonFiniteError,
        breakpoint,
        detect_anomaly,
        find_anomaly,
    )
    from hookscope.debug.hook_inventory import HookInventory, hooks
    from hookscope.distributed import (
        DivergenceReport,
        GatheredTrace,
        check_divergence,
    )
    from hookscope.errors import (
        HookscopeError,
        MissingDependencyError,
        ModelRunError,
        ProbeError,
        RenderError,
        RunStopped,
        SpecError,
    )
    from hookscope.flops.registry import register_flop_formula
    from hookscope.interventions.capture import Capture, capture
    from hookscope.interventions.functions import patches
    from hookscope.interventions.patch import patch, patch_inputs
    from hookscope.interventions.storage_reader import load_activations
    from hookscope.lint.findings import Finding, Severity
    from hookscope.lint.runner import lint
    from hookscope.memory_plan import MemoryPlan, memory_plan
    from hookscope.monitor import GradAnomaly, GradientAnomalyError, GradientMonitor
    from hookscope.render.feature_maps import plot_feature_maps
    from hookscope.render.summary import Summary
    from hookscope.render.timeline import write_chrome_trace

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "median_times": "hookscope.api.aggregate",
    "annotated_repr": "hookscope.api.annotated_repr",
    "summary": "hookscope.api.tracing",
    "trace": "hookscope.api.tracing",
    "CompareResult": "hookscope.compare",
    "compare": "hookscope.compare",
    "TraceDiff": "hookscope.compare",
    "diff": "hookscope.compare",
    "Call": "hookscope.core.records.trace",
    "CompileReport": "hookscope.core.records.compile_report",
    "FlopCount": "hookscope.core.records.values",
    "FlopRule": "hookscope.core.records.values",
    "OpRecord": "hookscope.core.records.values",
    "TensorMeta": "hookscope.core.records.values",
    "TensorStats": "hookscope.core.records.values",
    "Trace": "hookscope.api.tracing",  # through the API: it loads the renderers a Trace prints with
    "FailureRecord": "hookscope.core.records.trace",
    "ParamGrad": "hookscope.core.records.values",
    "StopRecord": "hookscope.core.records.trace",
    "Column": "hookscope.core.records.facts",
    "Fact": "hookscope.core.records.facts",
    "Field": "hookscope.core.records.facts",
    "Unit": "hookscope.core.records.facts",
    "Selector": "hookscope.core.model.selectors",
    "ModelInfo": "hookscope.api.inspection",  # through the API: it loads the table it prints as
    "inspect": "hookscope.api.inspection",
    "Tracer": "hookscope.api.tracing",  # through the API: it loads the built-in probes
    "AnomalyReport": "hookscope.debug",
    "NonFiniteError": "hookscope.debug",
    "breakpoint": "hookscope.debug",  # shadows the builtin inside hookscope only
    "detect_anomaly": "hookscope.debug",
    "find_anomaly": "hookscope.debug",
    "DivergenceReport": "hookscope.distributed",
    "GatheredTrace": "hookscope.distributed",
    "check_divergence": "hookscope.distributed",
    "HookscopeError": "hookscope.errors",
    "MissingDependencyError": "hookscope.errors",
    "ModelRunError": "hookscope.errors",
    "ProbeError": "hookscope.errors",
    "RunStopped": "hookscope.errors",
    "RenderError": "hookscope.errors",
    "SpecError": "hookscope.errors",
    "register_flop_formula": "hookscope.flops.registry",
    "HookInventory": "hookscope.debug.hook_inventory",
    "hooks": "hookscope.debug.hook_inventory",
    "lint": "hookscope.lint",  # the callable package (hookscope/lint/__init__.py says why)
    "Finding": "hookscope.lint.findings",
    "Severity": "hookscope.lint.findings",
    "MemoryPlan": "hookscope.memory_plan",
    "memory_plan": "hookscope.memory_plan",  # the callable package, as lint
    "GradAnomaly": "hookscope.monitor",
    "GradientAnomalyError": "hookscope.monitor",
    "GradientMonitor": "hookscope.monitor",
    "Probe": "hookscope.api.tracing",
    "register_probe": "hookscope.api.tracing",
    "Summary": "hookscope.render.summary",
    "Capture": "hookscope.interventions.capture",
    "capture": "hookscope.interventions.capture",
    "load_activations": "hookscope.interventions.storage_reader",
    "patch": "hookscope.interventions.patch",
    "patch_inputs": "hookscope.interventions.patch",
    "patches": "hookscope.interventions.functions",  # a namespace of patch functions
    "plot_feature_maps": "hookscope.render.feature_maps",
    "write_chrome_trace": "hookscope.render.timeline",
}

__all__ = [
    "AnomalyReport",
    "Call",
    "Capture",
    "Column",
    "CompareResult",
    "CompileReport",
    "DivergenceReport",
    "Fact",
    "FailureRecord",
    "Field",
    "Finding",
    "FlopCount",
    "FlopRule",
    "GatheredTrace",
    "GradAnomaly",
    "GradientAnomalyError",
    "GradientMonitor",
    "HookInventory",
    "HookscopeError",
    "MemoryPlan",
    "MissingDependencyError",
    "ModelInfo",
    "ModelRunError",
    "NonFiniteError",
    "OpRecord",
    "ParamGrad",
    "Probe",
    "ProbeError",
    "RenderError",
    "RunStopped",
    "Selector",
    "Severity",
    "SpecError",
    "StopRecord",
    "Summary",
    "TensorMeta",
    "TensorStats",
    "Trace",
    "TraceDiff",
    "Tracer",
    "Unit",
    "__version__",
    "annotated_repr",
    "breakpoint",
    "capture",
    "check_divergence",
    "compare",
    "detect_anomaly",
    "diff",
    "find_anomaly",
    "hooks",
    "inspect",
    "lint",
    "load_activations",
    "median_times",
    "memory_plan",
    "patch",
    "patch_inputs",
    "patches",
    "plot_feature_maps",
    "register_flop_formula",
    "register_probe",
    "summary",
    "trace",
    "write_chrome_trace",
]


def __getattr__(name: str) -> _typing.Any:
    if name == "__version__":
        from hookscope.core.version import package_version

        return package_version()
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hookscope' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value  # the next access is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
