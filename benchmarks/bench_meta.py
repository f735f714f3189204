"""Benchmark analysing a Llama 7B / 70B configuration on the meta device.

Nothing is allocated: the model (transformers ``LlamaForCausalLM``, random init, eval
mode, vocabulary 32000, 4096 positions) is built under ``with torch.device("meta")``
and run on 1×128 int64 token ids on meta, so every op computes shapes only and what is
timed is Python and dispatch work: per module call and per aten op. Configurations
(see ``LLAMA_CONFIGS`` in ``_harness.py``): 70B is hidden 8192, 80 layers, 64 heads
(8 key/value heads), MLP 28672; 7B is hidden 4096, 32 layers, 32 heads, MLP 11008.
Interleaved round-robin in one process (see ``_harness.py``).

Contenders:
    meta forward     ``model(ids)`` under ``torch.no_grad()``: the baseline
    build on meta    building the model under ``torch.device("meta")``
    trace: ops       ``hookscope.trace(model, ids, ops=True, time=False, stats=False,
                     memory=False)`` (shapes and the ops probe with FLOPs; for a model
                     on meta, hookscope analyses a meta copy, which is included)
    FlopCounterMode  ``FlopCounterMode(display=False)`` around the same forward, under
                     ``torch.no_grad()``

Target (issue 8): ``trace: ops`` no slower than ``FlopCounterMode`` (≤ 1.00× of it).

Run: ``python benchmarks/bench_meta.py [--rounds 5] [--models llama-70b llama-7b]``;
the 70B configuration takes a few seconds a round.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

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

MODELS = ("llama-70b", "llama-7b")


def contenders(name: str, model: torch.nn.Module, args: tuple[Any, ...]) -> list[Contender]:
    def forward() -> Any:
        with torch.no_grad():
            return model(*args)

    def flop_counter() -> int:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(*args)
        return counter.get_total_flops()

    def ops_trace() -> Any:
        return hookscope.trace(model, *args, ops=True, time=False, stats=False, memory=False)

    return [
        Contender("meta forward", forward),
        Contender("build on meta", lambda: build_model(name)),
        Contender("trace: ops", ops_trace, 1.00, target_of="FlopCounterMode"),
        Contender("FlopCounterMode", flop_counter),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(__doc__.splitlines()[0], MODELS, argv, rounds=5, warmup=1)
    results = []
    for name in opts.models:
        model, args = build_model(name)
        results += run_interleaved(name, contenders(name, model, args),
                                   rounds=opts.rounds[name], warmup=opts.warmup,
                                   progress=progress_printer(opts.quiet))
        del model
    report = Report("Llama configurations on the meta device: build, ops trace, "
                    "FlopCounterMode", environment(), rounds_run(opts), opts.warmup, results,
                    baseline="meta forward")
    emit(report, opts.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
