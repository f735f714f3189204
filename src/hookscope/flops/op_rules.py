"""Which aten ops cost FLOPs: how an op without a FLOP formula is counted.

``hookscope/flops/registry.py`` looks an op up in this order: a per-run mapping, the user's
registry, ``torch.utils.flop_counter.flop_registry``, then :data:`HOOKSCOPE_FORMULAS`
(hookscope's formulas for fused attention kernels, in ``hookscope/flops/formulas.py``).
An op without a formula gets a :class:`~hookscope.core.records.values.FlopRule` from
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
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch

from hookscope.core import torch_private
from hookscope.core.records.values import FlopRule
from hookscope.flops.collectives import COLLECTIVE_NAMESPACES

# the formulas are re-exported (``X as X``) for the modules and tests that import
# them from here
from hookscope.flops.formulas import HOOKSCOPE_FORMULAS as HOOKSCOPE_FORMULAS
from hookscope.flops.formulas import HOOKSCOPE_OVERRIDES as HOOKSCOPE_OVERRIDES
from hookscope.flops.formulas import FlopFormula as FlopFormula
from hookscope.flops.formulas import aten
from hookscope.flops.formulas import shape_wrapper as shape_wrapper

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


def base_name(func: torch_private.OpOverload) -> str:
    """Packet name without the in-place ``_`` suffix: ``aten.add_.Tensor`` -> ``add``."""
    name: str = func.overloadpacket.__name__
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


def rule_without_formula(func: torch_private.OpOverload) -> FlopRule:
    """How an op without a FLOP formula is counted (see the module docstring)."""
    namespace = func.namespace
    if namespace in ("prim", "profiler"):
        # prim::device, prim::layout: metadata queries; profiler::_record_function_*:
        # the markers record_function() dispatches (optimizers use it in step())
        return FlopRule.FREE
    if namespace in COLLECTIVE_NAMESPACES:  # moves data: no matmul-like work
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


def _tags(func: torch_private.OpOverload, name: str) -> set[Any]:
    """The op's tags and those of its functional op's overloads: ``out=`` and in-place
    variants (``relu.out``, ``abs_``) are not tagged themselves."""
    tags = set(func.tags)
    functional = getattr(aten, name, None)
    packets: list[Any] = [func.overloadpacket, functional]
    for packet in (p for p in packets if p is not None):
        for overload in packet.overloads():
            tags.update(getattr(packet, overload).tags)
    return tags


def _tensor_returns(func: torch_private.OpOverload) -> list[Any]:
    schema = torch_private.op_schema(func)
    returns = list(schema.returns) if schema is not None else []
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
