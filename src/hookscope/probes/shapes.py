"""Shapes probe: shape, dtype and device of every tensor a call receives and returns.

Inputs are recorded with paths ``args[i]...``/``kwargs["name"]...``, outputs with
``out...`` (``out[0]``, ``out["logits"]``, ``out.hidden``). Nothing is read from the
tensors' data, so this works on the meta device and costs no device synchronisation.

Both are read when the call ends, from the ``args``/``kwargs`` that ``forward`` was
called with (after every forward pre-hook, as torch's forward hooks see them), also
when it raised: one hook per call instead of two. NB: so a ``forward`` that changes
its input's shape in place (``x.unsqueeze_(0)``) records the changed shape.

Most calls take one tensor and return one. For those, the hook only keeps the
tensors' ``shape``, ``dtype``, ``device``, ``requires_grad`` and ``layout`` (never the
tensors), and the records are made in ``finalize``, identical ones shared: a hook runs
between two kernels, with cold caches, where every object made costs several times
what it costs in a loop. ``call.inputs``/``call.outputs`` are complete once the trace
is finalised.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hookscope.core.records import Call, TensorMeta, Trace
from hookscope.core.tensors import call_input_metas, meta_from_fields, metas
from hookscope.probes.base import Probe, register_probe

if TYPE_CHECKING:
    from hookscope.core.handles import Removable
    from hookscope.core.tracer import Tracer

# (is the output, shape, dtype, device, requires_grad, layout) of a plain tensor
_Fields = tuple[bool, torch.Size, torch.dtype, torch.device, bool, torch.layout]

_Tensor = torch.Tensor


@register_probe
class ShapeProbe(Probe):
    name = "shapes"
    order = 10

    def __init__(self) -> None:
        self._plain: list[tuple[Call, _Fields]] = []

    def install(self, tracer: Tracer) -> list[Removable]:
        self._plain.clear()
        return []

    def on_exit(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
        output: Any, failed: bool,
    ) -> None:
        plain = self._plain
        if len(args) == 1 and not kwargs:
            t = args[0]
            # NB: ``type() is``: a subclass (Parameter, a tensor subclass) may override
            # its attributes; a strided nested tensor has no ``shape``
            if type(t) is _Tensor and not t.is_nested:
                plain.append((call, (False, t.shape, t.dtype, t.device, t.requires_grad, t.layout)))
            else:
                call.inputs = call_input_metas(args, kwargs)
        else:
            call.inputs = call_input_metas(args, kwargs)
        if failed:
            return
        t = output
        if type(t) is _Tensor and not t.is_nested:
            plain.append((call, (True, t.shape, t.dtype, t.device, t.requires_grad, t.layout)))
        else:
            call.outputs = metas(output, "out")

    def finalize(self, trace: Trace) -> None:
        made: dict[_Fields, TensorMeta] = {}
        for call, fields in self._plain:
            meta = made.get(fields)
            if meta is None:
                is_output, shape, dtype, device, requires_grad, layout = fields
                meta = made[fields] = meta_from_fields(
                    "out" if is_output else "args[0]", shape, dtype, device, requires_grad, layout
                )
            if fields[0]:
                call.outputs = [meta]
            else:
                call.inputs = [meta]
        self._plain.clear()
