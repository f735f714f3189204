"""``torch.jit.trace``: its scope map and tracing state, as the module call path sees them.

Under ``torch.jit.trace`` torch's ``_call_impl`` calls ``Module._slow_forward``, which
records module scopes from ``torch.jit._trace._trace_module_map``; the fast path reads
that map on every call (:func:`jit_trace_scopes`, checked against
``_slow_forward``'s source once per process), and probes set the tracing state aside
while they work on tensors inside a traced forward (:func:`jit_tracing_paused`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from hookscope.core.torch_private._source import source_body
from hookscope.core.torch_private._warnings import _warn_once

# -- torch.jit.trace -----------------------------------------------------------------------

# torch's ``_slow_forward``, comments and whitespace removed: unless
# ``torch.jit.trace`` records module scopes, it calls ``forward`` and nothing else
_SLOW_FORWARD = (
    "tracing_state=torch._C._get_tracing_state()"
    "ifnottracing_stateorisinstance(self.forward,torch._C.ScriptMethod):"
    "returnself.forward(*input,**kwargs)"
    "recording_scopes=torch.jit._trace._trace_module_mapisnotNone"
    "ifrecording_scopes:name=torch.jit._trace._trace_module_map.get(self,None)"
    "ifname:tracing_state.push_scope(name)else:recording_scopes=False"
    "try:result=self.forward(*input,**kwargs)"
    "finally:ifrecording_scopes:tracing_state.pop_scope()returnresult"
)
_jit_scopes: list[Any] = []


class _TracingStateAsMap:
    """Stands in for ``torch.jit._trace`` where ``_slow_forward`` reads differently:
    its ``_trace_module_map`` is torch.jit.trace's state (``None`` when not tracing)."""

    @property
    def _trace_module_map(self) -> Any:
        return torch._C._get_tracing_state()


@contextlib.contextmanager
def jit_tracing_paused() -> Iterator[None]:
    """``torch.jit.trace`` stops recording while the block runs (``torch._C``'s tracing
    state set aside): probes' work on tensors inside a traced forward (statistics, a
    copy) is not recorded into the user's graph, where torch's alias analysis fails on
    it. Without the private functions, nothing is paused (a warning, once)."""
    get = getattr(torch._C, "_get_tracing_state", None)
    put = getattr(torch._C, "_set_tracing_state", None)
    if get is None or put is None:
        _warn_once("probes inside torch.jit.trace", "has no torch._C._get_tracing_state")
        yield
        return
    state = get()
    put(None)
    try:
        yield
    finally:
        put(state)


def jit_trace_scopes() -> Any:
    """An object whose ``_trace_module_map`` is not ``None`` exactly when torch's
    ``_call_impl`` would call ``_slow_forward`` to some effect: while ``torch.jit.trace``
    records module scopes (``torch.jit._trace`` itself; without scopes to record,
    ``_slow_forward`` only calls ``forward``). The fast path reads it on every module
    call. It is a module attribute read instead of ``torch._C._get_tracing_state()``, a
    pybind11 call that costs several µs with cold caches, between two kernels. Where
    ``_slow_forward`` reads differently (checked once per process, from its source),
    an object whose ``_trace_module_map`` is the tracing state, with a warning."""
    if not _jit_scopes:
        trace_module = getattr(torch.jit, "_trace", None)
        body = source_body(getattr(nn.Module, "_slow_forward", None))
        if body == _SLOW_FORWARD and hasattr(trace_module, "_trace_module_map"):
            _jit_scopes.append(trace_module)
        else:
            _jit_scopes.append(_TracingStateAsMap())
            _warn_once("the speed of trace() and summary()",
                       "changed how Module._slow_forward records torch.jit.trace scopes"
                       if body else "has no readable source for Module._slow_forward")
    return _jit_scopes[0]
