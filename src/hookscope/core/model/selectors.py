"""One way to choose modules, accepted by every API and CLI flag.

A :data:`Selector` is a glob over fully qualified module names (``"encoder.*.attn"``),
a sequence of globs (any may match), or a callable ``fn(path: str) -> bool``. The root
module's path is ``""``; the glob ``"<root>"`` selects it.

Globs match whole paths, segment by segment: ``*`` matches within one segment and
never crosses a dot (``layer*.0`` selects ``layer1.0``, not ``layer1.0.downsample.0``),
``?`` is one character other than a dot, ``[abc]``/``[!abc]`` one character of (not
of) a set (so ``*`` never selects the root, which has no segment), and ``**`` matches
across dots, any number of segments, also none
(``**.conv1`` selects ``conv1`` and ``layer1.0.conv1``; ``layer1.**`` selects
``layer1`` and everything below it).

:data:`ModuleSelector` adds a module class (or a tuple of classes), which selects its
instances, subclasses included: the APIs that hold the modules (capture, patch) accept
it through :func:`compile_module_selector`, a tracer's ``select=`` (``trace``,
``Tracer``, ``breakpoint``'s ``at=``) through :func:`module_classes`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch import nn

from hookscope.errors import SpecError

Selector = str | Sequence[str] | Callable[[str], bool]
ModuleSelector = Selector | type[nn.Module] | tuple[type[nn.Module], ...]


def compile_selector(select: Selector) -> Callable[[str], bool]:
    """Turn a :data:`Selector` into a predicate over module paths.

    Raises:
        SpecError: when ``select`` is not a string, a sequence of strings or a callable.
    """
    if isinstance(select, type) or module_classes(select):
        raise SpecError(
            f"select={select!r} is a class: a module class chooses modules in trace(), "
            "Tracer(), breakpoint(), capture() and patch(); here give a glob of paths "
            "('layer1.*') or a function of the path"
        )
    if callable(select):
        return select
    regex = re.compile("|".join(glob_to_regex(p) for p in _patterns(select)))
    return lambda path: regex.match(path) is not None


def compile_module_selector(select: ModuleSelector) -> Callable[[str, nn.Module], bool]:
    """Turn a :data:`ModuleSelector` into a predicate ``fn(path, module) -> bool``.

    A module class selects its instances (subclasses included); anything else is a
    :data:`Selector` over the path.

    Raises:
        SpecError: when ``select`` is none of these.
    """
    classes = module_classes(select)
    if classes:
        return lambda path, module: isinstance(module, classes)
    by_path = compile_selector(select)  # type: ignore[arg-type]
    return lambda path, module: by_path(path)


def module_classes(select: object) -> tuple[type[nn.Module], ...]:
    """The module classes ``select`` names (a class, or a tuple of them); ``()`` when
    it names none (a glob, a function).

    Raises:
        SpecError: a class that is not an ``nn.Module`` subclass.
    """
    if isinstance(select, type):
        if not issubclass(select, nn.Module):
            raise SpecError(
                f"a module selector class must be an nn.Module subclass, got {select!r}"
            )
        return (select,)
    if (
        isinstance(select, tuple) and select
        and all(isinstance(c, type) and issubclass(c, nn.Module) for c in select)
    ):
        return select
    return ()


def _patterns(select: object) -> list[str]:
    if isinstance(select, str):
        patterns: list[object] = [select]
    elif isinstance(select, Sequence):
        patterns = list(select)
    else:
        patterns = []
    if not patterns or not all(isinstance(p, str) for p in patterns):
        raise SpecError(
            f"a module selector must be a glob string, a list of globs, a module class "
            f"or a callable, got {select!r}"
        )
    return [str(p) for p in patterns]


def glob_to_regex(pattern: str) -> str:
    """The regular expression of one glob (segment semantics above), anchored at both
    ends.

    Example:
        >>> bool(re.match(glob_to_regex("layer*.0"), "layer1.0.downsample.0"))
        False
    """
    if pattern == "<root>":
        return r"(?:\Z)"
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        if pattern.startswith("**.", i):
            out.append(r"(?:.*\.)?")  # any number of leading segments, also none
            i += 3
        elif pattern.startswith(".**", i) and i + 3 == n:
            out.append(r"(?:\..*)?")  # the path itself or anything below it
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append(r"[^.]*")
            i += 1
        elif pattern[i] == "?":
            out.append(r"[^.]")
            i += 1
        elif pattern[i] == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1:end]
            negate = body.startswith("!")
            body = re.sub(r"([\\\]^])", r"\\\1", body[1:] if negate else body)
            out.append(f"[^.{body}]" if negate else f"[{body}]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    # the root's path has no segment: only ``<root>`` (or its path, ``""``) and ``**``
    # alone (any number of segments, also none) match it; not ``*``, nor ``**.*``
    nonempty = "" if pattern in ("", "**") else "(?=.)"
    return "(?:" + nonempty + "".join(out) + r")\Z"


def chosen_modules(
    select: object, matches: Callable[[str], bool], table: Any, model: str, *, option: str,
) -> Callable[[str], bool]:
    """What a tracer's ``select=`` chooses among the modules of ``table`` (a
    ``ModuleTable``): ``matches`` of a module's first path, or of any other path it is
    registered at.

    Raises:
        SpecError: it matches no module (:func:`require_match`).
    """
    aliased = {p: (p, *i.aliases) for p, i in table.modules.items() if i.aliases}
    chosen = by_any_path(matches, aliased) if aliased else matches
    require_match(select, chosen, [p for p, _ in table.members], model, option=option)
    return chosen


def by_any_path(
    matches: Callable[[str], bool], paths: Mapping[str, Sequence[str]]
) -> Callable[[str], bool]:
    """``matches`` of a module's first path, or of any other path it has in ``paths``
    (first path -> every path)."""
    def any_path(path: str) -> bool:
        return matches(path) or any(map(matches, paths.get(path, ())))

    return any_path


def require_match(
    select: object, matches: Callable[[str], bool], paths: Sequence[str], model: str, *,
    option: str = "select",
) -> None:
    """Raise unless ``matches`` chooses one of ``paths`` at least: a selector that matches
    no module is a typo, and would observe nothing without a word.

    ``option`` names the selector as the caller wrote it: ``select`` (``select='x'``)
    or a command-line option (``--break-at 'x'``).

    Raises:
        SpecError: no path matches.
    """
    if any(matches(path) for path in paths):
        return
    examples = [p for p in paths if p][:4]
    where = f"paths look like {examples!r}" if examples else "it has no submodules"
    named = f"{option} {select!r}" if option.startswith("-") else f"{option}={select!r}"
    raise SpecError(
        f"{named} matches no module of {model}; {where} "
        "(glob: * within a segment, ** across dots; '<root>' is the root)"
    )
