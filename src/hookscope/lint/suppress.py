"""Choosing rules (``select=``) and silencing findings (``ignore=``), validated once.

``select`` entries are rule codes or code prefixes: ``"HS101"``, ``"HS1"`` (the
container family), ``"HS"`` (everything). ``ignore`` entries are of three kinds:

- a code or prefix, ``"HS201"``: that rule is silenced everywhere;
- a glob over the finding's target, ``module.path.attribute``, or over its module path
  (``"encoder.cache"``, ``"decoder.*"``; ``"<root>"`` is the model itself): every rule
  is silenced there;
- a ``(code, glob)`` pair, ``("HS201", "decoder.*")``: that rule, there.

The command line's ``--ignore CODES`` passes codes only.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Sequence

from hookscope.errors import SpecError
from hookscope.lint.findings import Finding
from hookscope.lint.rules import Rule

IgnoreEntry = str | tuple[str, str]

_PREFIX = re.compile(r"HS\d{0,3}", re.IGNORECASE)


def _codes_matching(prefix: str, rules: Sequence[str]) -> list[str]:
    return [code for code in rules if code.startswith(prefix.upper())]


def _check_prefix(prefix: str, rules: Sequence[str], option: str) -> str:
    if not _PREFIX.fullmatch(prefix) or not _codes_matching(prefix, rules):
        raise SpecError(f"{option}: {prefix!r} is not a rule code or prefix; the rules are "
                        f"{', '.join(rules)} (hookscope lint --explain CODE)")
    return prefix.upper()


def select_rules(rules: dict[str, Rule], select: Sequence[str] | None) -> list[Rule]:
    """The rules ``select`` names (all when ``None``), in code order.

    Raises:
        SpecError: an entry is not a code or prefix of a registered rule.
    """
    if select is None:
        return list(rules.values())
    if isinstance(select, str) or not all(isinstance(s, str) for s in select):
        raise SpecError(f"select must be a list of rule codes such as ['HS101', 'HS2'], "
                        f"got {select!r}")
    prefixes = [_check_prefix(s, list(rules), "select") for s in select]
    return [rule for code, rule in rules.items() if any(code.startswith(p) for p in prefixes)]


def compile_ignore(ignore: Sequence[IgnoreEntry] | None) -> Callable[[Finding], bool]:
    """A predicate that is True for the findings ``ignore`` silences.

    Raises:
        SpecError: an entry is not a code, a glob or a ``(code, glob)`` pair.
    """
    from hookscope.lint.catalog import load_rules

    if not ignore:
        return lambda finding: False
    if isinstance(ignore, str):
        raise SpecError(f"ignore must be a list, e.g. ignore=[{ignore!r}], got {ignore!r}")
    codes = list(load_rules())
    tests = [_entry(entry, codes) for entry in ignore]
    return lambda finding: any(test(finding) for test in tests)


def _entry(entry: object, codes: list[str]) -> Callable[[Finding], bool]:
    if isinstance(entry, tuple) and len(entry) == 2 and all(isinstance(e, str) for e in entry):
        code = _check_prefix(entry[0], codes, "ignore")
        where = _place(entry[1])
        return lambda f: f.code.startswith(code) and where(f)
    if isinstance(entry, str) and entry:
        if _PREFIX.fullmatch(entry):
            code = _check_prefix(entry, codes, "ignore")
            return lambda f: f.code.startswith(code)
        return _place(entry)
    raise SpecError(f"an ignore entry is a code ('HS201'), a glob over module paths "
                    f"('decoder.*') or a (code, glob) pair, got {entry!r}")


def _place(glob: str) -> Callable[[Finding], bool]:
    if glob == "<root>":
        return lambda f: f.path == ""
    return lambda f: fnmatch.fnmatchcase(f.target, glob) or fnmatch.fnmatchcase(f.path, glob)
