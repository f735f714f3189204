"""Benchmark activation capture: every conv output of ResNet-50 (batch 8) kept in memory
and streamed to disk, against a plain forward, TorchLens saving the same layers, and
the disk's own write speed.

Contenders (one unit of work = one forward, under ``torch.no_grad()``):
    plain forward          ``model(x)``
    capture to memory      ``hookscope.capture(model, x, select=<every Conv2d>)``
    capture to disk        the same with ``save_to=DIR`` (safetensors shards + index)
    TorchLens              ``torchlens.trace`` saving the same modules' outputs (a
                           ``torchlens.module`` selector each), when installed

After the timed rounds it reports the capture's size, the disk write throughput of
``capture to disk`` (bytes / (its time - the in-memory capture's time)) and ``dd``'s
throughput writing the same number of bytes to the same directory (``conv=fsync``
off: both write to the page cache).

Run: ``python benchmarks/bench_capture.py --threads 1 [--rounds 5]``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
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

MODELS = ("resnet50",)
BATCH = 8


def _torchlens(model: torch.nn.Module, x: torch.Tensor, layers: list[str]) -> Any:
    """``torchlens.trace`` saving the outputs of the modules at ``layers`` (one module
    selector each, or-ed), its functions unwrapped after each call; ``None`` when
    TorchLens is not installed or its API differs."""
    try:
        import functools
        import operator

        import torchlens
        from torchlens.options import CaptureOptions
    except ImportError:
        return None
    selector = functools.reduce(operator.or_, [torchlens.module(p) for p in layers])

    def run() -> Any:
        capture = CaptureOptions(unwrap_when_done=True)
        return torchlens.trace(model, x, save=selector, capture=capture)

    try:
        run()
    except Exception as e:  # an API this script does not know: say so, skip it
        print(f"TorchLens skipped: {type(e).__name__}: {e}", file=sys.stderr)
        return None
    return run


def contenders(model: torch.nn.Module, x: torch.Tensor, out_dir: Path) -> list[Contender]:
    convs = [p for p, m in model.named_modules() if isinstance(m, torch.nn.Conv2d)]

    def plain() -> Any:
        with torch.no_grad():
            return model(x)

    def to_memory() -> Any:
        with torch.no_grad():
            return hookscope.capture(model, x, select=convs)

    def to_disk() -> Any:
        shutil.rmtree(out_dir, ignore_errors=True)
        with torch.no_grad():
            return hookscope.capture(model, x, select=convs, save_to=out_dir)

    found = [Contender("plain forward", plain), Contender("capture to memory", to_memory),
             Contender("capture to disk", to_disk)]
    lens = _torchlens(model, x, convs)
    if lens is not None:
        found.append(Contender("TorchLens", lens))
    return found


def _dd_throughput(directory: Path, nbytes: int) -> float:
    """Bytes per second ``dd`` writes into ``directory`` (one file of ``nbytes``)."""
    target = directory / "dd.bin"
    count = max(1, nbytes // 2**20)
    start = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={count}"],
                   check=True, capture_output=True)
    elapsed = time.perf_counter() - start
    target.unlink()
    return count * 2**20 / elapsed


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(__doc__.splitlines()[0], MODELS, argv, rounds=5)
    model, (x,) = build_model("resnet50", image_batch=BATCH)
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = Path(tmp) / "acts"
        results = run_interleaved("resnet50", contenders(model, x, out_dir),
                                  rounds=opts.rounds["resnet50"], warmup=opts.warmup,
                                  progress=progress_printer(opts.quiet))
        size = sum(f.stat().st_size for f in out_dir.glob("*.safetensors"))
        by_name = {r.name: r.median for r in results}
        extra = by_name["capture to disk"] - by_name["capture to memory"]
        dd = _dd_throughput(Path(tmp), size)
    report = Report("activation capture of every conv output, memory and disk",
                    environment(), rounds_run(opts), opts.warmup, results,
                    baseline="plain forward")
    emit(report, opts.json)
    mib = size / 2**20
    disk = f"{mib / extra:.0f} MiB/s" if extra > 0 else "n/a (no extra time measured)"
    print(f"\ncapture size: {mib:.0f} MiB; capture-to-disk write throughput: {disk}; "
          f"dd: {dd / 2**20:.0f} MiB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
