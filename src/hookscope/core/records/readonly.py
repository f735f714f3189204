"""A list that refuses changes, for facts that records share.

A probe that makes the same fact for many calls may hand every one of them the same
list (the shapes probe does: one ``[TensorMeta]`` per distinct input and output, in
every trace; ``probes/shapes.py``). Records are read-only, but a plain list invites
``call.inputs.append(...)``, which would change every call that shares it: a
:class:`ReadOnlyList` raises instead. It is a ``list`` in every other way (``==``,
``isinstance``, JSON, pandas), and a copy of one (``list(x)``, ``x.copy()``,
``copy.copy``, pickle) is a plain list.
"""

from __future__ import annotations

from typing import Any, NoReturn, SupportsIndex, TypeVar

T = TypeVar("T")

_REFUSED = (
    "this list is part of hookscope's records, shared by several of them, and is "
    "read-only; make a copy to change it: list(...)"
)


class ReadOnlyList(list[T]):
    """A ``list`` whose changes raise ``TypeError`` (see the module's docstring)."""

    __slots__ = ()

    def __reduce__(self) -> tuple[type[list[Any]], tuple[list[T]]]:
        return list, (list(self),)

    def __setitem__(self, key: Any, value: Any) -> NoReturn:
        raise TypeError(_REFUSED)

    def __delitem__(self, key: SupportsIndex | slice) -> NoReturn:
        raise TypeError(_REFUSED)

    def __iadd__(self, other: Any) -> NoReturn:  # type: ignore[misc]  # raises: no type
        raise TypeError(_REFUSED)

    def __imul__(self, other: SupportsIndex) -> NoReturn:
        raise TypeError(_REFUSED)

    def append(self, item: T) -> NoReturn:
        raise TypeError(_REFUSED)

    def extend(self, items: Any) -> NoReturn:
        raise TypeError(_REFUSED)

    def insert(self, index: SupportsIndex, item: T) -> NoReturn:
        raise TypeError(_REFUSED)

    def pop(self, index: SupportsIndex = -1) -> NoReturn:
        raise TypeError(_REFUSED)

    def remove(self, item: T) -> NoReturn:
        raise TypeError(_REFUSED)

    def clear(self) -> NoReturn:
        raise TypeError(_REFUSED)

    def sort(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(_REFUSED)

    def reverse(self) -> NoReturn:
        raise TypeError(_REFUSED)
