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

A target is a largest acceptable ratio, to the baseline or, with ``target_of``, to
another contender of the same run (paired per round the same way): "ops+FLOPs no slower
than ``FlopCounterMode``" is ``target=1.0, target_of="FlopCounterMode"``.
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Contender:
    """One thing to time. ``fn`` does one complete unit of work per call."""

    name: str
    fn: Callable[[], Any]
    target: float | None = None  # the largest acceptable ratio, if any
    target_of: str | None = None  # the contender that ratio is to; None: the baseline


@dataclass
class Result:
    model: str
    name: str
    times: list[float]
    ratios: list[float]
    target: float | None = None
    cpu_ratios: list[float] = field(default_factory=list)
    skipped: str | None = None
    target_of: str | None = None
    target_ratios: list[float] = field(default_factory=list)  # to target_of, per round

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
    def target_ratio(self) -> float:
        """The median per-round ratio the target is checked against."""
        if self.target_of is None:
            return self.ratio
        return statistics.median(self.target_ratios) if self.target_ratios else float("nan")

    @property
    def meets_target(self) -> bool | None:
        if self.target is None or not self.ratios:
            return None
        return self.target_ratio <= self.target


@dataclass
class Report:
    title: str
    environment: dict[str, str]
    rounds: int | dict[str, int]  # per model where they differ
    warmup: int
    results: list[Result] = field(default_factory=list)
    baseline: str = "plain forward"  # what the ratios are to, for the table's header


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
               _ratios(cpu[c.name], cpu_base), target_of=c.target_of,
               target_ratios=_ratios(times[c.name], times[c.target_of]) if c.target_of else [])
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


def markdown_table(results: Sequence[Result], baseline: str = "plain forward") -> str:
    lines = [
        f"| model | contender | median | IQR | × {baseline} | × (CPU time) | target |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in results:
        if r.skipped:
            lines.append(f"| {r.model} | {r.name} | – | – | – | – | skipped: {r.skipped} |")
            continue
        target = ""
        if r.target is not None:
            target = f"≤ {r.target:.2f}× {'met' if r.meets_target else '**missed**'}"
        if r.target_of is not None:
            target = f"{r.target_ratio:.3f}× {r.target_of}: {target}"
        lines.append(
            f"| {r.model} | {r.name} | {format_seconds(r.median)} | {format_seconds(r.iqr)} "
            f"| {r.ratio:.3f}× | {r.cpu_ratio:.3f}× | {target} |"
        )
    return "\n".join(lines)


def environment_line(env: dict[str, str]) -> str:
    return (f"{env['cpu']}, {env['cores']} cores ({env['torch_threads']} torch threads), "
            f"Python {env['python']}, torch {env['torch']}, {env['date']}")


def parse_args(
    description: str, models: Sequence[str], argv: Sequence[str] | None = None, *,
    rounds: int | Mapping[str, int] = 7, warmup: int = 2,
    default_models: Sequence[str] | None = None,
    more: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.Namespace:
    """The options every script takes. ``rounds`` is the default number of timed
    rounds, for all models or per model (a short forward needs more rounds for the same
    steadiness); ``--rounds`` sets it for all. ``opts.rounds`` is then a dict, model ->
    rounds, over every model in ``models``. ``--models`` chooses among ``models``
    (default: ``default_models``, else all); ``more`` adds a script's own options."""
    per_model = rounds if isinstance(rounds, Mapping) else dict.fromkeys(models, rounds)
    shown = ", ".join(f"{m} {n}" for m, n in per_model.items())
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"timed rounds (default: {shown})")
    parser.add_argument("--warmup", type=int, default=warmup,
                        help=f"untimed rounds (default {warmup})")
    parser.add_argument("--models", nargs="+", default=list(default_models or models),
                        choices=list(models))
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    if more is not None:
        more(parser)
    opts = parser.parse_args(argv)
    opts.rounds = {m: opts.rounds or per_model[m] for m in models}
    if opts.threads:
        import torch

        torch.set_num_threads(opts.threads)
    return opts


def rounds_run(opts: argparse.Namespace) -> int | dict[str, int]:
    """The rounds of the models run, for the :class:`Report`: one number if they agree."""
    run = {m: opts.rounds[m] for m in opts.models}
    return next(iter(run.values())) if len(set(run.values())) == 1 else run


def progress_printer(quiet: bool) -> Callable[[str], None] | None:
    if quiet:
        return None

    def show(message: str) -> None:
        print(f"\r\033[K{message}", end="", file=sys.stderr, flush=True)

    return show


def emit(report: Report, json_path: Path | None) -> None:
    print("\r\033[K", end="", file=sys.stderr)
    print(f"## {report.title}\n")
    rounds = report.rounds
    if isinstance(rounds, dict):
        rounds = "(" + ", ".join(f"{m}: {n}" for m, n in rounds.items()) + ")"
    print(f"{environment_line(report.environment)}; {rounds} interleaved rounds "
          f"after {report.warmup} warm-up rounds; ratios are medians of per-round ratios.\n")
    print(markdown_table(report.results, report.baseline))
    if json_path is not None:
        data = asdict(report)
        for r, d in zip(report.results, data["results"], strict=True):
            d.update(median=r.median, iqr=r.iqr, ratio=r.ratio, cpu_ratio=r.cpu_ratio,
                     target_ratio=r.target_ratio, meets_target=r.meets_target)
        json_path.write_text(json.dumps(data, indent=2))


IMAGE_MODELS = ("resnet50", "mobilenet_v3_large")

# NB: the Llama configurations are built on the meta device only: their weights would
# take 28 GB (7B) and 280 GB (70B) of real memory in float32
LLAMA_CONFIGS: dict[str, dict[str, int]] = {
    "llama-7b": {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                 "num_attention_heads": 32, "num_key_value_heads": 32},
    "llama-70b": {"hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
                  "num_attention_heads": 64, "num_key_value_heads": 8},
}


def build_model(name: str, *, image_batch: int = 1) -> tuple[Any, tuple[Any, ...]]:
    """A benchmark model with random weights (nothing downloaded), in eval mode, and its
    inputs: torchvision ``resnet50`` or ``mobilenet_v3_large`` on ``image_batch``
    3x224x224 images; ``gpt2`` (the default 12-layer ``GPT2LMHeadModel``) on 1x128
    token ids; ``llama-7b`` or ``llama-70b`` (``LlamaForCausalLM``, vocabulary 32000,
    4096 positions) built on the meta device, with 1x128 int64 token ids on meta."""
    import torch

    torch.manual_seed(0)
    if name in IMAGE_MODELS:
        import torchvision

        model = getattr(torchvision.models, name)(weights=None).eval()
        return model, (torch.randn(image_batch, 3, 224, 224),)
    if name == "gpt2":
        import transformers

        config = transformers.GPT2Config()
        model = transformers.GPT2LMHeadModel(config).eval()
        return model, (torch.randint(0, config.vocab_size, (1, 128)),)
    if name in LLAMA_CONFIGS:
        import transformers

        config = transformers.AutoConfig.for_model(
            "llama", vocab_size=32000, max_position_embeddings=4096, **LLAMA_CONFIGS[name])
        with torch.device("meta"):
            model = transformers.LlamaForCausalLM(config).eval()
            return model, (torch.zeros(1, 128, dtype=torch.int64),)
    raise ValueError(f"unknown benchmark model {name!r}")
