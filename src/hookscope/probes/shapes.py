"""Shapes probe: shape, dtype and device of every tensor a call receives and returns.

Inputs are recorded with paths ``args[i]...``/``kwargs["name"]...``, outputs with
``out...`` (``out[0]``, ``out["logits"]``, ``out.hidden``). Nothing is read from the
tensors' data, so this works on the meta device and costs no device synchronisation.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from hookscope.core.records import Call
from hookscope.core.tensors import call_input_metas, metas
from hookscope.probes.base import Probe, register_probe


@register_probe
class ShapeProbe(Probe):
    name = "shapes"
    order = 10

    def on_enter(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        call.inputs = call_input_metas(args, kwargs)

    def on_exit(self, call: Call, module: nn.Module, output: Any, failed: bool) -> None:
        if not failed:
            call.outputs = metas(output, "out")
