"""One training (or inference) step of the plan's fake model, under the tracker.

The order is that of a training loop in its steady state: the optimizer has stepped
before (its states exist: :func:`_warm_up` steps it once on zero gradients, which
costs no forward), then each micro-batch runs forward, the loss (the model's ``loss``
output, else the sum of its outputs that require grad) and backward, and the
optimizer steps. The outputs of the last micro-batch stay alive until the step ends,
as a loop's ``out = model(x)`` keeps them; those of an earlier micro-batch are freed
before the next forward. Two micro-batches stand for any number above one: from the
second on each one runs with the gradients of the ones before alive.

Activation checkpointing wraps the chosen modules' ``forward`` in
``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``, on the plan's copy.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from hookscope.core.torch_private import pytree
from hookscope.errors import SpecError
from hookscope.memory_plan.tracking import StorageTracker

OptimizerFactory = Callable[[list[nn.Parameter]], torch.optim.Optimizer]


@dataclass(frozen=True)
class StepOptions:
    """How the step runs (validated by the API before)."""

    training: bool
    optimizer: OptimizerFactory | None
    autocast: torch.dtype | None = None
    checkpointed: Callable[[str], bool] | None = None
    micro_batches: int = 1


@dataclass
class StepFacts:
    """Which tracked storages are what, after the step (storage ids of the tracker).

    Attributes:
        parameters, buffers, inputs, gradients, states: storage id -> owning module
            path (inputs: ``""``).
        of_parameter: a parameter's storage id -> the ids of its gradient and states.
    """

    parameters: dict[int, str] = field(default_factory=dict)
    buffers: dict[int, str] = field(default_factory=dict)
    inputs: dict[int, str] = field(default_factory=dict)
    gradients: dict[int, str] = field(default_factory=dict)
    states: dict[int, str] = field(default_factory=dict)
    of_parameter: dict[int, set[int]] = field(default_factory=dict)


def _owned_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    return [(name.rpartition(".")[0], p) for name, p in model.named_parameters()]


def _warm_up(optimizer: torch.optim.Optimizer, params: list[nn.Parameter]) -> None:
    for p in params:
        p.grad = torch.zeros_like(p)
    with _foreach(optimizer):
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)


@contextlib.contextmanager
def _foreach(optimizer: torch.optim.Optimizer) -> Iterator[None]:
    """The optimizer's ``foreach`` path, where it has one, for the untracked warm-up.

    Only the states' layout matters there: ``torch.optim`` makes them in ``_init_group``
    (or, for SGD's momentum, clones the gradient per parameter), the same on either
    path, and the ``foreach`` path dispatches a few ops per group where the
    single-tensor one (the default, which the tracked step keeps) dispatches about ten
    per parameter.
    """
    chosen = [(g, g["foreach"]) for g in optimizer.param_groups
              if "foreach" in g and not g["foreach"] and not g.get("fused")
              and not g.get("differentiable")]
    for group, _ in chosen:
        group["foreach"] = True
    try:
        yield
    finally:
        for group, foreach in chosen:
            group["foreach"] = foreach


def _state_tensors(optimizer: torch.optim.Optimizer, p: nn.Parameter) -> list[torch.Tensor]:
    return [v for v in optimizer.state.get(p, {}).values() if isinstance(v, torch.Tensor)]


def _loss(output: Any) -> torch.Tensor:
    loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.requires_grad:
        return loss
    leaves = [t for t in pytree.tree_leaves(output)
              if isinstance(t, torch.Tensor) and t.requires_grad]
    if not leaves:
        raise SpecError("the model's output has no tensor that requires grad, so there is "
                        "no backward pass to plan; plan inference with training=False")
    total = leaves[0].sum()
    for t in leaves[1:]:
        total = total + t.sum()
    return total


@contextlib.contextmanager
def _module_hooks(model: nn.Module, tracker: StorageTracker,
                  checkpointed: Callable[[str], bool] | None) -> Iterator[None]:
    handles = []
    starts: dict[str, list[int | None]] = {}
    for path, module in model.named_modules():
        def pre(_m: nn.Module, _a: Any, path: str = path) -> None:
            starts.setdefault(path, []).append(tracker.enter(path))

        def post(_m: nn.Module, _a: Any, _o: Any, path: str = path) -> None:
            tracker.exit(path, starts[path].pop() if starts.get(path) else None)

        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post, always_call=True))
        if checkpointed is not None and path and checkpointed(path):
            module.forward = functools.partial(checkpoint, module.forward, use_reentrant=False)
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def run_step(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
             options: StepOptions, tracker: StorageTracker) -> StepFacts:
    """Run one step of ``model`` (a fake copy, inside its fake mode) under ``tracker``."""
    model.train(options.training)
    config: Any = getattr(model, "config", None)
    if options.training and getattr(config, "use_cache", None):
        # a training step keeps no key-value cache (transformers turns it off under
        # gradient checkpointing, whose recompute would otherwise append to it again)
        config.use_cache = False
    owned = _owned_parameters(model)
    params = [p for _, p in owned if p.requires_grad]
    optimizer = None
    if options.training and options.optimizer is not None and params:
        optimizer = options.optimizer(params)
        _warm_up(optimizer, params)
    facts = StepFacts()
    with _module_hooks(model, tracker, options.checkpointed), tracker:
        _track_state(model, args, kwargs, optimizer, tracker, facts)
        if options.training:
            _train(model, args, kwargs, options, optimizer, tracker, facts)
        else:
            with torch.no_grad(), _autocast(options.autocast):
                tracker.phase = "forward"
                output = model(*args, **kwargs)
            del output
    return facts


def _track_state(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                 optimizer: torch.optim.Optimizer | None, tracker: StorageTracker,
                 facts: StepFacts) -> None:
    for owner, p in _owned_parameters(model):
        sid = tracker.track(p, owner=owner)
        facts.parameters[sid] = owner
        facts.of_parameter[sid] = set()
        for state in _state_tensors(optimizer, p) if optimizer is not None else ():
            facts.states[tracker.track(state, owner=owner)] = owner
    for name, b in model.named_buffers():
        owner = name.rpartition(".")[0]
        facts.buffers[tracker.track(b, owner=owner)] = owner
    for leaf in pytree.tree_leaves((args, kwargs)):
        if isinstance(leaf, torch.Tensor):
            facts.inputs[tracker.track(leaf)] = ""


def _train(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
           options: StepOptions, optimizer: torch.optim.Optimizer | None,
           tracker: StorageTracker, facts: StepFacts) -> None:
    output: Any = None
    for _ in range(min(options.micro_batches, 2)):
        output = None
        tracker.phase = "forward"
        with torch.autograd.graph.saved_tensors_hooks(tracker.pack, _unpack), \
                _autocast(options.autocast):
            output = model(*args, **kwargs)
            loss = _loss(output)
        tracker.phase = "backward"
        loss.backward()  # type: ignore[no-untyped-call]  # torch leaves it untyped
        del loss
    for owner, p in _owned_parameters(model):
        if p.grad is not None:
            grad = tracker.track(p.grad, owner=owner)
            facts.gradients[grad] = owner
            facts.of_parameter[tracker.track(p)].add(grad)
    if optimizer is not None:
        tracker.phase = "optimizer"
        optimizer.step()
        for owner, p in _owned_parameters(model):
            for state in _state_tensors(optimizer, p):
                sid = tracker.track(state, owner=owner)
                facts.states[sid] = owner
                facts.of_parameter[tracker.track(p)].add(sid)
    del output


def _unpack(t: torch.Tensor) -> torch.Tensor:
    return t


def _autocast(dtype: torch.dtype | None) -> contextlib.AbstractContextManager[Any]:
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast("cpu", dtype=dtype)
