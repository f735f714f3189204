"""Analysis on the meta device: shapes, parameters and FLOPs without real memory.

``trace(..., device="meta")`` (``hookscope/api/tracing.py``) runs the model on the meta device,
where tensors have shapes and dtypes but no data, so a 70B-parameter model costs no
memory and each op only computes its output shape. A model that is already on the
meta device (built under ``with torch.device("meta"):``) runs as it is; otherwise
:func:`meta_copy` makes a copy whose parameters, buffers and tensor attributes are
meta tensors, and the user's model is never touched.

The copy is ``copy.deepcopy`` with a memo pre-filled with the meta version of every
tensor, so no real tensor is copied, tied parameters stay tied (one meta tensor for
one real one), and the module tree, paths, classes and ``requires_grad`` flags are
those of the original.

Before building a model for real, the command line builds it here first (cheap) and
compares :func:`state_bytes` with :func:`available_memory`, so a default config of
billions of parameters is analysed on meta instead of being killed by the kernel.

NB: a model that reads tensor values in ``forward`` (``if x.sum() > 0``,
``.item()``, ``.tolist()``) cannot run on the meta device; the run fails with the
module path, as any failure inside the model does.
"""

from __future__ import annotations

import copy
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy
from torch.nn.utils.rnn import PackedSequence

from hookscope.core.torch_private import pytree
from hookscope.errors import SpecError

META = torch.device("meta")


def is_meta_request(device: str | torch.device | None) -> bool:
    """Whether ``device`` names the meta device."""
    if device is None:
        return False
    try:
        return torch.device(device).type == "meta"
    except (RuntimeError, TypeError):
        return False


def _all_modules(model: nn.Module) -> list[nn.Module]:
    """Registered submodules, and modules kept in plain lists, tuples and dicts
    (unregistered, but their forward still runs)."""
    found: dict[int, nn.Module] = {}
    todo = [model]
    module_type = nn.Module
    while todo:
        module = todo.pop()
        if id(module) in found:
            continue
        found[id(module)] = module
        for value in vars(module).values():
            # ``type() in`` first: most values are hook tables, empty, or not
            # containers (``not value`` of a tensor would raise)
            if type(value) in _MAPPINGS or isinstance(value, dict):
                if value:  # a hook table may hold a module used as a hook
                    todo.extend([m for m in value.values() if isinstance(m, module_type)])
            elif isinstance(value, (list, tuple)):
                todo.extend([m for m in value if isinstance(m, module_type)])
    return list(found.values())


_MAPPINGS = (dict, OrderedDict)


def _module_tensors(model: nn.Module) -> Iterator[torch.Tensor]:
    """Every tensor a module of ``model`` holds: parameters, buffers, and tensors in
    plain attributes, also inside lists, tuples and dicts of them (torchvision's
    ``AnchorGenerator.cell_anchors`` is a list of tensors, neither buffer nor
    parameter)."""
    tensor = torch.Tensor
    for module in _all_modules(model):
        for t in (*module._parameters.values(), *module._buffers.values()):
            if t is not None:
                yield t
        for name, t in vars(module).items():
            if isinstance(t, tensor):
                yield t
            elif isinstance(t, (list, tuple, dict)) and t and name not in _MODULE_OWN:
                try:
                    leaves = pytree.tree_leaves(t)
                except RecursionError:  # a list that holds itself
                    continue
                yield from (leaf for leaf in leaves if isinstance(leaf, tensor))


#: ``nn.Module``'s own attributes (its registries and hook dicts), walked above or not
#: holding the module's tensors.
_MODULE_OWN = frozenset(vars(nn.Module()))


def _first_parameter(model: nn.Module) -> torch.Tensor | None:
    """``next(iter(model.parameters()), None)``, without its generators (``trace()``
    asks on every run: for a real model the answer is a few dict reads away)."""
    todo: list[nn.Module | None] = [model]
    seen = set()
    while todo:
        module = todo.pop()
        if module is None or id(module) in seen:
            continue
        seen.add(id(module))
        for p in module._parameters.values():
            if p is not None:
                return p
        todo.extend(reversed(module._modules.values()))
    return None


def is_on_meta(model: nn.Module) -> bool:
    """Whether every parameter, buffer and tensor attribute of ``model`` is on meta.

    A model without any tensor is not "on meta" (it runs anywhere). Stops at the first
    tensor that is not on meta: for a real model that is the first parameter.
    """
    first = _first_parameter(model)
    if first is not None and not first.is_meta:
        return False
    found = False
    for t in _module_tensors(model):
        if not t.is_meta:
            return False
        found = True
    return found


def _meta_tensor(t: torch.Tensor) -> torch.Tensor:
    """A meta tensor like ``t``: shape, strides, dtype, ``requires_grad``, class."""
    if is_lazy(t):  # an uninitialized parameter: it materialises on meta
        factory: Callable[..., torch.Tensor] = type(t)
        return factory(requires_grad=t.requires_grad, device=META, dtype=t.dtype)
    data = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=META)
    if isinstance(t, nn.Parameter):
        meta: torch.Tensor = type(t)(data, requires_grad=t.requires_grad)
        meta.__dict__.update(t.__dict__)
        return meta
    if t.requires_grad and t.is_leaf:
        data.requires_grad_(True)
    return data


def meta_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` on the meta device (``model`` itself if already there).

    Parameters, buffers and tensor attributes become meta tensors; tied tensors stay
    tied; everything else is deep-copied. No real tensor memory is allocated.

    Raises:
        SpecError: the model has a TorchScript submodule, which cannot go to meta.
    """
    if is_on_meta(model):
        return model
    for path, module in model.named_modules():
        if isinstance(module, torch.jit.ScriptModule):  # its copy keeps real tensors
            raise SpecError(
                f"device='meta' cannot move the TorchScript submodule {path!r} "
                f"({type(module).__name__}) to the meta device; analyse the model "
                "before scripting it, or trace it on its own device"
            )
    return copy_with_tensors(model, _meta_tensor)


def copy_with_tensors(model: nn.Module,
                      convert: Callable[[torch.Tensor], torch.Tensor]) -> nn.Module:
    """A deep copy of ``model`` whose parameters, buffers and tensor attributes are
    ``convert(t)`` of the originals (one call per tensor: tied tensors stay tied); no
    original tensor is copied or touched."""
    memo: dict[int, Any] = {}
    for t in _module_tensors(model):
        if id(t) not in memo:
            memo[id(t)] = convert(t)
    # deepcopy keeps originals alive in memo[id(memo)]; keep ours alive the same way.
    memo[id(memo)] = list(memo.values())
    copied: nn.Module = copy.deepcopy(model, memo)
    return copied


def inputs_to_meta(value: Any) -> Any:
    """``value`` with every tensor in it replaced by a meta tensor of the same kind."""

    def convert(leaf: Any) -> Any:
        if isinstance(leaf, PackedSequence):  # its batch_sizes must stay on the CPU
            return leaf._replace(**{
                k: convert(getattr(leaf, k)) for k in ("data", "sorted_indices", "unsorted_indices")
            })
        if isinstance(leaf, torch.Tensor) and leaf.device.type != "meta":
            return _meta_tensor(leaf)
        return leaf

    return pytree.tree_map(convert, value, is_leaf=_packed)


def _packed(value: Any) -> bool:
    return isinstance(value, PackedSequence)


def state_bytes(model: nn.Module) -> int:
    """Bytes of ``model``'s parameters and buffers (each shared tensor once), on any device."""
    seen: set[int] = set()
    total = 0
    for t in (*model.parameters(), *model.buffers()):
        if id(t) in seen or is_lazy(t):
            continue
        seen.add(id(t))
        total += t.numel() * t.element_size()
    return total


def available_memory(device: torch.device | None = None) -> int | None:
    """Bytes that can still be allocated on ``device`` (default: the CPU), or ``None``.

    The CPU figure is ``MemAvailable`` of ``/proc/meminfo`` (what the kernel can give
    without swapping), else the free physical pages; a CUDA device's is
    ``torch.cuda.mem_get_info``. Tests patch this function.
    """
    if device is not None and device.type == "cuda":
        try:
            free, _ = torch.cuda.mem_get_info(device)
        except RuntimeError:
            return None
        return int(free)
    if device is not None and device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None
