"""Benchmark ``hookscope.trace`` probes against a plain forward, torchinfo and TorchLens.

Models (random weights, built from default configs, nothing downloaded): torchvision
ResNet-50 on an 8×3×224×224 batch, torchvision MobileNetV3-Large on a 1×3×224×224
input (255 module calls in a forward of about 10 ms: the per-call cost case), and
transformers GPT-2 (default 12-layer config, ``GPT2LMHeadModel``) on 1×128 token ids.
Everything runs on the CPU in this one process, interleaved round-robin (see
``_harness.py``); every contender runs its forward under ``torch.no_grad()``, as
``hookscope.trace`` does without ``backward=``.

Contenders:
    plain forward                 ``model(x)``
    trace: time                   ``hookscope.trace(model, x, shapes=False, time=True,
                                  stats=False, memory=False)``
    trace: shapes+time            the same with the shapes probe
    trace: shapes+time+stats+mem  ``hookscope.trace(model, x)`` (the default probes)
    trace: ops+FLOPs              ``hookscope.trace(model, x, ops=True)`` with only shapes
    FlopCounterMode               ``torch.utils.flop_counter.FlopCounterMode`` around a forward
    torchinfo.summary             ``torchinfo.summary(model, input_data=x, verbose=0)``
    TorchLens                     ``torchlens.trace(model, x, save=None)`` with
                                  ``unwrap_when_done=True``: TorchLens otherwise leaves torch's
                                  functions wrapped, which slows every later forward in the
                                  process (5× on ResNet-18 here) and would skew the others.

Targets (× plain forward unless said):
    trace: time                   ≤ 1.05× ResNet-50 (issue 8; 1.10× in issue 3),
                                  ≤ 1.20× MobileNetV3-Large (issue 8), ≤ 1.10× GPT-2 (issue 3)
    trace: shapes+time+stats+mem  ≤ 1.50× ResNet-50 and GPT-2 (issue 3)
    trace: ops+FLOPs              ≤ 1.00× ``FlopCounterMode``, every model (issues 4 and 8)

A contender whose library is missing, or whose probe this hookscope lacks, is reported
as skipped with the reason.

Run: ``python benchmarks/bench_trace.py [--rounds N] [--models resnet50 ...]``
(default rounds: 7 for ResNet-50 and GPT-2, 31 for MobileNetV3-Large).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
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
IMAGE_BATCH = {"resnet50": 8, "mobilenet_v3_large": 1}
# NB: a MobileNetV3-Large forward is about 10 ms, so one disturbed round is a larger
# share of it than of ResNet-50's 270 ms at batch 8: more rounds for the same steadiness
ROUNDS = {"resnet50": 7, "mobilenet_v3_large": 31, "gpt2": 7}
PROBE_SETS: dict[str, dict[str, bool]] = {
    "trace: time": {"shapes": False, "time": True, "stats": False, "memory": False},
    "trace: shapes+time": {"time": True, "stats": False, "memory": False},
    "trace: shapes+time+stats+mem": {"time": True, "stats": True, "memory": True},
    "trace: ops+FLOPs": {"time": False, "stats": False, "memory": False, "ops": True},
}
# (model, contender) -> (largest ratio, the contender it is to; None: the plain forward)
TARGETS: dict[tuple[str, str], tuple[float, str | None]] = {
    ("resnet50", "trace: time"): (1.05, None),
    ("mobilenet_v3_large", "trace: time"): (1.20, None),
    ("gpt2", "trace: time"): (1.10, None),
    ("resnet50", "trace: shapes+time+stats+mem"): (1.50, None),
    ("gpt2", "trace: shapes+time+stats+mem"): (1.50, None),
    **{(m, "trace: ops+FLOPs"): (1.00, "FlopCounterMode") for m in MODELS},
}


def _probes_available() -> set[str]:
    import hookscope.probes

    return set(hookscope.probes.PROBES)


def _torchlens(model: torch.nn.Module, args: tuple[Any, ...]) -> Callable[[], Any]:
    import torchlens
    from torchlens.options import CaptureOptions

    capture = CaptureOptions(unwrap_when_done=True)
    x = args[0] if len(args) == 1 else list(args)

    def run() -> Any:
        with torch.no_grad():
            return torchlens.trace(model, x, save=None, capture=capture)

    run()  # fail here, not in the middle of the timed rounds
    return run


def _with_target(name: str, contender: Contender) -> Contender:
    contender.target, contender.target_of = TARGETS.get((name, contender.name), (None, None))
    return contender


def contenders(
    model: torch.nn.Module, args: tuple[Any, ...]
) -> tuple[list[Contender], list[tuple[str, str]]]:
    skipped: list[tuple[str, str]] = []

    def plain() -> Any:
        with torch.no_grad():
            return model(*args)

    out = [Contender("plain forward", plain)]
    available = _probes_available()
    for label, flags in PROBE_SETS.items():
        missing = sorted(k for k, on in flags.items() if on and k not in available)
        if missing:
            skipped.append((label, f"probe(s) {missing} not in this hookscope"))
            continue
        out.append(Contender(label, lambda flags=flags: hookscope.trace(model, *args, **flags)))

    from torch.utils.flop_counter import FlopCounterMode

    def flop_counter() -> Any:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(*args)
        return counter.get_total_flops()

    out.append(Contender("FlopCounterMode", flop_counter))
    try:
        import torchinfo

        out.append(Contender("torchinfo.summary", lambda: torchinfo.summary(
            model, input_data=list(args), verbose=0)))
    except ImportError:
        skipped.append(("torchinfo.summary", "torchinfo is not installed"))
    try:
        out.append(Contender("TorchLens", _torchlens(model, args)))
    except ImportError:
        skipped.append(("TorchLens", "torchlens is not installed (pip install torchlens)"))
    except Exception as e:  # a TorchLens release that cannot trace this model/torch
        skipped.append(("TorchLens", f"{type(e).__name__}: {str(e)[:80]}"))
    return out, skipped


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(__doc__.splitlines()[0], MODELS, argv, rounds=ROUNDS)
    results: list[Result] = []
    for name in opts.models:
        model, args = build_model(name, image_batch=IMAGE_BATCH.get(name, 1))
        todo, skipped = contenders(model, args)
        todo = [_with_target(name, c) for c in todo]
        results += run_interleaved(name, todo, rounds=opts.rounds[name], warmup=opts.warmup,
                                   progress=progress_printer(opts.quiet))
        results += [Result(name, label, [], [], skipped=why) for label, why in skipped]
    report = Report("hookscope.trace vs plain forward, FlopCounterMode, torchinfo, TorchLens",
                    environment(), rounds_run(opts), opts.warmup, results)
    emit(report, opts.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
