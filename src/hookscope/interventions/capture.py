"""Activation capture: detached copies of chosen modules' outputs (or inputs), in memory
or streamed to disk while the forward runs.

A capture is a recording probe (``core/engine/probe.py``) in a :class:`~hookscope.Tracer` that
observes only the selected modules. At a call's exit the probe copies the value
(``detach`` + a copy to ``to=``, so an in-place op after the call cannot change it;
nested outputs keep their structure, by ``torch.utils._pytree``) and hands it to a
sink: a dict, or the :class:`~hookscope.interventions.storage.ShardWriter` that writes
safetensors shards during the forward. Calls are named as the trace names them:
``path`` for a module's first call, ``path#N`` for its N-th reuse (and, in a
:class:`Capture` around a loop, for the N-th batch).

The probes and the in-memory dict they fill are in ``recording.py``.

Recording probes run after replacing ones, so what is captured is what the caller
received, also inside a :func:`hookscope.patch` block entered before the capture.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import torch
from torch import nn

from hookscope.core.engine.failures import describe_failure
from hookscope.core.engine.tracer import Tracer
from hookscope.core.inputs import parse_device
from hookscope.core.meta import is_on_meta
from hookscope.core.model.module_table import module_paths
from hookscope.core.model.selectors import ModuleSelector, compile_module_selector
from hookscope.core.model.wrappers import unwrap
from hookscope.core.records.trace import Call
from hookscope.core.torch_private import original_module, pytree
from hookscope.errors import HookscopeError, ModelRunError, SpecError
from hookscope.interventions.recording import (
    CapturedActivations,
    SharedCopies,
    What,
    _InputCapture,
    _OutputCapture,
)
from hookscope.interventions.storage import Activations, ModuleInputs, ShardWriter, load_activations


def selected_paths(model: nn.Module, select: ModuleSelector, *, api: str) -> set[str]:
    """Paths of the modules ``select`` chooses (each module at its first path).

    Raises:
        SpecError: a bad selector, or one that matches no module.
    """
    matches = compile_module_selector(select)
    model = unwrap(model)  # paths without a data-parallel wrapper's ``module.``
    paths = module_paths(model)  # a module registered at several paths: by any of them
    chosen = {path for path, module in model.named_modules()
              if any(matches(p, module) for p in paths.get(path, (path,)))}
    if not chosen:
        examples = [p for p, _ in model.named_modules() if p][:4]
        raise SpecError(
            f"{api}: select={select!r} matches no module of {type(model).__name__}; "
            f"paths look like {examples!r} (glob: * within a segment, ** across dots)"
        )
    return chosen


_ON_META = ("capture copies values, and the meta device has shapes but no values; run it "
            "with the model and inputs on 'cpu' or 'cuda' (hookscope.trace(..., "
            "device='meta') gives every call's shapes)")


class Capture:
    """Capture activations of chosen modules while the ``with`` block runs.

    Around one forward, or around a whole data-loader loop: every call of a selected
    module is kept, the N-th call of a module as ``path#N`` (so batch N of a loop that
    calls each module once is ``path#N``; ``activations.calls_of(path)`` lists them).

    Args:
        model: the model; every hook is removed on exit, also when the block raises.
        select: which modules: a glob over module paths (``*`` within a segment, ``**``
            across dots), a list of globs, a module class (or a tuple of classes), or
            ``fn(path: str) -> bool``.
        what: ``"output"``, ``"input"`` (a :class:`ModuleInputs` of ``args`` and
            ``kwargs``, copied when ``forward`` starts) or ``"both"`` (a dict with
            ``"input"`` and ``"output"``).
        to: the device copies go to (``None``: where the value is).
        save_to: a new directory: values are written there as safetensors shards while
            the model runs, and an index when the block ends (see
            ``interventions/storage.py``); ``None`` keeps them in memory.
        shard_mib: with ``save_to``, values are written every ``shard_mib`` MiB, which
            bounds the memory the capture holds.
        restore_state: put the model's training flags, ``requires_grad`` and
            training-mode buffers (BatchNorm's running statistics) back when the block
            ends, for a forward run on the caller's behalf (``hookscope.capture`` does);
            by default the forwards in the block are the user's own and keep their
            effects.
        share_copies: in memory, keep one copy of a tensor that one call returns and
            the next receives unchanged (the same object at the same version), under
            both calls (``hookscope.compare`` does). By default each call's values are
            copies of their own, which may be changed independently.

    Raises:
        SpecError: a bad option, a selector that matches nothing, or a ``save_to`` that
            is not a new or empty directory.
        ProbeError: (in the block, from a ``SpecError``) a selected module ran inside
            ``torch.func.vmap``, whose tensors are wrappers that mean nothing outside it.

    Example:
        >>> with hookscope.Capture(model, select="layer*.0", save_to="acts") as cap:
        ...     for x in loader:
        ...         model(x)
        >>> cap.activations["layer1.0#3"].shape      # batch 3
    """

    def __init__(
        self, model: nn.Module, *, select: ModuleSelector, what: str = "output",
        to: str | torch.device | None = "cpu", save_to: str | os.PathLike[str] | None = None,
        shard_mib: float = 64.0, restore_state: bool = False, share_copies: bool = False,
    ) -> None:
        try:
            self.what = What(what)
        except ValueError:
            raise SpecError(
                f"what= must be 'output', 'input' or 'both', got {what!r}"
            ) from None
        try:
            self.to = None if to is None else torch.device(to)
        except (RuntimeError, TypeError):
            raise SpecError(f"to= must be a device such as 'cpu' or 'cuda:0', got {to!r}") from None
        if self.to is not None:
            try:
                parse_device(str(self.to))  # one this machine has: no failure mid-forward
            except SpecError as e:
                raise SpecError(f"to={to!r}: {e}") from None
            if torch.device(self.to).type == "meta":
                raise SpecError(f"to={to!r}: {_ON_META}")
        if not (isinstance(shard_mib, (int, float)) and not isinstance(shard_mib, bool)
                and 0 < shard_mib < math.inf):
            raise SpecError(f"shard_mib= must be a positive finite number, got {shard_mib!r}")
        if not isinstance(model, nn.Module):
            raise SpecError(f"Capture expects a torch.nn.Module, got {type(model).__name__}")
        self.model = model
        # by the paths of the module a torch.compile wrapper holds, as the tracer names them
        self._chosen = selected_paths(original_module(model), select, api="Capture")
        self._save_to, self._shard_bytes = save_to, int(shard_mib * 2**20)
        self._memory = CapturedActivations()
        self._started: dict[str, int] = {}  # call name -> its index in the run
        self._writer: ShardWriter | None = None
        self._tracer: Tracer | None = None
        self._restore_state, self._share_copies = restore_state, share_copies

    @property
    def activations(self) -> Mapping[str, Any]:
        """The captured values by call name (a dict, or the lazy reader of ``save_to``
        once the block ended).

        Raises:
            SpecError: asked inside the block of a capture with ``save_to``: its values
                are on their way to disk (this was an empty dict).
        """
        if self._writer is not None and self._tracer is None:
            return load_activations(self._writer.directory, partial=True)
        if self._writer is not None:
            raise SpecError(
                "this Capture writes to save_to=: read cap.activations after the with "
                "block, or hookscope.load_activations(save_to, partial=True) for the "
                "shards written so far"
            )
        return self._memory

    def __enter__(self) -> Capture:
        if self._tracer is not None:
            raise SpecError("this Capture is already active; create a new one")
        if is_on_meta(self.model):
            raise SpecError(_ON_META)
        # a block entered again starts anew: values of an earlier one stay as they were
        self._memory, self._started = CapturedActivations(), {}
        if self._save_to is not None:
            self._writer = ShardWriter(self._save_to, shard_bytes=self._shard_bytes)
        shared = SharedCopies() if self._share_copies and self._writer is None else None
        recorder = _OutputCapture if self.what is What.OUTPUT else _InputCapture
        probe = recorder(self, self._keep, shared)
        chosen = self._chosen
        tracer = Tracer(self.model, shapes=False, probes=[probe],
                        select=lambda path: path in chosen, restore_state=self._restore_state,
                        restore_buffers=self._restore_state)
        try:
            tracer.__enter__()
        except BaseException as e:  # nothing started: close the writer, stay reusable
            writer, self._writer = self._writer, None
            if writer is not None:
                writer.close(error=e)
            raise
        self._tracer = tracer
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tracer, self._tracer = self._tracer, None
        try:
            if tracer is not None:
                self.trace = tracer.trace  # the calls seen, also of a run that failed
                # kept as each call ended: in the order they started (a recursive
                # module's outer call ends last), as the index on disk reads
                kept = sorted(self._memory.items(), key=lambda kv: self._started[kv[0]])
                self._memory.clear()
                self._memory.update(kept)
                tracer.__exit__(exc_type, exc, tb)
        except BaseException as e:
            exc = exc or e
            raise
        finally:
            if self._writer is not None:
                self._writer.close(error=exc)

    def _keep(self, call: Call, value: Any) -> None:
        name = call.name
        if self._writer is None:
            self._memory[name] = value
            self._started[name] = call.index
        else:
            info = {"path": call.path, "call_index": call.call_index,
                    "module_class": call.module_class, "call": call.index}
            self._writer.add(name, value, info)


def capture(
    model: nn.Module, *inputs: Any, select: ModuleSelector, what: str = "output",
    to: str | torch.device | None = "cpu", kwargs: dict[str, Any] | None = None,
    save_to: str | os.PathLike[str] | None = None, shard_mib: float = 64.0,
) -> Mapping[str, Any]:
    """Run ``model(*inputs, **kwargs)`` once, without gradients, and return detached
    copies of the selected modules' outputs (or inputs) by call name.

    Args:
        model: the model; it is left as it was (no hook, flag or value changes).
        *inputs: positional inputs of the forward.
        select: which modules (see :class:`Capture`).
        what: ``"output"``, ``"input"`` or ``"both"`` (see :class:`Capture`).
        to: the device the copies go to (``None``: where they are).
        kwargs: keyword inputs of the forward.
        save_to: stream the values to this new directory (safetensors + JSON index)
            instead of keeping them in memory; the result then reads them lazily.
        shard_mib: with ``save_to``, write a shard every ``shard_mib`` MiB.

    Returns:
        ``{"layer1.0.conv1": tensor, "blocks.0#1": tensor, ...}``: a dict, or an
        :class:`~hookscope.interventions.storage.Activations` reader with ``save_to``.

    Raises:
        SpecError: a bad option or a selector that matches nothing.
        ModelRunError: the model raised (the module and its input shapes in the message;
            with ``save_to``, the directory reads as an interrupted capture).

    Example:
        >>> acts = hookscope.capture(model, x, select="layer*.0.conv1")
        >>> acts["layer1.0.conv1"].shape
        torch.Size([8, 64, 56, 56])
    """
    cap = Capture(model, select=select, what=what, to=to, save_to=save_to,
                  shard_mib=shard_mib, restore_state=True)
    if any(isinstance(t, torch.Tensor) and t.is_meta for t in pytree.tree_leaves((inputs, kwargs))):
        raise SpecError(_ON_META)
    started = False
    try:
        with cap, torch.no_grad():
            started = True
            model(*inputs, **(kwargs or {}))
    except HookscopeError:
        raise
    except Exception as e:
        trace = getattr(cap, "trace", None)
        # an error the model did not raise (writing the capture: a full disk) is
        # raised as it is, not as "the model raised"
        if not started or trace is None or trace.error is None:
            raise
        raise ModelRunError(
            f"the model raised {describe_failure(trace)}", trace=trace,
            path=None if trace.error is None else trace.error.path,
        ) from e
    return cap.activations


__all__ = ["Activations", "Capture", "CapturedActivations", "ModuleInputs", "capture"]
