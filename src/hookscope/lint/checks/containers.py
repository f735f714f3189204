"""HS1xx: modules and parameters kept in plain Python containers, and a module
registered inside itself.

``nn.Module.__setattr__`` registers a value only when it is itself a module or a
parameter; a ``list``, ``tuple``, ``dict`` or ``set`` of them is stored as a plain
attribute, and what it holds is invisible to ``parameters()``, ``state_dict()``,
``.to()``, ``.train()``/``.eval()`` and ``print(model)``. The rules look into plain
containers, nested too, and report only objects the model does not register anywhere
else: a list of references to registered modules is harmless, and so is what an
unregistered wrapper holds that the model registers (a view
``nn.Sequential(self.conv, self.bn)`` loses nothing; it is information).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch import nn

from hookscope.lint.context import LintContext, modules_by_id
from hookscope.lint.findings import Hit, Severity
from hookscope.lint.reads import reads_training
from hookscope.lint.rules import register_rule

PLAIN = (list, tuple, dict, set, frozenset)
MAX_DEPTH = 4  # NB: deeper nesting is not searched
MAX_ITEMS = 10_000  # NB: only the first items of a huge container (a vocabulary) are read


def contents(value: Any, depth: int = 0) -> Iterator[Any]:
    """Every non-container value inside a plain container, nested up to ``MAX_DEPTH``."""
    if not isinstance(value, PLAIN) or depth >= MAX_DEPTH:
        return
    items = value.values() if isinstance(value, dict) else value
    for i, item in enumerate(items):
        if i >= MAX_ITEMS:
            return
        if isinstance(item, PLAIN):
            yield from contents(item, depth + 1)
        else:
            yield item


def _kind(value: Any) -> str:
    return f"plain {type(value).__name__}"


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


@register_rule(
    "HS101", "module-in-plain-container", severity=Severity.ERROR,
    why="""A module kept in a plain list, tuple, dict or set attribute is not registered as
    a submodule: its parameters are not in model.parameters() (the optimizer never trains
    them), not in state_dict() (they are never saved or loaded), .to()/.cuda() does not
    move them and .eval() does not switch them. The model runs, but those layers keep
    their random initial weights.""",
    fix="hold them in nn.ModuleList (list, tuple) or nn.ModuleDict (dict), nested as needed",
)
def module_in_plain_container(ctx: LintContext) -> Iterator[Hit]:
    first = {id(m): p for p, m in ctx.members}
    for path, _, name, value in ctx.plain_attributes():
        lost = {id(m): m for m in contents(value)
                if isinstance(m, nn.Module) and id(m) not in ctx.module_ids}
        if not lost:
            continue
        # what a wrapper holds that the model registers (a view
        # ``nn.Sequential(self.conv, self.bn)``) is trained, saved, moved and switched
        inner = {id(m): m for top in lost.values() for m in modules_by_id(top)}
        unregistered = [m for key, m in inner.items() if key not in first]
        wrapped = sorted({first[key] or "<root>" for key in inner if key in first})
        params = {id(p): p.numel() for m in unregistered for p in m.parameters(recurse=False)
                  if id(p) not in ctx.tensor_ids}
        buffers = {id(b): b.numel() for m in unregistered for b in m.buffers(recurse=False)
                   if id(b) not in ctx.tensor_ids}
        classes = sorted({type(m).__name__ for m in lost.values()})
        # a class that reads ``training`` (Dropout, BatchNorm) misses .eval()
        reads = {type(m): reads_training(type(m)) for m in unregistered}
        modal = sorted({cls.__name__ for cls, used in reads.items() if used})
        unread = sorted({cls.__name__ for cls, used in reads.items() if used is None})
        held = (f"self.{name} is a {_kind(value)} holding {_count(len(lost), 'module')} "
                f"({', '.join(classes)}) that the model does not register: ")
        mode = (f".train()/.eval() do not reach them ({', '.join(modal)} keeps its own "
                "training flag)") if modal else ""
        if params:
            yield Hit(path, name, held + (
                f"their {sum(params.values()):,} parameters are not in parameters() (never "
                "trained), not in state_dict() (never saved), and .to() does not move "
                "them" + (f"; {mode}" if mode else "")))
        elif buffers or modal:
            lost_state = (f"their {sum(buffers.values()):,} buffer values are not in "
                          "state_dict() (never saved) and .to() does not move them"
                          if buffers else "")
            yield Hit(path, name, held + "; ".join(x for x in (lost_state, mode) if x))
        elif unread:  # no source to read: whether .eval() matters is not known
            yield Hit(path, name, held + (
                "they have no parameters or buffers, but whether "
                f"{', '.join(unread)} reads its training flag (which .train()/.eval() do "
                "not reach) could not be read from its source"), Severity.WARNING)
        elif not name.startswith("_"):  # ReLU, Tanh: nothing to train, save or switch
            # (under a private name, a deliberate choice: kernels' ``_kernel_funcs``)
            own = (f"the modules they wrap are registered ({', '.join(wrapped)}), they have "
                   "no other parameters or buffers" if wrapped
                   else "they have no parameters or buffers")
            yield Hit(path, name, held + (
                f"{own} and do not read their training flag, so nothing is lost, but "
                "print(model), named_modules() and module hooks do not see them"),
                Severity.INFO)


@register_rule(
    "HS102", "parameter-in-plain-container", severity=Severity.ERROR,
    why="""An nn.Parameter kept in a plain list, tuple, dict or set attribute (or set on
    the instance dict directly) is not registered: it is not in model.parameters(), so
    the optimizer never updates it, not in state_dict(), so it is never saved, and
    .to()/.cuda() does not move it. (A single Parameter set on the instance dict gets
    its own fix: assign it as self.name = nn.Parameter(...).)""",
    fix="hold them in nn.ParameterList (list, tuple) or nn.ParameterDict (dict)",
)
def parameter_in_plain_container(ctx: LintContext) -> Iterator[Hit]:
    for path, _, name, value in ctx.plain_attributes():
        items = [value] if isinstance(value, nn.Parameter) else list(contents(value))
        lost = {id(p): p for p in items
                if isinstance(p, nn.Parameter) and id(p) not in ctx.tensor_ids}
        if not lost:
            continue
        numel = sum(p.numel() for p in lost.values())
        single = value is next(iter(lost.values()))
        what = "an unregistered Parameter" if single else (
            f"a {_kind(value)} holding {_count(len(lost), 'Parameter')}")
        yield Hit(path, name, (
            f"self.{name} is {what} ({numel:,} values) that the model does not register: "
            "not in parameters() (never trained), not in state_dict() (never saved), "
            "and .to() does not move it"
        ), fix=(f"assign it as self.{name} = nn.Parameter(...), which registers it (or "
                f"self.register_parameter({name!r}, parameter)), not through "
                "self.__dict__ or object.__setattr__") if single else None)


@register_rule(
    "HS103", "module-contains-itself", severity=Severity.ERROR,
    why="""Assigning a module to an attribute registers it as a submodule, also when it is
    the module's own parent (a child that keeps a reference to its owner): the model then
    contains itself, and torch's recursive walks over submodules never end: .to()/.cuda(),
    .train()/.eval(), state_dict() and print(model) raise RecursionError.""",
    fix="keep the reference unregistered: object.__setattr__(self, 'owner', parent), or "
    "pass the parent (or what it holds) to the call that needs it",
)
def module_contains_itself(ctx: LintContext) -> Iterator[Hit]:
    first = {id(m): p for p, m in ctx.members}
    for path, module in ctx.members:
        for name, child in module._modules.items():
            at = first.get(id(child)) if child is not None else None
            if at is None or not (at == "" or path == at or path.startswith(f"{at}.")):
                continue
            what = "the model itself" if at == "" else f"{at!r}, a module that contains it"
            yield Hit(path, name, (
                f"self.{name} registers {what} ({type(child).__name__}) as a submodule: the "
                "model contains itself, so .to(), .train()/.eval(), state_dict() and "
                "print(model) never end (RecursionError)"
            ))
