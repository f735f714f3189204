"""hookscope's FLOP formulas for the fused kernels ``flop_counter``'s registry lacks.

``hookscope/flops/registry.py`` looks an op up in a per-run mapping, the user's registry,
``torch.utils.flop_counter.flop_registry``, then :data:`HOOKSCOPE_FORMULAS` here;
:data:`HOOKSCOPE_OVERRIDES` are consulted before ``flop_counter``'s registry. An op
without any formula is counted by ``hookscope/flops/op_rules.py``.

The formulas here exist because ``flop_counter``'s registry lacks the fused attention
kernels that CPU runs dispatch to (pytorch issue 195460). They are composed from
``flop_counter``'s own helpers (``sdpa_flop_count``, ``mm_flop``), so they count what
the same model counts with eager attention (explicit matmuls).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import Any

import torch
from torch.utils import flop_counter as fc

FlopFormula = Callable[..., int]

aten = torch.ops.aten

# flop_counter's helpers, typed (torch leaves them unannotated).
sdpa_flop_count: Callable[..., int] = fc.sdpa_flop_count
shape_wrapper: Callable[[Callable[..., int]], FlopFormula] = fc.shape_wrapper


# -- formulas for the fused attention kernels flop_counter's registry lacks ----------


def _mm(rows: int, inner: int, cols: int) -> int:
    result: int = fc.mm_flop((rows, inner), (inner, cols))
    return result


def _mha_flops(
    query: Sequence[int], key: Sequence[int], value: Sequence[int], num_heads: int
) -> int:
    """In-projection, scaled-dot-product attention and out-projection of one MHA call.

    ``query`` is ``(batch, len, embed)`` or ``(len, embed)``; ``key``/``value`` likewise.
    """
    *q_batch, q_len, embed = query
    *_, k_len, k_embed = key
    *_, _, v_embed = value
    batch = prod(q_batch)
    head_dim = embed // num_heads
    in_proj = (
        _mm(batch * q_len, embed, embed)
        + _mm(batch * k_len, k_embed, embed)
        + _mm(batch * k_len, v_embed, embed)
    )
    heads_q = (batch, num_heads, q_len, head_dim)
    heads_kv = (batch, num_heads, k_len, head_dim)
    attention = sdpa_flop_count(heads_q, heads_kv, heads_kv)
    return in_proj + attention + _mm(batch * q_len, embed, embed)


def _sdpa_cpu_flop(
    query_shape: Sequence[int],
    key_shape: Sequence[int],
    value_shape: Sequence[int],
    *args: Any,
    out_shape: Any = None,
    **kwargs: Any,
) -> int:
    """``_scaled_dot_product_flash_attention_for_cpu``: QKᵀ and PV, as ``sdpa_flop``."""
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _sdpa_cpu_backward_flop(
    grad_out_shape: Sequence[int],
    query_shape: Sequence[int],
    key_shape: Sequence[int],
    value_shape: Sequence[int],
    *args: Any,
    out_shape: Any = None,
    **kwargs: Any,
) -> int:
    """Backward of the CPU flash kernel: two matmuls per forward matmul.

    NB: ``flop_counter``'s ``sdpa_backward_flop_count`` also counts recomputing QKᵀ,
    which the GPU flash kernels do. hookscope counts the gradient matmuls only (dP,
    dV, dQ, dK: twice the forward), what the same model counts with eager attention
    and on the meta device (where ``scaled_dot_product_attention`` takes the math
    path), so CPU, meta and eager-attention totals agree.
    """
    return 2 * sdpa_flop_count(query_shape, key_shape, value_shape)


def _native_mha_flop(
    query: Sequence[int],
    key: Sequence[int],
    value: Sequence[int],
    embed_dim: int,
    num_head: int,
    *args: Any,
    out_shape: Any = None,
    **kwargs: Any,
) -> int:
    """``_native_multi_head_attention`` (``nn.MultiheadAttention``'s inference path)."""
    return _mha_flops(query, key, value, num_head)


def _encoder_layer_flop(
    src: Sequence[int],
    embed_dim: int,
    num_heads: int,
    *args: Any,
    out_shape: Any = None,
    **kwargs: Any,
) -> int:
    """``_transformer_encoder_layer_fwd`` (``nn.TransformerEncoderLayer``'s fast path).

    Self-attention plus the two feed-forward matmuls; ``ffn_weight_1`` is argument 14
    of the schema (``src, embed_dim, num_heads, qkv_weight, ..., ffn_weight_1, ...``).
    """
    ffn_weight_1 = args[11] if len(args) > 11 else kwargs["ffn_weight_1"]
    hidden = ffn_weight_1[0]
    tokens = prod(src[:-1])
    return _mha_flops(src, src, src, num_heads) + _mm(tokens, embed_dim, hidden) + _mm(
        tokens, hidden, embed_dim
    )


def _mkldnn_rnn_layer_flop(
    input: Sequence[int],
    weight0: Sequence[int],
    weight1: Sequence[int],
    weight2: Any,
    weight3: Any,
    hx: Sequence[int],
    *args: Any,
    out_shape: Any = None,
    **kwargs: Any,
) -> int:
    """``mkldnn_rnn_layer``: one direction of one layer of a CPU LSTM, GRU or RNN.

    Per time step, the input and the hidden projections of every gate, the matmuls an
    unfused cell runs: ``weight0`` is ``w_ih`` [gates*hidden, in], ``weight1`` is
    ``w_hh`` [gates*hidden, hidden], ``hx`` the hidden state [batch, hidden]. The gate
    nonlinearities are elementwise (0 by convention).
    """
    tokens, features = prod(input[:-1]), input[-1]
    batch = prod(hx[:-1])
    gates_hidden, hidden = weight1
    steps = tokens // batch if batch else 0
    return _mm(tokens, features, weight0[0]) + steps * _mm(batch, hidden, gates_hidden)


def _mkldnn_rnn_layer_backward_flop(
    input: Sequence[int], weight1: Sequence[int], weight2: Sequence[int], weight3: Any,
    weight4: Any, hx: Sequence[int], *args: Any, out_shape: Any = None, **kwargs: Any,
) -> int:
    """``mkldnn_rnn_layer_backward``: twice the forward's matmuls, as for a linear layer:
    each projection's gradient with respect to its input (``x``, the hidden state) and
    to its weight (``w_ih``, ``w_hh``)."""
    return 2 * _mkldnn_rnn_layer_flop(input, weight1, weight2, weight3, weight4, hx)


def _grouped_mm_flop(
    self_shape: Sequence[int],
    mat2_shape: Sequence[int],
    *args: Any,
    out_shape: Any = None,
    **kwargs: Any,
) -> int:
    """``_grouped_mm`` (mixture-of-experts layers): one matmul per group.

    2D x 3D (tokens sorted by expert, ``offs`` splitting the rows), 3D x 3D (batched) and
    3D x 2D contract the full last dimension of ``self`` for every output element; 2D x 2D
    (the weight gradient, ``offs`` splitting the contracted dimension) contracts each
    group's share of it, ``M x K_total x N`` in all.
    """
    if len(self_shape) == 2 and len(mat2_shape) == 2:
        return 2 * self_shape[0] * self_shape[1] * mat2_shape[1]
    return 2 * self_shape[-1] * int(prod(out_shape))


def _hookscope_formulas() -> dict[Any, FlopFormula]:
    table: dict[Any, Callable[..., int]] = {
        "_grouped_mm": _grouped_mm_flop,
        "_scaled_dot_product_flash_attention_for_cpu": _sdpa_cpu_flop,
        "_scaled_dot_product_flash_attention_for_cpu_backward": _sdpa_cpu_backward_flop,
        "_native_multi_head_attention": _native_mha_flop,
        "_transformer_encoder_layer_fwd": _encoder_layer_flop,
        "mkldnn_rnn_layer": _mkldnn_rnn_layer_flop,
        "mkldnn_rnn_layer_backward": _mkldnn_rnn_layer_backward_flop,
    }
    out: dict[Any, FlopFormula] = {}
    for name, formula in table.items():
        packet = getattr(aten, name, None)  # absent in older torch versions
        if packet is not None:
            out[packet] = shape_wrapper(formula)
    return out


#: hookscope's formulas, keyed by ``OpOverloadPacket``, shape-wrapped like
#: ``flop_counter``'s (called as ``formula(*args, **kwargs, out_val=out)``).
HOOKSCOPE_FORMULAS: dict[Any, FlopFormula] = _hookscope_formulas()


def _overrides() -> dict[Any, FlopFormula]:
    """Formulas that replace ``flop_counter``'s: the backward of the CUDA fused attention
    kernels (flash, memory-efficient, cuDNN), which ``flop_counter`` counts with a
    recomputation of QKᵀ (2.5x the forward); hookscope counts the gradient matmuls only
    (2x), as for the CPU flash kernel and eager/math attention, so a model's backward
    FLOPs do not depend on which kernel, or device, ran."""
    names = (
        "_scaled_dot_product_flash_attention_backward",
        "_scaled_dot_product_efficient_attention_backward",
        "_scaled_dot_product_cudnn_attention_backward",
    )
    packets = [getattr(aten, name, None) for name in names]
    return {p: shape_wrapper(_sdpa_cpu_backward_flop) for p in packets if p is not None}


#: Formulas consulted before ``torch.utils.flop_counter``'s registry (one convention for
#: the backward of fused attention, whichever kernel ran).
HOOKSCOPE_OVERRIDES: dict[Any, FlopFormula] = _overrides()
