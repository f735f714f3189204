"""Interleaved timing of several contenders in one process, for the benchmark scripts.

Every contender is a zero-argument callable doing one complete unit of work (one plain
forward, one ``hookscope.summary`` call, ...). After ``warmup`` untimed rounds, each of
``rounds`` rounds times every contender once, in an order rotated by one each round, so
slow drifts of the machine (another process, thermal state) hit all contenders alike
and no contender always runs right after the same other one. The garbage collector is
off while a call is timed and runs between calls.

Reported per contender: the median wall time, the interquartile range, and the ratio
to the baseline (the first contender, normally the plain forward) as the median of the
per-round ratios: each round's time divided by the baseline's time in the same round.
Paired ratios are much steadier than a ratio of medians on a busy machine. The same
ratio of process CPU time (``time.process_time``: every thread of this process, not
other processes) is reported beside it; on a machine shared with other work it is the
steadier of the two.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Contender:
    """One thing to time. ``fn`` does one complete unit of work per call."""

    name: str
    fn: Callable[[], Any]
    target: float | None = None  # the largest acceptable ratio to the baseline, if any


@dataclass
class Result:
    model: str
    name: str
    times: list[float]
    ratios: list[float]
    target: float | None = None
    cpu_ratios: list[float] = field(default_factory=list)
    skipped: str | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.times) if self.times else float("nan")

    @property
    def iqr(self) -> float:
        if len(self.times) < 4:
            return float("nan")
        q = statistics.quantiles(self.times, n=4)
        return q[2] - q[0]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios) if self.ratios else float("nan")

    @property
    def cpu_ratio(self) -> float:
        return statistics.median(self.cpu_ratios) if self.cpu_ratios else float("nan")

    @property
    def meets_target(self) -> bool | None:
        return None if self.target is None or not self.ratios else self.ratio <= self.target


@dataclass
class Report:
    title: str
    environment: dict[str, str]
    rounds: int
    warmup: int
    results: list[Result] = field(default_factory=list)


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one call, with the GC off."""
    gc.collect()
    gc.disable()
    try:
        cpu, start = time.process_time(), time.perf_counter()
        fn()
        return time.perf_counter() - start, time.process_time() - cpu
    finally:
        gc.enable()


def run_interleaved(
    model: str, contenders: Sequence[Contender], *, rounds: int, warmup: int,
    progress: Callable[[str], None] | None = None,
) -> list[Result]:
    """Time ``contenders`` round-robin; the first one is the baseline for the ratios."""
    if not contenders:
        return []
    for w in range(warmup):
        for c in contenders:
            if progress:
                progress(f"{model}: warm-up {w + 1}/{warmup}: {c.name}")
            c.fn()
    times: dict[str, list[float]] = {c.name: [] for c in contenders}
    cpu: dict[str, list[float]] = {c.name: [] for c in contenders}
    n = len(contenders)
    for r in range(rounds):
        order = [contenders[(i + r) % n] for i in range(n)]
        for c in order:
            if progress:
                progress(f"{model}: round {r + 1}/{rounds}: {c.name}")
            wall, cpu_s = timed(c.fn)
            times[c.name].append(wall)
            cpu[c.name].append(cpu_s)
    base, cpu_base = times[contenders[0].name], cpu[contenders[0].name]
    return [
        Result(model, c.name, times[c.name], _ratios(times[c.name], base), c.target,
               _ratios(cpu[c.name], cpu_base))
        for c in contenders
    ]


def _ratios(values: list[float], base: list[float]) -> list[float]:
    return [v / b if b > 0 else float("nan") for v, b in zip(values, base, strict=True)]


def environment() -> dict[str, str]:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "torch_threads": str(torch.get_num_threads()),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "date": time.strftime("%Y-%m-%d"),
    }


def format_seconds(s: float) -> str:
    if s != s:  # nan
        return "–"
    if s >= 1:
        return f"{s:.2f} s"
    return f"{s * 1e3:.1f} ms"


def markdown_table(results: Sequence[Result]) -> str:
    lines = [
        "| model | contender | median | IQR | × plain forward | × (CPU time) | target |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in results:
        if r.skipped:
            lines.append(f"| {r.model} | {r.name} | – | – | – | – | skipped: {r.skipped} |")
            continue
        target = ""
        if r.target is not None:
            target = f"≤ {r.target:.2f}× {'met' if r.meets_target else '**missed**'}"
        lines.append(
            f"| {r.model} | {r.name} | {format_seconds(r.median)} | {format_seconds(r.iqr)} "
            f"| {r.ratio:.3f}× | {r.cpu_ratio:.3f}× | {target} |"
        )
    return "\n".join(lines)


def environment_line(env: dict[str, str]) -> str:
    return (f"{env['cpu']}, {env['cores']} cores ({env['torch_threads']} torch threads), "
            f"Python {env['python']}, torch {env['torch']}, {env['date']}")


def parse_args(description: str, models: Sequence[str], argv: Sequence[str] | None = None,
               *, rounds: int = 7) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=rounds,
                        help=f"timed rounds (default {rounds})")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds (default 2)")
    parser.add_argument("--models", nargs="+", default=list(models), choices=list(models))
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return parser.parse_args(argv)


def progress_printer(quiet: bool) -> Callable[[str], None] | None:
    if quiet:
        return None

    def show(message: str) -> None:
        print(f"\r\033[K{message}", end="", file=sys.stderr, flush=True)

    return show


def emit(report: Report, json_path: Path | None) -> None:
    print("\r\033[K", end="", file=sys.stderr)
    print(f"## {report.title}\n")
    print(f"{environment_line(report.environment)}; {report.rounds} interleaved rounds "
          f"after {report.warmup} warm-up rounds; ratios are medians of per-round ratios.\n")
    print(markdown_table(report.results))
    if json_path is not None:
        data = asdict(report)
        for r, d in zip(report.results, data["results"], strict=True):
            d.update(median=r.median, iqr=r.iqr, ratio=r.ratio, cpu_ratio=r.cpu_ratio)
        json_path.write_text(json.dumps(data, indent=2))


def build_model(name: str, *, image_batch: int) -> tuple[Any, tuple[Any, ...]]:
    """A benchmark model with random weights (nothing downloaded) and its inputs:
    ``resnet50`` on ``image_batch`` 3x224x224 images, ``gpt2`` (the default 12-layer
    ``GPT2LMHeadModel``) on 1x128 token ids."""
    import torch

    torch.manual_seed(0)
    if name == "resnet50":
        import torchvision

        model = torchvision.models.resnet50(weights=None).eval()
        return model, (torch.randn(image_batch, 3, 224, 224),)
    if name == "gpt2":
        import transformers

        config = transformers.GPT2Config()
        model = transformers.GPT2LMHeadModel(config).eval()
        return model, (torch.randint(0, config.vocab_size, (1, 128)),)
    raise ValueError(name)
