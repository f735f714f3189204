"""A lazy module before its first forward, to put back after one run for the caller
(``core/model/state.py``): :class:`LazyState`."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import is_lazy


def is_lazy_module(module: nn.Module) -> bool:
    return isinstance(module, LazyModuleMixin) and module.has_uninitialized_params()


class LazyState:
    """A lazy module before its first forward (``nn.LazyLinear``, ``LazyBatchNorm2d``,
    ``LazyConv2d``), to put back after one: the forward gives its uninitialised
    parameters and buffers a shape and values in place (the same objects become plain
    ``Parameter`` objects and tensors), removes its initialising hooks and switches its class
    (``LazyLinear`` becomes ``Linear``). NB: ``reset_parameters`` drew the values from
    torch's random generator, as the forward itself would have."""

    def __init__(self, module: nn.Module) -> None:
        self.module, self.cls = module, type(module)
        self.tables = {name: dict(getattr(module, name)) for name in _LAZY_TABLES
                       if isinstance(getattr(module, name, None), dict)}
        # its hooks' handles, and the plain settings ``initialize_parameters`` fills
        # in (``in_features``, ``in_channels``, ``num_features``: 0 until then)
        self.attributes: dict[str, Any] = {
            name: value for name, value in module.__dict__.items()
            if name in ("_initialize_hook", "_load_hook")
            or (not name.startswith("_") and isinstance(value, _PLAIN))
        }
        self.tensors = [(t, type(t), t.device, t.dtype)
                        for table in (module._parameters, module._buffers)
                        for t in table.values() if t is not None and is_lazy(t)]

    def restore(self) -> None:
        module = self.module
        with torch.no_grad():
            for t, cls, device, dtype in self.tensors:
                if type(t) is not cls:  # materialised: empty again, uninitialised again
                    t.data = torch.empty(0, device=device, dtype=dtype)
                    t.__class__ = cls
        if type(module) is not self.cls:
            module.__class__ = self.cls
        for name, saved in self.tables.items():
            table = getattr(module, name)
            if table != saved or list(table) != list(saved):
                table.clear()
                table.update(saved)
        module.__dict__.update(self.attributes)


_PLAIN = (int, float, bool, str, tuple, type(None))

#: The tables of a lazy module its first forward changes: its parameters and buffers
#: (the same objects), the initialising pre-hook and the state-dict load hook.
_LAZY_TABLES = ("_parameters", "_buffers", "_forward_pre_hooks",
                "_forward_pre_hooks_with_kwargs", "_load_state_dict_pre_hooks")
