"""Benchmark ``hookscope.summary`` against a plain forward and ``torchinfo.summary``.

Models (random weights, built from default configs, nothing downloaded): torchvision
ResNet-50 and MobileNetV3-Large on a 1×3×224×224 input, and transformers GPT-2 (default
12-layer config, ``GPT2LMHeadModel``) on 1×128 token ids. Everything runs on the CPU in
this one process, interleaved round-robin (see ``_harness.py``). MobileNetV3-Large is
the hard case for per-call cost: 255 module calls in a forward of about 10 ms.

Contenders:
    plain forward            ``model(x)`` under ``torch.no_grad()`` (what summary runs)
    bare forward hooks       a no-op ``register_forward_hook`` on every module, the same
                             forward, the hooks removed: torch's hook dispatch alone, the
                             floor of any hook-based tool
    hookscope.summary        ``hookscope.summary(model, x)``: the trace of one forward
    hookscope.summary+render the same, plus rendering the table to text
    torchinfo.summary        ``torchinfo.summary(model, input_data=x, verbose=0)``

Targets: ``hookscope.summary`` ≤ 1.05× a plain forward on ResNet-50 (issue 8; 1.10×
in issue 2) and ≤ 1.15× on MobileNetV3-Large (issue 8).

Run: ``python benchmarks/bench_summary.py [--rounds N] [--models resnet50 ...]``
(default rounds: 21 for ResNet-50 and GPT-2, 41 for MobileNetV3-Large).
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
    rounds_run,
    run_interleaved,
)

import hookscope

MODELS = ("resnet50", "mobilenet_v3_large", "gpt2")
SUMMARY_TARGET = {"resnet50": 1.05, "mobilenet_v3_large": 1.15}
# NB: 21 rounds: a ResNet-50 forward at batch 1 is 46 ms, and the target's margin
# (5 %) is 2.3 ms, so a round disturbed by the machine moves a short median; a
# MobileNetV3-Large forward is about 10 ms, so a disturbance is a larger share of it
ROUNDS = {"resnet50": 21, "mobilenet_v3_large": 41, "gpt2": 21}


def _noop_hook(module: torch.nn.Module, args: Any, output: Any) -> None:
    return None


def contenders(name: str, model: torch.nn.Module, args: tuple[Any, ...]) -> list[Contender]:
    def plain() -> Any:
        with torch.no_grad():
            return model(*args)

    modules = list(model.modules())

    def bare_hooks() -> Any:
        handles = [m.register_forward_hook(_noop_hook) for m in modules]
        try:
            return plain()
        finally:
            for h in handles:
                h.remove()

    out = [
        Contender("plain forward", plain),
        Contender("bare forward hooks", bare_hooks),
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
    opts = parse_args(__doc__.splitlines()[0], MODELS, argv, rounds=ROUNDS)
    results: list[Result] = []
    for name in opts.models:
        model, args = build_model(name, image_batch=1)
        results += run_interleaved(name, contenders(name, model, args),
                                   rounds=opts.rounds[name], warmup=opts.warmup,
                                   progress=progress_printer(opts.quiet))
    report = Report("hookscope.summary vs plain forward, bare hooks and torchinfo",
                    environment(), rounds_run(opts), opts.warmup, results)
    emit(report, opts.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
