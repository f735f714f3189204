"""Benchmark a training step with a ``hookscope.Tracer`` entered and left around it.

What a gradient monitor does: every step runs inside ``with hookscope.Tracer(model,
shapes=False):``, so the tracer's set-up and tear-down (the module table, registering
and removing its hooks) and its per-call bookkeeping are paid once per step. The model
is torchvision ResNet-50 (random weights, training mode) on an 8×3×224×224 batch of
random images with random labels, on the CPU, interleaved round-robin with the same
step without the tracer (see ``_harness.py``).

Contenders (one unit of work = one step):
    train step            forward, ``CrossEntropyLoss`` on the labels, backward,
                          ``SGD.step()``, ``zero_grad()``
    train step in Tracer  the same inside ``with hookscope.Tracer(model, shapes=False):``

Target (issue 8): the step in the tracer ≤ 1.02× the plain step.

Both contenders train the same model with the same optimizer (plain SGD, no momentum:
no state that one contender would build up for the other), at a small learning rate so
that the weights stay in range over every round.

Run: ``python benchmarks/bench_tracer_step.py [--rounds 15] [--threads 2] [--json f]``;
a step is about 1 s on two cores, so the default (15 rounds after 2 warm-up rounds,
two contenders) takes about 40 s.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from _harness import (
    Contender,
    Report,
    build_model,
    emit,
    environment,
    parse_args,
    progress_printer,
    rounds_run,
    run_interleaved,
)

import hookscope

MODELS = ("resnet50",)
BATCH = 8
TRACER_TARGET = 1.02


def train_step(model: torch.nn.Module, x: torch.Tensor, labels: torch.Tensor,
               optimizer: torch.optim.Optimizer) -> Callable[[], float]:
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> float:
        loss = loss_fn(model(x), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.item()

    return step


def contenders(model: torch.nn.Module, x: torch.Tensor) -> list[Contender]:
    model.train()
    labels = torch.randint(0, 1000, (x.shape[0],))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    step = train_step(model, x, labels, optimizer)

    def traced_step() -> float:
        with hookscope.Tracer(model, shapes=False):
            return step()

    return [
        Contender("train step", step),
        Contender("train step in Tracer", traced_step, TRACER_TARGET),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    # NB: 15 rounds: the target's margin (2 %) is about 20 ms of a 1 s step, and the
    # per-round ratios of two 1 s steps scatter by about as much on a shared machine
    opts = parse_args(__doc__.splitlines()[0], MODELS, argv, rounds=15)
    results = []
    for name in opts.models:
        model, (x,) = build_model(name, image_batch=BATCH)
        results += run_interleaved(name, contenders(model, x), rounds=opts.rounds[name],
                                   warmup=opts.warmup, progress=progress_printer(opts.quiet))
    report = Report(f"training step (batch {BATCH}) with and without hookscope.Tracer",
                    environment(), rounds_run(opts), opts.warmup, results,
                    baseline="train step")
    emit(report, opts.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
