"""FLOP rules over the whole aten op set, MoE and integer ops, one attention convention.

Oracles: ``torch.utils.flop_counter.FlopCounterMode`` on the same model where it has a
formula, the explicit matmuls an eager expert loop would run for ``_grouped_mm``, and
the op set itself: every aten op that reaches the dispatcher as itself (no composite
decomposition) and has no formula must be classified, unless it belongs to a family
that does matmul-like work hookscope has no formula for.
"""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

import hookscope
from hookscope.core import torch_private
from hookscope.core.records.values import FlopRule
from hookscope.flops.op_rules import HOOKSCOPE_OVERRIDES, rule_without_formula
from hookscope.flops.registry import find_formula

#: Families genuinely without a formula (matmul-like, decompositions, quantized kernels).
UNCOUNTED_FAMILIES = re.compile(
    r"mm|matmul|linear|conv|linalg|fft|stft|rnn|lstm|gru|attention|dist|dot|mv|addr|"
    r"svd|solve|cholesky|eig|qr|lu|ormqr|int4|int8|quant|sparse|grid_sampler|upsample|"
    r"_backward|_fused_moving_avg|affine_grid|fractional_max_pool|loss|segment_reduce|"
    r"_add_relu|logspace|special_ndtr|fix|__|negative|absolute|^_test_|^_foobar$"
)


def load_every_aten_op() -> None:
    """Make ``dir(torch.ops.aten)`` list every registered aten op: it lists only the
    packets looked up so far, so what it lists depends on the tests that ran before."""
    for qualified in torch._C._dispatch_get_all_op_names():
        namespace, _, name = qualified.partition("::")
        if namespace == "aten":
            getattr(torch.ops.aten, name.split(".")[0], None)


def test_every_aten_op_is_classified() -> None:
    load_every_aten_op()
    aten = torch.ops.aten
    unclassified = []
    for name in dir(aten):
        packet = getattr(aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket) or find_formula(packet, {}):
            continue
        for overload in packet.overloads():
            func = getattr(packet, overload)
            try:
                if torch_private.dispatch_has_composite_kernel(func):
                    continue  # decomposed at run time: its parts are counted
            except RuntimeError:  # a Python-only overload (aten::__and__.bool)
                continue
            if rule_without_formula(func) is FlopRule.UNCOUNTED and not UNCOUNTED_FAMILIES.search(
                name
            ):
                unclassified.append(str(func))
    assert unclassified == []


@pytest.mark.parametrize("name", ["_pack_padded_sequence", "_pad_packed_sequence", "index_put_",
                                  "diag_embed", "_jagged_to_padded_dense_forward", "size"])
def test_data_movement_is_free(name: str) -> None:
    packet = getattr(torch.ops.aten, name)
    func = getattr(packet, packet.overloads()[0])
    assert rule_without_formula(func) is FlopRule.FREE


def test_packed_sequence_lstm_totals_are_complete() -> None:
    class Packed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.GRU(4, 8, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            packed = nn.utils.rnn.pack_padded_sequence(x, torch.tensor([3, 2]), batch_first=True)
            out, _ = self.rnn(packed)
            return nn.utils.rnn.pad_packed_sequence(out, batch_first=True)[0]

    trace = hookscope.trace(Packed(), torch.randn(2, 3, 4), ops=True, time=False, stats=False,
                            memory=False)
    assert "aten._pack_padded_sequence.default" not in trace.facts["uncounted_ops"]


def test_integer_ops_are_not_floating_point_work() -> None:
    class Router(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.floor_divide(x, 3) + torch.ops.aten.gcd(x, x)

    trace = hookscope.trace(Router(), torch.arange(6), ops=True, time=False, stats=False,
                            memory=False)
    assert trace.facts["uncounted_ops"] == {}
    assert not trace.facts["totals_flops"].partial


def test_grouped_mm_counts_the_expert_matmuls() -> None:
    tokens, k, n, experts = 16, 32, 24, 4
    a = torch.randn(tokens, k)
    b = torch.randn(experts, k, n)
    offs = torch.tensor([4, 8, 12, 16], dtype=torch.int32)

    class Experts(nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return torch._grouped_mm(a, b, offs=offs)

    trace = hookscope.trace(Experts(), a, b, ops=True, time=False, stats=False, memory=False)
    # oracle: one (rows x k) @ (k x n) matmul per expert, 2 FLOPs per multiply-add
    assert trace.facts["totals_flops"].forward == 2 * tokens * k * n
    assert not trace.facts["totals_flops"].partial


def test_fused_attention_backward_follows_one_convention() -> None:
    q = (2, 4, 16, 8)
    ref = torch.utils.flop_counter.sdpa_flop_count(q, q, q)
    for packet, formula in HOOKSCOPE_OVERRIDES.items():
        tensors = [torch.empty(q, device="meta") for _ in range(4)]
        # grad_out, query, key, value: the gradient matmuls only, twice the forward
        assert formula(*tensors, out_val=None) == 2 * ref, packet
