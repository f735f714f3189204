"""Shapes probe: shape, dtype and device of every tensor a call receives and returns.

Inputs are recorded with paths ``args[i]...``/``kwargs["name"]...``, outputs with
``out...`` (``out[0]``, ``out["logits"]``, ``out.hidden``). Nothing is read from the
tensors' data, so this works on the meta device and costs no device synchronisation.

Both are read when the call ends, from the ``args``/``kwargs`` that ``forward`` was
called with (after every forward pre-hook, as torch's forward hooks see them), also
when it raised: one hook per call instead of two. NB: so a ``forward`` that changes
its input's shape in place (``x.unsqueeze_(0)``) records the changed shape.

Most calls take one tensor and return one. For those, the hook reads the tensors'
``shape``, ``dtype``, ``device``, ``requires_grad`` and ``layout`` and looks the call's
two facts up by them: identical facts are shared (within a trace and between traces:
records are read-only, and the lists are :class:`~hookscope.core.records.readonly.ReadOnlyList`),
so a model traced again makes none, and a call's facts get both in one
``dict.update``, which copies the template's table: two list allocations and two
insertions less per call (about 0.3 ms of MobileNetV3-Large's 255 calls). The
lookup is made in the hook, while what it reads is in the cache; leaving the fields
for ``finalize`` to look up costs more, as a second visit of every call after the
forward finds nothing cached. One key for both tensors, one lookup; the fields
are read as attributes in bytecode, which the interpreter specialises (an
``attrgetter`` of the five executes more instructions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hookscope.core.engine.probe import Probe, register_probe
from hookscope.core.records.facts import Column, Fact, Field, Unit
from hookscope.core.records.readonly import ReadOnlyList
from hookscope.core.records.tensor_paths import (
    call_input_metas,
    meta_from_fields,
    metas,
    shapes_text,
)
from hookscope.core.records.trace import Call
from hookscope.core.records.value_json import metas_in, metas_out
from hookscope.core.records.values import TensorMeta

if TYPE_CHECKING:
    from hookscope.core.engine.handles import Removable
    from hookscope.core.engine.tracer import Tracer

# (shape, dtype, device, requires_grad, layout) of the input, then of the output
_Fields = tuple[Any, ...]

_Tensor = torch.Tensor

#: The facts of a call with one input tensor and one output tensor, by their fields,
#: seen so far in every trace: ``{"inputs": [meta], "outputs": [meta]}``, the lists
#: read-only and shared by every call with those fields (making them would be most
#: of this probe's time per run). Cleared, when a run starts, once it has grown too large.
_FACTS: dict[_Fields, dict[str, ReadOnlyList[TensorMeta]]] = {}
_MAX_FACTS = 4096


def _numel(metas: list[TensorMeta]) -> float | None:
    counts = [m.numel for m in metas]
    return float(sum(counts)) if counts and min(counts) >= 0 else None


def _shapes_column(name: str, header: str, fact: str) -> Column:
    return Column(
        name, header, lambda c, t: c.facts.get(fact, []), Unit.SHAPES,
        key=lambda c, t: _numel(c.facts.get(fact, [])), wrap=True, numeric=False,
    )


@register_probe
class ShapeProbe(Probe):
    """Record ``inputs`` and ``outputs``: a :class:`TensorMeta` per tensor, with its path."""

    name = "shapes"
    install_touches_modules = False
    order = 10
    column_rank = 10
    facts = (
        Fact("inputs", "tensors the call received: args[i]..., kwargs[\"k\"]...",
             metas_out, metas_in, default_factory=list),
        Fact("outputs", "tensors the call returned: out, out[0], out[\"logits\"]...",
             metas_out, metas_in, default_factory=list),
    )
    columns = (
        _shapes_column("input", "Input shape", "inputs"),
        _shapes_column("output", "Output shape", "outputs"),
    )
    fields = (
        Field("inputs", lambda c, t: shapes_text(c.facts.get("inputs", []), sep="; "),
              column="input"),
        Field("outputs", lambda c, t: shapes_text(c.facts.get("outputs", []), sep="; "),
              column="output"),
    )

    def install(self, tracer: Tracer) -> list[Removable]:
        if len(_FACTS) > _MAX_FACTS:
            _FACTS.clear()
        return []

    def on_exit(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
        output: Any, failed: bool,
    ) -> None:
        t = args[0] if len(args) == 1 and not kwargs else None
        o = output
        # ``type() is``: a subclass (Parameter, a tensor subclass) may override its
        # attributes
        if type(t) is _Tensor and type(o) is _Tensor and not failed:
            try:
                key = (t.shape, t.dtype, t.device, t.requires_grad, t.layout,
                       o.shape, o.dtype, o.device, o.requires_grad, o.layout)
            except RuntimeError:  # a strided nested tensor has no ``shape``: asking
                pass  # raises, which costs nothing until it does (not is_nested twice)
            else:
                made = _FACTS.get(key)
                if made is None:
                    made = _FACTS[key] = {
                        "inputs": ReadOnlyList([meta_from_fields("args[0]", *key[:5])]),
                        "outputs": ReadOnlyList([meta_from_fields("out", *key[5:])]),
                    }
                call.facts.update(made)
                return
        facts = call.facts
        facts["inputs"] = call_input_metas(args, kwargs)
        if not failed:
            facts["outputs"] = metas(output, "out")
