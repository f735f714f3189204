"""The hook inventory as a tree: owner -> hook kind -> hooks.

Reads only :class:`~hookscope.debug.hook_records.HookRecord`\\ s (never a module or a hook
function): :func:`hooks_tree` builds a ``rich.tree.Tree`` for a console,
:func:`render_hooks_text` renders it to a string (ASCII guides ``+--``/``|`` and no
colour by default, what pipes, files and tests get) and :func:`render_hooks_html` to
a self-contained ``<pre>`` block for Jupyter. Each hook line is its qualified name,
``file:line`` (shortened: relative to the working directory, or from the package
directory inside ``site-packages``), its flags and its handle id.
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text
from rich.tree import Tree

from hookscope.render.table import DEFAULT_WIDTH, to_text

if TYPE_CHECKING:
    from hookscope.debug.hook_inventory import HookInventory
    from hookscope.debug.hook_records import HookRecord


class _AsciiGuides:
    """Draws a tree with rich's ASCII guides whatever the console's encoding."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        ascii_options = options.copy()
        ascii_options.encoding = "ascii"  # ConsoleOptions.ascii_only reads this
        yield from console.render(self.tree, ascii_options)


def hooks_tree(inventory: HookInventory, *, ascii: bool = False) -> Tree | _AsciiGuides:
    """The tree of ``inventory``: one branch per owner, one per hook kind under it.

    Args:
        inventory: the records to draw.
        ascii: draw the guides with ASCII characters (pipes, files, tests).
    """
    tree = Tree(_title(inventory), guide_style="dim")
    for records in inventory.by_owner().values():
        owner = tree.add(_owner_label(records[0]))
        kinds: dict[str, Tree] = {}
        for record in records:
            kind = record.kind.value
            if kind not in kinds:
                kinds[kind] = owner.add(Text(kind, style="magenta"))
            kinds[kind].add(hook_label(record, ascii=ascii))
    return _AsciiGuides(tree) if ascii else tree


def hook_label(record: HookRecord, *, ascii: bool = False) -> Text:
    """``name  file:line  [flags]  id N`` of one hook."""
    label = Text()
    label.append(record.name, style="bold")
    location = record.location
    label.append(f"  {short_path(location)}" if location else "  (no source)", style="cyan")
    if record.flags:
        label.append(f"  [{', '.join(record.flags)}]", style="yellow")
    label.append(f"  id {record.handle_id}", style="dim")
    if record.registered_by != "user":
        label.append(f"  ({record.registered_by})", style="bold red")
    return label


def short_path(location: str) -> str:
    """A source location as a reader wants it: relative to the working directory when
    inside it, from the package name when inside ``site-packages``, else unchanged."""
    for marker in (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}"):
        if marker in location:
            return location.rsplit(marker, 1)[1]
    try:
        relative = os.path.relpath(location, os.getcwd())
    except ValueError:  # another drive on Windows
        return location
    return location if relative.startswith("..") else relative


def _title(inventory: HookInventory) -> Text:
    count = len(inventory)
    text = Text()
    text.append(inventory.model_class, style="bold")
    text.append(f": {count} hook{'s' if count != 1 else ''}" if count else ": no hooks")
    if inventory.hidden_hookscope:
        text.append(
            f" ({inventory.hidden_hookscope} of hookscope's own not shown)", style="dim"
        )
    return text


def _owner_label(record: HookRecord) -> Text:
    if record.owner_class is None:
        return Text(record.owner, style="bold green")
    text = Text()
    text.append(record.owner or "<root>", style="bold")
    text.append(f" ({record.owner_class})", style="cyan")
    if record.aliases:
        text.append(f" = {', '.join(record.aliases)}", style="dim")
    return text


def render_hooks_text(
    inventory: HookInventory, *, width: int | None = None, ascii: bool = True
) -> str:
    """The tree as a string, without colour."""
    return to_text(hooks_tree(inventory, ascii=ascii), width=width or DEFAULT_WIDTH)


def render_hooks_html(inventory: HookInventory) -> str:
    """The tree as a self-contained HTML ``<pre>`` block (what Jupyter shows)."""
    text = render_hooks_text(inventory, ascii=False)
    return f"<pre style=\"white-space: pre; font-family: monospace\">{html.escape(text)}</pre>"


def hooks_renderables(inventory: HookInventory, ascii: bool) -> Sequence[Tree | _AsciiGuides]:
    """``Rendered.of_tables``'s builder for the command line."""
    return [hooks_tree(inventory, ascii=ascii)]


if __name__ == "__main__":  # pragma: no cover
    import torch

    import hookscope

    demo = torch.nn.Sequential(torch.nn.Linear(2, 2))
    demo[0].register_forward_hook(lambda m, i, o: None, always_call=True)
    Console().print(hookscope.hooks(demo))
