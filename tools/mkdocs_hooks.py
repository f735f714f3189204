"""MkDocs hooks: the reference pages generated from the code, never retyped.

- ``reference/cli.md``: every command's ``--help``, read from the Typer app through
  click's own introspection;
- ``reference/lint-rules.md``: one entry per rule of ``hookscope.lint``'s registry
  (code, severity, why, fix, what it needs), so a new rule appears with no docs edit,
  with the example that triggers it (``tools/lint_examples/HSxxx.py``, run at build
  time: the findings shown are what it reports);
- ``reference/api.md``: a mkdocstrings entry for every name in ``hookscope.__all__``.
"""

from __future__ import annotations

import runpy
import warnings
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files


def cli_reference() -> str:
    """The help of ``hookscope`` and of each of its commands, as the CLI prints it."""
    import typer

    from hookscope.cli.app import app

    group = typer.main.get_command(app)
    root = typer.Context(group, info_name="hookscope", terminal_width=88, max_content_width=88,
                         **group.context_settings)
    parts = ["# CLI reference\n",
             "Generated from the command line's own help (`hookscope COMMAND --help`).\n",
             "```text\n" + group.get_help(root) + "\n```\n"]
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        ctx = typer.Context(command, info_name=name, parent=root,
                            terminal_width=88, max_content_width=88)
        parts.append(f"## `hookscope {name}`\n\n```text\n{command.get_help(ctx)}\n```\n")
    return "\n".join(parts)


LINT_EXAMPLES = Path(__file__).resolve().parent / "lint_examples"


def lint_example(code: str) -> str:
    """The rule's example and what linting it reports for that rule, as Markdown."""
    from hookscope.lint.report import render_finding

    path = LINT_EXAMPLES / f"{code}.py"
    if not path.exists():
        return f"No example yet: add `tools/lint_examples/{code}.py`.\n"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = runpy.run_path(str(path))["report"]
    found = "\n".join(render_finding(f) for f in report.findings if f.code == code)
    source = path.read_text(encoding="utf-8").strip()
    return (f"**Example:**\n\n```python\n{source}\n```\n\n"
            f"**Reports:**\n\n```text\n{found}\n```\n")


def lint_rules() -> str:
    """One section per registered lint rule, in code order."""
    from hookscope.lint.catalog import load_rules
    from hookscope.lint.rules import Needs

    needs = {Needs.STATIC: "the model only", Needs.FORWARD: "a forward pass (give inputs)",
             Needs.BACKWARD: "a backward pass (`backward=True`, `--backward`)"}
    parts = ["# Lint rules\n",
             "Every rule of `hookscope.lint`, generated from its registry "
             "(`hookscope.lint.register_rule`). `hookscope lint --explain CODE` prints "
             "the same text; the [guide](../guides/lint.md) shows them at work.\n"]
    for rule in load_rules().values():
        why = " ".join(rule.why.split())
        parts.append(
            f"## {rule.code} `{rule.name}`\n\n**Severity:** {rule.severity.value} · "
            f"**Needs:** {needs[rule.needs]}\n\n{why}\n\n**Fix:** {rule.fix}\n\n"
            f"**Silence:** `ignore=[\"{rule.code}\"]` in Python, "
            f"`--ignore {rule.code}` on the command line.\n\n{lint_example(rule.code)}")
    return "\n".join(parts)


def api_reference() -> str:
    """A mkdocstrings entry per public name, in the order of ``hookscope.__all__``."""
    import hookscope

    parts = ["# Python API\n",
             "Every public name of `hookscope` (`hookscope.__all__`), from its docstring.\n"]
    for name in hookscope.__all__:
        if name.startswith("_"):
            continue
        parts.append(f"::: hookscope.{name}\n")
    return "\n".join(parts)


def on_files(files: Files, config: Any) -> Files:
    """Adds the generated reference pages to the site."""
    pages = {"reference/cli.md": cli_reference, "reference/lint-rules.md": lint_rules,
             "reference/api.md": api_reference}
    for uri, make in pages.items():
        files.append(File.generated(config, uri, content=make()))
    return files
