"""One-call entry points: ``trace`` and ``summary``.

Both validate their options here, at the API boundary, build example inputs when the
user gives sizes instead of tensors (``core/inputs.py``), run the model under a
:class:`~hookscope.core.engine.tracer.Tracer`, and turn a failure inside the model into a
:class:`~hookscope.errors.ModelRunError` that carries the partial trace.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

import hookscope.distributed
import hookscope.render  # noqa: F401  (registers how a Trace prints and exports)
from hookscope.core.engine.failures import message
from hookscope.core.engine.probe import Probe, register_probe
from hookscope.core.engine.run_backward import run_backward
from hookscope.core.engine.tracer import ProbeSpec, Tracer, describe_failure
from hookscope.core.inputs import (
    InputSize,
    make_example_inputs,
    model_device,
    model_float_dtype,
    parse_device,
)
from hookscope.core.meta import inputs_to_meta, is_meta_request, is_on_meta, meta_copy
from hookscope.core.model.selectors import ModuleSelector
from hookscope.core.model.wrappers import unwrap, wrapper_names
from hookscope.core.options import check_flags, check_optional_flags
from hookscope.core.records.tensor_paths import call_input_metas, metas
from hookscope.core.records.trace import Call, Trace
from hookscope.core.torch_private import original_module
from hookscope.errors import ModelRunError, ProbeError, RunStopped, SpecError
from hookscope.probes import PROBES
from hookscope.render.summary import Summary
from hookscope.render.trace_table import describe_input_stats

__all__ = ["PROBES", "Probe", "Trace", "Tracer", "register_probe", "summary", "trace"]


def trace(
    model: nn.Module,
    *inputs: Any,
    kwargs: dict[str, Any] | None = None,
    input_size: InputSize | None = None,
    dtypes: Sequence[torch.dtype] | None = None,
    device: str | torch.device | None = None,
    backward: bool = False,
    loss: Callable[[Any], torch.Tensor] | None = None,
    grad: bool | None = None,
    grads: bool | None = None,
    shapes: bool = True,
    time: bool = True,
    stats: bool = True,
    memory: bool = True,
    ops: bool = False,
    probes: Iterable[ProbeSpec] = (),
    select: ModuleSelector | None = None,
    compiled: bool = False,
) -> Trace:
    """Run one forward pass (and optionally a backward pass) and record every call.

    Args:
        model: the model; it is left exactly as it was (hooks, flags, parameters).
            A ``DistributedDataParallel`` (or ``DataParallel``) wrapper's module runs
            alone, on this rank, without the wrapper's collectives; paths are its own.
        *inputs: positional inputs of ``model``.
        kwargs: keyword inputs of ``model``.
        input_size: instead of ``inputs``: one shape or a list of shapes; random
            tensors of those shapes are made on the model's device.
        dtypes: dtypes of the tensors made from ``input_size`` (default float32).
        device: where to make inputs from ``input_size`` (default: the model's).
            ``"meta"`` analyses the model on the meta device (shapes, parameters,
            FLOPs; no real memory, no timing): a copy of the model and the inputs are
            made on meta, the model itself is untouched. A model already on the meta
            device is always analysed there.
        backward: also run a backward pass, from ``loss`` (default: the sum of every
            floating output). Gradients are computed with ``torch.autograd.grad``: no
            ``.grad`` is changed. Records the gradients (``grads``).
        loss: ``loss(output) -> Tensor``: the scalar to differentiate with
            ``backward=True`` (a criterion on the output, ``lambda out: out.logits.
            logsumexp(-1).mean()``); its own ops are not the model's.
        grad: run the forward with autograd recording, so that the memory probe
            reports the bytes each call saves for backward, without running a
            backward. Default (``None``): only when ``backward=True``; otherwise the
            forward runs under ``torch.no_grad()``.
        grads: record gradients (``probes/grads.py``): per call the norms of the
            gradients w.r.t. outputs and inputs and the backward time, per parameter
            norm, max-abs, mean, NaN/Inf counts, unused and frozen parameters
            (``trace.param_grads``). Default (``None``): when ``backward=True``.
        shapes: run the built-in shapes probe.
        time: run the built-in time probe.
        stats: run the built-in stats probe (output statistics).
        memory: run the built-in memory probe.
        ops: run the built-in ops probe (aten ops and FLOPs).
        probes: more probes: instances, probe classes or registered names, exactly as
            :class:`~hookscope.Tracer` takes them.
        select: observe only the modules whose path matches (a glob, a list of globs,
            ``fn(path) -> bool``), or the instances of a module class.
        compiled: also run the model once through ``torch._dynamo.explain`` and record
            what the compiled code does (``trace.meta["compile"]``, read with
            ``CompileReport.of(trace.meta)``): its graphs, each graph break with its
            reason, module and source line, and the recompilations dynamo recorded.
            The calls are always recorded from the original module run eagerly: a
            model compiled with ``torch.compile`` is traced as the module it wraps
            (``trace.meta["compiled"]`` says how it was compiled).

    Returns:
        The :class:`~hookscope.Trace`.

    Raises:
        ModelRunError: the model raised; ``.trace`` holds the partial trace.
        RunStopped: a probe stopped the run early; ``.trace`` holds the partial trace.
        ProbeError: a probe raised (the model did not); ``.trace`` holds the partial trace.
        SpecError: an option is wrong.
    """
    check_flags(backward=backward, compiled=compiled)
    check_optional_flags(grad=grad, grads=grads)
    if backward and grad is False:
        raise SpecError("backward=True needs grad mode; drop grad=False or backward=True")
    if loss is not None and not backward:
        raise SpecError("loss= is what backward=True differentiates; pass backward=True too")
    if loss is not None and not callable(loss):
        raise SpecError(
            f"loss= must be a function of the model's output returning a scalar tensor, "
            f"got {type(loss).__name__}; write loss=lambda out: out.sum()"
        )
    if grads is not None and not isinstance(grads, bool):
        raise SpecError(f"grads= must be True, False or None, got {grads!r}")
    if backward and torch.is_inference_mode_enabled():
        raise SpecError(
            "backward=True needs autograd, which torch.inference_mode() turns off; call "
            "hookscope.trace outside the inference_mode block (or use torch.no_grad())"
        )
    args, kw = _resolve_inputs(model, inputs, kwargs, input_size, dtypes, device)
    # NB: a data-parallel wrapper's module runs alone: on this rank, without the
    # wrapper's collectives (buffer broadcast, gradient all-reduce) or its state
    wrappers = wrapper_names(model)
    model = unwrap(model)
    on_meta = is_meta_request(device) or (device is None and is_on_meta(model))
    if on_meta:  # analyse a meta copy: the user's model is not touched
        _warn_autocast_ignored()
        if compiled:
            raise SpecError("compiled=True runs the model's compiled code, which needs real "
                            "tensors; drop device='meta' (--device meta) or compiled=True "
                            "(--compiled)")
        model, (args, kw) = meta_copy(original_module(model)), inputs_to_meta((args, kw))
        # nothing runs on meta: no times, and no values to take statistics of
        time = stats = False
    tracer = Tracer(
        model, shapes=shapes, time=time, stats=stats, memory=memory, ops=ops,
        probes=probes, select=select, restore_state=True,
        grads=backward if grads is None else grads,
        exclusive=True,  # only the model (and the backward) runs inside it
        restore_buffers=True,  # its forward is run for the caller: no trace left
        saves_nothing=not (backward or grad),  # under no_grad: autograd saves nothing
    )
    grad_ctx = torch.enable_grad() if backward or grad else torch.no_grad()
    started = False
    in_backward: list[Call | None] = []  # the backward raised (inside that call's)
    try:
        with tracer, grad_ctx:
            started = True
            output = tracer.model(*args, **kw)  # a torch.compile wrapper's module
            if backward:
                try:
                    run_backward(tracer, tracer.model, output, args, kw, loss)
                except Exception:
                    in_backward.append(tracer.backward_failed_in())
                    raise
    except (RunStopped, ProbeError):
        raise  # hookscope's own: they carry the partial trace already
    except Exception as e:
        if not started:  # the tracer could not start: nothing of the model ran
            raise
        raise _run_error(tracer, e, in_backward) from e
    result = tracer.trace
    assert result is not None
    result.inputs = call_input_metas(args, kw)
    result.outputs = metas(output, "out")
    if on_meta:
        result.meta["device"] = "meta"
    if compiled:
        from hookscope.api.compiled import explain_compiled

        result.meta["compile"] = explain_compiled(
            tracer.model, args, kw, result, grad=bool(backward or grad))
    if wrappers:
        result.meta["wrappers"] = wrappers
    return result


def summary(
    model: nn.Module,
    *inputs: Any,
    kwargs: dict[str, Any] | None = None,
    input_size: InputSize | None = None,
    dtypes: Sequence[torch.dtype] | None = None,
    device: str | torch.device | None = None,
    depth: int | None = None,
    ops: bool = False,
    fold: bool = True,
    compiled: bool = False,
) -> Summary:
    """Summarise a model: module tree, input/output shapes and parameters per call.

    Runs one forward pass under ``torch.no_grad()``.

    Args:
        model: the model; it is left exactly as it was.
        *inputs: as for :func:`trace`.
        kwargs: as for :func:`trace`.
        input_size: as for :func:`trace`.
        dtypes: as for :func:`trace`.
        device: as for :func:`trace`.
        depth: show modules down to this depth (``None``: all).
        ops: also count FLOPs per call.
        fold: show a run of identical blocks (GPT-2's ``h.1`` ... ``h.11``) as its
            first block and one row for the rest; ``False`` shows every row.
        compiled: as for :func:`trace`: also report the compiled code's graphs and
            graph breaks under the table.

    Returns:
        A :class:`~hookscope.render.summary.Summary`: print it for the table;
        ``.trace`` holds the records, ``.to_json()`` the JSON document.

    Example:
        >>> print(hookscope.summary(model, input_size=(1, 3, 224, 224), depth=2))
    """
    check_flags(fold=fold)
    if depth is not None and (not isinstance(depth, int) or isinstance(depth, bool) or depth < 0):
        raise SpecError(f"depth must be a non-negative integer or None, got {depth!r}")
    result = trace(
        model, *inputs, kwargs=kwargs, input_size=input_size, dtypes=dtypes, device=device,
        time=False, stats=False, memory=False, ops=ops, compiled=compiled,
    )
    return Summary(result, depth=depth, fold=fold)


def _resolve_inputs(
    model: nn.Module,
    inputs: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    input_size: InputSize | None,
    dtypes: Sequence[torch.dtype] | None,
    device: str | torch.device | None,
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if not isinstance(model, nn.Module):
        raise SpecError(
            f"expected a torch.nn.Module as the first argument, got {type(model).__name__}"
        )
    if kwargs is not None and not isinstance(kwargs, dict):
        raise SpecError(f"kwargs must be a dict of keyword inputs, got {type(kwargs).__name__}")
    bad_keys = [k for k in kwargs or {} if not isinstance(k, str)]
    if bad_keys:
        raise SpecError(
            f"kwargs keys must be argument names (strings), got {bad_keys[0]!r}; pass "
            "tensors that are not keyword arguments positionally"
        )
    if inputs and input_size is not None:
        raise SpecError("pass either input tensors or input_size=, not both")
    if input_size is not None:
        dev = parse_device(device) or model_device(model)
        made = make_example_inputs(
            input_size, dtypes=dtypes, device=dev, float_dtype=model_float_dtype(model)
        )
        return made, dict(kwargs or {})
    if dtypes is not None:
        raise SpecError("dtypes= only applies to inputs made from input_size=")
    if not inputs and kwargs is None:
        raise SpecError(
            "no inputs given: pass example inputs (hookscope.trace(model, x)) "
            "or their sizes (input_size=(1, 3, 224, 224)); for a model whose forward "
            "takes no arguments, pass kwargs={}"
        )
    wanted = parse_device(device)
    if wanted is not None and wanted.type != "meta":
        for meta in call_input_metas(inputs, kwargs or {}):
            on = torch.device(meta.device)
            other_index = None not in (wanted.index, on.index) and wanted.index != on.index
            if on.type != wanted.type or other_index:
                raise SpecError(
                    f"device={str(device)!r} but input {meta.path} is on {on}: device= "
                    "moves nothing, it only places inputs made from input_size= (or "
                    "analyses on 'meta'); move the model and the inputs with .to() instead"
                )
    return inputs, dict(kwargs or {})


def _warn_autocast_ignored() -> None:
    """Autocast has no meta device: say so when the caller's block turned it on."""
    on = []
    for device_type in ("cpu", "cuda", "xpu", "mps"):
        try:
            if torch.is_autocast_enabled(device_type):
                on.append(device_type)
        except (RuntimeError, TypeError):  # a device type this torch does not know
            continue
    if on:
        warnings.warn(
            f"hookscope: torch.autocast({on[0]!r}) does not apply on the meta device; the "
            "analysis shows the dtypes and bytes of the model without it (FLOPs are the "
            "same). Drop device='meta' to see the autocast dtypes",
            UserWarning, stacklevel=_outside_hookscope(),
        )


def _outside_hookscope() -> int:
    """The ``stacklevel`` of the first frame outside this module (``trace`` is called
    directly, or by ``summary``)."""
    here = inspect.currentframe()
    level, frame = 1, here.f_back if here is not None else None
    while frame is not None and frame.f_code.co_filename == __file__:
        level, frame = level + 1, frame.f_back
    return level


def _run_error(tracer: Tracer, e: Exception, in_backward: list[Call | None]) -> Exception:
    partial = tracer.trace
    if partial is None or isinstance(e, SpecError):
        return e
    if in_backward:  # the forward ran; its backward raised
        call = in_backward[0]
        where = "" if call is None else \
            f" in the backward of module {call.path or '<root>'!r} ({call.module_class}, " \
            f"call {call.call_index})"
        return ModelRunError(
            f"the model's backward pass raised {type(e).__name__}{where}: {message(e)}",
            trace=partial, path=None if call is None else call.path,
        )
    err = partial.error
    if err is None:  # not the model's: raised by hookscope itself while leaving the run
        return e
    inputs = "" if err.call is None else describe_input_stats(
        partial.calls[err.call]
    )
    return ModelRunError(
        f"the model raised {describe_failure(partial)}{inputs}",
        trace=partial,
        path=err.path,
    )
