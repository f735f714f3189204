"""What the linter reports: :class:`Severity`, :class:`Finding` and :class:`LintReport`.

Rules (``lint/checks/*.py``) yield :class:`Hit`s: where (module path, attribute) and
what (a message). The runner (``lint/runner.py``) turns each hit into a
:class:`Finding` by adding the rule's code, name, severity and fix, and the source
location of the attribute (``lint/source.py``). A :class:`LintReport` holds the
findings of one run and renders them in the linters' text convention or as JSON.

Findings are plain data; only :class:`LintReport` produces strings.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any, NamedTuple

from hookscope.errors import SpecError

SCHEMA_VERSION = 1


class Severity(str, Enum):
    """How sure a rule is that the model is wrong (the same scale for ``--fail-on``).

    - ``ERROR``: the model is certainly wrong (a module in a plain list is not trained).
    - ``WARNING``: very likely wrong (a plain tensor attribute, a layer never called).
    - ``INFO``: a fact worth knowing (tied or frozen parameters).
    """

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """2 for error, 1 for warning, 0 for info: ``a.rank >= b.rank`` is "at least"."""
        return {"error": 2, "warning": 1, "info": 0}[self.value]


def parse_severity(value: Severity | str) -> Severity:
    """``"warning"`` -> ``Severity.WARNING``.

    Raises:
        SpecError: not one of error, warning, info.
    """
    try:
        return Severity(value)
    except ValueError:
        raise SpecError(
            f"severity must be one of error, warning, info, got {value!r}"
        ) from None


class Hit(NamedTuple):
    """What a rule found, before the runner adds the rule's fields and the location.

    Attributes:
        path: fully qualified name of the module (``""`` for the root).
        attribute: the attribute of that module concerned, or ``None``.
        message: one sentence saying what is wrong and what goes wrong because of it.
        severity: this finding's, when it is not the rule's (``None``: the rule's).
        fix: this finding's fix, when the rule's does not fit it (``None``: the rule's).
        location: ``(file, line, col)`` of the line to edit, when the rule knows it
            better than the assignment of ``self.<attribute>`` (``None``: that one).
        parameters: the paths of the parameters the finding is about, when it groups
            several (HS503).
    """

    path: str
    attribute: str | None
    message: str
    severity: Severity | None = None
    fix: str | None = None
    location: tuple[str, int, int] | None = None
    parameters: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem (or fact) found in a model.

    Attributes:
        code: the rule's stable code, e.g. ``HS101``.
        name: the rule's short name, e.g. ``module-in-plain-container``.
        severity: error, warning or info.
        path: fully qualified name of the module (``""`` for the root).
        attribute: the attribute concerned (``layers``), or ``None``.
        message: what is wrong and what goes wrong because of it.
        fix: how to fix it, in one line.
        file: the source file of the line to edit to fix it (where the attribute is
            assigned, or what the rule knows better: ``lint/locate.py``), when found.
        line: 1-based line of that place, when found.
        col: 1-based column of that place, when found.
        parameters: the parameters the finding is about, by path as in
            ``named_parameters()`` (``aux.weight``), when it groups them (HS503: one
            finding per module); empty otherwise.
    """

    code: str
    name: str
    severity: Severity
    path: str
    attribute: str | None
    message: str
    fix: str
    file: str | None = None
    line: int | None = None
    col: int | None = None
    parameters: tuple[str, ...] = ()

    @property
    def target(self) -> str:
        """``path.attribute`` (what ``ignore=`` globs match), or the path alone."""
        if self.attribute is None:
            return self.path
        return f"{self.path}.{self.attribute}" if self.path else self.attribute

    def to_dict(self) -> dict[str, Any]:
        """The finding as JSON-ready values (``severity`` as its string)."""
        out = asdict(self)
        out["severity"] = self.severity.value
        return out


class LintReport:
    """The findings of one :func:`hookscope.lint` run, most severe first.

    Iterate it for :class:`Finding`s; ``to_text()`` and ``to_json()`` render it;
    ``exit_code(fail_on=...)`` is what ``hookscope lint`` exits with.

    Attributes:
        findings: the findings, sorted by severity, then path and code.
        model: the class name of the linted model.
        dynamic: whether rules that need a forward pass ran.
        backward: whether rules that need a backward pass ran.
        suppressed: how many findings ``ignore=`` silenced.
        backward_skipped: why no backward pass ran although ``backward=True`` asked for
            one (no floating output requires grad: an ``argmax`` output, a frozen
            model); ``None`` otherwise.
        inputs_given: whether inputs were given (no forward pass ran with them when
            ``select=`` chose only static rules).
        skipped_rules: the codes of the selected rules that did not run, for want of
            inputs (HS50x) or of a backward pass (HS503 without ``backward=True``).
        notes: lines the text ends with, saying how to run the skipped rules that a
            summary does not name (``"HS503 (parameter-without-gradient) needs a
            backward pass: pass backward=True"``).
    """

    def __init__(
        self, findings: list[Finding], *, model: str, dynamic: bool, backward: bool,
        suppressed: int = 0, backward_skipped: str | None = None, inputs_given: bool = False,
        skipped_rules: tuple[str, ...] = (), notes: tuple[str, ...] = (),
    ) -> None:
        self.findings = sorted(findings, key=lambda f: (-f.severity.rank, f.path, f.code))
        self.model = model
        self.dynamic = dynamic
        self.backward = backward
        self.suppressed = suppressed
        self.backward_skipped = backward_skipped
        self.inputs_given = inputs_given
        self.skipped_rules = skipped_rules
        self.notes = notes

    def __iter__(self) -> Iterator[Finding]:
        return iter(self.findings)

    def __len__(self) -> int:
        return len(self.findings)

    def __getitem__(self, index: int) -> Finding:
        return self.findings[index]

    def counts(self) -> dict[str, int]:
        """Number of findings per severity, e.g. ``{"error": 1, "warning": 0, "info": 2}``."""
        return {s.value: sum(f.severity is s for f in self.findings) for s in Severity}

    def codes(self) -> list[str]:
        """The codes found, each once, sorted."""
        return sorted({f.code for f in self.findings})

    def exit_code(self, *, fail_on: Severity | str = Severity.ERROR) -> int:
        """1 when a finding is at least as severe as ``fail_on``, else 0."""
        threshold = parse_severity(fail_on).rank
        return int(any(f.severity.rank >= threshold for f in self.findings))

    def __repr__(self) -> str:
        c = self.counts()
        return (f"<LintReport {self.model}: {c['error']} error(s), {c['warning']} warning(s),"
                f" {c['info']} info>")

    def to_text(self) -> str:
        """``file:line:col: CODE [severity] message`` lines, each followed by the module
        path and the fix, then a summary line that says how to silence a finding."""
        from hookscope.lint.report import render_text

        return render_text(self)

    def to_json(self, *, indent: int | None = 2) -> str:
        """A JSON document with sorted keys and ``schema_version``, for CI."""
        doc = {
            "schema_version": SCHEMA_VERSION,
            "model": self.model,
            "dynamic": self.dynamic,
            "backward": self.backward,
            "backward_skipped": self.backward_skipped,
            "suppressed": self.suppressed,
            "counts": self.counts(),
            "findings": [f.to_dict() for f in self.findings],
            "skipped_rules": list(self.skipped_rules),
            "notes": list(self.notes),
        }
        return json.dumps(doc, indent=indent, sort_keys=True)

    def __str__(self) -> str:
        return self.to_text()
