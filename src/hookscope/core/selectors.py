"""One way to choose modules, accepted by every API and CLI flag.

A :data:`Selector` is a glob over fully qualified module names (``"encoder.*.attn"``),
a sequence of globs (any may match), or a callable ``fn(path: str) -> bool``. The root
module's path is ``""``; the glob ``"<root>"`` selects it.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Sequence

from hookscope.errors import SpecError

Selector = str | Sequence[str] | Callable[[str], bool]


def compile_selector(select: Selector) -> Callable[[str], bool]:
    """Turn a :data:`Selector` into a predicate over module paths.

    Raises:
        SpecError: when ``select`` is not a string, a sequence of strings or a callable.
    """
    if callable(select):
        return select
    if isinstance(select, str):
        patterns: list[object] = [select]
    elif isinstance(select, Sequence):
        patterns = list(select)
    else:
        patterns = []
    if not patterns or not all(isinstance(p, str) for p in patterns):
        raise SpecError(
            f"a module selector must be a glob string, a list of globs or a callable, "
            f"got {select!r}"
        )
    regex = re.compile(
        "|".join("(?:^$)" if p == "<root>" else fnmatch.translate(str(p)) for p in patterns)
    )
    return lambda path: regex.match(path) is not None
