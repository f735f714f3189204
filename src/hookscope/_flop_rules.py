"""Which aten ops cost FLOPs, and hookscope's formulas for fused attention kernels.

``hookscope/flops.py`` looks an op up in this order: a per-run mapping, the user's
registry, ``torch.utils.flop_counter.flop_registry``, then :data:`HOOKSCOPE_FORMULAS`
below. An op without a formula gets a :class:`~hookscope.core.records.FlopRule` from
:func:`rule_without_formula`:

- ``FREE``: views and in-place views (by their schema), and the ops named in
  :data:`FREE_OPS` (copies, creation, concatenation, indexing, padding, random fill).
- ``CONVENTION``: ops tagged ``pointwise`` or ``reduction`` in
  ``native_functions.yaml`` and the ops named in :data:`CONVENTION_OPS`
  (normalisation, softmax, pooling, interpolation, losses, dropout, the backward ops
  of activations, optimizer steps). ``torch.utils.flop_counter`` counts only
  matmul-like work, so these are 0 there too; hookscope keeps them at 0 so that its
  totals equal ``FlopCounterMode``'s.
- ``UNCOUNTED``: everything else (matmul-like kernels without a formula, ``linalg``,
  FFT, RNN kernels, ops of other libraries): FLOPs unknown, totals marked partial.

The formulas here exist because ``flop_counter``'s registry lacks the fused attention
kernels that CPU runs dispatch to (pytorch issue 195460). They are composed from
``flop_counter``'s own helpers (``sdpa_flop_count``, ``mm_flop``), so they count what
the same model counts with eager attention (explicit matmuls).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from math import prod
from typing import Any

import torch
from torch.utils import flop_counter as fc

from hookscope.core.records import FlopRule

FlopFormula = Callable[..., int]

aten = torch.ops.aten

# flop_counter's helpers, typed (torch leaves them unannotated).
sdpa_flop_count: Callable[..., int] = fc.sdpa_flop_count
shape_wrapper: Callable[[Callable[..., int]], FlopFormula] = fc.shape_wrapper

#: Ops (by ``aten`` packet name, in-place ``_`` suffix dropped) that do no arithmetic.
FREE_OPS: frozenset[str] = frozenset(
    {
        # copies and conversions
        "clone", "copy", "_to_copy", "_unsafe_view", "contiguous", "_pin_memory",
        "lift", "lift_fresh", "lift_fresh_copy", "_local_scalar_dense", "item",
        "unsafe_split", "unsafe_split_with_sizes", "unsafe_chunk",
        "alias_copy", "view_copy", "permute_copy", "t_copy", "expand_copy",
        "unsqueeze_copy", "squeeze_copy", "transpose_copy", "narrow_copy",
        "_reshape_copy", "split_with_sizes_copy", "unbind_copy", "slice_copy",
        # creation and random fill
        "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
        "new_empty_strided", "zeros", "zeros_like", "new_zeros", "ones", "ones_like",
        "new_ones", "full", "full_like", "new_full", "scalar_tensor", "arange",
        "linspace", "eye", "fill", "zero", "rand", "rand_like", "randn", "randn_like",
        "randint", "randint_like", "randperm", "bernoulli", "normal", "uniform",
        "_efficientzerotensor", "resize", "set",
        # concatenation, indexing, masking, padding, reordering
        "cat", "stack", "repeat", "repeat_interleave", "roll", "flip", "tril", "triu",
        "index", "_unsafe_index", "index_select", "index_put", "_index_put_impl",
        "index_copy", "index_fill", "gather", "scatter", "masked_fill",
        "masked_scatter", "masked_select", "nonzero", "where", "embedding",
        "slice_backward", "select_backward", "slice_scatter", "select_scatter",
        "diagonal_scatter", "as_strided_scatter", "constant_pad_nd",
        "reflection_pad1d", "reflection_pad2d", "reflection_pad3d",
        "replication_pad1d", "replication_pad2d", "replication_pad3d",
        "pixel_shuffle", "pixel_unshuffle", "native_channel_shuffle", "im2col",
        "one_hot", "_unique2", "unique_consecutive", "unique_dim",
        # metadata, comparisons of whole tensors, asserts
        "equal", "is_nonzero", "_is_all_true", "_is_any_true", "_assert_async",
        "_assert_tensor_metadata", "sym_size", "sym_stride", "sym_numel",
        "sym_storage_offset", "record_stream", "q_per_channel_scales",
        "q_per_channel_zero_points", "hash_tensor",
        # creation and copies that are loaded only when first used
        "range", "from_file", "_lazy_clone", "_new_zeros_with_same_feature_meta",
        "int_repr", "put", "_coalesce", "_cslt_compress",
    }
)

#: Ops with arithmetic that ``torch.utils.flop_counter`` leaves at 0 by convention
#: (besides every op tagged ``pointwise`` or ``reduction``).
CONVENTION_OPS: frozenset[str] = frozenset(
    {
        # softmax
        "softmax", "log_softmax", "_softmax", "_safe_softmax", "_log_softmax",
        "_softmax_backward_data", "_transform_bias_rescale_qkv", "_aminmax",
        "_dirichlet_grad",
        "_log_softmax_backward_data", "_masked_softmax", "_masked_softmax_backward",
        # normalisation
        "native_layer_norm", "native_layer_norm_backward", "native_batch_norm",
        "native_batch_norm_backward", "_native_batch_norm_legit",
        "_native_batch_norm_legit_functional", "_native_batch_norm_legit_no_training",
        "_batch_norm_with_update", "_batch_norm_with_update_functional",
        "batch_norm_stats", "batch_norm_elemt", "batch_norm_update_stats",  # SyncBatchNorm
        "embedding_renorm",
        "_batch_norm_no_update", "batch_norm_backward", "batch_norm", "layer_norm",
        "group_norm", "instance_norm", "native_group_norm", "native_group_norm_backward",
        "_fused_rms_norm", "_fused_rms_norm_backward", "rms_norm", "cudnn_batch_norm",
        "cudnn_batch_norm_backward", "miopen_batch_norm", "miopen_batch_norm_backward",
        "_weight_norm_interface", "_weight_norm_interface_backward", "renorm",
        # pooling and interpolation
        "max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices",
        "max_pool2d_with_indices_backward", "max_pool3d_with_indices",
        "max_pool3d_with_indices_backward", "max_unpool2d", "max_unpool3d",
        "avg_pool1d", "avg_pool2d", "avg_pool2d_backward", "avg_pool3d",
        "avg_pool3d_backward", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
        "adaptive_avg_pool3d", "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward",
        "_adaptive_avg_pool3d", "_adaptive_avg_pool3d_backward", "adaptive_max_pool2d",
        "adaptive_max_pool2d_backward", "adaptive_max_pool3d",
        "adaptive_max_pool3d_backward", "upsample_nearest1d", "upsample_nearest2d",
        "upsample_nearest3d", "_upsample_nearest_exact1d", "_upsample_nearest_exact2d",
        "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
        "upsample_bicubic2d", "upsample_trilinear3d", "_upsample_bilinear2d_aa",
        "_upsample_bicubic2d_aa", "upsample_nearest1d_backward",
        "upsample_nearest2d_backward", "upsample_nearest3d_backward",
        "upsample_linear1d_backward", "upsample_bilinear2d_backward",
        "upsample_bicubic2d_backward", "upsample_trilinear3d_backward",
        "grid_sampler_2d", "grid_sampler_2d_backward", "grid_sampler_3d",
        "grid_sampler_3d_backward", "col2im",
        # activations not tagged pointwise, and their backward ops
        "hardswish", "hardswish_backward", "hardsigmoid_backward", "hardtanh_backward",
        "elu_backward", "leaky_relu_backward", "softplus_backward", "softshrink_backward",
        "hardshrink_backward", "mish_backward", "glu", "glu_backward", "prelu",
        "_prelu_kernel", "_prelu_kernel_backward", "rrelu_with_noise",
        "rrelu_with_noise_backward", "log_sigmoid_forward", "log_sigmoid_backward",
        # dropout
        "native_dropout", "native_dropout_backward", "_fused_dropout", "_masked_scale",
        # losses
        "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward",
        "nll_loss2d_backward", "mse_loss", "mse_loss_backward", "l1_loss",
        "smooth_l1_loss", "smooth_l1_loss_backward", "huber_loss", "huber_loss_backward",
        "binary_cross_entropy", "binary_cross_entropy_backward",
        "binary_cross_entropy_with_logits", "kl_div", "soft_margin_loss",
        "multilabel_margin_loss_forward", "multi_margin_loss",
        # accumulation, scans, sorting, statistics
        "embedding_dense_backward", "embedding_backward", "_embedding_bag",
        "_embedding_bag_forward_only", "_embedding_bag_backward",
        "_embedding_bag_dense_backward", "_embedding_bag_per_sample_weights_backward",
        "index_add", "index_reduce", "scatter_add", "scatter_reduce", "cumsum",
        "cumprod", "logcumsumexp", "_logcumsumexp", "cummax", "cummin", "sort",
        "argsort", "topk", "kthvalue", "median", "nanmedian", "mode", "bucketize",
        "searchsorted", "histc", "histogram", "_histogramdd_from_bin_cts",
        "_histogramdd_from_bin_tensors", "bincount", "logsumexp", "norm", "native_norm",
        "linalg_vector_norm",
        "std", "var", "std_mean", "var_mean", "cross", "linalg_cross", "_cdist_backward",
        # optimizer steps and AMP bookkeeping
        "_amp_foreach_non_finite_check_and_unscale", "_amp_update_scale",
        "_fused_adam", "_fused_adamw", "_fused_sgd", "_fused_adagrad",
    }
)

_CONVENTION_TAGS = tuple(
    tag for tag in (getattr(torch.Tag, "pointwise", None), getattr(torch.Tag, "reduction", None))
    if tag is not None
)
_FREE_TAGS = tuple(
    tag for tag in (getattr(torch.Tag, "inplace_view", None), getattr(torch.Tag, "view_copy", None))
    if tag is not None
)


def base_name(func: torch._ops.OpOverload) -> str:
    """Packet name without the in-place ``_`` suffix: ``aten.add_.Tensor`` -> ``add``."""
    name: str = func._overloadpacket.__name__
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return name


#: Words of op names that only move, select or re-arrange data (``_pack_padded_sequence``,
#: ``_jagged_to_padded_dense_forward``, ``diag_embed``), matched on whole ``_``-separated
#: words of every aten op name; ``tests/probes/test_flop_rules.py`` walks the whole op set.
_DATA_MOVEMENT = re.compile(
    r"(^|_)(pack|unpack|pad|padded|jagged|nested|dense|index|gather|scatter|slice|select|"
    r"cat|stack|split|chunk|copy|shuffle|unfold|diag|embed|tril|triu|rot90|take|meshgrid|"
    r"broadcast|block|unique|nonzero|indices|window|spdiags|list|print|resize|mkldnn|"
    r"assert|constrain|token|philox|coalesced|contiguous|pinned|complex|polar)(_|$)"
)
_SPECIAL_CONVENTION = ("floor_divide", "true_divide", "rsub", "isin", "trace", "dist")


def rule_without_formula(func: torch._ops.OpOverload) -> FlopRule:
    """How an op without a FLOP formula is counted (see the module docstring)."""
    namespace = func.namespace
    if namespace in ("prim", "profiler"):
        # prim::device, prim::layout: metadata queries; profiler::_record_function_*:
        # the markers record_function() dispatches (optimizers use it in step())
        return FlopRule.FREE
    if namespace != "aten":
        return FlopRule.UNCOUNTED
    name = base_name(func)
    tags = _tags(func, name)
    if func.is_view or name in FREE_OPS or any(t in tags for t in _FREE_TAGS):
        return FlopRule.FREE
    if not any(r.type.isSubtypeOf(torch.TensorType.get()) for r in _tensor_returns(func)):
        return FlopRule.FREE  # returns no tensor (size, is_contiguous, _assert_scalar)
    if name.startswith("_foreach_") or name in CONVENTION_OPS or name in _SPECIAL_CONVENTION:
        return FlopRule.CONVENTION
    if any(t in tags for t in _CONVENTION_TAGS):
        return FlopRule.CONVENTION
    if _SEEDED in tags or _DATA_MOVEMENT.search(name):
        return FlopRule.FREE  # random fill, or data movement
    return FlopRule.UNCOUNTED


_SEEDED = getattr(torch.Tag, "nondeterministic_seeded", None)


def _tags(func: torch._ops.OpOverload, name: str) -> set[Any]:
    """The op's tags and those of its functional op's overloads: ``out=`` and in-place
    variants (``relu.out``, ``abs_``) are not tagged themselves."""
    tags = set(func.tags)
    functional = getattr(aten, name, None)
    packets: list[Any] = [func._overloadpacket, functional]
    for packet in (p for p in packets if p is not None):
        for overload in packet.overloads():
            tags.update(getattr(packet, overload).tags)
    return tags


def _tensor_returns(func: torch._ops.OpOverload) -> list[Any]:
    returns = list(func._schema.returns)
    tensor = torch.TensorType.get()
    optional = torch.OptionalType(tensor)
    lists = torch.ListType(tensor)
    return [
        r for r in returns
        if r.type.isSubtypeOf(tensor) or r.type.isSubtypeOf(optional)
        or r.type.isSubtypeOf(lists)
    ] or [r for r in returns if "Tensor" in str(r.type)]


def is_floating_op(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether any of an op's tensors is floating, complex or quantized (real values
    stored as integers: ``quantized.linear`` is arithmetic, counted or said uncounted):
    ops on integer and bool tensors only (an int64 ``floor_divide`` in a router) are not
    floating-point work."""
    return any(
        t.dtype.is_floating_point or t.dtype.is_complex or t.dtype in _QUANTIZED
        for t in tensors
    )


_QUANTIZED = frozenset(
    d for d in (getattr(torch, n, None) for n in (
        "quint8", "qint8", "qint32", "quint4x2", "quint2x4")) if d is not None
)


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
