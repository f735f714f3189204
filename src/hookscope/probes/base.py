"""The probe protocol and registry, defined in ``hookscope.core.probe``.

Kept here so that ``from hookscope.probes.base import Probe, register_probe`` (the
import of hookscope 0.1) still works; new code imports ``hookscope.Probe``.
"""

from hookscope.core.probe import PROBES, Probe, overrides, register_probe

__all__ = ["PROBES", "Probe", "overrides", "register_probe"]
