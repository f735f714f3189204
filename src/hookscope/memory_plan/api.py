"""``hookscope.memory_plan``: will this model train, at which batch size, on how many GPUs.

The plan copies the model onto fake tensors (``fake_copy.py``), runs one step of it,
forward, backward and a real step of the chosen optimizer, under the storage tracker
(``tracking.py``, ``step.py``), and reads the peak, the per-module columns and the
timeline from the tracker's log (``accounting.py``). Nothing of the model's size is
allocated, and the user's model, its parameters and their ``.grad`` are never touched.
With ``device_memory=``, the largest batch size that fits is found by planning at a
few batch sizes (``search.py``).

NB: the bytes are those of the storages torch allocates on the CPU's kernels; a CUDA
device adds its caching allocator's rounding (512 B blocks), its workspaces (cuBLAS,
cuDNN) and the CUDA context, and may pick other kernels (fused attention saves less
than the math path the CPU takes). A recurrent layer's oneDNN workspace, which fake
tensors report as empty, is sized by its real kernel (``core/torch_private/fake.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from hookscope.core.model.selectors import Selector
from hookscope.core.model.structure import inspect
from hookscope.core.torch_private.fake import (
    VALUE_DEPENDENT,
    fake_mode,
    quiet_fake_kernel_errors,
)
from hookscope.errors import HookscopeError, ModelRunError, SpecError
from hookscope.memory_plan.accounting import account, per_module
from hookscope.memory_plan.fake_copy import batch_size_of, fake_inputs, fake_model
from hookscope.memory_plan.options import (
    checkpoint_choice,
    optimizer_factory,
    parse_bytes,
    parse_dtype,
    positive,
    repeated_blocks,
)
from hookscope.memory_plan.result import MemoryPlan, MemoryPoint, ModuleMemory
from hookscope.memory_plan.step import StepOptions, run_step
from hookscope.memory_plan.tracking import StorageTracker

_NOTE_SHARDS = ("per rank: parameters, gradients and optimizer states are sharded; "
                "'gathered' is the whole parameters and gradients of the blocks being "
                "computed and prefetched (2 blocks in forward, 3 in backward)")


@dataclass(frozen=True)
class PlanRequest:
    """Everything a plan at one batch size needs (the options checked)."""

    model: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    step: StepOptions
    dtype: torch.dtype | None
    shards: int
    optimizer_name: str | None
    checkpointed: list[str]


def memory_plan(
    model: nn.Module,
    *inputs: Any,
    kwargs: dict[str, Any] | None = None,
    training: bool = True,
    optimizer: Any = "adamw",
    dtype: torch.dtype | str | None = None,
    autocast: torch.dtype | str | None = None,
    activation_checkpointing: bool | Selector | None = None,
    shards: int = 1,
    gradient_accumulation: int = 1,
    batch_size: int | None = None,
    device_memory: int | str | None = None,
) -> MemoryPlan:
    """Plan the memory of one training (or inference) step, without allocating it.

    Args:
        model: the model (on any device, the meta device included); never modified.
        *inputs: example positional inputs (tensors of one batch, real or meta).
        kwargs: example keyword inputs.
        training: forward, backward and an optimizer step (else one forward without
            gradients).
        optimizer: a ``torch.optim`` class name (``"adamw"``, ``"sgd"``), a class, or
            ``fn(params) -> Optimizer``; ``None``: no optimizer step. It is stepped for
            real on fake tensors, so its states are its own.
        dtype: cast the floating parameters, buffers and inputs (``"bf16"``).
        autocast: run forward under ``torch.autocast`` with this dtype.
        activation_checkpointing: ``True``: recompute each repeated block (the
            children of a ``ModuleList``/``Sequential`` of one class) in backward; a
            selector (``"layers.*"``): those modules.
        shards: plan one rank of FSDP2-style sharding over this many ranks.
        gradient_accumulation: micro-batches per optimizer step.
        batch_size: plan with this many rows instead of the inputs' (every tensor whose
            first dimension is the first tensor's gets it).
        device_memory: bytes (or ``"80GiB"``): also find the largest batch size that
            fits, by planning (``.max_batch_size``).

    Returns:
        The plan: ``.peak_bytes``, ``.peak_phase``, ``.peak_module``, one row per module.

    Raises:
        SpecError: an option is wrong, or the model reads tensor values, which fake
            tensors do not have.
        ModelRunError: the planned step raised (``.path``: the module whose forward
            raised, ``None`` outside one; the original exception is its cause), as a
            torchvision detection model does in training mode without targets.

    Example:
        >>> import torch, hookscope
        >>> plan = hookscope.memory_plan(torch.nn.Linear(1024, 1024), torch.randn(8, 1024))
        >>> plan.at_peak["optimizer_states"] == 2 * (1024 * 1024 + 1024) * 4 + 2 * 4
        True
    """
    request = _request(model, inputs, kwargs or {}, training=training, optimizer=optimizer,
                       dtype=dtype, autocast=autocast, checkpointing=activation_checkpointing,
                       shards=shards, accumulation=gradient_accumulation)
    budget = parse_bytes(device_memory)
    rows = None if batch_size is None else positive(batch_size, option="batch_size")
    plan = plan_once(request, batch_size=rows)
    if budget is None:
        return plan
    if plan.batch_size is None:
        raise SpecError("device_memory= searches the batch size, but no input has a batch "
                        "dimension; give tensor inputs")
    from hookscope.memory_plan.search import largest_batch

    best = largest_batch(lambda n: plan_once(request, batch_size=n).peak_bytes, budget,
                         start=plan.batch_size, start_peak=plan.peak_bytes)
    return replace(plan, device_memory=budget, max_batch_size=best)


def _request(model: nn.Module, inputs: tuple[Any, ...], kwargs: dict[str, Any], *,
             training: bool, optimizer: Any, dtype: Any, autocast: Any, checkpointing: Any,
             shards: int, accumulation: int) -> PlanRequest:
    if not isinstance(model, nn.Module):
        raise SpecError(f"memory_plan takes an nn.Module, got {type(model).__name__}")
    factory, name = optimizer_factory(optimizer if training else None)
    checkpointed = checkpoint_choice(model, checkpointing, training=training)
    chosen = frozenset(checkpointed)
    step = StepOptions(training=training, optimizer=factory,
                       autocast=parse_dtype(autocast, option="autocast"),
                       checkpointed=chosen.__contains__ if chosen else None,
                       micro_batches=positive(accumulation, option="gradient_accumulation"))
    return PlanRequest(model, inputs, kwargs, step, parse_dtype(dtype, option="dtype"),
                       positive(shards, option="shards"), name, checkpointed)


def plan_once(request: PlanRequest, *, batch_size: int | None = None) -> MemoryPlan:
    """The plan of ``request``'s step (with ``batch_size`` rows of input if given)."""
    mode = fake_mode()
    fake = fake_model(request.model, mode, dtype=request.dtype)
    args, kwargs = fake_inputs((request.args, request.kwargs), mode, dtype=request.dtype,
                               batch_size=batch_size)
    tracker = StorageTracker()
    try:
        with mode, quiet_fake_kernel_errors():
            facts = run_step(fake, args, kwargs, request.step, tracker)
    except VALUE_DEPENDENT as e:
        where = _where(tracker.raised_in.get(id(e)))
        raise SpecError(f"the model reads tensor values{where} ({type(e).__name__}: {e}), "
                        "which a memory plan's fake tensors do not have") from e
    except HookscopeError:
        raise
    except Exception as e:
        inside = tracker.raised_in.get(id(e))  # the module whose forward raised it
        where = _where(inside)
        first_line = (str(e).strip().splitlines() or [""])[0]
        training = request.step.training and "train" in first_line.lower()
        hint = _TRAINING_HINT if training else ""
        raise ModelRunError(
            f"{type(e).__name__} raised{where} in the {tracker.phase} of the planned "
            f"step, run on fake tensors: {first_line}{hint}", trace=None,
            path=inside) from e
    del args, kwargs
    paths = [p for p, _ in fake.named_modules()]
    held = {p: {tracker.track(t) for t in m.parameters()} for p, m in fake.named_modules()}
    accounts = account(tracker, facts, shards=request.shards, unit_bytes=_unit_bytes(fake))
    rows = per_module(tracker, facts, accounts, held, shards=request.shards)
    classes = {p: type(m).__name__ for p, m in fake.named_modules()}
    phase, module = accounts.places[accounts.peak_index] if accounts.places else ("", "")
    points = [MemoryPoint(b, ph, mod) for b, (ph, mod)
              in zip(accounts.timeline, accounts.places, strict=True)]
    return MemoryPlan(
        peak_bytes=accounts.timeline[accounts.peak_index] if accounts.timeline else 0,
        peak_phase=phase, peak_module=module, at_peak=accounts.at_peak,
        modules=[ModuleMemory.of(p, classes[p], rows[p]) for p in paths], timeline=points,
        training=request.step.training, optimizer=request.optimizer_name,
        dtype=_name(request.dtype), autocast=_name(request.step.autocast),
        shards=request.shards, micro_batches=request.step.micro_batches,
        batch_size=batch_size or batch_size_of((request.args, request.kwargs)),
        checkpointed=request.checkpointed,
        notes=_notes(request, tracker),
        structure=inspect(request.model),
    )


def _where(path: str | None) -> str:
    """`` in module 'a.b'`` for the module whose forward raised, `` in the root
    module`` for ``""``, nothing for ``None`` (outside any module's forward)."""
    if path is None:
        return ""
    return " in the root module" if path == "" else f" in module {path!r}"


_TRAINING_HINT = ("; a training step runs the model in training mode: give the inputs "
                  "that mode needs (a detection model's targets), or plan inference "
                  "(training=False, --inference)")


def _unit_bytes(model: nn.Module) -> int:
    """Bytes of the parameters of the largest repeated block (else of the model)."""
    modules = dict(model.named_modules())
    units = [modules[p] for p in repeated_blocks(model)] or [model]
    return int(max(sum(p.numel() * p.element_size() for p in unit.parameters())
                   for unit in units))


def _notes(request: PlanRequest, tracker: StorageTracker) -> list[str]:
    notes = [_NOTE_SHARDS] if request.shards > 1 else []
    for op in sorted(tracker.opaque):
        notes.append(f"{op} keeps a workspace for backward that its fake kernel reports as "
                     "empty and whose real kernel could not be asked its size (not on the "
                     "CPU, too large to run once, or it refused zeros): the plan is low by "
                     "it")
    return notes


def _name(dtype: torch.dtype | None) -> str | None:
    return None if dtype is None else str(dtype).removeprefix("torch.")
