"""``hookscope hooks MODEL``: every hook the model's own code attached to it.

For ``file.py:factory`` models whose factory registers hooks (logging, gradient
clipping, state-dict fix-ups): the command builds the model, lists its hooks with
:func:`hookscope.hooks` (nothing runs, no input is needed) and prints the tree of
``render/hooks_tree.py`` or the JSON document of
:meth:`hookscope.HookInventory.to_json`.

The command is registered on the app of ``cli/app.py`` when that module is imported
(its last line imports this one) and shares that module's option types, so the
``hooks`` options read like every other command's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hookscope.cli.failure_boundary import failure_boundary, model_prints_to_stderr
from hookscope.cli.output import OutputTarget, Rendered
from hookscope.cli.shared_options import (
    ConfigOpt,
    DebugOpt,
    DeviceOpt,
    Format,
    FormatOpt,
    ModelArg,
    NoColorOpt,
    OutputOpt,
    WidthOpt,
    chosen_format,
)

if TYPE_CHECKING:
    from hookscope.debug.hook_inventory import HookInventory


def hooks_command(
    model: ModelArg,
    device: DeviceOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
    no_color: NoColorOpt = False,
    width: WidthOpt = None,
    debug: DebugOpt = False,
) -> None:
    """Every hook attached to the model: per module, parameter and process-wide."""
    import hookscope
    from hookscope.cli.running import check_output, load

    fmt = chosen_format(fmt, output, Format)
    target = OutputTarget(output, no_color, width)
    with failure_boundary(debug=debug):
        check_output(output)  # before the model is built
        with model_prints_to_stderr():
            loaded = load(model, config=config, device=device)
        target.write(hooks_view(hookscope.hooks(loaded.model), fmt.value))


def hooks_view(inventory: HookInventory, fmt: str) -> Rendered:
    """The tree of ``inventory``, or its JSON document."""
    if fmt == "json":
        return Rendered.of_text(inventory.to_json())
    from hookscope.render.hooks_tree import hooks_renderables

    return Rendered.of_tables(lambda ascii: hooks_renderables(inventory, ascii))
