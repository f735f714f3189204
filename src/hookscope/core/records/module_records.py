"""What a trace records about the model itself: each module of its tree
(:class:`ModuleInfo`) and the model-level counts (:class:`ModelSummary`), made by
``core/model/module_table.py`` on every run and kept with the trace (``Trace.modules``,
``Trace.model``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class ModuleInfo:
    """One module of the tree.

    Attributes:
        path: fully qualified name (``""`` for the root).
        class_name: the module's class name.
        depth: 0 for the root, 1 for its children, ...
        parent: path of the parent module (``None`` for the root).
        children: paths of the direct submodules (like ``named_children``).
        aliases: other paths under which the same module object is registered.
        own_params: parameters registered directly on this module (tied ones counted
            once, at their first path).
        total_params: parameters of the whole subtree, each tensor once.
        trainable_params: of ``total_params``, those with ``requires_grad``.
        own_buffers: elements of the buffers registered directly on this module.
        extra_repr: the module's ``extra_repr()`` (e.g. ``in_features=2, ...``), as
            :func:`hookscope.inspect` records it; ``None`` in a trace's module table,
            which does not record it (it costs a user method call per module on
            every trace, and no view of a trace shows it).

    Not frozen, like :class:`Call`: a trace makes one per module on every run, and
    a frozen dataclass is five times slower to make. Treat it as read-only.
    """

    path: str
    class_name: str
    depth: int
    parent: str | None
    children: tuple[str, ...]
    aliases: tuple[str, ...]
    own_params: int
    total_params: int
    trainable_params: int
    own_buffers: int
    extra_repr: str | None


@dataclass(slots=True)
class ModelSummary:
    """Model-level counts recorded with a trace (from ``core/model/module_table.py``)."""

    class_name: str
    params_total: int
    params_trainable: int
    buffers_total: int
    param_bytes: int
    buffer_bytes: int
