"""Checks of the options every entry point takes, so that each refuses a wrong value
the same way: one :class:`~hookscope.errors.SpecError` naming the option the caller
wrote (a string such as ``"no"`` is truthy: taken as ``True`` it would do the
opposite of what was meant)."""

from __future__ import annotations

from typing import Any

from hookscope.errors import SpecError


def check_flags(**flags: Any) -> None:
    """Raise :class:`SpecError` for the first of ``flags`` that is not a ``bool``.

    Raises:
        SpecError: ``name= must be True or False, got 'no'``.
    """
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise SpecError(f"{name}= must be True or False, got {value!r}")


def check_optional_flags(**flags: Any) -> None:
    """As :func:`check_flags`, ``None`` (the default that decides) allowed too."""
    check_flags(**{name: value for name, value in flags.items() if value is not None})
