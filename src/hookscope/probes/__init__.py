"""Probes: each measures one kind of fact per module call (see ``probes/base.py``)."""

from hookscope.probes.base import PROBES, Probe, register_probe
from hookscope.probes.shapes import ShapeProbe

__all__ = ["PROBES", "Probe", "ShapeProbe", "register_probe"]
