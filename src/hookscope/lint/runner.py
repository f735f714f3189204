"""``hookscope.lint``: run the registered rules over a model and collect findings.

The runner validates the options, builds one
:class:`~hookscope.lint.context.LintContext`, runs the static rules, then (when inputs
are given and a selected rule needs them) one forward pass through
:func:`~hookscope.lint.traced_pass.observe` and the rules that read it. Each
:class:`~hookscope.lint.findings.Hit` becomes a :class:`~hookscope.lint.findings.Finding`
with its rule's fields and the source location of the attribute
(``lint/locate.py``); ``ignore=`` entries then silence what the user chose
(``lint/suppress.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from hookscope.core.torch_private import original_module
from hookscope.errors import ModelRunError, SpecError
from hookscope.lint.catalog import load_rules
from hookscope.lint.context import LintContext
from hookscope.lint.findings import Finding, Hit, LintReport
from hookscope.lint.locate import locate
from hookscope.lint.rules import Needs, Rule
from hookscope.lint.suppress import IgnoreEntry, compile_ignore, select_rules


def lint(
    model: nn.Module,
    *inputs: Any,
    kwargs: dict[str, Any] | None = None,
    backward: bool = False,
    select: Sequence[str] | None = None,
    ignore: Sequence[IgnoreEntry] | None = None,
) -> LintReport:
    """Find the bugs that make a model definition silently wrong.

    Without inputs only the static rules run (no forward pass). With inputs the model
    runs once (under ``torch.no_grad()``, or with grad for ``backward=True``); the model
    is left exactly as it was: hooks, flags, parameters, buffers, ``.grad``.

    Args:
        model: the model to lint (also one on the meta device).
        *inputs: positional inputs for one forward pass (optional).
        kwargs: keyword inputs for that forward pass.
        backward: also take gradients of the floating outputs, for the rules that need
            them (a parameter that gets no gradient); needs inputs.
        select: run only these rules: codes (``"HS101"``) or code prefixes (``"HS1"``).
        ignore: silence findings; each entry is a code or prefix (``"HS201"``), a
            glob over ``module.path.attribute`` or the module path (``"encoder.cache"``,
            ``"decoder.*"``; ``"<root>"`` is the model itself), or a ``(code, glob)``
            pair (``("HS201", "decoder.*")``).

    Returns:
        A :class:`~hookscope.lint.findings.LintReport`, most severe findings first.

    Raises:
        SpecError: ``model`` is not a module, or an option is wrong.
        ModelRunError: the model raised during the forward pass.

    Example:
        >>> report = hookscope.lint(model, torch.randn(2, 8))
        >>> print(report.to_text())
        >>> report.exit_code(fail_on="warning")
    """
    if not isinstance(model, nn.Module):
        raise SpecError(f"hookscope.lint expects a torch.nn.Module, got {type(model).__name__}")
    rules = select_rules(load_rules(), select)
    silenced = compile_ignore(ignore)
    dynamic = bool(inputs) or bool(kwargs)
    if backward and not dynamic:
        raise SpecError("backward=True needs inputs: pass them as hookscope.lint(model, x, "
                        "backward=True), or drop backward=True for the static rules only")
    if backward and torch.is_inference_mode_enabled():
        raise SpecError(
            "backward=True needs autograd, which torch.inference_mode() turns off; call "
            "hookscope.lint outside the inference_mode block (or use torch.no_grad())"
        )
    model = original_module(model)  # torch.compile's wrapper: the module it holds
    ctx = LintContext(model)
    findings = _run(ctx, [r for r in rules if r.needs is Needs.STATIC])
    wanted = [r for r in rules
              if r.needs is Needs.FORWARD or (backward and r.needs is Needs.BACKWARD)]
    if dynamic and wanted:
        from hookscope.lint.traced_pass import observe

        try:
            ctx.forward = observe(ctx, inputs, dict(kwargs or {}), backward=backward)
        except ModelRunError as e:
            raise _with_static_findings(e, findings, silenced) from e.__cause__
        findings += _run(ctx, wanted)
    kept = [f for f in findings if not silenced(f)]
    skipped = ctx.forward.backward_skipped if ctx.forward is not None else None
    ran_backward = backward and dynamic and ctx.forward is not None and skipped is None
    return LintReport(kept, model=type(model).__name__, dynamic=dynamic and bool(wanted),
                      backward=ran_backward,
                      suppressed=len(findings) - len(kept), backward_skipped=skipped,
                      inputs_given=dynamic,
                      skipped_rules=_skipped(rules, dynamic=dynamic, backward=ran_backward),
                      notes=_notes(rules, dynamic=dynamic, backward=backward))


def _skipped(rules: list[Rule], *, dynamic: bool, backward: bool) -> tuple[str, ...]:
    """The codes of the selected rules that did not run, for want of inputs or of a
    backward pass."""
    return tuple(r.code for r in rules if (r.needs is Needs.FORWARD and not dynamic)
                 or (r.needs is Needs.BACKWARD and not backward))


def _notes(rules: list[Rule], *, dynamic: bool, backward: bool) -> tuple[str, ...]:
    """One line naming the selected rules that need a backward pass none was asked for
    (a backward asked for and not possible is said by ``backward_skipped``)."""
    wanting = [f"{r.code} ({r.name})" for r in rules if r.needs is Needs.BACKWARD]
    if backward or not wanting:
        return ()
    need = "needs" if len(wanting) == 1 else "need"
    how = _PYTHON_HOW[0] if dynamic else _PYTHON_HOW[1]
    return (f"{', '.join(wanting)} {need} a backward pass: {how}",)


#: How a note says to take a backward pass (with inputs given, without), in Python and
#: on the command line.
_PYTHON_HOW = ("pass backward=True", "pass inputs and backward=True")
_CLI_HOW = ("run with --backward", "give inputs (--input) and run with --backward")


def cli_notes(notes: tuple[str, ...]) -> tuple[str, ...]:
    """``notes`` of a :class:`LintReport` in the command line's words: ``--backward``
    where the library says ``backward=True``."""
    def reworded(note: str) -> str:
        for python, cli in zip(_PYTHON_HOW, _CLI_HOW, strict=True):
            if note.endswith(f": {python}"):
                return note[: -len(python)] + cli
        return note

    return tuple(reworded(note) for note in notes)


def _with_static_findings(
    error: ModelRunError, findings: list[Finding], silenced: Callable[[Finding], bool],
) -> ModelRunError:
    """``error`` (the forward raised), saying what the static rules found first: often
    the cause (HS402, a float64 layer among float32 ones)."""
    kept = sorted((f for f in findings if not silenced(f)),
                  key=lambda f: (-f.severity.rank, f.path, f.code))
    message = str(error)
    if kept:
        shown = "; ".join(f"{f.code} {f.message}" for f in kept[:2])
        more = f" (+{len(kept) - 2} more)" if len(kept) > 2 else ""
        message += f"; the static rules found: {shown}{more}"
    return ModelRunError(message, trace=error.trace, path=error.path)


def _run(ctx: LintContext, rules: list[Rule]) -> list[Finding]:
    return [_finding(ctx, rule, hit) for rule in rules for hit in rule.check(ctx)]


def _finding(ctx: LintContext, rule: Rule, hit: Hit) -> Finding:
    where = hit.location or locate(ctx, hit.path, hit.attribute)
    file, line, col = where if where is not None else (None, None, None)
    return Finding(rule.code, rule.name, hit.severity or rule.severity, hit.path,
                   hit.attribute, hit.message,
                   hit.fix or rule.fix, file, line, col, hit.parameters)
