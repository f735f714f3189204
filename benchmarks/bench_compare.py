"""Benchmark hookscope.compare: two ResNet-50s (batch 8) compared call by call, against
the two plain forwards it replaces, and the memory it adds.

Contenders (one unit of work, under ``torch.no_grad()``):
    two plain forwards     ``model_a(x); model_b(x)``
    compare                ``hookscope.compare(model_a, model_b, x)``: both runs
                           captured, every matched call measured, every call of side B
                           run again on side A's inputs (the introduced error)

Target: compare costs at most 2.5x the two plain forwards.

After the timed rounds it reports the extra peak memory two ways: what the result
counts (``result.memory``: side A's call inputs and outputs and side B's outputs, kept
on the CPU) and what the process's peak resident set shows (Linux: the peak is reset
through ``/proc/self/clear_refs`` before each of the two, the two plain forwards and
one compare, and read from ``VmHWM``; the difference is compare's extra peak).

Run: ``python benchmarks/bench_compare.py --threads 1 [--rounds 3] [--batch 8]``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torchvision

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


def contenders(model_a: torch.nn.Module, model_b: torch.nn.Module,
               x: torch.Tensor) -> list[Contender]:
    def plain() -> Any:
        with torch.no_grad():
            return model_a(x), model_b(x)

    def compare() -> Any:
        return hookscope.compare(model_a, model_b, x)

    return [Contender("two plain forwards", plain), Contender("compare", compare, target=2.5)]


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def peak_rss_delta(fn: Callable[[], Any]) -> int | None:
    """Bytes the process's peak resident set rose above its size before ``fn`` (``None``
    where ``/proc`` cannot reset or read it)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    except OSError:
        return None
    before = _status_kib("VmRSS")
    fn()
    peak = _status_kib("VmHWM")
    return None if before is None or peak is None else (peak - before) * 1024


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(__doc__.splitlines()[0], MODELS, argv, rounds=3, warmup=1,
                      more=lambda p: p.add_argument("--batch", type=int, default=BATCH,
                                                    help=f"images per batch ({BATCH})"))
    model_a, (x,) = build_model("resnet50", image_batch=opts.batch)
    torch.manual_seed(1)  # side B: the same architecture, other random weights
    model_b = torchvision.models.resnet50(weights=None).eval()
    results = run_interleaved("resnet50", contenders(model_a, model_b, x),
                              rounds=opts.rounds["resnet50"], warmup=opts.warmup,
                              progress=progress_printer(opts.quiet))
    report = Report(f"hookscope.compare of two ResNet-50s (batch {opts.batch}) vs their "
                    "two plain forwards", environment(), rounds_run(opts), opts.warmup, results,
                    baseline="two plain forwards")
    emit(report, opts.json)
    plain_peak = peak_rss_delta(contenders(model_a, model_b, x)[0].fn)
    found: list[Any] = []
    compare_peak = peak_rss_delta(lambda: found.append(hookscope.compare(model_a, model_b, x)))
    memory = found[0].memory
    print(f"\ncounted by the result: extra peak {memory.extra_peak_bytes / 2**20:.0f} MiB "
          f"(values kept {memory.stored_bytes / 2**20:.0f} MiB, side B copy "
          f"{memory.copy_bytes / 2**20:.0f} MiB)")
    if plain_peak is not None and compare_peak is not None:
        print(f"measured (peak RSS rise): two plain forwards {plain_peak / 2**20:.0f} MiB, "
              f"compare {compare_peak / 2**20:.0f} MiB, extra "
              f"{(compare_peak - plain_peak) / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
