"""Count what one ``hookscope.summary`` costs beyond a plain forward, deterministically.

Wall-clock ratios on a shared 2-core machine swing by more than the effects this
project chases (see ``README.md``). This script counts instead: it runs itself
under valgrind's callgrind with a cache simulation (a 32 KiB first level and a 512 KiB
last level, like one core's L2 here), switches the measurement on and off from Python
around each contender (``CALLGRIND_ZERO_STATS``/``CALLGRIND_DUMP_STATS``, through a
10-line C helper compiled on the fly and loaded with ``ctypes``), and runs every
contender in **one process**, interleaved with plain forwards, so that they share the
memory layout (two processes differ by about 5 % in cache misses alone).

Contenders: a plain forward (the baseline), ``hookscope.summary`` and, optionally,
``--variant MODULE:FUNCTION``: a function of no arguments run before each of its
summaries (and undone by ``--undo MODULE:FUNCTION`` before the plain one), to compare
two versions of a code path in one run.

Reported per contender, beyond the plain forward: instructions, first-level and
last-level cache misses, and "cost units", instructions + 10 × first-level misses +
100 × last-level misses (a rough cycle model; compare code with it, not machines).

Needs valgrind (with ``valgrind/callgrind.h``) and a C compiler: Debian's
``valgrind`` and ``gcc``. Takes minutes (the forward runs about 50× slower):
``python benchmarks/count_summary.py [--model mobilenet_v3_large] [--size 96]
[--repeats 4]``.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

_HELPER = """#include <valgrind/callgrind.h>
void hs_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void hs_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
void hs_zero(void) { CALLGRIND_ZERO_STATS; }
void hs_dump(void) { CALLGRIND_DUMP_STATS; }
"""
_UNDER_VALGRIND = "HOOKSCOPE_COUNT_INSIDE"


def _function(spec: str | None) -> Any:
    if spec is None:
        return None
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def _inside(opts: argparse.Namespace) -> None:
    """Run under callgrind: the contenders, each measured alone, interleaved."""
    import torch
    import torchvision

    import hookscope

    torch.set_num_threads(1)
    torch.manual_seed(0)
    helper = ctypes.CDLL(os.environ[_UNDER_VALGRIND])
    model = getattr(torchvision.models, opts.model)().eval()
    x = torch.randn(1, 3, opts.size, opts.size)
    variant, undo = _function(opts.variant), _function(opts.undo)

    def plain() -> None:
        with torch.no_grad():
            model(x)

    contenders = [("summary", lambda: hookscope.summary(model, x))]
    if variant is not None:
        def summary_variant() -> None:
            variant()
            try:
                hookscope.summary(model, x)
            finally:
                if undo is not None:
                    undo()

        contenders.append(("summary, variant", summary_variant))
    contenders.append(("plain", plain))  # the baseline, measured like the others
    for _ in range(3):  # warm up: tables made, kernels chosen
        for _, run in contenders:
            plain()
            run()
    gc.collect()
    gc.disable()
    helper.hs_start()
    for _ in range(opts.repeats):
        for _, run in contenders:
            plain()  # the caches as a plain forward leaves them
            helper.hs_zero()
            run()
            helper.hs_dump()
    helper.hs_stop()


def _summary_line(path: Path) -> list[int]:
    for line in path.read_text().splitlines():
        if line.startswith("summary:"):
            return [int(v) for v in line.split()[1:]]
    raise ValueError(f"{path}: no summary line")


def _cost(v: list[float]) -> float:
    return v[0] + 10 * (v[3] + v[4] + v[5]) + 100 * (v[6] + v[7] + v[8])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mobilenet_v3_large")
    parser.add_argument("--size", type=int, default=96, help="image side (default 96)")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--variant", help="MODULE:FUNCTION run before each variant summary")
    parser.add_argument("--undo", help="MODULE:FUNCTION undoing --variant after it")
    opts = parser.parse_args(argv)
    if os.environ.get(_UNDER_VALGRIND):
        _inside(opts)
        return 0
    missing = [tool for tool in ("valgrind", "cc") if shutil.which(tool) is None]
    if missing:
        print(f"count_summary: needs {' and '.join(missing)} (Debian: apt install valgrind "
              "gcc)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "helper.c").write_text(_HELPER)
        built = subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(work / "helper.so"),
                                str(work / "helper.c")], capture_output=True, text=True)
        if built.returncode:
            print(f"count_summary: cannot build the callgrind helper (is valgrind's "
                  f"callgrind.h installed?): {built.stderr.strip()}", file=sys.stderr)
            return 2
        out = work / "callgrind.out"
        env = {**os.environ, _UNDER_VALGRIND: str(work / "helper.so"), "PYTHONHASHSEED": "0"}
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--cache-sim=yes",
               "--D1=32768,8,64", "--LL=524288,8,64", f"--callgrind-out-file={out}",
               sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])]
        run = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if run.returncode:
            print(run.stderr[-3000:], file=sys.stderr)
            return run.returncode
        dumps = sorted(work.glob("callgrind.out.*"), key=lambda p: int(p.suffix[1:]))
        names = ["summary"] + (["summary, variant"] if opts.variant else []) + ["plain"]
        per: dict[str, list[list[int]]] = {n: [] for n in names}
        for i, dump in enumerate(dumps):
            per[names[i % len(names)]].append(_summary_line(dump))
    mean = {n: [sum(col) / len(rows) for col in zip(*rows, strict=True)]
            for n, rows in per.items()}
    base = mean["plain"]
    print(f"{opts.model}, 1x3x{opts.size}x{opts.size}, {opts.repeats} repeats; beyond a "
          f"plain forward ({base[0] / 1e6:.1f} M instructions, {_cost(base) / 1e6:.1f} M "
          "cost units):")
    print("| contender | instructions | L1 misses | last-level misses | cost units |")
    print("|---|---:|---:|---:|---:|")
    for name in names[:-1]:
        d = [a - b for a, b in zip(mean[name], base, strict=True)]
        print(f"| {name} | {d[0] / 1e6:.2f} M | {(d[3] + d[4] + d[5]) / 1e3:.1f} k | "
              f"{(d[6] + d[7] + d[8]) / 1e3:.1f} k | {_cost(d) / 1e6:.2f} M |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
