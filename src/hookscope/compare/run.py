"""``hookscope.compare``: run two models (or one under two settings) on the same inputs
and measure, call by call, where their values part.

Three passes, all without gradients:

1. side A runs in a :class:`~hookscope.Capture` of every module with ``what="both"``:
   each call's inputs and output are copied to the CPU, or streamed to ``spill=DIR``
   (capture's safetensors shards) for a model whose activations do not fit;
2. side B (``sides.py``) runs in a tracer whose probe measures each call's output
   against side A's as the call ends (``measure.py``; side B's outputs are kept
   nowhere), and the two traces' calls are matched by module path and call index
   (``matching.py``);
3. for each matched call, side B's module runs again on side A's inputs of that call
   (cast to side B's dtype and device, under its autocast): how far that output is from
   side A's is the error the call *introduced*; the rest of its error came in with its
   inputs (*propagated*). In that re-run a module's submodules give back side A's
   outputs of their calls (``replay.py``), so a module's introduced error is that of its
   own code, and the re-runs together cost about one forward.

Both runs start from the same RNG seed (in a forked RNG, so the caller's stream does not
move), and every model is left as it was: captures restore training-mode buffers, the
re-runs put back what they change.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hookscope.compare.matching import match_calls
from hookscope.compare.measure import Measured, SideBMeasure, candidates_index
from hookscope.compare.numerics import TensorError, worst
from hookscope.compare.replay import StoredUses, introduced_errors
from hookscope.compare.result import CallError, CompareResult, MemoryUse
from hookscope.compare.sides import SideB, Weights, side_b
from hookscope.core.engine.failures import describe_failure
from hookscope.core.engine.tracer import Tracer
from hookscope.core.records.tensor_paths import iter_tensors
from hookscope.core.records.trace import Call, Trace
from hookscope.errors import HookscopeError, ModelRunError, SpecError
from hookscope.interventions.capture import Capture

_SHARD_MIB = 64.0


def compare(
    model_a: nn.Module, model_b: nn.Module | None = None, *inputs: Any,
    kwargs: dict[str, Any] | None = None, b_autocast: torch.dtype | str | None = None,
    b_dtype: torch.dtype | str | None = None, b_device: str | torch.device | None = None,
    b_compile: bool | str = False, b_weights: Weights | None = None,
    match: Mapping[str, str] | None = None, tolerance: float = 1e-4,
    spill: str | os.PathLike[str] | None = None,
) -> CompareResult:
    """Run ``model_a`` and side B on the same inputs and measure where they part.

    Side B is ``model_b`` (``None``: ``model_a`` itself) under the ``b_*`` settings.

    Args:
        model_a: the reference model.
        model_b: the model compared with it (``None`` or ``model_a``: one model under
            two settings).
        *inputs: positional inputs of the forward (side B gets them on its device, in
            its dtype).
        kwargs: keyword inputs of the forward.
        b_autocast: run side B under ``torch.autocast`` with this dtype
            (``torch.bfloat16``/``"bf16"``, ``torch.float16``/``"fp16"``).
        b_dtype: side B is a copy cast to this floating dtype.
        b_device: side B is a copy on this device.
        b_compile: side B is a copy run through ``torch.compile`` (``True``, or a
            backend name such as ``"eager"``).
        b_weights: side B is a copy with these weights: a state dict, a ``.safetensors``
            file or a ``torch.save`` file (read with ``weights_only=True``).
        match: side A path -> side B path for modules whose paths differ; a prefix maps
            its subtree (``{"encoder": "model.encoder"}``).
        tolerance: the introduced ``max_abs`` error above which a call can be
            :attr:`CompareResult.first` (the first such call to end).
        spill: a new (or empty) directory: side A's call inputs and outputs are streamed
            there instead of kept in memory.

    Returns:
        A :class:`CompareResult`: one row per matched call, the first call that
        introduced an error above ``tolerance``, the calls left unmatched, the memory
        the compare held.

    Raises:
        SpecError: a bad option.
        ModelRunError: a model raised (which side, the module and its inputs' shapes).

    Example:
        >>> result = hookscope.compare(model, None, x, b_autocast="bf16")
        >>> result.first.path
        'conv1'
    """
    if not isinstance(model_a, nn.Module):
        raise SpecError(f"compare expects a torch.nn.Module as model_a, got "
                        f"{type(model_a).__name__}")
    if not (isinstance(tolerance, (int, float)) and not isinstance(tolerance, bool)
            and 0 <= tolerance < math.inf):
        raise SpecError(f"tolerance= must be a finite number >= 0, got {tolerance!r}")
    where = _spill_dir(spill)
    side = side_b(model_a, model_b, autocast=b_autocast, dtype=b_dtype, device=b_device,
                  compile=b_compile, weights=b_weights)
    _check_match(match, model_a, side.model)
    if where is not None:  # made once every option was found good
        where.mkdir(exist_ok=True)
    kwargs = kwargs or {}
    store_a, trace_a = _record_a(model_a, inputs, kwargs, save_to=where)
    measure = SideBMeasure(store_a, candidates_index(trace_a.calls, match))
    trace_b = _run_b(side, side.inputs(inputs), side.inputs(kwargs), measure)
    matching = match_calls(trace_a.calls, trace_b.calls, match=match)
    rows = [_row(a, b, measure.measured) for a, b in matching.pairs]
    uses = StoredUses.of(matching.pairs, trace_a, store_a) if where is None else None
    introduced = introduced_errors(matching.pairs, trace_a, store_a, side, uses=uses)
    rows = [row.with_introduced(i) for row, i in zip(rows, introduced, strict=True)]
    first = _first(rows, [measure.ended.get(b.name, math.inf) for _, b in matching.pairs],
                   tolerance)
    memory = _memory(store_a, side, spilled=where)
    return CompareResult(rows=rows, first=first, tolerance=tolerance,
                         only_a=list(matching.only_a), only_b=list(matching.only_b),
                         memory=memory, trace_a=trace_a, trace_b=trace_b,
                         settings=_settings(side, model_b))


def _first(rows: list[CallError], ended: list[float], tolerance: float) -> CallError | None:
    """The row whose introduced error is above ``tolerance`` and whose side B call ended
    first: in execution order, as :func:`hookscope.find_anomaly` reads calls (a block
    that only passes on its child's output ends after that child)."""
    above = [(end, i) for i, (row, end) in enumerate(zip(rows, ended, strict=True))
             if row.introduced_max_abs is not None and row.introduced_max_abs > tolerance]
    return rows[min(above)[1]] if above else None


def _check_match(match: Mapping[str, str] | None, model_a: nn.Module,
                 model_b: nn.Module) -> None:
    """Check ``match`` against the models' module paths before anything runs (the
    matching checks it again against the calls that ran).

    Raises:
        SpecError: a key or value that is not a string, or names no module on its side.
    """
    if match is None:
        return
    if not isinstance(match, Mapping):
        raise SpecError(f"match= must be a mapping of side A paths to side B paths, got "
                        f"{type(match).__name__}")
    for side, model, names in (("A", model_a, match.keys()), ("B", model_b, match.values())):
        paths = [p for p, _ in model.named_modules()]
        for name in names:
            if not isinstance(name, str):
                raise SpecError(f"match= maps module paths to module paths (str), got "
                                f"{name!r} of type {type(name).__name__}")
            if name and not any(p == name or p.startswith(name + ".") for p in paths):
                close = difflib.get_close_matches(name, paths, n=3)
                hint = f"; close matches: {close}" if close else ""
                raise SpecError(f"match= names {name!r}, but side {side}'s model has no "
                                f"module at or under that path{hint}")


def _spill_dir(spill: str | os.PathLike[str] | None) -> Path | None:
    """``spill`` as a path, checked to be a new or empty directory in one that exists."""
    if spill is None:
        return None
    path = Path(spill).expanduser()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise SpecError(f"spill={str(spill)!r} is not a new or empty directory; give one")
    if not path.parent.is_dir():
        raise SpecError(f"spill={str(spill)!r}: {str(path.parent)!r} is not a directory")
    return path


def _record_a(model: nn.Module, inputs: tuple[Any, ...], kwargs: dict[str, Any], *,
              save_to: Path | None) -> tuple[Mapping[str, Any], Trace]:
    """Run side A once in a capture of every call's inputs and output; the values and
    the trace."""
    # the forward is run here, for the caller: the capture puts back what it moved
    # (training-mode buffers, flags), as hookscope.capture does; one copy of what one
    # call returns and the next receives
    cap = Capture(model, select=lambda path: True, what="both", to="cpu", save_to=save_to,
                  shard_mib=_SHARD_MIB, restore_state=True, share_copies=True)
    started = False
    try:
        with torch.random.fork_rng(devices=_cuda_devices()):
            torch.manual_seed(0)  # both sides draw the same dropout masks
            with cap, torch.no_grad():
                started = True
                model(*inputs, **kwargs)
    except HookscopeError:
        raise
    except Exception as e:
        trace = getattr(cap, "trace", None)
        if not started or trace is None or trace.error is None:
            raise
        raise ModelRunError(f"compare: side A: the model raised {describe_failure(trace)}",
                            trace=trace, path=trace.error.path) from e
    trace = cap.trace
    assert trace is not None  # set when the block ended
    return cap.activations, trace


def _run_b(side: SideB, inputs: tuple[Any, ...], kwargs: dict[str, Any],
           measure: SideBMeasure) -> Trace:
    """Run side B once in a tracer whose probe measures every call as it ends."""
    tracer = Tracer(side.model, shapes=False, probes=[measure], restore_state=True,
                    restore_buffers=True)
    started = False
    try:
        with torch.random.fork_rng(devices=_cuda_devices()):
            torch.manual_seed(0)  # as side A: the same dropout masks
            with tracer, torch.no_grad(), side.running():
                started = True
                side.model(*inputs, **kwargs)
    except HookscopeError:
        raise
    except Exception as e:
        trace = tracer.trace if started else None
        if trace is None or trace.error is None:
            raise
        raise ModelRunError(f"compare: side B: the model raised {describe_failure(trace)}",
                            trace=trace, path=trace.error.path) from e
    trace = tracer.trace
    assert trace is not None  # set when the block ended
    return trace


def _cuda_devices() -> list[int]:
    # NB: only devices in use: forking an unused CUDA RNG would initialise CUDA
    started = torch.cuda.is_available() and torch.cuda.device_count() > 0 \
        and torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
    return list(range(torch.cuda.device_count())) if started else []


def _row(a: Call, b: Call, measured: Measured) -> CallError:
    errors = measured.get((a.name, b.name))
    if errors is None:  # NB: a pair the measure did not foresee (measure.py): unmeasured
        errors = [_unforeseen(b)]
    w = worst(errors)
    return CallError(
        path=a.path, call_index=a.call_index, path_b=b.path, module_class=a.module_class,
        depth=a.depth, index=a.index, max_abs=w.max_abs, max_rel=w.max_rel,
        cosine=w.cosine, sqnr_db=w.sqnr_db, outputs=tuple(errors),
    )


def _unforeseen(b: Call) -> TensorError:
    nan = math.nan
    return TensorError("out", nan, nan, nan, nan,
                       f"side B's {b.name!r} was matched after its run, not measured")


def _nbytes(values: Iterable[Any]) -> int:
    """The bytes of the tensors in ``values``, a copy kept under several calls once."""
    unique = {id(t): t for v in values for _, t in iter_tensors(v, "v")}
    return sum(t.nbytes for t in unique.values())


def _memory(store_a: Mapping[str, Any], side: SideB, *, spilled: Path | None) -> MemoryUse:
    """What the compare stored and held beyond the two forwards.

    NB: counted, not measured: the bytes of the values kept (in memory, or the shards'
    sizes on disk, of which a capture holds at most one shard's worth at a time) and of
    side B's copy; the forwards' own memory is the models'. In memory, a copy kept
    under two calls (what one returns and the next receives) counts once.
    """
    if spilled is None:
        stored = _nbytes(store_a.values())
        held = stored
    else:
        stored = sum(f.stat().st_size for f in spilled.rglob("*.safetensors"))
        held = min(stored, int(_SHARD_MIB * 2**20))
    return MemoryUse(stored_bytes=stored, held_bytes=held, copy_bytes=side.copy_bytes,
                     spilled=spilled is not None)


def _settings(side: SideB, model_b: nn.Module | None) -> dict[str, str]:
    out = {}
    if model_b is not None:
        out["model_b"] = type(model_b).__name__
    for name, value in (("autocast", side.autocast), ("dtype", side.dtype),
                        ("device", side.device)):
        if value is not None:
            out[name] = str(value).removeprefix("torch.")
    if side.compiled is not None:
        out["compile"] = side.compiled
    return out
