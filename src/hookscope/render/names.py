"""Shortening names, distinguishably: the last resort of a table's layout.

:func:`hookscope.render.grid.fit` shortens a name (a module path, a class name, a
parameter path, an op name) only when no column is left to leave out. Then a middle
ellipsis keeps a name's start and end (:func:`elide`), and labels that would read
alike get other elisions (:func:`distinct_shortener`), so two rows never look the same
while the width allows them not to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

ELLIPSIS = "…"
LABEL_MIN = 12
"""A shortened parameter path keeps at least this many characters."""

Shorten = Callable[[str, int], str]
"""``shorten(cell, width) -> cell``: a cell whose every line fits ``width`` if it can."""


def elide(text: str, width: int, *, head: int | None = None) -> str:
    """``text`` in ``width`` characters with a middle ellipsis (start and end kept)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS
    keep = width - 1
    front = head if head is not None and head < keep else (keep + 1) // 2
    front = min(front, keep)
    return text[:front] + ELLIPSIS + (text[len(text) - (keep - front):] if keep > front else "")


def shorten_plain(cell: str, width: int) -> str:
    """Every line of ``cell`` in ``width`` characters, by a middle ellipsis."""
    return "\n".join(elide(line, width) for line in cell.split("\n"))



def distinct_shortener(labels: Sequence[str]) -> Shorten:
    """A :data:`Shorten` for one-line labels (parameter paths) that keeps them apart.

    Each label that does not fit is elided in the middle, more of its end kept than of
    its start (``layer…onv1.weight``: the end of a path tells its rows apart). Labels
    that would then read alike are given other elisions (more of the start, or of the
    end) by a matching over every label's possible forms, so two rows never look the
    same while distinct forms of the width exist (:func:`distinct_min` finds the
    narrowest width where they do).
    """
    return shortener_by_width(lambda width: distinct_forms(labels, width)[0], elide)


def shortener_by_width(forms: Callable[[int], dict[str, str]], fallback: Shorten) -> Shorten:
    """A :data:`Shorten` that gives a cell its form in ``forms(width)`` (a matching over
    every label of the table, made once per width), else ``fallback(cell, width)``."""
    chosen: dict[int, dict[str, str]] = {}

    def shorten(cell: str, width: int) -> str:
        found = chosen.get(width)
        if found is None:
            found = chosen[width] = forms(width)
        return found.get(cell) or fallback(cell, width)

    return shorten


def distinct_min(labels: Sequence[str], floor: int) -> int:
    """The narrowest width from ``floor`` on where :func:`distinct_shortener` keeps every
    label apart (at most the widest label).

    Being apart is monotonic in the width, so the width is found by bisection: a
    matching at width ``w`` gives one at ``w + 1`` (each label keeps its head and one
    more character of its end; two forms equal at ``w + 1`` would be equal at ``w``).
    That holds only while no label holds an ellipsis itself (else an elided form can
    equal another label's text, whatever its head); such labels get the plain search.
    """
    widest = max(map(len, labels), default=0)
    low, high = min(floor, widest), widest
    if any(ELLIPSIS in label for label in labels):
        while low < high and not _match(labels, low, give_up=True)[1]:
            low += 1
        return low
    while low < high:  # apart at ``high`` (every label fits there), not below ``low``
        middle = (low + high) // 2
        if _match(labels, middle, give_up=True)[1]:
            high = middle
        else:
            low = middle + 1
    return low


def distinct_forms(labels: Sequence[str], width: int) -> tuple[dict[str, str], bool]:
    """Each label's form in ``width`` characters, and whether they are all distinct:
    labels that fit are themselves; the others get one of their elided forms, matched
    (augmenting paths) so that no two share one where that is possible."""
    return _match(labels, width, give_up=False)


def _match(labels: Sequence[str], width: int, *, give_up: bool) -> tuple[dict[str, str], bool]:
    """:func:`distinct_forms`; with ``give_up``, only whether the labels can be kept
    apart (the forms are then incomplete).

    The answer does not depend on the matching the search starts from: when a label
    left free has no augmenting path, no matching places every label (the difference
    between it and the current one would hold such a path). So ``give_up`` starts from each
    label's first free form, which leaves few labels to search for, and stops at the
    first label the search cannot place: a failed search walks every alternating path,
    so the widths just short of the answer cost most without it.
    """
    unique = list(dict.fromkeys(labels))
    out = {label: label for label in unique if len(label) <= width}
    fixed = set(out)
    keep = max(width - 1, 1)
    default = max(keep // 3, 1)
    heads = [default, *range(default - 1, 0, -1), *range(default + 1, keep)]
    rest = [label for label in unique if label not in out]
    options = {label: [f for f in dict.fromkeys(elide(label, width, head=h) for h in heads)
                       if f not in fixed] for label in rest}
    owner: dict[str, str] = {}  # form -> the label it is given to

    def place(label: str, seen: set[str]) -> bool:
        for form in options[label]:
            if form in seen:
                continue
            seen.add(form)
            if form not in owner or place(owner[form], seen):
                owner[form] = label
                return True
        return False

    if give_up:
        for label in rest:
            free = next((f for f in options[label] if f not in owner), None)
            if free is not None:
                owner[free] = label
    placed = set(owner.values())
    distinct = True
    for label in rest:
        if label not in placed and not place(label, set()):
            distinct = False
            if give_up:
                return out, False
    out.update({label: form for form, label in owner.items()})
    for label in rest:
        out.setdefault(label, elide(label, width, head=default))
    return out, distinct
