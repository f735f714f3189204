"""Every hook attached to a model: :func:`hooks` and the records it returns.

``hookscope.hooks(model)`` answers the question a debugging session starts with when
a model behaves oddly: what else runs when it runs? It reads torch's own hook
registries (the per-module dicts, the parameters' and buffers' gradient hooks, and
the process-wide module hook dicts; ``debug/hook_scan.py`` does the reading) and returns a
:class:`HookInventory` of :class:`~hookscope.debug.hook_records.HookRecord`s (their
module is ``hook_records.py``, which both this module and the scan import): plain,
frozen data that never holds the hook function or a module. Rendering lives
in ``render/hooks_tree.py`` (a tree grouped by owner and hook kind); JSON is
``HookInventory.to_json()``.

Hooks that hookscope itself registered (a :class:`~hookscope.Tracer` that is active
right now) are left out unless ``include_hookscope=True``, and then are marked
``registered_by="hookscope"``: they are never shown as the user's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hookscope.debug.hook_records import HookRecord

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult
    from torch import nn

SCHEMA_VERSION = 1
"""Version of :meth:`HookInventory.to_dict`'s document; bumped on incompatible changes."""


@dataclass(frozen=True)
class HookInventory:
    """The hooks attached to one model, in the order torch runs them per owner.

    Iterate it for the :class:`HookRecord`s; ``len()`` counts them. ``str()`` is the
    tree of ``render/hooks_tree.py`` in ASCII; in a rich console or Jupyter it draws
    itself.

    Attributes:
        model_class: class name of the model that was inspected.
        records: the hooks: global ones first, then per module (first-path order) the
            module's hooks followed by those of its own parameters and buffers.
        hidden_hookscope: how many of hookscope's own hooks were left out.
    """

    model_class: str
    records: tuple[HookRecord, ...] = ()
    hidden_hookscope: int = 0
    schema_version: int = field(default=SCHEMA_VERSION, repr=False)

    def __iter__(self) -> Iterator[HookRecord]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def by_owner(self) -> dict[str, list[HookRecord]]:
        """Owner (module path, tensor path or ``"global"``) -> its hooks, in order."""
        groups: dict[str, list[HookRecord]] = {}
        for record in self.records:
            groups.setdefault(record.owner, []).append(record)
        return groups

    def to_dict(self) -> dict[str, Any]:
        """The inventory as plain data, with ``schema_version``."""
        return {
            "schema_version": self.schema_version,
            "model_class": self.model_class,
            "hidden_hookscope": self.hidden_hookscope,
            "hooks": [r.to_dict() for r in self.records],
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        """:meth:`to_dict` as JSON with sorted keys."""
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HookInventory:
        """The inventory :meth:`to_dict` made ``data`` from.

        Raises:
            RenderError: ``data`` is of another schema version.
        """
        from hookscope.errors import RenderError

        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise RenderError(
                f"expected a hookscope hook inventory with schema_version {SCHEMA_VERSION}, "
                f"got {version!r}; write it again with this version of hookscope"
            )
        return cls(
            model_class=data["model_class"],
            records=tuple(HookRecord.from_dict(r) for r in data["hooks"]),
            hidden_hookscope=data.get("hidden_hookscope", 0),
        )

    @classmethod
    def from_json(cls, text: str) -> HookInventory:
        """The inventory :meth:`to_json` wrote."""
        return cls.from_dict(json.loads(text))

    def to_text(self, *, width: int | None = None, ascii: bool = True) -> str:
        """The tree as text (ASCII guides by default)."""
        from hookscope.render.hooks_tree import render_hooks_text

        return render_hooks_text(self, width=width, ascii=ascii)

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        hooks, owners = len(self.records), len(self.by_owner())
        return (
            f"<hookscope.HookInventory of {self.model_class}: {hooks} hook{_s(hooks)}"
            f" on {owners} owner{_s(owners)}>"
        )

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from hookscope.render.hooks_tree import hooks_tree

        yield hooks_tree(self, ascii=console.no_color and not console.is_terminal)

    def _repr_html_(self) -> str:
        from hookscope.render.hooks_tree import render_hooks_html

        return render_hooks_html(self)


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def hooks(model: nn.Module, *, include_hookscope: bool = False) -> HookInventory:
    """List every hook attached to ``model``, without running it.

    Reads, per module (each shared module once): forward pre-hooks and forward hooks
    with their ``with_kwargs``/``always_call`` flags, backward pre-hooks and backward
    hooks, state-dict and load-state-dict pre/post hooks; per parameter and buffer
    (each tied tensor once): gradient hooks and post-accumulate-grad hooks; and the
    process-wide module hooks, which run for this model too.

    Args:
        model: the model to look at. Nothing in it is changed.
        include_hookscope: also list the hooks of an active :class:`~hookscope.Tracer`
            (marked ``registered_by="hookscope"``); by default they are left out and
            only counted (``hidden_hookscope``).

    Returns:
        The hooks, global ones first, then per module in ``named_modules`` order.

    Raises:
        SpecError: ``model`` is not a ``torch.nn.Module``, or ``include_hookscope`` is
            not a bool.

    Example:
        >>> model.fc.register_forward_hook(log_output)
        >>> print(hookscope.hooks(model))
        Net: 1 hook
        `-- fc (Linear)
            `-- forward
                `-- log_output  train.py:12  id 0
    """
    from hookscope.core.options import check_flags
    from hookscope.debug.hook_scan import scan_hooks

    check_flags(include_hookscope=include_hookscope)
    records = scan_hooks(model)
    kept = tuple(r for r in records if include_hookscope or r.registered_by == "user")
    return HookInventory(
        model_class=type(model).__name__, records=kept,
        hidden_hookscope=len(records) - len(kept),
    )
