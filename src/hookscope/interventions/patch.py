"""Interventions: replace what chosen modules return (or receive) while a block runs.

A patch is a replacing probe (``replaces = True``, ``core/engine/probe.py``) in a
:class:`~hookscope.Tracer` that observes only the patched modules. The engine runs
replacing probes before recording ones, so a trace or capture made in the same block
records the patched values. Every hook is the tracer's and is removed on exit, also on
exceptions.

Order, documented and tested:

- within one ``patch`` call, the functions whose selectors match a module run in the
  order of the mapping, each receiving the output the previous one returned;
- nested ``patch`` blocks compose in the order they were entered: an inner block's
  functions receive the output the outer block made;
- a ``Tracer``/``trace``/``capture`` records what the model's caller received, the
  patched values, whether it was entered inside the patch block or before it: a
  replacing-only tracer (the patch) puts its hooks before every recording tracer's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from torch import nn

from hookscope.core.engine.probe import Probe
from hookscope.core.engine.tracer import Tracer
from hookscope.core.model.module_table import module_paths
from hookscope.core.model.selectors import ModuleSelector, compile_module_selector
from hookscope.core.model.wrappers import unwrap
from hookscope.core.records.trace import Call
from hookscope.errors import SpecError

PatchFn = Callable[[nn.Module, tuple[Any, ...], Any], Any]
"""``fn(module, inputs, output) -> replacement output | None`` (``None``: keep it)."""
InputPatchFn = Callable[[nn.Module, tuple[Any, ...], dict[str, Any]], Any]
"""``fn(module, args, kwargs) -> None | new args | (new args, new kwargs)``."""


def call_aware(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a patch function that also takes ``call=`` (the :class:`~hookscope.Call`
    being patched), as ``patches.replace_with`` does to find a captured call by name."""
    fn.hookscope_call_aware = True  # type: ignore[attr-defined]
    return fn


def output_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a ready-made patch of outputs (``fn(module, inputs, output)``):
    ``patch_inputs``, which calls ``fn(module, args, kwargs)``, refuses it."""
    fn.hookscope_output_only = True  # type: ignore[attr-defined]
    return fn


def _plan(model: nn.Module, fns: Mapping[ModuleSelector, Callable[..., Any]],
          api: str) -> dict[str, list[Callable[..., Any]]]:
    """Path -> the functions that patch it, in mapping order."""
    if not isinstance(model, nn.Module):
        raise SpecError(f"{api} expects a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(fns, Mapping) or not fns:
        raise SpecError(
            f"{api} expects a non-empty mapping {{selector: fn}}, got {fns!r}; e.g. "
            f"hookscope.{api}(model, {{'layer1.*': hookscope.patches.zero()}})"
        )
    plan: dict[str, list[Callable[..., Any]]] = {}
    model = unwrap(model)  # paths without a data-parallel wrapper's ``module.``
    modules = list(model.named_modules())
    paths = module_paths(model)
    for select, fn in fns.items():
        if not callable(fn):
            raise SpecError(f"{api}: the value for {select!r} must be a function, got {fn!r}")
        if api == "patch_inputs" and getattr(fn, "hookscope_output_only", False):
            raise SpecError(
                f"patch_inputs: the value for {select!r} is a ready-made patch of outputs "
                "(hookscope.patches.*); patch_inputs takes fn(module, args, kwargs) "
                "returning new args, e.g. lambda m, args, kwargs: (args[0] * 0,), or use "
                "hookscope.patch on the module before it"
            )
        matches = compile_module_selector(select)
        hit = [path for path, module in modules  # a shared module: by any of its paths
               if any(matches(p, module) for p in paths.get(path, (path,)))]
        if not hit:
            examples = [p for p, _ in modules if p][:4]
            raise SpecError(
                f"{api}: selector {select!r} matches no module of {type(model).__name__}; "
                f"paths look like {examples!r} (glob: * within a segment, ** across dots)"
            )
        for path in hit:
            plan.setdefault(path, []).append(fn)
    return plan


class _OutputPatch(Probe):
    name = "patch"
    replaces = True

    def __init__(self, plan: dict[str, list[Callable[..., Any]]]) -> None:
        self.plan = plan

    def on_exit(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
        output: Any, failed: bool,
    ) -> Any:
        if failed:
            return None
        replaced = False
        for fn in self.plan.get(call.path, ()):
            if getattr(fn, "hookscope_call_aware", False):
                new = fn(module, args, output, call=call)
            else:
                new = fn(module, args, output)
            if new is not None:
                output, replaced = new, True
        return output if replaced else None


class _InputPatch(Probe):
    name = "patch_inputs"
    replaces = True

    def __init__(self, plan: dict[str, list[Callable[..., Any]]]) -> None:
        self.plan = plan

    def on_enter(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        replaced = False
        for fn in self.plan.get(call.path, ()):
            new = fn(module, args, kwargs)
            if new is None:
                continue
            if isinstance(new, tuple) and len(new) == 2 and isinstance(new[0], tuple) \
                    and isinstance(new[1], dict):
                args, kwargs = new
            else:
                args = new if isinstance(new, tuple) else (new,)
            replaced = True
        return (args, dict(kwargs)) if replaced else None


class PatchHandle:
    """Patches in place on a model until :meth:`remove` (idempotent) or the end of the
    ``with`` block."""

    def __init__(self, model: nn.Module, probe: Probe, paths: set[str]) -> None:
        # the root is observed too (it passes through): an error that leaves it is
        # in the block's hands, which may handle it (core/engine/tracer.py: undelivered errors)
        self._tracer: Tracer | None = Tracer(
            model, shapes=False, probes=[probe], select=lambda path: path in paths or not path
        )
        self._tracer.__enter__()
        self.paths = sorted(paths)

    def remove(self) -> None:
        """Remove the patches (a second call does nothing)."""
        self.__exit__(None, None, None)

    def __enter__(self) -> PatchHandle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tracer, self._tracer = self._tracer, None
        if tracer is not None:
            tracer.__exit__(exc_type, exc, tb)


def patch(model: nn.Module, fns: Mapping[ModuleSelector, PatchFn]) -> PatchHandle:
    """Replace the outputs of chosen modules until the block ends.

    Args:
        model: the model; after the block (or ``remove()``) it has exactly the hooks and
            values it had before, also when the block raised.
        fns: ``{selector: fn}``; a selector is a glob over module paths, a list of globs,
            a module class (or tuple of classes) or ``fn(path) -> bool``, and ``fn`` is
            called as ``fn(module, inputs, output)`` after each call of a chosen module
            (``inputs``: its positional arguments) and returns a replacement output or
            ``None`` to keep it. Ready-made functions: ``hookscope.patches``.

    Returns:
        A handle; the patches are active as soon as it is made.

    Raises:
        SpecError: not a mapping, a value that is not callable, or a selector that
            matches no module.

    Example:
        >>> with hookscope.patch(model, {"layer2.*.relu": hookscope.patches.zero()}):
        ...     ablated = model(x)
    """
    plan = _plan(model, fns, "patch")
    return PatchHandle(model, _OutputPatch(plan), set(plan))


def patch_inputs(model: nn.Module, fns: Mapping[ModuleSelector, InputPatchFn]) -> PatchHandle:
    """Replace what chosen modules' ``forward`` receives until the block ends.

    Args:
        model: the model (left as it was afterwards).
        fns: ``{selector: fn}``; ``fn(module, args, kwargs)`` runs before each call of
            a chosen module and returns ``None`` (keep), a tuple of new positional
            arguments, a single new first argument, or ``(args, kwargs)``.

    Returns:
        A handle; the patches are active as soon as it is made.

    Raises:
        SpecError: as :func:`patch`.

    Example:
        >>> with hookscope.patch_inputs(model, {"fc": lambda m, a, k: (a[0] * 0,)}):
        ...     out = model(x)
    """
    plan = _plan(model, fns, "patch_inputs")
    return PatchHandle(model, _InputPatch(plan), set(plan))
