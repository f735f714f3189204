"""Benchmark rendering alone: the time to turn a finished trace into text, per 100 rows.

The summary and the trace table of ResNet-50 (batch 1; 183 calls, 76 rows folded) and
GPT-2 (12 blocks), each as plain text (what a pipe, a file and ``print()`` get) folded
and unfolded, timed with ``time.perf_counter`` over ``--rounds`` renders after the trace
was recorded once. Target (issue #13): at most 5 ms per 100 rows.

Run: ``python benchmarks/bench_render.py [--rounds 21]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import build_model

import hookscope
from hookscope.render.trace_table import render_trace

TARGET_MS_PER_100_ROWS = 5.0


def _median_ms(fn: Callable[[], str], rounds: int) -> tuple[float, int]:
    times, text = [], ""
    for _ in range(rounds):
        start = time.perf_counter()
        text = fn()
        times.append(time.perf_counter() - start)
    rows = sum(1 for line in text.splitlines() if line.strip())
    return statistics.median(times) * 1e3, rows


def _cases(name: str, rounds: int) -> list[tuple[str, float, int]]:
    model, args = build_model(name)
    summary = hookscope.summary(model, *args)
    unfolded = hookscope.Summary(summary.trace, fold=False)
    trace = hookscope.trace(model, *args)
    cases: dict[str, Callable[[], str]] = {
        "summary, folded": summary.to_text,
        "summary, every row": unfolded.to_text,
        "trace table, folded": lambda: render_trace(trace),
    }
    return [(label, *_median_ms(fn, rounds)) for label, fn in cases.items()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--models", nargs="+", default=["resnet50", "gpt2"])
    opts = parser.parse_args(argv)
    print("| model | table | rows | median | per 100 rows | target |")
    print("|---|---|---:|---:|---:|---|")
    for name in opts.models:
        for label, ms, rows in _cases(name, opts.rounds):
            per = 100 * ms / max(rows, 1)
            verdict = "met" if per <= TARGET_MS_PER_100_ROWS else "**missed**"
            print(f"| {name} | {label} | {rows} | {ms:.1f} ms | {per:.2f} ms | "
                  f"≤ {TARGET_MS_PER_100_ROWS:.0f} ms {verdict} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
