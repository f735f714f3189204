"""Benchmark ``hookscope.find_anomaly`` against a plain run and ``autograd.detect_anomaly``.

Models (random weights, nothing downloaded): torchvision ResNet-50 on 1×3×224×224 and
transformers GPT-2 (default 12-layer ``GPT2LMHeadModel``) on 1×128 token ids, on the
CPU, interleaved round-robin in one process (``_harness.py``). Both are clean, so
every contender runs the whole model: the cost of looking, not of finding.

Forward group (baseline: plain forward under ``torch.no_grad()``):
    find_anomaly             ``hookscope.find_anomaly(model, x)``: every module output
                             and every aten op output checked (target ≤ 1.2×, issue 10)
    find_anomaly ops=False   module outputs only (no dispatch mode, no op named)

Forward+backward group (baseline: a forward with autograd, then
``torch.autograd.grad`` of the sum of the floating outputs w.r.t. the parameters,
what ``backward=True`` runs):
    find_anomaly backward    ``hookscope.find_anomaly(model, x, backward=True)``
    autograd.detect_anomaly  the same forward+backward inside
                             ``torch.autograd.detect_anomaly()`` (torch's own NaN check:
                             backward only, with a traceback kept per node)

Run: ``python benchmarks/bench_anomaly.py --threads 1 [--rounds N] [--models resnet50 ...]``.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))

from _harness import (
    Contender,
    Report,
    Result,
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
ROUNDS = {"resnet50": 11, "gpt2": 11}
TARGET = 1.2


def _logits(out: Any) -> list[torch.Tensor]:
    tensors = [out] if isinstance(out, torch.Tensor) else [out["logits"]]
    return [t for t in tensors if t.requires_grad]


def forward_group(model: torch.nn.Module, args: tuple[Any, ...]) -> list[Contender]:
    def plain() -> Any:
        with torch.no_grad():
            return model(*args)

    def check(**options: Any) -> Any:
        report = hookscope.find_anomaly(model, *args, **options)
        assert report is None, report
        return report

    return [
        Contender("plain forward", plain),
        Contender("find_anomaly", check, TARGET),
        Contender("find_anomaly ops=False", lambda: check(ops=False)),
    ]


def backward_group(model: torch.nn.Module, args: tuple[Any, ...]) -> list[Contender]:
    params = [p for p in model.parameters() if p.requires_grad]

    def plain() -> Any:
        with torch.enable_grad():
            loss = torch.stack([t.sum() for t in _logits(model(*args))]).sum()
            return torch.autograd.grad(loss, params, allow_unused=True)

    def torch_detect() -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Anomaly Detection has been enabled"
            with torch.autograd.detect_anomaly():
                return plain()

    def check() -> Any:
        report = hookscope.find_anomaly(model, *args, backward=True)
        assert report is None, report
        return report

    return [
        Contender("plain forward+backward", plain),
        Contender("find_anomaly backward=True", check),
        Contender("autograd.detect_anomaly", torch_detect),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(__doc__.splitlines()[0], MODELS, argv, rounds=ROUNDS)
    results: list[Result] = []
    for name in opts.models:
        model, args = build_model(name, image_batch=1)
        for label, group in ((name, forward_group), (f"{name} fwd+bwd", backward_group)):
            results += run_interleaved(label, group(model, args), rounds=opts.rounds[name],
                                       warmup=opts.warmup,
                                       progress=progress_printer(opts.quiet))
    report = Report("hookscope.find_anomaly vs a plain run and torch.autograd.detect_anomaly",
                    environment(), rounds_run(opts), opts.warmup, results,
                    baseline="the group's plain run")
    emit(report, opts.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
