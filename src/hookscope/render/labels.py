"""The text of labels: tree rows, folded runs, shape cells, tied parameters.

A tree row is named as the user types it: the last part of the path, with the list
it sits in when that part is an index (``h.0 (GPT2Block)``, ``enc.layers.0``'s row is
``layers.0``), so two lists (``enc``, ``dec``) are never confused; a row whose
parent module's row is not there (``select=``) is named by its path below the row it
sits under, or by its whole path. A shape cell shows
one tensor per line, with its path (``args[0]``, ``kwargs["mask"]``, ``out[1]``) as
soon as the cell holds more than one tensor, so the first positional input is labelled
like the second.
"""

from __future__ import annotations

from collections.abc import Sequence

from hookscope.core.records.module_records import ModuleInfo
from hookscope.core.records.tensor_paths import shape_text
from hookscope.core.records.trace import Call, Trace
from hookscope.core.records.values import TensorMeta
from hookscope.render.names import Shorten, distinct_forms, elide, shortener_by_width

ROOT = "<root>"
"""How the root module's path is written in captions and messages."""


def path_text(path: str | None) -> str:
    """``path``, or ``<root>`` for the root (``''``)."""
    return ROOT if path == "" else str(path)


def ended_early(trace: Trace) -> list[str]:
    """The caption's word on a run that did not end normally: where the model raised
    (``FAILED in 'x': ...``), or which probe stopped it, where and why."""
    err, stop = trace.error, trace.stop
    if err is not None:
        where = "outside any module" if err.path is None else f"in {path_text(err.path)!r}"
        return [f"FAILED {where}: {err.exception_type}: {_first_line(err.message)}"]
    if stop is not None:
        where = "outside any module" if stop.path is None else f"in {path_text(stop.path)!r}"
        return [f"STOPPED {where} by probe {stop.probe!r}: {_first_line(stop.reason)}"]
    return []


def _first_line(text: str) -> str:
    """A message's first line, ``…`` when it has more (the record keeps them all)."""
    lines = text.strip().splitlines()
    return (lines[0] + (" …" if len(lines) > 1 else "")) if lines else ""


def short_name(path: str) -> str:
    """The last part of ``path``, with its list when that part is an index (``h.0``)."""
    parts = path.split(".")
    i = len(parts) - 1
    while i > 0 and parts[i].isdigit():
        i -= 1
    return ".".join(parts[i:])


def call_label(trace: Trace, call: Call) -> str:
    """A tree row's name: the path below the row it sits under, at least its
    :func:`short_name` (``layers.0`` under ``enc``), the whole path for a row under
    none (a call whose parent was not recorded: with ``select=``, ``enc.layers.0`` and
    ``dec.layers.0`` are told apart)."""
    if not call.path:
        return trace.model.class_name
    parent = trace.calls[call.parent].path if call.parent is not None else None
    if parent is None:
        return call.path
    short = short_name(call.path)
    prefix = f"{parent}." if parent else ""
    if not call.path.startswith(prefix):  # a module of another part (a shared one)
        return short
    below = call.path[len(prefix):]
    return below if below.count(".") > short.count(".") else short


def shapes_cell(metas: Sequence[TensorMeta]) -> str:
    """One shape per line; paths shown when there is more than one tensor."""
    if len(metas) == 1:
        return shape_text(metas[0])
    return "\n".join(f"{m.path}: {shape_text(m)}" for m in metas)


def tied_here(trace: Trace, call: Call) -> int:
    """Parameters of ``call``'s module registered on it but counted at another path."""
    info = trace.modules.get(call.path)
    if info is None or call.call_index:
        return 0
    below = info.own_params + sum(
        m.total_params for p in info.children if (m := trace.modules.get(p)) is not None
    )
    return max(info.total_params - below, 0)


def shared_here(trace: Trace, call: Call) -> list[str]:
    """The submodules below ``call``'s module that are registered first at another path
    (one module in every block): the call's row counts their parameters, which the
    totals count once, at that first path. ``[]`` for a later call of a module (its
    row shows no count) and in a model without shared modules."""
    if call.call_index:
        return []
    shared = _shared_modules(trace)
    if not shared:
        return []
    prefix = f"{call.path}." if call.path else ""
    return sorted(first for first, aliases in shared if not first.startswith(prefix)
                  and any(a.startswith(prefix) for a in aliases))


def _shared_modules(trace: Trace) -> list[tuple[str, tuple[str, ...]]]:
    """``(first path, other paths)`` of each module registered at several paths, once
    per module table (asked for every row of a table)."""
    modules = trace.modules
    kept = _SHARED.get(id(modules))
    if kept is not None and kept[0] is modules:
        return kept[1]
    found = [(info.path, info.aliases) for info in modules.values() if info.aliases]
    if len(_SHARED) >= 64:
        _SHARED.clear()
    _SHARED[id(modules)] = (modules, found)
    return found


_SHARED: dict[int, tuple[dict[str, ModuleInfo], list[tuple[str, tuple[str, ...]]]]] = {}


def tied_names(trace: Trace, path: str) -> list[tuple[str, str]]:
    """``(tied path, first path)`` of the tensors of module ``path`` counted elsewhere,
    when the trace knows them (``trace.meta["tied"]``)."""
    tied = trace.meta.get("tied") or {}
    prefix = f"{path}." if path else ""
    return [(p, first) for p, first in tied.items()
            if p.startswith(prefix) and "." not in p[len(prefix):]]


def tree_text(
    trace: Trace, call: Call, *, ascii: bool, indent: int | None = None
) -> str:
    """``"    h.0 (GPT2Block)"``: indented by depth, with the call index and markers."""
    depth = call.depth if indent is None else indent
    text = "  " * depth + call_label(trace, call)
    if call.call_index:
        text += f"#{call.call_index}"
    if call.path:
        text += f" ({call.module_class})"
    if tied_here(trace, call):
        text += " [tied]"
    elif shared_here(trace, call):
        text += " [shared]"
    if call.error:
        text += "  x raised" if ascii else "  ✗ raised"
    elif trace.stop is not None and trace.stop.call == call.index:
        text += "  stopped" if ascii else "  ■ stopped"
    return text


def fold_text(trace: Trace, calls: Sequence[Call], *, ascii: bool) -> str:
    """``"    h.1 … h.11 (GPT2Block) ×11"``: one row for a run of identical blocks."""
    first, last = calls[0], calls[-1]
    dots = "..." if ascii else "…"
    times = "x" if ascii else "×"
    names = _name(trace, first) if len(calls) == 1 else \
        f"{_name(trace, first)} {dots} {_name(trace, last)}"
    kind = f" ({first.module_class})" if first.path else ""  # the root's name is its class
    mark = " [shared]" if any(shared_here(trace, c) for c in calls) else ""
    return f"{'  ' * first.depth}{names}{kind} {times}{len(calls)}{mark}"


def _name(trace: Trace, call: Call) -> str:
    """:func:`call_label` with the call index (``#2``)."""
    label = call_label(trace, call)
    return f"{label}#{call.call_index}" if call.call_index else label


def structure_text(info: ModuleInfo, class_name: str) -> str:
    """The tree label of a module of :func:`hookscope.inspect`."""
    name = short_name(info.path) if info.path else class_name
    text = "  " * info.depth + name
    if info.aliases:
        text += f" (= {', '.join(info.aliases)})"
    return text


def structure_fold_text(modules: Sequence[ModuleInfo], *, ascii: bool) -> str:
    """``"    h.1 ... h.11 x11"``: :func:`hookscope.inspect`'s row for a run of
    identical blocks (their class is in the next column)."""
    dots, times = ("...", "x") if ascii else ("…", "×")
    first, last = short_name(modules[0].path), short_name(modules[-1].path)
    return f"{'  ' * modules[0].depth}{first} {dots} {last} {times}{len(modules)}"


def shorten_tree(cell: str, width: int) -> str:
    """A tree label in ``width``: the class shortened first (to 4 characters, or to 2
    when that keeps the name whole: ``layer1.0 (B…k)``, not ``lay…1.0 (Ba…k)``), then
    the name; the indentation, the ``×N`` of a fold and markers stay."""
    if len(cell) <= width:
        return cell
    body = cell.lstrip(" ")
    indent = cell[: len(cell) - len(body)]
    name, paren, rest = body.partition(" (")
    if not paren:
        return indent + elide(body, max(width - len(indent), 4))
    kind, close, tail = rest.partition(")")
    over = len(cell) - width
    if len(kind) - over >= 2:  # the name stays whole: it tells the rows apart
        return f"{indent}{name} ({elide(kind, len(kind) - over)}{close}{tail}"
    kind = elide(kind, max(len(kind) - over, 4))
    over = len(indent) + len(name) + 2 + len(kind) + 1 + len(tail) - width
    if over > 0:
        name = _elide_name(name, max(len(name) - over, 5))
    return f"{indent}{name} ({kind}{close}{tail}"


def _elide_name(name: str, width: int) -> str:
    """``name`` in ``width``; a fold's range (``h.1 ... h.11``) keeps its separator
    whole and shortens each end (cut as one string, it read ``h.1 .… h.11``)."""
    for sep in (" ... ", " … "):
        first, found, last = name.partition(sep)
        if not found:
            continue
        # the separator tightened, then one character, then the end without the
        # dotted prefix both ends share (``layers.1…79``)
        head = first.rpartition(".")[0] + "."
        short = last[len(head):] if head != "." and last.startswith(head) else last
        for text in (f"{first}{sep.strip()}{last}", f"{first}…{last}", f"{first}…{short}"):
            if len(text) <= width:
                return text
        break
    return elide(name, width)


def tree_shortener(cells: Sequence[str]) -> Shorten:
    """:func:`shorten_tree` for the labels of one table, kept apart: where two rows'
    labels would read alike (rows named by their whole path, under ``select=`` or
    ``sort=``, differ in the middle, where the layer index is: ``encoder.layer.0.
    attention.self.query``), their names get other elisions, matched so that no two
    rows look the same where the width allows (``render/grid.distinct_shortener``)."""
    return shortener_by_width(lambda width: _tree_forms(cells, width), shorten_tree)


def _tree_forms(cells: Sequence[str], width: int) -> dict[str, str]:
    out = {cell: shorten_tree(cell, width) for cell in dict.fromkeys(cells)}
    alike: dict[str, list[str]] = {}
    for cell, form in out.items():
        alike.setdefault(form, []).append(cell)
    for form, group in alike.items():
        if len(group) < 2:
            continue
        # the same form: the same indentation, class and markers, names cut alike
        body = form.lstrip(" ")
        indent = form[: len(form) - len(body)]
        short, paren, rest = body.partition(" (")
        names = [cell.lstrip(" ").partition(" (")[0] for cell in group]
        forms = _apart(names, len(short))
        for cell, name in zip(group, names, strict=True):
            out[cell] = f"{indent}{forms.get(name, short)}{paren}{rest}"
    return out


def _apart(names: list[str], width: int) -> dict[str, str]:
    """``names`` (distinct paths) in ``width`` characters each, showing where they
    differ: the dotted prefix they share is cut to ``…``, then each keeps its first
    differing segment and its end (``…0.…lf.query`` for ``encoder.layer.0.attention.
    self.query``). Any that would still read alike get other elisions
    (:func:`~hookscope.render.grid.distinct_forms`)."""
    split = [name.split(".") for name in names]
    common = 0  # the whole segments every name starts with
    while all(len(parts) > common + 1 and parts[common] == split[0][common] for parts in split):
        common += 1
    shared = ".".join(split[0][:common]) + "." if common else ""
    forms: dict[str, str] = {}
    for name in names:
        rest = name[len(shared):]
        lead = "…" if shared else ""
        head = len(rest.partition(".")[0]) + 1  # the differing segment and its dot
        room = width - len(lead)
        if len(rest) <= room:
            forms[name] = lead + rest
        elif room >= head + 3:  # the segment, an ellipsis and a character of the end
            forms[name] = lead + elide(rest, room, head=head)
    if len(set(forms.values())) == len(names):
        return forms
    return distinct_forms(names, width)[0]


def tree_min(cells: Sequence[str]) -> int:
    """The narrowest :func:`shorten_tree` can make these labels."""
    return max((len(shorten_tree(c, 1)) if len(c) > 16 else len(c) for c in cells), default=0)
