"""The training steps of ``hookscope grads``, recorded by a :class:`~hookscope.GradientMonitor`.

Where it sits: ``cli/grads_command.py`` parses the options and loads the model
(``cli/running.py``); :func:`train` runs the steps and returns a :class:`Training`;
``cli/grads_report.py`` turns it into the table, the caption and the JSON.

Each step is what a user's loop does: a new batch, the forward, the loss
(``cli/grads_loss.py``), ``backward()``, ``mon.step()`` (so the recorded norms are
those backward made), the clip of the total norm (``--clip``, by
``torch.nn.utils.clip_grad_norm_``), then ``SGD.step()`` and ``zero_grad()``. Each step
draws its batch, then its labels or target, from one CPU generator seeded with ``seed``
for the run, through the function that makes the default inputs
(:func:`hookscope.cli.input_specs.make_inputs`): the same shapes, dtypes and token ranges,
new values every step (step 0 of seed 0 is the batch ``hookscope trace`` runs on). One
stream per run, not one seed per step: seeds ``s + k`` would give ``--seed 1`` the
batches of ``--seed 0`` one step later.
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field
from typing import Any

import torch

from hookscope.cli.grads_loss import Loss, choose_loss, input_ids

__all__ = ["Batches", "Training", "train"]


@dataclass
class Batches:
    """A new batch per step from the run's seeded generator, made as the default inputs
    are.

    Attributes:
        specs: the inputs' shapes, dtypes and names.
        device: where they are made.
        vocab_size: the range of token ids (``None``: unknown).
        seed: the seed of the run's one generator, which every step draws from in turn.
    """

    specs: tuple[Any, ...]
    device: str | None
    vocab_size: int | None
    seed: InitVar[int]
    generator: torch.Generator = field(init=False)

    def __post_init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    def draw(self) -> tuple[tuple[Any, ...], dict[str, Any], torch.Generator]:
        """The next step's positional and keyword inputs, and the generator they were
        drawn from (the loss draws the labels from it next)."""
        from hookscope.cli.input_specs import make_inputs

        args, kwargs = make_inputs(self.specs, device=self.device, vocab_size=self.vocab_size,
                                   generator=self.generator)
        return args, kwargs, self.generator


@dataclass
class Training:
    """What the steps recorded, on the host.

    Attributes:
        monitor: the closed monitor (``history``: norms before the clip; ``anomalies``).
        loss: the loss the steps trained on.
        losses: its value per step.
        total_norms: the total gradient norm per step, before any clip.
        clipped_norms: the total norm after ``--clip`` per step (empty without it).
        weight_norms: per step, the norm of each of ``monitor.names``' weights when its
            gradient was taken (before the update); empty unless asked for.
    """

    monitor: Any
    loss: Loss
    losses: list[float] = field(default_factory=list)
    total_norms: list[float] = field(default_factory=list)
    clipped_norms: list[float] = field(default_factory=list)
    weight_norms: list[list[float]] = field(default_factory=list)


def train(prepared: Any, *, steps: int, lr: float, seed: int, loss: str,
          clip: float | None, weight_norms: bool, **thresholds: Any) -> Training:
    """Run ``steps`` SGD steps of the prepared model (see the module docstring).

    Raises:
        SpecError: nothing to train, or the loss does not fit the output.
        ModelRunError: the model's forward raised (checked once before the steps).
        HookscopeError: the model's backward raised.
    """
    import hookscope

    net = prepared.loaded.model
    net.train()  # before the check: a model may fail in training mode alone
    # one observed forward first, in the mode the steps run in: inputs that do not fit
    # fail with the module's path and its input shapes (a ModelRunError), not inside
    # the training loop
    hookscope.trace(net, *prepared.args, kwargs=prepared.kwargs, time=False, stats=False,
                    memory=False)
    trainable = [p for p in net.parameters() if p.requires_grad]
    if not trainable:
        raise hookscope.SpecError(
            f"grads trains the model, and {type(net).__name__} has no parameter that "
            "requires grad (none, or all frozen); for its forward use hookscope trace")
    batches = Batches(prepared.specs, prepared.device, prepared.loaded.vocab_size, seed)
    opt = torch.optim.SGD(trainable, lr=lr)
    # every anomaly stays in monitor.anomalies, which the caption and --fail-on read;
    # no warning per parameter on stderr besides
    with hookscope.GradientMonitor(net, on_anomaly=_keep, **thresholds) as monitor:
        named = dict(net.named_parameters())
        watched = [named[n] for n in monitor.names]
        rows: dict[str, list[torch.Tensor]] = {"loss": [], "clipped": [], "weights": []}
        chosen: Loss | None = None
        for step in range(steps):
            args, kwargs, generator = batches.draw()
            out = net(*args, **kwargs)
            ids = input_ids(args, kwargs)
            chosen = chosen or choose_loss(loss, net, out, ids)
            value = chosen.compute(out, ids, generator)
            _backward(value, step)
            monitor.step()  # the norms as backward made them, before the clip
            rows["loss"].append(value.detach().float())
            if weight_norms:
                rows["weights"].append(_norms(watched))
            if clip is not None:  # the total before the clip is the monitor's history.total
                torch.nn.utils.clip_grad_norm_(trainable, clip)
                rows["clipped"].append(_total_norm(trainable))
            opt.step()
            opt.zero_grad()
    assert chosen is not None  # steps >= 1
    return Training(monitor, chosen, total_norms=list(monitor.history.total), **_to_host(rows))


def _keep(anomaly: Any) -> None:
    """``on_anomaly``: nothing more than the monitor's own record."""


def _backward(loss: Any, step: int) -> None:
    import hookscope
    from hookscope.core.engine.failures import message

    try:
        loss.backward()
    except Exception as e:  # the model's own backward (the forward was checked)
        raise hookscope.HookscopeError(
            f"the model's backward raised {type(e).__name__} at step {step}: {message(e)}"
        ) from e


def _norms(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The norm of each tensor, stacked on the first one's device (no host sync)."""
    from hookscope.monitor.norms import grad_norms, stack_norms

    with torch.no_grad():
        return stack_norms(grad_norms([t.detach() for t in tensors], 2.0))


def _total_norm(params: list[torch.Tensor]) -> torch.Tensor:
    """The norm of all gradients together, as ``clip_grad_norm_`` measures it."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    total: torch.Tensor = torch.linalg.vector_norm(_norms(grads))
    return total


def _to_host(rows: dict[str, list[torch.Tensor]]) -> dict[str, Any]:
    def host(key: str) -> list[Any]:
        return torch.stack([t.cpu() for t in rows[key]]).tolist() if rows[key] else []

    return {"losses": host("loss"), "clipped_norms": host("clipped"),
            "weight_norms": host("weights")}
