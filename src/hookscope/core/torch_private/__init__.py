"""Every use of a private torch API, in one package.

hookscope relies on a few things torch does not promise: that every module call looks
``Module._call_impl`` up when it runs (the exclusive fast path stands in for it), the
registries of global module hooks, the sources of ``Module._call_impl`` and
``Module._slow_forward`` and ``torch.jit.trace``'s scope map
(``torch.jit._trace._trace_module_map``), autograd's node sequence numbers and
current node, the saved-tensor hooks currently active, the execution engine's
end-of-backward callback queue, functorch's wrapper check, the dispatcher's kernel
table and the guard that turns Python dispatch off, the operator classes and
schemas, tensor version counters and storages, the ``_foreach`` kernels and the
batch-norm base class. Each is wrapped here with a fallback for a torch release that
changed it: the fallback **warns once** (``HookscopeTorchWarning``) and degrades that
one feature, never silently (the operator classes are imported as they are: without
them the ops probe cannot exist, so a torch that moves one fails at import, by name).
``tests/core/test_torch_private.py`` checks every
assumption against the installed torch, so a release that breaks one fails a test by
name.

Nothing outside this package touches these APIs; ``torch.utils._pytree`` (the
documented way to walk nested values) is imported here too (``pytree``). Callers use
the names below (``torch_private.next_sequence_nr()``); the submodules hold them:

- ``call_impl.py``: ``Module._call_impl``, torch's and the fast path's stand-in for
  it (:func:`replace_call_impl`, :func:`stand_in_call_impl`,
  :func:`call_impl_replaceable`, :func:`call_impl_shortcut`,
  :func:`overrides_call_impl`), its frames in a traceback and on the stack
  (:func:`raised_in_call_of`, :func:`inside_another_module_call`), and the global module
  hook registries (:func:`global_module_hooks_present`).
- ``jit.py``: ``torch.jit.trace``'s scope map and tracing state
  (:func:`jit_trace_scopes`, :func:`jit_tracing_paused`).
- ``autograd.py``: node sequence numbers, the current node and graph task, the
  end-of-backward queue, saved-tensor hooks, a tensor's hook order
  (:func:`hooks_first`), whether a backward accumulates into a leaf
  (:func:`accumulates_now`), whether a pass runs a node (:func:`node_runs_function`),
  the forward stack anomaly mode keeps on a node (:func:`node_forward_stack`), a custom
  function's class (:func:`custom_function_class`), whether a hook handle's table
  still exists (:func:`hook_table_alive`) and a ``GradScaler``'s overflow flags.
- ``dispatch.py``: functorch's wrappers and batches, version counters, the
  dispatcher's kernel table, and Python dispatch (:func:`dispatch_off`,
  :func:`unwrapped_dispatch_mode`).
- ``operators.py``: the operator classes (:class:`OpOverload`, :class:`OpOverloadPacket`,
  :class:`HigherOrderOperator`), :class:`TorchDispatchMode`, an op's schema
  (:func:`op_schema`) and a custom op's overload (:func:`custom_op_overload`).
- ``tensor_internals.py``: version counters (:func:`version_counter`), storage identity
  (:func:`storage_key`), a sparse tensor's parts (:func:`sparse_coo_parts`) and the
  ``_foreach`` kernels (:func:`foreach_norm`, :func:`foreach_mul_`).
- ``compiler.py``: ``torch.compile``: the module a compiled model wraps
  (:func:`original_module`), how it was compiled (:func:`compiled_form`),
  ``torch._dynamo.explain`` without its cache reset (:func:`explain_run`, of a module's
  call: :func:`explain_module_run`) and the guard
  failures dynamo recorded when it recompiled (:func:`recompile_reasons`).
- ``fake.py``: fake tensors (:func:`fake_mode`, :func:`is_fake`, the exceptions of an
  op that reads values, :data:`VALUE_DEPENDENT`), which the memory plan runs on, and
  the workspace a kernel keeps for backward that they report as empty
  (:func:`real_workspace_nbytes`).
- ``fsdp.py``: FSDP2's all-gathered parameters, which autograd differentiates
  (:func:`fsdp_unsharded_params`).
- ``frames.py``: torch's source files a module call and a backward pass run through
  to reach a hook (:func:`is_torch_machinery`), which a breakpoint's stack hides.
- ``module_internals.py``: the process-wide module hook dicts (:func:`global_hooks`,
  :func:`global_backward_hooks_are_legacy`) and :data:`BatchNormBase`.
- ``_source.py``: a torch function's body as text, which ``call_impl.py`` and
  ``jit.py`` compare once per process with the copy they rely on.
- ``_warnings.py``: :class:`HookscopeTorchWarning` and the warn-once bookkeeping every
  fallback shares.

The accepted exception: the attributes every ``nn.Module`` instance keeps its
children, tensors and hooks in are used where they are needed, as torch's own
``nn.Module`` methods and ``torch.utils.hooks`` use them (read, and for a buffer the
forward replaced, written back: ``core/model/buffer_state.py``):
``_modules``, ``_parameters``, ``_buffers``, ``_non_persistent_buffers_set``, the
per-module hook dicts (``_forward_pre_hooks``, ``_forward_hooks``,
``_backward_pre_hooks``, ``_backward_hooks``, their ``_with_kwargs``/``_always_called``
flag dicts, ``_state_dict_pre_hooks``, ``_state_dict_hooks``,
``_load_state_dict_pre_hooks``, ``_load_state_dict_post_hooks``), and a tensor's
``_backward_hooks`` and ``_post_accumulate_grad_hooks``. They are the registries that
``register_*_hook`` and ``named_modules()`` themselves fill and walk;
``tests/test_safety.py`` counts them before and after every entry point.
"""

from __future__ import annotations

from torch.utils import _pytree as pytree

from hookscope.core.torch_private._warnings import HookscopeTorchWarning
from hookscope.core.torch_private.autograd import (
    accumulates_now,
    current_autograd_node,
    current_graph_task_id,
    custom_function_class,
    graph_task_id_function,
    graph_task_running,
    hook_table_alive,
    hooks_first,
    next_sequence_nr,
    node_forward_stack,
    node_runs_function,
    node_sequence_nr,
    queue_end_of_backward,
    saved_tensor_default_hooks,
    scaler_found_inf,
    scaler_scale,
    scaler_update_marker,
)
from hookscope.core.torch_private.call_impl import (
    call_impl_replaceable,
    call_impl_shortcut,
    global_module_hooks_present,
    inside_another_module_call,
    overrides_call_impl,
    raised_in_call_of,
    replace_call_impl,
    stand_in_call_impl,
    torch_call_impl,
)
from hookscope.core.torch_private.compiler import (
    compiled_form,
    explain_module_run,
    explain_run,
    original_module,
    recompile_reasons,
)
from hookscope.core.torch_private.dispatch import (
    batched,
    dispatch_has_composite_kernel,
    dispatch_off,
    is_functorch_wrapped,
    set_versions,
    unwrapped_dispatch_mode,
    vmap_running,
)
from hookscope.core.torch_private.frames import is_torch_machinery
from hookscope.core.torch_private.fsdp import fsdp_unsharded_params
from hookscope.core.torch_private.jit import jit_trace_scopes, jit_tracing_paused
from hookscope.core.torch_private.module_internals import (
    BatchNormBase,
    global_backward_hooks_are_legacy,
    global_hooks,
)
from hookscope.core.torch_private.operators import (
    HigherOrderOperator,
    OpOverload,
    OpOverloadPacket,
    TorchDispatchMode,
    custom_op_overload,
    op_schema,
)
from hookscope.core.torch_private.tensor_internals import (
    foreach_mul_,
    foreach_norm,
    sparse_coo_parts,
    storage_key,
    version_counter,
)

__all__ = [
    "BatchNormBase",
    "HigherOrderOperator",
    "HookscopeTorchWarning",
    "OpOverload",
    "OpOverloadPacket",
    "TorchDispatchMode",
    "accumulates_now",
    "batched",
    "call_impl_replaceable",
    "call_impl_shortcut",
    "compiled_form",
    "current_autograd_node",
    "current_graph_task_id",
    "custom_function_class",
    "custom_op_overload",
    "dispatch_has_composite_kernel",
    "dispatch_off",
    "explain_module_run",
    "explain_run",
    "foreach_mul_",
    "foreach_norm",
    "fsdp_unsharded_params",
    "global_backward_hooks_are_legacy",
    "global_hooks",
    "global_module_hooks_present",
    "graph_task_id_function",
    "graph_task_running",
    "hook_table_alive",
    "hooks_first",
    "inside_another_module_call",
    "is_functorch_wrapped",
    "is_torch_machinery",
    "jit_trace_scopes",
    "jit_tracing_paused",
    "next_sequence_nr",
    "node_forward_stack",
    "node_runs_function",
    "node_sequence_nr",
    "op_schema",
    "original_module",
    "overrides_call_impl",
    "pytree",
    "queue_end_of_backward",
    "raised_in_call_of",
    "recompile_reasons",
    "replace_call_impl",
    "saved_tensor_default_hooks",
    "scaler_found_inf",
    "scaler_scale",
    "scaler_update_marker",
    "set_versions",
    "sparse_coo_parts",
    "stand_in_call_impl",
    "storage_key",
    "torch_call_impl",
    "unwrapped_dispatch_mode",
    "version_counter",
    "vmap_running",
]
