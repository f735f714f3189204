"""Benchmark gradient monitoring: a training step with ``hookscope.GradientMonitor``
against the same step without it, beside the naive loop users write today, and
``hookscope.trace(backward=True)`` against a plain forward+backward.

Models: torchvision ResNet-50 (random weights, training mode, batch 8 of 3×224×224)
and the default 12-layer GPT-2 (``GPT2LMHeadModel``, random weights, 1×128 tokens,
the LM loss), on the CPU, interleaved round-robin (``_harness.py``).

Contenders (one unit of work = one step):
    train step             forward, loss, backward, ``SGD.step()``, ``zero_grad()``
    monitored step         the same with ``GradientMonitor(model, optimizer=opt)``
                           attached once (it records at the optimizer's step)
    naive hooks            the same with a ``register_hook`` per parameter whose hook
                           calls ``grad.norm().item()`` (one host sync per parameter)
    forward+backward       forward and ``torch.autograd.grad`` of the sum of the outputs
    trace(backward=True)   ``hookscope.trace(model, x, backward=True)``, default probes

Targets (issue 9): monitored step ≤ 1.05× the train step. The trace is reported
against forward+backward (``target_of``) without a target.

Run: ``python benchmarks/bench_grads.py --threads 1 [--rounds 5] [--models gpt2]``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

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

MODELS = ("resnet50", "gpt2")
BATCH = 8
MONITOR_TARGET = 1.05


def _loss_fn(name: str, x: torch.Tensor) -> Callable[[torch.nn.Module], torch.Tensor]:
    if name == "gpt2":
        return lambda m: m(x, labels=x).loss
    labels = torch.randint(0, 1000, (x.shape[0],))
    return lambda m: torch.nn.functional.cross_entropy(m(x), labels)


def contenders(name: str, model: torch.nn.Module, x: torch.Tensor) -> list[Contender]:
    model.train()
    loss_of = _loss_fn(name, x)
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)

    def step() -> None:
        loss_of(model).backward()
        opt.step()
        opt.zero_grad()

    # NB: the monitored step has an optimizer of its own (plain SGD keeps no state),
    # so the monitor stays attached for the whole run, as in a training loop, and the
    # other contenders' steps are not recorded
    watched_opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    monitor = hookscope.GradientMonitor(model, optimizer=watched_opt,
                                        on_anomaly=lambda a: None)

    def monitored() -> None:
        loss_of(model).backward()
        watched_opt.step()
        watched_opt.zero_grad()

    norms: list[float] = []

    def naive() -> None:
        handles = [p.register_hook(lambda g: norms.append(g.norm().item()))
                   for p in model.parameters()]
        try:
            step()
        finally:
            for h in handles:
                h.remove()

    def forward_backward() -> Any:
        out = model(x)
        out = out.logits if hasattr(out, "logits") else out
        return torch.autograd.grad(out.sum(), [p for p in model.parameters()])

    def traced() -> Any:
        return hookscope.trace(model, x, backward=True)

    contenders.monitor = monitor  # type: ignore[attr-defined]  # kept alive, closed in main
    return [
        Contender("train step", step),
        Contender("monitored step", monitored, MONITOR_TARGET),
        Contender("naive hooks (.norm().item())", naive),
        Contender("forward+backward", forward_backward),
        Contender("trace(backward=True)", traced, target_of="forward+backward"),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(__doc__.splitlines()[0], MODELS, argv, rounds=5)
    results = []
    for name in opts.models:
        kwargs = {"image_batch": BATCH} if name != "gpt2" else {}
        model, (x,) = build_model(name, **kwargs)
        results += run_interleaved(name, contenders(name, model, x),
                                   rounds=opts.rounds[name], warmup=opts.warmup,
                                   progress=progress_printer(opts.quiet))
    report = Report("gradient monitoring: a training step with and without it",
                    environment(), rounds_run(opts), opts.warmup, results,
                    baseline="train step")
    emit(report, opts.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
