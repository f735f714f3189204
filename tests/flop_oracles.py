"""Independent FLOP oracles for the ops/FLOPs and meta-device tests.

Everything here counts with ``torch.utils.flop_counter.FlopCounterMode`` on plain torch
runs, never with hookscope, so hookscope's numbers are checked against torch's own
counter. The backward pass mirrors ``hookscope.trace(..., backward=True)``: gradients
of every floating output that requires grad, seeded with ones, with respect to every
parameter that requires grad (``torch.autograd.grad``; no ``.grad`` is touched).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree
from torch.utils.flop_counter import FlopCounterMode


@dataclasses.dataclass
class FlopOracle:
    """``FlopCounterMode``'s counts for one forward (and backward) of a model.

    Attributes:
        forward: total forward FLOPs.
        backward: total backward FLOPs (0 without a backward pass).
        per_module: forward FLOPs per module, keyed by hookscope path (``""`` = root).
    """

    forward: int
    backward: int
    per_module: dict[str, int]


def float_roots(output: Any) -> list[torch.Tensor]:
    """Every floating tensor in ``output`` that requires grad."""
    leaves = pytree.tree_leaves(output)
    if hasattr(output, "to_tuple"):  # transformers ModelOutput
        leaves = pytree.tree_leaves(output.to_tuple())
    return [
        t for t in leaves
        if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()
    ]


def _per_module(counter: FlopCounterMode, root: nn.Module) -> dict[str, int]:
    prefix = type(root).__name__
    out: dict[str, int] = {}
    for name, counts in counter.get_flop_counts().items():
        if name == "Global":
            continue
        path = "" if name == prefix else name.removeprefix(prefix + ".")
        out[path] = sum(counts.values())
    return out


def count_flops(
    model: nn.Module,
    *args: Any,
    kwargs: dict[str, Any] | None = None,
    backward: bool = False,
    custom_mapping: dict[Any, Any] | None = None,
) -> FlopOracle:
    """Count a forward (under ``no_grad`` unless ``backward``) and optionally a backward."""
    kwargs = kwargs or {}
    grad = torch.enable_grad() if backward else torch.no_grad()
    with grad, FlopCounterMode(display=False, custom_mapping=custom_mapping) as fwd:
        output = model(*args, **kwargs)
    bwd_total = 0
    if backward:
        roots = float_roots(output)
        params = [p for p in model.parameters() if p.requires_grad]
        with FlopCounterMode(display=False, custom_mapping=custom_mapping) as bwd:
            torch.autograd.grad(
                roots, params, [torch.ones_like(r) for r in roots], allow_unused=True
            )
        bwd_total = bwd.get_total_flops()
    return FlopOracle(fwd.get_total_flops(), bwd_total, _per_module(fwd, model))


def hookscope_per_module(trace: Any) -> dict[str, int]:
    """hookscope's forward FLOPs per module path, summed over the module's calls."""
    out: dict[str, int] = {}
    for call in trace.calls:
        out[call.path] = out.get(call.path, 0) + call.flops.forward
    return out


def assert_per_module_equal(hs: dict[str, int], oracle: dict[str, int]) -> None:
    """Equal for every module either side reports FLOPs for (absent means 0)."""
    paths = {p for p, v in hs.items() if v} | set(oracle)
    diffs = {p: (hs.get(p, 0), oracle.get(p, 0)) for p in paths if hs.get(p, 0) != oracle.get(p, 0)}
    assert not diffs, f"per-module forward FLOPs differ (hookscope, FlopCounterMode): {diffs}"
    assert paths, "no module reported any FLOPs: the comparison would be vacuous"


def hf_model(
    model_type: str, attn: str, *, causal_lm: bool = False, **overrides: Any
) -> nn.Module:
    """A transformers model from its default config with random weights, in eval mode.

    Every model gets its own config object: transformers writes the attention
    implementation into the config, so sharing one would switch both models.
    ``causal_lm`` adds the language-model head (``AutoModelForCausalLM``).
    """
    transformers = __import__("transformers")
    config = transformers.AutoConfig.for_model(model_type, **overrides)
    auto = transformers.AutoModelForCausalLM if causal_lm else transformers.AutoModel
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = auto.from_config(copy.deepcopy(config), attn_implementation=attn)
    return model.eval()


@contextlib.contextmanager
def math_attention() -> Iterator[None]:
    """``scaled_dot_product_attention`` as explicit matmuls (the eager oracle)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        yield
