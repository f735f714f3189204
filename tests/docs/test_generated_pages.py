"""The reference pages the docs build generates (tools/mkdocs_hooks.py) cover everything.

A new command, option, lint rule or public name must appear on its page with no docs
edit: these tests compare each page with the app, the registry and ``__all__``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import hookscope
from hookscope.lint.catalog import load_rules

pytest.importorskip("mkdocs")  # the docs extra: pip install -e ".[docs]"
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

import mkdocs_hooks


def test_cli_reference_has_every_command_and_option() -> None:
    import typer

    from hookscope.cli.app import app

    page = mkdocs_hooks.cli_reference()
    group = typer.main.get_command(app)
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        section = page.split(f"## `hookscope {name}`", 1)[1].split("\n## ", 1)[0]
        assert f"Usage: hookscope {name} " in section
        for param in command.params:
            for opt in param.opts:
                if opt.startswith("-"):
                    assert opt in section, (name, opt)


def test_lint_rules_page_has_every_rule_with_its_example() -> None:
    page = mkdocs_hooks.lint_rules()
    for code, rule in load_rules().items():
        section = page.split(f"## {code} ", 1)[1].split("\n## ", 1)[0]
        assert rule.fix in section
        assert "**Example:**" in section
        assert f"{code} [{rule.severity.value}]" in section  # the finding it reports


def test_api_reference_has_every_public_name() -> None:
    page = mkdocs_hooks.api_reference()
    for name in hookscope.__all__:
        if not name.startswith("_"):
            assert f"::: hookscope.{name}\n" in page
