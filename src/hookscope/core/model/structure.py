"""Static structure of a model: no forward pass, no hooks.

``inspect(model)`` walks ``named_modules``/``named_parameters``/``named_buffers`` once
and returns a :class:`ModelInfo`: the module tree by fully qualified name, parameter
and buffer counts, bytes by dtype, and tied (shared) tensors counted once. It only
reads attributes, so it works on a model on the meta device.

The tracer records the same facts with every trace (``Trace.modules``), so renderers
can show parameter counts beside the calls. ``str(info)`` is the structure table of
``render/table.py``, which ``hookscope.render`` registers in :data:`PRESENTERS` (core
never imports the render layer); :meth:`ModelInfo.to_json` is ``core/records/structure_json.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from os import PathLike
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from hookscope.core.model.module_table import Members, first_paths, module_table
from hookscope.core.records.module_records import ModelSummary, ModuleInfo
from hookscope.core.records.tensor_paths import device_str, dtype_str
from hookscope.core.torch_private import original_module
from hookscope.errors import SpecError


@dataclass(frozen=True, slots=True)
class ParamInfo:
    """One parameter. ``tied_to`` names the first path of the same tensor when shared."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    device: str
    numel: int
    nbytes: int
    trainable: bool
    tied_to: str | None = None


@dataclass(frozen=True, slots=True)
class BufferInfo:
    """One buffer. ``persistent`` is False for buffers left out of ``state_dict``."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    device: str
    numel: int
    nbytes: int
    persistent: bool
    tied_to: str | None = None


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """Structure of a model, as returned by :func:`hookscope.inspect`.

    Index it by path like ``get_submodule``/``get_parameter``/``get_buffer``:
    ``info["ab.b"]`` is a :class:`ModuleInfo`, ``info["ab.b.W1"]`` a
    :class:`ParamInfo`, ``info["cd.c.duck"]`` a :class:`BufferInfo`.
    """

    class_name: str
    modules: dict[str, ModuleInfo]
    parameters: dict[str, ParamInfo]
    buffers: dict[str, BufferInfo]
    tied: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, path: str) -> ModuleInfo | ParamInfo | BufferInfo:
        for table in (self.modules, self.parameters, self.buffers):
            if path in table:
                return table[path]
        first = self.tied.get(path)
        if first is not None:  # a later path of a tied tensor: it names the first
            found: ParamInfo | BufferInfo | None = (
                self.parameters.get(first) or self.buffers.get(first))
            if found is not None:
                return replace(found, path=path, tied_to=first)
        import difflib

        names = [*self.modules, *self.parameters, *self.buffers, *self.tied]
        close = difflib.get_close_matches(path, names, n=3)
        hint = f"; close matches: {close}" if close else ""
        raise KeyError(f"{path!r} is not a module, parameter or buffer of this model{hint}")

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and (
            path in self.modules or path in self.parameters or path in self.buffers
            or path in self.tied
        )

    def __iter__(self) -> Iterator[ModuleInfo]:
        return iter(self.modules.values())

    def children(self, path: str = "") -> list[ModuleInfo]:
        """Direct submodules of ``path`` (like ``named_children``)."""
        return [self.modules[p] for p in self.modules[path].children]

    def descendants(self, path: str = "") -> list[ModuleInfo]:
        """Every module below ``path`` in tree order (like ``named_modules``)."""
        prefix = f"{path}." if path else ""
        return [m for p, m in self.modules.items() if p != path and p.startswith(prefix)]

    @property
    def total_params(self) -> int:
        """Elements of the model's parameters."""
        return sum(p.numel for p in self.parameters.values())

    @property
    def trainable_params(self) -> int:
        """Parameters that require grad."""
        return sum(p.numel for p in self.parameters.values() if p.trainable)

    @property
    def frozen_params(self) -> int:
        """Parameters that do not require grad."""
        return self.total_params - self.trainable_params

    @property
    def total_buffers(self) -> int:
        """Elements of the model's buffers."""
        return sum(b.numel for b in self.buffers.values())

    @property
    def param_bytes(self) -> int:
        """Bytes of the parameters."""
        return sum(p.nbytes for p in self.parameters.values())

    @property
    def buffer_bytes(self) -> int:
        """Bytes of the buffers."""
        return sum(b.nbytes for b in self.buffers.values())

    def param_bytes_by_dtype(self) -> dict[str, int]:
        """Bytes of the parameters, by dtype name."""
        out: dict[str, int] = {}
        for p in self.parameters.values():
            out[p.dtype] = out.get(p.dtype, 0) + p.nbytes
        return dict(sorted(out.items()))

    def summary(self) -> ModelSummary:
        """The totals of the model as one record (parameters, buffers, bytes)."""
        return ModelSummary(
            class_name=self.class_name,
            params_total=self.total_params,
            params_trainable=self.trainable_params,
            buffers_total=self.total_buffers,
            param_bytes=self.param_bytes,
            buffer_bytes=self.buffer_bytes,
        )

    def to_dict(self) -> dict[str, Any]:
        """The structure as a JSON-ready dict (``"kind": "structure"``).

        Field names follow the trace document where they overlap (``model.class``,
        ``model.params.total``, ``modules[].path``); see ``core/records/structure_json.py``.
        """
        from hookscope.core.records.structure_json import structure_to_dict

        return structure_to_dict(self)

    def to_json(self, *, indent: int | None = 2) -> str:
        """:meth:`to_dict` as JSON text with sorted keys (``indent=None``: one line)."""
        from hookscope.core.records.structure_json import structure_to_json

        return structure_to_json(self, indent=indent)

    def __repr__(self) -> str:
        tied = f", {len(self.tied)} tied" if self.tied else ""
        return (
            f"<hookscope.ModelInfo of {self.class_name}: {len(self.modules)} modules, "
            f"{self.total_params:,} params{tied}>"
        )

    def to_html(self, path: str | PathLike[str] | None = None) -> str:
        """One self-contained HTML page of the structure (totals and the module tree,
        folded and searchable), written to ``path`` when one is given.

        Raises:
            SpecError: ``path``'s folder does not exist, or ``path`` is a folder.
            RuntimeError: ``hookscope.render`` was not imported (``hookscope.inspect`` does).
        """
        present = PRESENTERS.get("report")
        if present is None:
            raise RuntimeError("no report renderer is registered: import hookscope.render")
        html = str(present(self))
        if path is not None:
            PRESENTERS["write_html"](html, path)
        return html

    def _repr_html_(self) -> str:
        """The structure table as HTML, for Jupyter."""
        present = PRESENTERS.get("html")
        return str(present(self)) if present is not None else repr(self)

    def __str__(self) -> str:
        # the table is a renderer's, registered by ``hookscope.render`` when it is
        # imported (``hookscope.inspect`` does): core does not import the render layer.
        present = PRESENTERS.get("text")
        if present is not None:
            return str(present(self))
        return (
            f"{self.class_name} (modules: {len(self.modules)}, params: {self.total_params:,}; "
            "import hookscope.render to print the structure table)"
        )


PRESENTERS: dict[str, Callable[..., Any]] = {}
"""How a :class:`ModelInfo` shows itself (``text``: ``str(info)``), registered by
``hookscope.render`` when it is imported (importing ``hookscope.inspect`` does)."""


def _tensor_fields(t: torch.Tensor) -> tuple[tuple[int, ...], str, str, int, int]:
    dtype, device = dtype_str(t.dtype), device_str(t.device)
    if is_lazy(t):
        return (), dtype, device, 0, 0
    numel = t.numel()
    return tuple(t.shape), dtype, device, numel, numel * t.element_size()


def _collect_params(walk: Members) -> tuple[dict[str, ParamInfo], dict[str, str]]:
    found, tied = first_paths(walk, "_parameters")
    params = {
        path: ParamInfo(path, *_tensor_fields(p), p.requires_grad) for path, _, _, p in found
    }
    return params, tied


def _collect_buffers(walk: Members) -> tuple[dict[str, BufferInfo], dict[str, str]]:
    found, tied = first_paths(walk, "_buffers")
    buffers = {
        path: BufferInfo(
            path, *_tensor_fields(b), name not in module._non_persistent_buffers_set
        )
        for path, name, module, b in found
    }
    return buffers, tied


def inspect(model: nn.Module) -> ModelInfo:
    """Describe a model's structure without running it.

    Args:
        model: any ``nn.Module``, also one on the meta device.

    Returns:
        The module tree, parameters and buffers, with tied tensors counted once.

    Example:
        >>> info = hookscope.inspect(model)
        >>> info.total_params, info["encoder.layers.0"].total_params
    """
    if not isinstance(model, nn.Module):
        from hookscope.errors import SpecError

        raise SpecError(
            f"hookscope.inspect expects a torch.nn.Module, got {type(model).__name__}"
        )
    model = original_module(model)  # torch.compile's wrapper: the module it holds
    table = module_table(model)
    params, tied = _collect_params(table.walk)
    buffers, tied_buffers = _collect_buffers(table.walk)
    tied.update(tied_buffers)
    return ModelInfo(type(model).__name__, table.modules, params, buffers, tied)


def check_model(model: Any) -> None:
    """Raise :class:`~hookscope.errors.SpecError` unless ``model`` is an ``nn.Module``
    hookscope can observe (not a TorchScript module)."""
    if not isinstance(model, nn.Module):
        raise SpecError(
            f"hookscope expects a torch.nn.Module, got {type(model).__name__}; "
            "pass the model object, not its output or its class"
        )
    if isinstance(model, torch.jit.ScriptModule):
        raise SpecError(
            f"hookscope cannot observe the TorchScript module {type(model).__name__} "
            "(torch.jit.script/trace): it runs compiled code that calls no module hooks; "
            "pass the nn.Module you scripted instead"
        )
