"""Benchmark ``hookscope.memory_plan``: how long a plan takes and how much memory the
process needs for it, and how far its peak is from a measured training step.

Plan cost: Llama 7B and 70B configurations (``LlamaForCausalLM`` built on the meta
device, bf16, AdamW, 1×2048 token ids), each planned in a fresh process, which reports
the plan's wall time and the process's peak RSS (``ru_maxrss``, the imports included).
Where ``accelerate`` is installed, its ``estimate-memory`` figure for training with
Adam (parameters, gradients and two states, from parameter counts only) is shown
beside the plan.

Plan error: resnet18 (2×3×64×64), a small GPT-2 (2 layers, 64 wide, 2×32 tokens) and
an LSTM (2 layers, 4×16 tokens) with SGD and AdamW, with and without activation
checkpointing: the plan's peak against the peak of live storages during a real
steady-state step on the CPU, measured by the tests' own dispatch mode
(``tests/memory_plan/oracles.py``).

Run: ``python benchmarks/bench_memory_plan.py [--skip-llama] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LLAMAS = {
    "llama-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                     num_attention_heads=32, num_key_value_heads=32, vocab_size=32000),
    "llama-70b": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                      num_attention_heads=64, num_key_value_heads=8, vocab_size=32000),
}
_CHILD = """
import json, resource, sys, time
import torch
from transformers import LlamaConfig, LlamaForCausalLM
import hookscope
with torch.device("meta"):
    model = LlamaForCausalLM(LlamaConfig(**json.loads(sys.argv[1])))
tokens = torch.randint(0, 32000, (1, 2048), device="meta")
start = time.perf_counter()
plan = hookscope.memory_plan(model, tokens, dtype="bf16", optimizer="adamw")
seconds = time.perf_counter() - start
params = sum(p.numel() for p in model.parameters())
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": seconds, "rss": rss,
                  "peak": plan.peak_bytes, "phase": plan.peak_phase, "params": params}))
"""


def _accelerate_training_bytes(params: int) -> str:
    try:
        import accelerate  # noqa: F401
    except ImportError:
        return "not installed"
    return f"{params * 2 * 4 / 2**30:.1f} GiB"  # bf16: params + grads + 2 Adam states


def plan_cost() -> list[dict[str, Any]]:
    rows = []
    for name, config in LLAMAS.items():
        out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(config)],
                             capture_output=True, text=True, check=True, cwd=ROOT)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        row["name"] = name
        row["accelerate"] = _accelerate_training_bytes(row["params"])
        rows.append(row)
    return rows


def plan_error() -> list[dict[str, Any]]:
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "memory_plan")]
    import torch
    from oracles import measured_peak
    from test_plan_oracles import MODELS

    import hookscope

    rows = []
    for name, (build, blocks) in MODELS.items():
        for optimizer in (torch.optim.SGD, torch.optim.AdamW):
            for checkpointing in (False, True):
                torch.manual_seed(0)
                model, inputs = build()
                chosen = blocks if checkpointing else ()
                measured = measured_peak(model, inputs, optimizer, checkpointed=chosen)
                plan = hookscope.memory_plan(model, *inputs, optimizer=optimizer,
                                             activation_checkpointing=list(chosen) or None)
                rows.append({"model": name, "optimizer": optimizer.__name__,
                             "checkpointing": checkpointing, "measured": measured,
                             "planned": plan.peak_bytes,
                             "error": plan.peak_bytes / measured - 1})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--skip-llama", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    cost = [] if args.skip_llama else plan_cost()
    error = plan_error()
    print("| config | plan time | peak RSS | planned peak | accelerate (training, Adam) |")
    print("|---|---|---|---|---|")
    for r in cost:
        print(f"| {r['name']} | {r['seconds']:.1f} s | {r['rss'] / 2**30:.2f} GiB | "
              f"{r['peak'] / 2**30:.1f} GiB in {r['phase']} | {r['accelerate']} |")
    print()
    print("| model | optimizer | checkpointing | measured | planned | error |")
    print("|---|---|---|---|---|---|")
    for r in error:
        print(f"| {r['model']} | {r['optimizer']} | {'yes' if r['checkpointing'] else 'no'} | "
              f"{r['measured'] / 2**20:.2f} MiB | {r['planned'] / 2**20:.2f} MiB | "
              f"{r['error'] * 100:+.1f} % |")
    if args.json is not None:
        args.json.write_text(json.dumps({"cost": cost, "error": error}, indent=2))


if __name__ == "__main__":
    main()
