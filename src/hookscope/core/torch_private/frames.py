"""torch's own files on the stack: which of them a module call and a backward pass run
through to reach a hook.

Private: torch's source layout (``nn/modules/module.py``, ``utils/hooks.py``,
``autograd/``, ``_tensor.py``), which no API names. The pdb that stops in a hook hides
these frames, so that the stack goes from the stop straight to the module's caller.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from hookscope.core.torch_private._warnings import _warn_once

_TORCH_DIR = os.path.dirname(os.path.realpath(torch.__file__)) + os.sep
#: torch's files a module call (and a backward pass) runs through to reach a hook
_MACHINERY = tuple(_TORCH_DIR + f.replace("/", os.sep) for f in (
    "nn/modules/module.py", "utils/hooks.py", "autograd/", "_tensor.py"))
_machinery: tuple[str, ...] | None = None


def is_torch_machinery(filename: str) -> bool:
    """Whether ``filename`` (a frame's ``co_filename``) is one of torch's files that a
    module call or a backward pass runs through to reach a hook."""
    return os.path.realpath(filename).startswith(_machinery_files())


def _machinery_files() -> tuple[str, ...]:
    """:data:`_MACHINERY`, checked once against the file ``nn.Module.__call__`` is in;
    where torch moved it, that file is added, with a warning."""
    global _machinery
    if _machinery is None:
        code = getattr(nn.Module.__call__, "__code__", None)
        call_file = os.path.realpath(getattr(code, "co_filename", None) or "")
        _machinery = _MACHINERY
        if not call_file.startswith(_MACHINERY):
            _warn_once("the stack a breakpoint shows (torch's frames are not all hidden)",
                       "calls modules from a file hookscope does not know")
            _machinery += (call_file,) if os.path.isabs(call_file) else ()
    return _machinery
