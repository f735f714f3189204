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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hookscope.cli.loading import LoadedModel
    from hookscope.core.records import Trace


@dataclass(frozen=True)
class Prepared:
    """A loaded model and the example inputs to call it with.

    Attributes:
        loaded: the model and what is known about it.
        args: positional inputs.
        kwargs: keyword inputs.
    """

    loaded: LoadedModel
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def load(spec: str, *, config: str | None, device: str | None) -> LoadedModel:
    """Build the model named by ``spec`` (config overrides given as ``K=V,...``).

    Raises:
        SpecError: the spec, the overrides or the device are wrong.
    """
    from hookscope.cli import loading
    from hookscope.cli.inputs import parse_config_overrides

    overrides = parse_config_overrides(config) if config else None
    return loading.load_model(spec, config=overrides, device=device)


def prepare(
    spec: str, *, inputs: Sequence[str], config: str | None, device: str | None
) -> Prepared:
    """Load the model and make its inputs (the model's defaults when ``inputs`` is empty).

    Input specs are parsed before the model is built, so a typo fails at once.

    Raises:
        SpecError: a spec is wrong, or the model has no default inputs and none is given.
    """
    from hookscope.cli.inputs import make_inputs, parse_input_spec
    from hookscope.cli.loading import default_input_specs
    from hookscope.core.inputs import model_device

    specs = [parse_input_spec(text) for text in inputs]
    loaded = load(spec, config=config, device=device)
    specs = specs or default_input_specs(loaded)
    args, kwargs = make_inputs(
        specs, device=device or model_device(loaded.model), vocab_size=loaded.vocab_size
    )
    return Prepared(loaded, args, kwargs)


def run_traces(prepared: Prepared, *, repeat: int, **options: Any) -> Trace:
    """Trace the model ``repeat`` times and return the trace with median times.

    Args:
        prepared: model and inputs.
        repeat: number of runs (at least 1).
        **options: keyword options of :func:`hookscope.trace` (``time``, ``ops``, ...).

    Raises:
        ModelRunError: the model raised; its ``.trace`` is the partial trace of that run.
    """
    import hookscope

    traces: list[Trace] = []
    with _progress(repeat, enabled=repeat > 1 and sys.stderr.isatty()) as advance:
        for _ in range(repeat):
            traces.append(
                hookscope.trace(prepared.loaded.model, *prepared.args, kwargs=prepared.kwargs,
                                **options)
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
