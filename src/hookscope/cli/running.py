"""From command-line strings to a model run: load, make inputs, trace (repeatedly).

:func:`prepare` turns a model spec, ``--input`` strings, ``--config`` and ``--device``
into a model and its example inputs (through :mod:`hookscope.cli.loading`).
:func:`run_traces` calls :func:`hookscope.trace` one or more times, showing progress
on a terminal, and folds repeated traces into one whose times are the medians
(:func:`hookscope.median_times`), so one slow run does not decide the result.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hookscope.cli.input_specs import InputSpec
    from hookscope.cli.loading import LoadedModel
    from hookscope.core.records.trace import Trace


@dataclass(frozen=True)
class Prepared:
    """A loaded model and the example inputs to call it with.

    Attributes:
        loaded: the model and what is known about it.
        args: positional inputs.
        kwargs: keyword inputs.
        specs: what ``args`` and ``kwargs`` were made from (to draw more batches alike).
        device: the device they were made on.
    """

    loaded: LoadedModel
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    specs: tuple[InputSpec, ...] = ()
    device: str | None = None


def load(
    spec: str,
    *,
    config: str | None,
    device: str | None,
    dtype: str | None = None,
    on_too_large: str = "stop",
) -> LoadedModel:
    """Build the model named by ``spec`` (config overrides given as ``K=V,...``).

    Args:
        spec: the model spec.
        config: ``--config`` overrides.
        device: ``--device``; ``None`` lets the memory guard decide (see
            :func:`hookscope.cli.loading.load_model`).
        dtype: ``--dtype``: the floating dtype of the model.
        on_too_large: ``"meta"``: a model too large for the memory available is
            analysed on the meta device, with a notice on stderr; ``"stop"``: an error.

    Raises:
        SpecError: the spec, the overrides, the dtype or the device are wrong, or the
            model is too large and ``on_too_large`` is ``"stop"``.
    """
    import torch

    from hookscope.cli import loading
    from hookscope.cli.input_specs import parse_config_overrides, parse_model_dtype

    overrides = parse_config_overrides(config) if config else None
    # the command's process is its own: the same random weights on every run (and the
    # same dropout masks after), so two runs of `grads` or `trace` print the same numbers
    torch.manual_seed(0)
    loaded = loading.load_model(
        spec, config=overrides, device=device, dtype=parse_model_dtype(dtype),
        on_too_large=loading.TooLarge(on_too_large),
    )
    if loaded.notice is not None:
        sys.stderr.write(f"note: {loaded.notice}\n")
    return loaded


def prepare(
    spec: str,
    *,
    inputs: Sequence[str],
    config: str | None,
    device: str | None,
    dtype: str | None = None,
    on_too_large: str = "stop",
) -> Prepared:
    """Load the model and make its inputs (the model's defaults when ``inputs`` is empty).

    Input specs are parsed before the model is built, so a typo fails at once; they are
    completed as :func:`hookscope.cli.loading.complete_input_specs` says (an unnamed
    ``1,128`` is a transformers model's int64 ``input_ids``, an encoder-decoder gets
    ``decoder_input_ids``, floating inputs take the model's dtype).

    Raises:
        SpecError: a spec is wrong, or the model has no default inputs and none is given.
    """
    from hookscope.cli.input_specs import make_inputs, parse_input_spec, parse_model_dtype
    from hookscope.cli.loading import complete_input_specs
    from hookscope.core.inputs import model_device

    specs = [parse_input_spec(text) for text in inputs]
    parse_model_dtype(dtype)  # a bad --dtype fails before the model is built
    loaded = load(spec, config=config, device=device, dtype=dtype, on_too_large=on_too_large)
    specs = complete_input_specs(loaded, specs)
    on = device or model_device(loaded.model)
    args, kwargs = make_inputs(specs, device=on, vocab_size=loaded.vocab_size)
    return Prepared(loaded, args, kwargs, tuple(specs), str(on))


def check_timeline(
    path: Path | None, *, untimed: str | None, find_anomaly: bool, output: Path | None = None
) -> None:
    """Check ``--timeline FILE`` before any model is built: the file can be written and
    the run will be timed (a timeline is made of the calls' times).

    Args:
        path: the ``--timeline`` file, if given.
        untimed: why the run records no times (``cli/views.unmeasured``), if it does not.
        find_anomaly: ``--find-anomaly`` was given (its run makes no timed trace).
        output: the ``-o`` file, which must be another one.

    Raises:
        SpecError: the file cannot be written, or the run is not timed.
    """
    from hookscope.errors import SpecError

    if path is None:
        return
    if str(path) == "-":
        raise SpecError("--timeline needs a file name (the JSON is not written to stdout), "
                        "e.g. --timeline timeline.json")
    if untimed is not None:
        raise SpecError(f"--timeline needs the calls' times, and {untimed}")
    if find_anomaly:
        raise SpecError("--timeline and --find-anomaly do not go together: the anomaly "
                        "search makes no timed trace; run them one at a time")
    check_output(path, option="--timeline")
    if output is not None and str(output) != "-" and _same_file(output, path):
        raise SpecError(f"--timeline and -o name the same file {str(path)!r}: give the "
                        "timeline its own, e.g. --timeline timeline.json")


def _same_file(a: Path, b: Path) -> bool:
    import os

    return os.path.realpath(a.expanduser()) == os.path.realpath(b.expanduser())


def check_output(path: Path | None, *, option: str = "-o") -> None:
    """Check that ``-o FILE`` can be written before any model is built.

    Args:
        path: the file to write (``None`` or ``-``: standard output).
        option: the option that named it, for the error message.

    Raises:
        SpecError: ``path`` is a directory, its directory does not exist, or either
            cannot be written.
    """
    import os
    import stat

    from hookscope.cli.output import check_parent
    from hookscope.errors import SpecError

    if path is None or str(path) == "-":
        return
    shown = str(path)
    target = Path(os.path.realpath(path.expanduser()))
    if target.is_dir():
        example = {"--plot": "out.png", "--timeline": "timeline.json"}.get(option, "out.txt")
        raise SpecError(f"{option} {shown!r} is a directory; give a file name, "
                        f"e.g. {option} {example}")
    if target.exists():
        if stat.S_ISREG(target.stat().st_mode) and not os.access(target, os.W_OK):
            raise SpecError(f"cannot write output file {shown!r}: permission denied")
        if not stat.S_ISREG(target.stat().st_mode):
            return  # a device or FIFO (-o /dev/stdout): written directly
    check_parent(target.parent, f"cannot write output file {shown!r}")


@contextmanager
def dtype_hints(prepared: Prepared) -> Iterator[None]:
    """Say which ``--dtype`` to pass when a kernel refused the model's dtype.

    ``torch._grouped_mm`` (mixture-of-experts layers) takes only bfloat16 on the meta
    device (its checks are CUDA's); a float32 Mixtral fails there inside its experts.

    Raises:
        ModelRunError: the model's own, with the hint added to its message.
    """
    from hookscope.errors import ModelRunError

    try:
        yield
    except ModelRunError as e:
        cause = str(e.__cause__ or e)
        if "to be BFloat16" not in cause and "expected BFloat16" not in cause.lower():
            raise
        from hookscope.cli.loading.common import floating_dtype

        dtype = str(floating_dtype(prepared.loaded.model)).removeprefix("torch.")
        raise ModelRunError(
            f"{e}; a kernel of this model takes only bfloat16 here, not {dtype}: "
            "pass --dtype bfloat16", trace=e.trace, path=e.path,
        ) from e


def run_traces(prepared: Prepared, *, repeat: int, progress: bool = True,
               **options: Any) -> Trace:
    """Trace the model ``repeat`` times and return the trace with median times.

    Args:
        prepared: model and inputs.
        repeat: number of runs (at least 1).
        progress: a progress bar on a terminal (``--no-color`` asks for plain output:
            none).
        **options: keyword options of :func:`hookscope.trace` (``time``, ``ops``, ...).

    Raises:
        ModelRunError: the model raised; its ``.trace`` is the partial trace of that run.
    """
    import hookscope

    traces: list[Trace] = []
    with _progress(repeat, enabled=progress and repeat > 1 and sys.stderr.isatty()) as advance:
        for i in range(repeat):
            # the compiled code is explained once: the first trace's meta is kept
            once = {"compiled": False} if i and options.get("compiled") else {}
            traces.append(
                hookscope.trace(prepared.loaded.model, *prepared.args, kwargs=prepared.kwargs,
                                **{**options, **once})
            )
            advance()
    return hookscope.median_times(traces)


@contextmanager
def _progress(total: int, *, enabled: bool) -> Iterator[Callable[[], None]]:
    """Yield ``advance()``; on a terminal, a transient progress bar on stderr."""
    if not enabled:
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    columns = ("tracing", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("trace", total=total)
        yield lambda: progress.advance(task)
