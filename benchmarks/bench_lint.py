"""Static lint of Llama-7B and Llama-70B-size configurations on the meta device.

Each measurement runs in a fresh interpreter, so peak RSS (``ru_maxrss``) is that of
one build: first the bare build under ``torch.device("meta")``, then the same build
followed by ``hookscope.lint(model)`` (static rules only). Weights are never allocated,
so the two peaks should be close and both far below the model's size.

Run: ``python benchmarks/bench_lint.py`` (``--sizes 7b`` for one size).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CONFIGS = {
    "7b": {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000},
    "70b": {"hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
            "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 32000},
}

CHILD = """
import json, resource, sys, time
import torch, transformers
import hookscope
config = transformers.LlamaConfig(**json.loads(sys.argv[1]))
lint = sys.argv[2] == "lint"
t0 = time.perf_counter()
with torch.device("meta"):
    model = transformers.LlamaForCausalLM(config)
built = time.perf_counter() - t0
report = None
if lint:
    t1 = time.perf_counter()
    report = hookscope.lint(model)
    linted = time.perf_counter() - t1
print(json.dumps({
    "params": sum(p.numel() for p in model.parameters()),
    "build_s": built,
    "lint_s": linted if lint else None,
    "findings": [f.code for f in report] if report is not None else None,
    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}))
"""


def _run(config: dict[str, int], mode: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(config), mode],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="7b,70b")
    args = parser.parse_args()
    print(f"{'config':>6} {'params':>8} {'build s':>8} {'lint s':>7} "
          f"{'RSS bare MiB':>13} {'RSS lint MiB':>13}  findings")
    for size in args.sizes.split(","):
        bare, linted = _run(CONFIGS[size], "bare"), _run(CONFIGS[size], "lint")
        params = f"{int(linted['params']) / 1e9:.1f}B"  # type: ignore[call-overload]
        print(f"{size:>6} {params:>8} {linted['build_s']:>8.2f} {linted['lint_s']:>7.2f} "
              f"{bare['peak_rss_mib']:>13.0f} {linted['peak_rss_mib']:>13.0f}  "
              f"{linted['findings']}")


if __name__ == "__main__":
    main()
