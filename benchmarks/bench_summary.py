"""Benchmark ``hookscope.summary`` against a plain forward and ``torchinfo.summary``.

Models (random weights, built from default configs, nothing downloaded): torchvision
ResNet-50 on a 1×3×224×224 input, and transformers GPT-2 (default 12-layer config,
``GPT2LMHeadModel``) on 1×128 token ids. Everything runs on the CPU in this one
process, interleaved round-robin (see ``_harness.py``).

Contenders:
    plain forward            ``model(x)`` under ``torch.no_grad()`` (what summary runs)
    hookscope.summary        ``hookscope.summary(model, x)``: the trace of one forward
    hookscope.summary+render the same, plus rendering the table to text
    torchinfo.summary        ``torchinfo.summary(model, input_data=x, verbose=0)``

Target (issue 2): ``hookscope.summary`` ≤ 1.10× a plain forward on ResNet-50.

Run: ``python benchmarks/bench_summary.py [--rounds 21] [--models resnet50 gpt2]``.
"""

from __future__ import annotations

import sys
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
    run_interleaved,
)

import hookscope

MODELS = ("resnet50", "gpt2")
SUMMARY_TARGET = {"resnet50": 1.10}


def contenders(name: str, model: torch.nn.Module, args: tuple[Any, ...]) -> list[Contender]:
    def plain() -> Any:
        with torch.no_grad():
            return model(*args)

    out = [
        Contender("plain forward", plain),
        Contender("hookscope.summary", lambda: hookscope.summary(model, *args),
                  SUMMARY_TARGET.get(name)),
        Contender("hookscope.summary+render",
                  lambda: hookscope.summary(model, *args).to_text()),
    ]
    try:
        import torchinfo

        out.append(Contender("torchinfo.summary", lambda: torchinfo.summary(
            model, input_data=list(args), verbose=0)))
    except ImportError:
        pass
    return out


def main(argv: Sequence[str] | None = None) -> int:
    # NB: 21 rounds: a ResNet-50 forward at batch 1 is 46 ms, and the target's margin
    # (10 %) is 4.6 ms, so a round disturbed by the machine moves a short median
    opts = parse_args(__doc__.splitlines()[0], MODELS, argv, rounds=21)
    if opts.threads:
        torch.set_num_threads(opts.threads)
    results: list[Result] = []
    for name in opts.models:
        model, args = build_model(name, image_batch=1)
        results += run_interleaved(name, contenders(name, model, args), rounds=opts.rounds,
                                   warmup=opts.warmup, progress=progress_printer(opts.quiet))
    report = Report("hookscope.summary vs plain forward and torchinfo", environment(),
                    opts.rounds, opts.warmup, results)
    emit(report, opts.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
