"""What a capture records (the API: ``capture.py``): which values of a call
(:class:`What`), the recording probes that copy them (``detach`` and a copy to ``to=``;
inputs when ``forward`` starts, the output at the call's exit) and hand them to the
capture, and the dict the copies are kept in, in memory (:class:`CapturedActivations`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hookscope.core import torch_private
from hookscope.core.engine.probe import Probe
from hookscope.core.records.tensor_paths import map_tensors
from hookscope.core.records.trace import Call
from hookscope.errors import SpecError
from hookscope.interventions.storage_format import ModuleInputs

if TYPE_CHECKING:
    from hookscope.interventions.capture import Capture


class What(str, Enum):
    """Which values of a call a capture keeps."""

    OUTPUT = "output"
    INPUT = "input"
    BOTH = "both"


class CapturedActivations(dict[str, Any]):
    """Captured values held in memory, by call name (a plain ``dict`` otherwise)."""

    def calls_of(self, path: str) -> list[Any]:
        """The values of every call of the module at ``path``, in call order (also
        inside the block, where a recursive module's calls are kept as they end)."""
        found = []
        for key, value in self.items():
            name, sep, n = key.partition("#")
            if name == path:
                found.append((int(n) if sep else 0, value))
        return [value for _, value in sorted(found, key=lambda item: item[0])]


class SharedCopies:
    """One copy per tensor and version: a tensor that one call returns and the next
    receives unchanged (same object, same version counter) is copied once and the copy
    kept under both calls (what ``hookscope.compare`` asks for; a capture to disk
    copies each time, as safetensors refuses tensors that share memory)."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[weakref.ref[torch.Tensor], int, torch.Tensor]] = {}

    def copy(self, t: torch.Tensor, make: Callable[[], torch.Tensor]) -> torch.Tensor:
        """The copy of ``t`` made before if ``t`` has not been written since, else
        ``make()``."""
        version = torch_private.version_counter(t)
        if version is None:  # an inference tensor counts no writes: copied each time
            return make()
        seen = self._seen.get(id(t))
        if seen is not None and seen[0]() is t and seen[1] == version:
            return seen[2]
        made = make()
        self._seen[id(t)] = (weakref.ref(t), version, made)
        return made


class _OutputCapture(Probe):
    """Copies each observed call's output at its exit."""

    name = "capture"

    def __init__(self, capture: Capture, keep: Callable[[Call, Any], None],
                 shared: SharedCopies | None) -> None:
        self.capture = capture
        self.keep = keep  # where a call's copied value goes (memory or the shard writer)
        self.shared = shared

    def on_exit(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
        output: Any, failed: bool,
    ) -> None:
        if failed:
            return
        self.keep(call, self._copy(output, call))

    def _copy(self, value: Any, call: Call) -> Any:
        device = self.capture.to
        under_vmap = torch_private.vmap_running()

        def copy(t: torch.Tensor) -> torch.Tensor:
            # inside torch.func.vmap a module's tensors are vmap's wrappers of one
            # sample (shape [4] of a batch [3, 4]), whose copy means nothing once the
            # transform ends (no op takes it, safetensors cannot save it): refused, not
            # unwrapped (functorch's private API, and the batch dimension may be any)
            if under_vmap and torch_private.is_functorch_wrapped(t):
                raise SpecError(
                    f"capture: {call.name!r} ran inside torch.func.vmap, where its tensors "
                    "are vmap's per-sample wrappers, meaningless outside it; capture the "
                    "module run outside vmap (for vmap(model)(x): model(x), same values)"
                )
            return t.detach().to(t.device if device is None else device, copy=True)

        shared = self.shared
        if shared is not None:
            return map_tensors(lambda t: shared.copy(t, lambda: copy(t)), value)
        return map_tensors(copy, value)  # also into dataclasses, which pytree leaves whole


class _InputCapture(_OutputCapture):
    """Copies what ``forward`` receives when the call starts (before it can change it in
    place), and the output too for ``what="both"``."""

    def __init__(self, capture: Capture, keep: Callable[[Call, Any], None],
                 shared: SharedCopies | None) -> None:
        super().__init__(capture, keep, shared)
        self._pending: dict[int, ModuleInputs] = {}

    def on_enter(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        self._pending[call.index] = ModuleInputs(self._copy(args, call),
                                                 self._copy(kwargs, call))

    def on_exit(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
        output: Any, failed: bool,
    ) -> None:
        inputs = self._pending.pop(call.index, None)
        if failed or inputs is None:
            return
        if self.capture.what is What.INPUT:
            self.keep(call, inputs)
        else:
            self.keep(call, {"input": inputs, "output": self._copy(output, call)})
