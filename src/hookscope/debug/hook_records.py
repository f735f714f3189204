"""One hook as torch keeps it: :class:`HookRecord`, its :class:`HookKind` and
:class:`Scope`.

Plain, frozen data that never holds the hook function or a module. ``debug/hook_scan.py``
makes them from torch's registries, ``hook_inventory.py`` gathers them into a
:class:`~hookscope.debug.hook_inventory.HookInventory`, and ``render/hooks_tree.py`` draws them;
this module imports none of those.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any

GLOBAL = "global"
"""The ``owner`` of the process-wide module hooks (``register_module_forward_hook`` ...)."""


class HookKind(str, Enum):
    """What a hook is called for (the torch registration that made it)."""

    FORWARD_PRE = "forward_pre"  # register_forward_pre_hook / register_module_forward_pre_hook
    FORWARD = "forward"  # register_forward_hook / register_module_forward_hook
    BACKWARD_PRE = "backward_pre"  # register_full_backward_pre_hook (+ module-wide)
    BACKWARD = "backward"  # register_full_backward_hook; flag "legacy": register_backward_hook
    STATE_DICT_PRE = "state_dict_pre"  # register_state_dict_pre_hook
    STATE_DICT_POST = "state_dict_post"  # register_state_dict_post_hook, _register_state_dict_hook
    LOAD_STATE_DICT_PRE = "load_state_dict_pre"  # register_load_state_dict_pre_hook
    LOAD_STATE_DICT_POST = "load_state_dict_post"  # register_load_state_dict_post_hook
    GRAD = "grad"  # Tensor.register_hook on a parameter or buffer
    POST_ACCUMULATE_GRAD = "post_accumulate_grad"  # Tensor.register_post_accumulate_grad_hook
    MODULE_REGISTRATION = "module_registration"  # register_module_module_registration_hook
    PARAMETER_REGISTRATION = "parameter_registration"  # ..._parameter_registration_hook
    BUFFER_REGISTRATION = "buffer_registration"  # ..._buffer_registration_hook


class Scope(str, Enum):
    """What a hook is attached to."""

    MODULE = "module"
    PARAMETER = "parameter"
    BUFFER = "buffer"
    GLOBAL = "global"


@dataclass(frozen=True)
class HookRecord:
    """One hook, as torch keeps it.

    Attributes:
        kind: what the hook is called for.
        scope: what it is attached to: a module, a parameter, a buffer, or every module.
        owner: the module path (``""`` for the model itself), the tensor path
            (``"fc.weight"``), or ``"global"``. A shared module or tied tensor is
            listed once, at its first path.
        owner_class: the module's class name, ``"Parameter"``/``"Tensor"`` for tensors,
            ``None`` for global hooks.
        handle_id: the id of the ``RemovableHandle`` torch returned for it (its key in
            the hook dict).
        name: qualified name of the function (``Net.log``, ``make.<locals>.hook``,
            ``functools.partial(scale)``, ``<lambda>`` within its scope).
        module: the Python module the function is defined in (``None`` if unknown).
        file: the function's source file (``None`` for builtins and C functions).
        line: the line of its ``def`` (``None`` when ``file`` is).
        flags: torch's options of this registration, sorted: ``with_kwargs``,
            ``always_call`` (forward hooks), ``legacy`` (a backward hook registered with
            the deprecated ``register_backward_hook``).
        registered_by: ``"user"``, or ``"hookscope"`` for a hook that hookscope
            registered and holds the handle of now (an active
            :class:`~hookscope.Tracer`); a hook function of hookscope's that the user
            registered (``hookscope.patches.zero()``) is the user's.
        aliases: the owner's other paths (a shared module, a tied tensor).
    """

    kind: HookKind
    scope: Scope
    owner: str
    owner_class: str | None
    handle_id: int
    name: str
    module: str | None
    file: str | None
    line: int | None
    flags: tuple[str, ...] = ()
    registered_by: str = "user"
    aliases: tuple[str, ...] = ()

    @property
    def location(self) -> str | None:
        """``file:line`` of the function's source, or ``None``."""
        if self.file is None:
            return None
        return self.file if self.line is None else f"{self.file}:{self.line}"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values (enums as their strings, tuples as lists)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = value.value if isinstance(value, Enum) else (
                list(value) if isinstance(value, tuple) else value
            )
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HookRecord:
        """The record :meth:`to_dict` made ``data`` from."""
        values = dict(data)
        values["kind"] = HookKind(values["kind"])
        values["scope"] = Scope(values["scope"])
        values["flags"] = tuple(values.get("flags", ()))
        values["aliases"] = tuple(values.get("aliases", ()))
        return cls(**values)
