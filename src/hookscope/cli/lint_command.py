"""``hookscope lint MODEL``: the model-definition lint on the command line.

The command builds the model (``cli/running.py``), makes its inputs from ``--input``
or the model's default inputs (none for a ``file.py:factory`` model without
``--input``: then only the static rules run), calls :func:`hookscope.lint`, and
prints the report as text or JSON. ``--explain CODE`` prints a rule's documentation
and needs no model.

Exit status: 0 when no finding is at or above ``--fail-on`` (default ``error``), 1 when
one is, 2 for a usage error (``cli/failure_boundary.py``).

The command is registered on the app of ``cli/app.py`` when that module is imported
(its last lines import this one) and shares that module's option types.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hookscope.cli.failure_boundary import failure_boundary, model_prints_to_stderr
from hookscope.cli.output import OutputTarget, Rendered
from hookscope.cli.shared_options import (
    ConfigOpt,
    DebugOpt,
    DeviceOpt,
    InputOpt,
    OutputOpt,
    chosen_format,
    split_names,
)

if TYPE_CHECKING:
    from hookscope.cli.loading import LoadedModel


class LintFormat(str, Enum):
    """Output formats of ``lint``."""

    TEXT = "text"
    JSON = "json"


class FailOn(str, Enum):
    """The least severe finding that makes ``lint`` exit with 1."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


def lint_command(
    model: Annotated[str | None, typer.Argument(
        metavar="MODEL", show_default=False,
        help="file.py:factory, package.module:factory, torchvision:NAME or transformers:NAME",
    )] = None,
    inputs: InputOpt = None,
    backward: Annotated[bool, typer.Option(
        "--backward", help="Also take gradients (finds parameters that get none).")] = False,
    fmt: Annotated[LintFormat | None, typer.Option(
        "--format", "-f", show_default=False,
        help="text or json. Default: json for -o FILE.json, else text.")] = None,
    fail_on: Annotated[FailOn, typer.Option(
        "--fail-on", help="Exit with 1 on a finding this severe or worse.")] = FailOn.ERROR,
    select: Annotated[str | None, typer.Option(
        metavar="CODES", show_default=False,
        help="Run only these rules: codes or prefixes, comma-separated (HS101,HS2).")] = None,
    ignore: Annotated[str | None, typer.Option(
        metavar="CODES", show_default=False,
        help="Skip these rules: codes or prefixes, comma-separated.")] = None,
    explain: Annotated[str | None, typer.Option(
        metavar="CODE", show_default=False, help="Print the documentation of a rule and exit.",
    )] = None,
    output: OutputOpt = None,
    device: DeviceOpt = None,
    config: ConfigOpt = None,
    debug: DebugOpt = False,
) -> int:
    """Find the bugs that make a model definition silently wrong (static rules; with
    inputs, also what one forward pass shows)."""
    import hookscope
    from hookscope.cli.running import check_output
    from hookscope.errors import SpecError
    from hookscope.lint.runner import cli_notes

    fmt = chosen_format(fmt, output, LintFormat)
    target = OutputTarget(output, True, None)
    with failure_boundary(debug=debug):
        if explain is not None:
            from hookscope.lint.catalog import get_rule

            target.write(Rendered.of_text(get_rule(explain).explain()))
            return 0
        if model is None:
            raise SpecError("hookscope lint needs a MODEL (e.g. hookscope lint net.py:build), "
                            "or --explain CODE")
        check_output(output)  # before the model is built and run
        # a typo fails before the build
        _check_rule_options(split_names(select), split_names(ignore))
        with model_prints_to_stderr():
            loaded, args, kwargs = _load(model, inputs or [], config=config, device=device)
        if backward and not (args or kwargs):
            raise SpecError(f"--backward needs inputs: model {model!r} has no default inputs; "
                            "pass them with --input, e.g. --input 1,3,224,224")
        with model_prints_to_stderr():
            report = hookscope.lint(
                loaded.model, *args, kwargs=kwargs or None, backward=backward,
                select=split_names(select), ignore=split_names(ignore),
            )
        report.notes = cli_notes(report.notes)
        if fmt is LintFormat.JSON:  # the text says them; JSON on stdout stays parseable
            for note in report.notes:
                typer.echo(note, err=True)
        text = report.to_json() if fmt is LintFormat.JSON else report.to_text()
        target.write(Rendered.of_text(text))
        return report.exit_code(fail_on=fail_on.value)
    return 2  # pragma: no cover  (failure_boundary raises typer.Exit)


def _check_rule_options(select: list[str] | None, ignore: list[str] | None) -> None:
    from hookscope.lint.catalog import load_rules
    from hookscope.lint.suppress import compile_ignore, select_rules

    select_rules(load_rules(), select)
    compile_ignore(ignore)


def _load(
    spec: str, inputs: list[str], *, config: str | None, device: str | None
) -> tuple[LoadedModel, tuple[Any, ...], dict[str, Any]]:
    """The model and its inputs: ``--input``, else the model's defaults, else none."""
    from hookscope.cli.running import load, prepare

    if inputs:
        prepared = prepare(spec, inputs=inputs, config=config, device=device)
        return prepared.loaded, prepared.args, prepared.kwargs
    loaded = load(spec, config=config, device=device)
    if not loaded.default_inputs:
        return loaded, (), {}
    from hookscope.cli.input_specs import make_inputs
    from hookscope.core.inputs import model_device

    args, kwargs = make_inputs(
        list(loaded.default_inputs), device=device or model_device(loaded.model),
        vocab_size=loaded.vocab_size,
    )
    return loaded, args, kwargs
