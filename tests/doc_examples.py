"""Runs every fenced block of README.md and docs/ as a test (with sybil).

Each fence is one example, evaluated in the order of its page, in one namespace per
page, with a fresh temporary directory per page as the working directory (and on
``sys.path``, so ``from net import Net`` finds a file an earlier block wrote):

- ``python``: executed; what it prints is kept for the ``output`` block after it.
- ``output``: compared with what the ``python`` (or ``script``) block before it
  printed, after masking (see :func:`normalize`).
- ``console``: each ``$ command`` line runs in a shell in the page's directory; what
  it prints (stdout and stderr) is compared with the lines below it, masked the same
  way. ``$ echo $?`` prints the previous command's exit status.
- ``text``: shown, not executed (a diagram, a listing of signatures).

An HTML comment right before a fence changes what is done with it:

- ``<!-- docs: file NAME -->``: the block is written to NAME (a ``python`` module a
  later ``console`` block runs) and compiled, so a syntax error still fails.
- ``<!-- docs: script NAME -->``: written to NAME and run as ``python NAME``; its
  output is compared with the ``output`` block after it.
- ``<!-- docs: slow -->``: marked ``slow``, so run only with ``-m slow`` (CI runs
  them); such an example imports what it uses, as the page's earlier ones do not run
  (the files the page's earlier ``file`` blocks write are written for it).
- ``<!-- docs: stats -->`` (before an ``output`` or ``console`` block): decimal numbers
  are masked too, for statistics of random weights that float rounding may move on
  another machine (gradient norms of a ResNet); integers (shapes, parameter counts,
  FLOPs) are still compared.
- ``<!-- docs: skip REASON -->``: not run (installing packages, an interactive
  debugger session); the reason is shown in the test report.

``pytest --update-docs`` writes what each block printed into its ``output`` block or
``console`` block instead of comparing: after an intended change, read the diff.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

ROOT = Path(__file__).resolve().parent.parent
LANGUAGES = ("python", "output", "console", "text")
DIRECTIVE = re.compile(r"<!--\s*docs:\s*(?P<kind>\w+)\s*(?P<arg>[^>]*?)\s*-->\s*\n\s*\Z")
_INFO = re.compile(r"(?P<language>[^\s`]*)[^\n]*\n")
_DECIMAL = re.compile(r"(?<![\w.])-?\d+\.\d+(?:e[-+]?\d+)?%?")
_TIME = re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|s)\b")


@dataclass
class Settings:
    """What this pytest run asked for (rewrite the shown outputs) and what it collected."""

    update: bool = False
    rewrites: list[tuple[str, int, int, str]] = field(default_factory=list)


SETTINGS = Settings()


def doc_paths() -> list[Path]:
    """Every page the runner covers: README.md and every Markdown file under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def normalize(text: str, *, stats: bool = False) -> str:
    """Masks what changes from run to run and what only aligns columns.

    Times (``686 us``, ``21.1 ms``) become ``<time>``, and with ``stats`` every decimal
    number ``<num>``; runs of spaces become one and runs of dashes two, so a column
    made wider by a longer time still matches.
    """
    text = _TIME.sub("<time>", text)
    if stats:
        text = _DECIMAL.sub("<num>", text)
    lines = [re.sub(r"-{2,}", "--", re.sub(r"[ \t]+", " ", line)).rstrip()
             for line in text.strip("\n").splitlines()]
    return "\n".join(lines)


def matches(expected: str, actual: str, *, stats: bool = False) -> bool:
    """Whether actual output matches a shown one; ``...`` in the shown one matches anything."""
    want, got = normalize(expected, stats=stats), normalize(actual, stats=stats)
    if "..." not in want:
        return want == got
    pattern = ".*?".join(re.escape(part) for part in want.split("..."))
    return re.fullmatch(pattern, got, flags=re.DOTALL) is not None


def _directive(document: Document, start: int) -> tuple[str, str]:
    before = document.text[max(0, start - 300):start]
    found = DIRECTIVE.search(before)
    return (found["kind"], found["arg"]) if found else ("", "")


def parse_fences(document: Document) -> Iterator[Region]:
    """One region per fence, whatever its language (unknown ones fail when evaluated)."""
    lexer = RawFencedCodeBlockLexer(info_pattern=_INFO)
    for region in lexer(document):
        kind, arg = _directive(document, region.start)
        source = region.lexemes["source"]
        region.parsed = (region.lexemes["language"], kind, arg, str(source))
        body_start = region.start + source.offset
        region.evaluator = Evaluator(body_start, body_start + len(source))
        yield region


class Evaluator:
    """Evaluates one fence; the page's namespace carries output between fences."""

    def __init__(self, body_start: int, body_end: int) -> None:
        self.body = (body_start, body_end)

    def __call__(self, example: Example) -> str | None:
        language, kind, arg, source = example.parsed
        if kind == "skip":
            pytest.skip(f"not run: {arg}")
        namespace = example.namespace
        if kind == "slow":
            _write_files_before(example)
        if kind == "file" or kind == "script":
            Path(arg).write_text(source, encoding="utf-8")
            compile(source, arg, "exec")
            if kind == "script":
                namespace["_shown"] = _run([sys.executable, arg])[0]
            return None
        if language == "python":
            namespace["_shown"] = _exec(example, source)
        elif language == "output":
            shown = namespace.pop("_shown", None)
            if shown is None:
                raise AssertionError("an output block must follow a python block or script")
            return self._compare(example, source, shown)
        elif language == "console":
            return self._compare(example, source, _console(source))
        elif language != "text":
            raise AssertionError(f"fence language {language!r}: use one of {LANGUAGES}")
        return None

    def _compare(self, example: Example, shown: str, actual: str) -> str | None:
        stats = example.parsed[1] == "stats"
        if SETTINGS.update:
            if not matches(shown, actual, stats=stats):
                SETTINGS.rewrites.append((example.path, *self.body, actual.rstrip("\n") + "\n"))
            return None
        if matches(shown, actual, stats=stats):
            return None
        return f"shown:\n{shown}\nprinted (pytest --update-docs writes it):\n{actual}"


def _write_files_before(example: Example) -> None:
    """Write the files of the page's ``file`` blocks before ``example``, in page order:
    under ``-m slow`` those blocks are deselected, and the example may run the files."""
    for earlier in example.document.examples():
        if earlier.start >= example.start:
            return
        _, kind, name, source = earlier.parsed
        if kind == "file":
            Path(name).write_text(source, encoding="utf-8")


def _exec(example: Example, source: str) -> str:
    code = compile("\n" * example.line + source, example.path, "exec")
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        exec(code, example.namespace)
    return buffer.getvalue()


def _run(command: list[str] | str) -> tuple[str, int]:
    done = subprocess.run(command, shell=isinstance(command, str), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600, check=False)
    return done.stdout, done.returncode


def _console(source: str) -> str:
    """Runs the ``$`` lines of a console block; returns the block as it would read."""
    out: list[str] = []
    status = 0
    for command in _commands(source):
        out.append(f"$ {command}\n")
        if command.strip() == "echo $?":
            out.append(f"{status}\n")
            continue
        text, status = _run(command)
        out.append(text)
    return "".join(out)


def _commands(source: str) -> Iterator[str]:
    lines = iter(source.splitlines())
    for line in lines:
        if not line.startswith("$ "):
            continue
        command = line[2:]
        while command.endswith("\\"):
            command += "\n" + next(lines)
        shlex.split(command)  # a quoting mistake in the page fails here, clearly
        yield command


def setup(namespace: dict[str, object]) -> None:
    """A fresh working directory per page, seeded, tables 120 wide, no colour settings."""
    import torch

    workdir = tempfile.mkdtemp(prefix="hookscope-docs-")
    namespace["_cwd"] = os.getcwd()
    namespace["_env"] = dict(os.environ)
    namespace["_workdir"] = workdir
    os.chdir(workdir)
    sys.path.insert(0, workdir)
    for name in ("NO_COLOR", "FORCE_COLOR", "LINES", "TERM_PROGRAM"):
        os.environ.pop(name, None)
    os.environ["COLUMNS"] = "120"  # tables as a pipe gets them, whatever runs the tests
    # torch warns on Python 3.13.0 alone (its dynamo guards run slower there): a line of
    # the interpreter's, not of the command the page shows
    os.environ["PYTHONWARNINGS"] = "ignore:Guards may run slower:RuntimeWarning"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT / "src"), workdir, os.environ.get("PYTHONPATH")]))
    # `hookscope` and `python` in a console block are this interpreter's, also when
    # the tests run as `venv/bin/python -m pytest` without the environment activated
    os.environ["PATH"] = os.pathsep.join(
        filter(None, [os.path.dirname(sys.executable), os.environ.get("PATH")]))
    torch.manual_seed(0)


def teardown(namespace: dict[str, object]) -> None:
    """Back to the directory and environment the run had; the page's own modules
    (``net.py``...) are forgotten, so the next page's file of the same name is imported."""
    os.chdir(str(namespace["_cwd"]))
    workdir = str(namespace["_workdir"]) + os.sep
    for name, module in list(sys.modules.items()):
        if (getattr(module, "__file__", None) or "").startswith(workdir):
            del sys.modules[name]
    os.environ.clear()
    os.environ.update(namespace["_env"])  # type: ignore[arg-type]
    if sys.path and sys.path[0].startswith(tempfile.gettempdir()):
        sys.path.pop(0)


class _Pages(Sybil):
    """Parses exactly the pages of :func:`doc_paths` (a fixture page is parsed on request)."""

    def should_parse(self, path: Path) -> bool:
        return Path(path).resolve() in set(doc_paths())


def make_sybil() -> Sybil:
    """The runner: every fence of README.md and docs/**/*.md."""
    return _Pages(parsers=[parse_fences], path=str(ROOT), setup=setup, teardown=teardown)


def apply_rewrites() -> None:
    """Writes the collected outputs into their pages (``--update-docs``)."""
    by_path: dict[str, list[tuple[int, int, str]]] = {}
    for path, start, end, text in SETTINGS.rewrites:
        by_path.setdefault(path, []).append((start, end, text))
    for path, edits in by_path.items():
        text = Path(path).read_text(encoding="utf-8")
        for start, end, new in sorted(edits, reverse=True):
            text = text[:start] + new + text[end:]
        Path(path).write_text(text, encoding="utf-8")
    SETTINGS.rewrites.clear()
