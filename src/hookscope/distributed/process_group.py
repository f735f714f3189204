"""The user's process group, as the collectives of this package need it."""

from __future__ import annotations

import torch.distributed as dist

from hookscope.errors import SpecError

__all__ = ["check_initialized", "check_rank"]


def check_initialized(what: str) -> None:
    """Raise :class:`~hookscope.errors.SpecError` unless a process group is initialised.

    Args:
        what: the call that needs it, for the message (``"trace.gather()"``).
    """
    if not (dist.is_available() and dist.is_initialized()):
        raise SpecError(
            f"{what} is a collective of a torch.distributed job, and no process group is "
            "initialised: run under torchrun and call "
            "torch.distributed.init_process_group() first"
        )


def check_rank(dst: object, *, option: str = "dst") -> int:
    """``dst`` as a rank of the default group (a ``SpecError`` when it is none)."""
    world = dist.get_world_size()
    if not isinstance(dst, int) or isinstance(dst, bool) or not 0 <= dst < world:
        raise SpecError(f"{option}= must be a rank from 0 to {world - 1}, got {dst!r}")
    return dst
