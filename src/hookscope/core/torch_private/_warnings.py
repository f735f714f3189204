"""The one warning every fallback in :mod:`hookscope.core.torch_private` gives, once.

A wrapper whose private torch API is missing or changed calls :func:`_warn_once` with
the feature that degrades and what torch changed; each such pair warns once per
process (``_warned`` remembers them; tests swap it for a fresh set to see the warning
again). ``stacklevel=3`` points at the caller of the public wrapper.
"""

from __future__ import annotations

import warnings

import torch


class HookscopeTorchWarning(UserWarning):
    """This torch release changed a private API hookscope uses; one feature degrades."""


_warned: set[str] = set()


def _warn_once(feature: str, what: str) -> None:
    key = f"{feature}: {what}"
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(
        f"hookscope: torch {torch.__version__} {what}; {feature} is degraded "
        "(please report this to hookscope)",
        HookscopeTorchWarning,
        stacklevel=3,
    )
