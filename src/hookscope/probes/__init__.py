"""Probes: each measures one kind of fact per module call (the protocol and registry
are ``core/engine/probe.py``'s)."""

from hookscope.core.engine.probe import PROBES, Probe, register_probe
from hookscope.probes.grads import GradsProbe
from hookscope.probes.memory import MemoryProbe
from hookscope.probes.ops import OpsProbe
from hookscope.probes.shapes import ShapeProbe
from hookscope.probes.stats import StatsProbe
from hookscope.probes.timing import TimingProbe

__all__ = [
    "PROBES",
    "GradsProbe",
    "MemoryProbe",
    "OpsProbe",
    "Probe",
    "ShapeProbe",
    "StatsProbe",
    "TimingProbe",
    "register_probe",
]
