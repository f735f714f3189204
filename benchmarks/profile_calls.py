"""Where hookscope's per-module-call cost goes: phase times and a cProfile listing.

Input for performance work on the engine, not a pass/fail benchmark. On
torchvision MobileNetV3-Large at batch 1 (random weights, eval, 1×3×224×224 on the
CPU; 255 module calls in a forward of about 10 ms, so per-call cost dominates), it
prints:

1. **Phases**, timed interleaved round-robin with ``_harness.run_interleaved`` (median
   wall time, overhead over the plain forward, and that overhead divided by the
   number of module calls, in µs per call): the plain forward; the forward with a no-op
   ``register_forward_hook`` on every module (torch's hook dispatch alone: the floor);
   ``hookscope.summary``; ``hookscope.trace`` with the time probe only; and a forward
   inside ``hookscope.Tracer(model, shapes=False)`` and ``Tracer(model, shapes=True)``,
   whose construction, ``__enter__``, forward and ``__exit__`` are also timed one by
   one with ``time.perf_counter_ns`` (medians over the same rounds). NB: ``Tracer``
   used directly is not exclusive (other code may run in its block), so it takes no
   leaf fast path: its forward costs more per call than ``summary``'s.
2. **cProfile** of ``--reps`` calls of ``hookscope.summary`` and of ``hookscope.trace``
   (time only): the top functions by own time (tottime), per profiled call; first over
   everything (torch's own module code included), then hookscope's functions alone.
   cProfile's own cost per Python call inflates small functions: read the listing for
   where the time goes, and the phases for how much.

Run: ``python benchmarks/profile_calls.py [--rounds 21] [--reps 20] [--top 15]
[--models mobilenet_v3_large] [--threads 1] [--json f]``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))

from _harness import (
    IMAGE_MODELS,
    Contender,
    build_model,
    environment,
    environment_line,
    format_seconds,
    parse_args,
    progress_printer,
    run_interleaved,
)

import hookscope

TRACER_PHASES = ("construct", "__enter__", "forward", "__exit__")
# a function's location as pstats keys it: (file, line, name)
FuncKey = tuple[str, int, str]


def _noop_hook(module: torch.nn.Module, args: Any, output: Any) -> None:
    return None


class PhaseClock:
    """A forward inside ``hookscope.Tracer(model, **options)``, each phase timed."""

    def __init__(self, model: torch.nn.Module, x: torch.Tensor, **options: bool) -> None:
        self.model, self.x, self.options = model, x, options
        self.ns: dict[str, list[int]] = {p: [] for p in TRACER_PHASES}

    def __call__(self) -> None:
        t0 = time.perf_counter_ns()
        tracer = hookscope.Tracer(self.model, **self.options)
        t1 = time.perf_counter_ns()
        tracer.__enter__()
        try:
            t2 = time.perf_counter_ns()
            with torch.no_grad():
                self.model(self.x)
            t3 = time.perf_counter_ns()
        finally:
            tracer.__exit__(None, None, None)
        t4 = time.perf_counter_ns()
        for phase, start, end in zip(TRACER_PHASES, (t0, t1, t2, t3), (t1, t2, t3, t4),
                                     strict=True):
            self.ns[phase].append(end - start)

    def medians(self) -> dict[str, float]:
        return {p: statistics.median(v) / 1e9 for p, v in self.ns.items() if v}


def phase_contenders(model: torch.nn.Module, x: torch.Tensor) -> list[Contender]:
    modules = list(model.modules())

    def plain() -> Any:
        with torch.no_grad():
            return model(x)

    def bare_hooks() -> Any:
        handles = [m.register_forward_hook(_noop_hook) for m in modules]
        try:
            return plain()
        finally:
            for h in handles:
                h.remove()

    return [
        Contender("plain forward", plain),
        Contender("bare forward hooks", bare_hooks),
        Contender("hookscope.summary", lambda: hookscope.summary(model, x)),
        Contender("trace: time", lambda: trace_time(model, x)),
        Contender("Tracer(shapes=False)", PhaseClock(model, x, shapes=False)),
        Contender("Tracer(shapes=True)", PhaseClock(model, x, shapes=True)),
    ]


def trace_time(model: torch.nn.Module, x: torch.Tensor) -> Any:
    return hookscope.trace(model, x, shapes=False, time=True, stats=False, memory=False)


def print_phases(name: str, contenders: list[Contender], opts: Any, calls: int) -> dict:
    results = run_interleaved(name, contenders, rounds=opts.rounds[name], warmup=opts.warmup,
                              progress=progress_printer(opts.quiet))
    print("\r\033[K", end="", file=sys.stderr)
    plain = results[0].median
    print(f"### {name}: phases ({opts.rounds[name]} interleaved rounds, {calls} module "
          "calls per forward)\n")
    print("| contender | median | IQR | × plain forward | overhead | µs per call |")
    print("|---|---:|---:|---:|---:|---:|")
    out: dict[str, Any] = {}
    for r in results:
        over = r.median - plain
        print(f"| {r.name} | {format_seconds(r.median)} | {format_seconds(r.iqr)} "
              f"| {r.ratio:.3f}× | {format_seconds(over)} | {over / calls * 1e6:.1f} |")
        out[r.name] = {"median": r.median, "iqr": r.iqr, "ratio": r.ratio,
                       "overhead_us_per_call": over / calls * 1e6}
    for c in contenders:
        if isinstance(c.fn, PhaseClock):
            phases = c.fn.medians()
            shown = ", ".join(f"{p} {format_seconds(s)}" for p, s in phases.items())
            print(f"\n{c.name} phases (medians): {shown}")
            out[c.name]["phases"] = phases
    print()
    return out


def profile(fn: Callable[[], Any], reps: int) -> pstats.Stats:
    """cProfile ``reps`` calls of ``fn``, with the GC off during each, as the phases are
    timed: a collection would be charged to whichever function made the object that
    triggered it."""
    fn()  # warm: first-call imports and caches are not what is asked about
    profiler = cProfile.Profile()
    for _ in range(reps):
        gc.collect()
        gc.disable()
        try:
            profiler.enable()
            fn()
            profiler.disable()
        finally:
            gc.enable()
    return pstats.Stats(profiler)


def _where(key: FuncKey) -> str:
    file, line, func = key
    if file == "~":  # a builtin: pstats spells it "<built-in method ...>" in func
        return func
    parts = Path(file).parts
    for anchor in ("hookscope", "torch", "torchvision"):
        if anchor in parts:
            file = "/".join(parts[len(parts) - parts[::-1].index(anchor) - 1:])
            break
    return f"{file}:{line}({func})"


def top_functions(stats: pstats.Stats, reps: int, top: int,
                  keep: Callable[[FuncKey], bool] = lambda key: True) -> list[dict[str, Any]]:
    rows = []
    table: dict[FuncKey, tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    for key, (_, ncalls, tottime, cumtime, _) in table.items():
        if keep(key):
            rows.append({"function": _where(key), "calls": ncalls / reps,
                         "tottime": tottime / reps, "cumtime": cumtime / reps})
    rows.sort(key=lambda r: r["tottime"], reverse=True)
    return rows[:top]


def print_top(title: str, rows: list[dict[str, Any]], total: float) -> None:
    print(f"{title}\n")
    print("| tottime | % | calls | µs per call | cumtime | function |")
    print("|---:|---:|---:|---:|---:|---|")
    for r in rows:
        per = r["tottime"] / r["calls"] * 1e6 if r["calls"] else float("nan")
        print(f"| {format_seconds(r['tottime'])} | {r['tottime'] / total * 100:.1f} "
              f"| {r['calls']:.0f} | {per:.2f} | {format_seconds(r['cumtime'])} "
              f"| `{r['function']}` |")
    print()


def _is_hookscope(key: FuncKey) -> bool:
    return "hookscope" in Path(key[0]).parts


def _is_torch_hook_machinery(key: FuncKey) -> bool:
    """torch's module call path (``_call_impl`` and its hooked slow path ``inner``,
    ``named_modules`` ...) and ``RemovableHandle``: what any hook-based tool pays."""
    return key[0].endswith(("torch/nn/modules/module.py", "torch/utils/hooks.py"))


def own_time(stats: pstats.Stats, reps: int, keep: Callable[[FuncKey], bool]) -> float:
    table: dict[FuncKey, tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    return sum(v[2] for k, v in table.items() if keep(k)) / reps


def print_profiles(name: str, model: torch.nn.Module, x: torch.Tensor, opts: Any) -> dict:
    out: dict[str, Any] = {}
    for label, fn in (("hookscope.summary", lambda: hookscope.summary(model, x)),
                      ("trace: time", lambda: trace_time(model, x))):
        stats = profile(fn, opts.reps)
        total = stats.total_tt / opts.reps  # type: ignore[attr-defined]
        print(f"### {name}: cProfile of {label} ({opts.reps} calls; {format_seconds(total)} "
              "per call under the profiler; times below are per call)\n")
        every = top_functions(stats, opts.reps, opts.top)
        own = top_functions(stats, opts.reps, opts.top, _is_hookscope)
        shares = {"hookscope": own_time(stats, opts.reps, _is_hookscope),
                  "torch module call path and hook handles":
                  own_time(stats, opts.reps, _is_torch_hook_machinery)}
        print("Own time per call: " + "; ".join(
            f"{k} {format_seconds(v)} ({v / total * 100:.1f} %)" for k, v in shares.items())
            + ".\n")
        print_top("Top functions by tottime, everything:", every, total)
        print_top("Top hookscope functions by tottime:", own, total)
        out[label] = {"total": total, "own_time": shares, "top": every, "top_hookscope": own}
    return out


def _profile_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reps", type=int, default=20,
                        help="calls profiled per function (default 20)")
    parser.add_argument("--top", type=int, default=15,
                        help="functions listed per profile (default 15)")


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(__doc__.splitlines()[0], IMAGE_MODELS, argv, rounds=21,
                      default_models=["mobilenet_v3_large"], more=_profile_options)
    print(f"## hookscope per-call cost\n\n{environment_line(environment())}\n")
    report: dict[str, Any] = {"environment": environment()}
    for name in opts.models:
        model, (x,) = build_model(name)
        calls = len(trace_time(model, x))
        report[name] = {
            "calls": calls,
            "phases": print_phases(name, phase_contenders(model, x), opts, calls),
            "profiles": print_profiles(name, model, x, opts),
        }
    if opts.json is not None:
        opts.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
