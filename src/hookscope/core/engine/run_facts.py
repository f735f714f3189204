"""What a tracer records about the run.

- :func:`run_facts`: the process facts of a run (``Trace.meta``) that a merged or
  timeline view needs: versions, start time, pid, device, rank and world size;
- :func:`cuda_devices`: the CUDA devices the model lives on (the timing and memory
  probes synchronise or read them).

The model's state around a run, which ``Tracer(restore_state=True)`` puts back, is
``core/model/state.py``'s.
"""

from __future__ import annotations

import functools
import os
import time as _time
from typing import Any

import torch

from hookscope.core.model.module_table import ModuleTable
from hookscope.core.version import package_version


def run_facts(table: ModuleTable) -> dict[str, Any]:
    """What a merged or timeline view needs to know about the process of this run."""
    facts: dict[str, Any] = {
        "torch_version": torch.__version__,
        "hookscope_version": package_version(),
        "started_at_ns": _time.time_ns(),
        "pid": os.getpid(),
    }
    if table.tied:  # later path -> first path, for renderers to name tied rows
        facts["tied"] = dict(table.tied)
        # first path -> elements: what counting a selection's parameters once needs
        facts["tied_numel"] = dict(table.tied_numel)
    first = table.parameters[0] if table.parameters else None
    # a CPU tensor's device without making a device object and its string
    facts["device"] = "cpu" if first is None or first.is_cpu else str(first.device)
    dist = _distributed()
    if dist is not None and dist.is_initialized():
        facts["rank"], facts["world_size"] = dist.get_rank(), dist.get_world_size()
        sharded = _sharded(table)
        if sharded:  # path -> [the full parameter's elements, this rank's shard's]
            facts["sharded"] = sharded
    return facts


def _sharded(table: ModuleTable) -> dict[str, list[int]]:
    """The parameters that are ``DTensor``\\ s (FSDP2): their elements and the local
    shard's, by path."""
    found: dict[str, list[int]] = {}
    for path, module in table.members:
        for name, p in module._parameters.items():
            local = getattr(p, "to_local", None)
            if p is not None and local is not None and hasattr(p, "placements"):
                found[f"{path}.{name}" if path else name] = [p.numel(), local().numel()]
    return found


@functools.cache
def _distributed() -> Any:
    """``torch.distributed`` where this torch build has it, else ``None`` (asked once)."""
    dist = getattr(torch, "distributed", None)
    return dist if dist is not None and dist.is_available() else None


def cuda_devices(table: ModuleTable) -> list[torch.device]:
    """The CUDA devices that hold the model's parameters or buffers."""
    if not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # no CUDA tensor yet
        return []
    found = {p.device for p in table.parameters}
    for _, module in table.members:
        found.update(b.device for b in module._buffers.values() if b is not None)
    return sorted((d for d in found if d.type == "cuda"), key=str)
