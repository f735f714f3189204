"""Benchmark the HTML report: its size, the time to write it after the trace, and how
soon the page is interactive in Chromium.

GPT-2 (``GPT2Config(n_embd=64, n_head=2)``, random weights) at 24 blocks (293 calls)
and 42 blocks (509 calls), on 1×32 tokens, traced once with the default probes and
once with FLOPs and a backward pass as well. Per case: the page's size, the median of
``--rounds`` times ``trace.to_html(path)`` (``time.perf_counter``; the trace is
recorded once, before), and the median over ``--loads`` page loads from ``file://`` in
headless Chromium (``tools/report_browser.py``) of the time from navigation start to
``DOMContentLoaded``'s end: the page's script runs while the page is parsed, so its
table collapses, searches and sorts from then on. Targets (issue #38): at most 3 MB,
written in at most 1 s beyond the trace, interactive in at most 1 s.

Run: ``python benchmarks/bench_report.py [--rounds 7] [--loads 5]`` (needs playwright
and Debian's chromium for the last column).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

import report_browser

import hookscope

MAX_BYTES = 3 * 1024 * 1024
MAX_WRITE_S = 1.0
MAX_INTERACTIVE_MS = 1000.0


def _trace(n_layer: int, *, full: bool) -> hookscope.Trace:
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(n_layer=n_layer, n_embd=64, n_head=2)).eval()
    ids = torch.randint(0, 100, (1, 32))
    return hookscope.trace(model, ids, ops=full, backward=full)


def _write_s(trace: hookscope.Trace, path: Path, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        trace.to_html(path)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _interactive_ms(browser: object, path: Path, loads: int) -> float:
    times = []
    for _ in range(loads):
        opened = report_browser.open_report(browser, path)
        assert not opened.errors, opened.errors
        times.append(report_browser.interactive_ms(opened))
        opened.page.context.close()
    return statistics.median(times)


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--layers", type=int, nargs="+", default=[24, 42])
    opts = parser.parse_args(argv)
    missing = report_browser.missing()
    print("| model | probes | calls | size | write | interactive | targets |")
    print("|---|---|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp, \
            (report_browser.chromium() if missing is None else nullcontext()) as browser:
        for n_layer in opts.layers:
            for full in (False, True):
                trace = _trace(n_layer, full=full)
                path = Path(tmp) / f"gpt2-{n_layer}-{full}.html"
                write = _write_s(trace, path, opts.rounds)
                size = path.stat().st_size
                ms = None if browser is None else _interactive_ms(browser, path, opts.loads)
                shown = "n/a" if ms is None else f"{ms:.0f} ms"
                probes = "defaults + ops + backward" if full else "defaults"
                verdicts = (f"size {_verdict(size <= MAX_BYTES)}, "
                            f"write {_verdict(write <= MAX_WRITE_S)}")
                if ms is not None:
                    verdicts += f", interactive {_verdict(ms <= MAX_INTERACTIVE_MS)}"
                print(f"| GPT-2 {n_layer} blocks | {probes} | {len(trace.calls)} | "
                      f"{size / 1e6:.2f} MB | {write * 1e3:.0f} ms | {shown} | {verdicts} |")
    if missing is not None:
        print(f"\ninteractive: not measured, {missing}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
