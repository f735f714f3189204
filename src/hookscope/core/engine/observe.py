"""How a run observes its module calls: the stand-in for ``Module._call_impl``
(``core/engine/fast_path.py``) or per-module hooks (``core/engine/module_hooks.py``), per module.

:func:`observe_module_calls` is called once on a tracer's entry, after the probes are
installed; everything it registers goes to the tracer's handles, removed on exit. The
hooks and the stand-in it installs talk to the tracer's :class:`~hookscope.core.engine.run.Run`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from torch import nn

from hookscope.core.engine.call_plan import plan_calls
from hookscope.core.engine.fast_path import install_call_path
from hookscope.core.engine.handles import CallbackHandle, HandleGroup
from hookscope.core.engine.module_hooks import (
    RECORDING_HOOKS,
    RECORDING_PRE_HOOKS,
    before_recorders,
    make_module_post_hook,
    make_module_pre_hook,
)
from hookscope.core.torch_private import call_impl_replaceable, global_module_hooks_present

if TYPE_CHECKING:
    from hookscope.core.engine.run import Run
    from hookscope.core.model.table_reuse import ModelScan


def observe_module_calls(
    run: Run, handles: HandleGroup, members: Sequence[tuple[str, nn.Module]],
    selects: Callable[[str], bool] | None, *, exclusive: bool, scan: ModelScan | None = None,
) -> None:
    """Observe the calls of ``members`` (``(path, module)``, each module once) that
    ``selects`` chooses (``None``: all) for ``run``; what it installs goes to
    ``handles``. Exclusive runs (``trace()``/``summary()``) observe hook-free modules in
    the stand-in, ``torch.nn`` leaves without a start event when no probe needs one;
    every other module, and every module of any other run, gets a forward pre-hook and
    an always-call forward hook. ``scan``: what the table's check read of the modules,
    when it holds for the plan (``core/model/table_reuse.py``)."""
    add = handles.add
    fast = (
        exclusive and not run.watches_calls and not run.enter_replacers
        and not run.exit_replacers and not global_module_hooks_present()
        and call_impl_replaceable()
    )
    plan = plan_calls(members, selects, fast, not run.needs_start, scan)
    hooked = plan.hooked
    if plan.entries:  # the stand-in reads them (core/engine/fast_path.py)
        fast_handle = install_call_path(run, plan)
        if fast_handle is None:  # another tracer's stand-in is there: plain hooks
            hooked = plan_calls(members, selects, False, False).hooked
        else:
            add(fast_handle)
    if not hooked:
        return
    recording = not run.replaces_only
    post_hook = make_module_post_hook(run)  # one function: it finds its call on the stack
    for path, module in hooked:
        post = module.register_forward_hook(post_hook, with_kwargs=True, always_call=True)
        add(post)
        if recording:
            RECORDING_HOOKS.add(post.id)
            add(CallbackHandle(functools.partial(RECORDING_HOOKS.discard, post.id)))
        pre_hook = make_module_pre_hook(run, path, type(module).__name__, post.id)
        pre = module.register_forward_pre_hook(pre_hook, with_kwargs=True)
        add(pre)
        if recording:
            RECORDING_PRE_HOOKS.add(pre.id)
            add(CallbackHandle(functools.partial(RECORDING_PRE_HOOKS.discard, pre.id)))
        if run.enter_replacers:  # inputs replaced inside a recording block: first
            before_recorders(module._forward_pre_hooks, pre.id, RECORDING_PRE_HOOKS)
