"""Handles for everything hookscope registers, so that all of it can be removed.

Every registration hookscope makes (module hooks, tensor hooks, autograd graph hooks,
context managers such as dispatch modes) is kept in a :class:`HandleGroup`. The group
removes them in reverse order, exactly once, also when removal of one of them fails.
While a group holds a torch ``RemovableHandle``, its id (the hook's key in torch's
hook dict) is in :data:`HOOKSCOPE_HOOK_IDS`: ``hookscope.hooks`` tells hookscope's own
hooks from the user's by it.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Protocol

HOOKSCOPE_HOOK_IDS: set[int] = set()
"""Ids of the torch hook handles that a :class:`HandleGroup` holds now (torch numbers
every ``RemovableHandle`` of the process from one counter)."""


class Removable(Protocol):
    """Anything with an idempotent ``remove()``, like ``torch.utils.hooks.RemovableHandle``."""

    def remove(self) -> None: ...


class CallbackHandle:
    """A handle that runs ``fn`` once on ``remove()``; also a context manager."""

    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[[], None]) -> None:
        self._fn: Callable[[], None] | None = fn

    def remove(self) -> None:
        fn, self._fn = self._fn, None
        if fn is not None:
            fn()

    def __enter__(self) -> CallbackHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()


class HandleGroup:
    """Collects handles and removes them all, last registered first.

    ``remove()`` is idempotent. If removing one handle raises, the others are still
    removed and the first error is raised at the end.
    """

    __slots__ = ("_handles",)

    def __init__(self) -> None:
        self._handles: list[Removable] = []

    def add(self, handle: Removable) -> Removable:
        self._handles.append(handle)
        hook_id = _hook_id(handle)
        if hook_id is not None:
            HOOKSCOPE_HOOK_IDS.add(hook_id)
        return handle

    def extend(self, handles: list[Removable]) -> None:
        for handle in handles:
            self.add(handle)

    def __len__(self) -> int:
        return len(self._handles)

    def remove(self) -> None:
        handles, self._handles = self._handles, []
        error: BaseException | None = None
        for handle in reversed(handles):
            try:
                handle.remove()
            except BaseException as e:  # keep removing the rest, then re-raise
                error = error or e
            finally:
                hook_id = _hook_id(handle)
                if hook_id is not None:
                    HOOKSCOPE_HOOK_IDS.discard(hook_id)
        if error is not None:
            raise error

    def __enter__(self) -> HandleGroup:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()


def _hook_id(handle: Removable) -> int | None:
    """The key of a torch ``RemovableHandle`` in its hook dict; ``None`` for another
    handle (and for a multi-grad hook's, whose hooks are on the graph's tensors)."""
    hook_id = getattr(handle, "id", None)
    return hook_id if isinstance(hook_id, int) else None
