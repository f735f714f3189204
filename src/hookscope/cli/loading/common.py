"""What every model source shares: the spec forms, the loaded-model record, building.

Where it sits: the bottom of :mod:`hookscope.cli.loading`. :func:`split_spec` tells
which source a spec names; the per-source modules (``files.py``, ``vision.py``,
``hf.py``) build the model through :func:`build`, which puts it on the requested device
(on ``meta`` without allocating memory) and turns whatever the user's code raised into a
one-line :class:`~hookscope.errors.SpecError`.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from types import ModuleType
from typing import TYPE_CHECKING

import torch
from torch import nn

from hookscope.cli.input_specs import InputSpec
from hookscope.errors import SpecError

if TYPE_CHECKING:
    from hookscope.cli.loading.hf_inputs import PositionLimit

__all__ = [
    "LoadedModel",
    "ModelSource",
    "build",
    "complete_input_specs",
    "default_input_specs",
    "describe",
    "floating_dtype",
    "raised",
    "require",
    "split_spec",
]

_SPEC_FORMS = (
    "'file.py:factory', 'package.module:factory', 'torchvision:NAME' or 'transformers:NAME'"
)
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


class ModelSource(str, enum.Enum):
    """Where a model came from; compares equal to its string value."""

    FILE = "file"
    MODULE = "module"
    TORCHVISION = "torchvision"
    TRANSFORMERS = "transformers"


@dataclass(frozen=True)
class LoadedModel:
    """A model built from a spec, with what is known about its inputs.

    Attributes:
        model: the module, on the requested device (library models are in eval mode).
        spec: the model spec it was built from.
        source: which kind of spec it was.
        default_inputs: example inputs that the model accepts; empty when unknown.
        vocab_size: the token vocabulary size, for drawing integer inputs; ``None`` if unknown.
        main_input: what an unnamed first ``--input`` is (its dtype: ``input_ids`` are
            int64); ``None`` when unknown.
        companions: inputs added to the user's when they leave them out
            (``decoder_input_ids`` of an encoder-decoder).
        notice: why the model was built elsewhere than asked (the memory guard), for
            the user; ``None`` when it was not.
        max_positions: the most tokens the model takes (a transformers model with a
            table of positions); ``None`` when it takes any number.
    """

    model: nn.Module
    spec: str
    source: ModelSource
    default_inputs: tuple[InputSpec, ...] = ()
    vocab_size: int | None = None
    main_input: InputSpec | None = None
    companions: tuple[InputSpec, ...] = ()
    notice: str | None = None
    max_positions: PositionLimit | None = None


def split_spec(spec: str) -> tuple[ModelSource, str, str]:
    if spec.endswith(".py"):
        raise SpecError(
            f"model spec {spec!r} names a file but no factory; write '{spec}:FACTORY', where "
            "FACTORY is a function, nn.Module class or nn.Module instance defined in it"
        )
    target, sep, name = spec.rpartition(":")
    if sep and target and name:
        if target in ("torchvision", "transformers"):
            return ModelSource(target), target, name
        is_file = target.endswith(".py") or "/" in target or os.sep in target
        if name.isidentifier() and (is_file or _DOTTED.fullmatch(target)):
            return (ModelSource.FILE if is_file else ModelSource.MODULE), target, name
    raise SpecError(f"model spec {spec!r} is not of the form {_SPEC_FORMS}")


def build(make: Callable[[], nn.Module], device: torch.device | None, *, what: str) -> nn.Module:
    """Call ``make`` under ``device`` and move the result there; wrap its errors."""
    try:
        return _construct(make, device)
    except SpecError:
        raise
    except (Exception, SystemExit) as e:
        raise SpecError(f"{what} {raised(e)}") from e


def _construct(make: Callable[[], nn.Module], device: torch.device | None) -> nn.Module:
    if device is None:
        return make()
    try:
        with device:
            model = make()
    except (NotImplementedError, RuntimeError) as e:
        if device.type != "meta" or "meta" not in str(e):
            raise
        # the code computes with tensors while building (torchvision's regnet calls
        # .tolist()), which meta tensors cannot do: build on the CPU, parameters on meta.
        with _parameters_on_meta():
            model = make()
    return model.to(device)


@contextlib.contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Move every parameter and buffer to meta as it is registered.

    NB: patches ``nn.Module.register_parameter``/``register_buffer`` for the duration, the
    way accelerate's ``init_empty_weights`` does; not thread-safe. Only one parameter at a
    time ever holds real memory.
    """
    register_parameter = nn.Module.register_parameter
    register_buffer = nn.Module.register_buffer

    def on_meta_parameter(self: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is not None and not nn.parameter.is_lazy(param):
            param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register_parameter(self, name, param)

    def on_meta_buffer(
        self: nn.Module, name: str, tensor: torch.Tensor | None, persistent: bool = True
    ) -> None:
        register_buffer(self, name, None if tensor is None else tensor.to("meta"), persistent)

    nn.Module.register_parameter = on_meta_parameter  # type: ignore[method-assign]
    nn.Module.register_buffer = on_meta_buffer  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = register_parameter  # type: ignore[method-assign]
        nn.Module.register_buffer = register_buffer  # type: ignore[method-assign]


def raised(e: BaseException) -> str:
    """``raised TypeName: message``, or what a ``sys.exit()`` call needs to say."""
    if isinstance(e, SystemExit):
        return (
            f"called sys.exit({e.code!r}); put the code that parses arguments or exits "
            "under `if __name__ == '__main__':`"
        )
    return f"raised {describe(e)}"


def describe(e: BaseException, *, whole: bool = False) -> str:
    """``TypeName: first line of the message``, at most 200 characters; with ``whole``,
    every line of the message joined by spaces, at most 500."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    message = " ".join(lines) if whole else (lines[0] if lines else "")
    text = f"{type(e).__name__}: {message}" if message else type(e).__name__
    limit = 500 if whole else 200
    return text if len(text) <= limit else text[: limit - 1] + "…"


def floating_dtype(model: nn.Module) -> torch.dtype:
    """The dtype of the model's first floating parameter or buffer (float32 if none)."""
    for t in (*model.parameters(), *model.buffers()):
        if t.dtype.is_floating_point:
            return t.dtype
    return torch.float32


def require(module: str, *, spec: str, extra: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        package = module.partition(".")[0]
        raise SpecError(
            f"model spec {spec!r} needs {package}, which is not installed; "
            f"install it with pip install 'hookscope[{extra}]'"
        ) from e


def default_input_specs(loaded: LoadedModel) -> list[InputSpec]:
    """The example inputs to use when the user gives none.

    torchvision: one ``1x3xSxS`` image at the model's native size ``S`` (ViT's
    ``image_size``, else the crop size of its default weights, else 224); video models a
    ``1x3x16xSxS`` clip; optical-flow models two images. transformers: what the model's
    ``forward`` signature and config call for (``cli/loading/hf_inputs.py``).

    Raises:
        SpecError: nothing is known about the model's inputs (its own factory, or a
            transformers model whose inputs are none of those hookscope can make).
    """
    if loaded.default_inputs:
        return list(loaded.default_inputs)
    raise SpecError(
        f"model {loaded.spec!r} has no default inputs; pass them with --input, "
        "e.g. --input 1,3,224,224 or --input input_ids=1,128:int64"
    )


def complete_input_specs(loaded: LoadedModel, specs: list[InputSpec]) -> list[InputSpec]:
    """The user's ``--input`` specs, completed with what the model needs besides.

    An unnamed first spec without a dtype takes the dtype of the model's main input
    (``--input 1,128`` is ``input_ids`` of int64 for a transformers text model); floating
    specs without a dtype take the model's floating dtype; the model's companions
    (``decoder_input_ids``) are added, of the first input's batch and length, unless given.

    Raises:
        SpecError: a sequence of token ids is longer than the model's positions.
    """
    floating = floating_dtype(loaded.model)
    if not specs:
        return [
            replace(s, dtype=floating) if s.dtype.is_floating_point else s
            for s in default_input_specs(loaded)
        ]
    out: list[InputSpec] = []
    main = loaded.main_input
    for i, spec in enumerate(specs):
        if not spec.explicit_dtype:
            if main is not None and (spec.name == main.name or (spec.name is None and i == 0)):
                spec = replace(spec, dtype=main.dtype)
            elif _integer_input(spec.name):
                spec = replace(spec, dtype=torch.int64)
            elif spec.dtype.is_floating_point:
                spec = replace(spec, dtype=floating)
        _check_length(loaded, spec, main if spec.name is None and i == 0 else None)
        out.append(spec)
    given = {s.name for s in out}
    first = out[0].shape
    for companion in loaded.companions:
        if companion.name in given or _embeds_given(companion.name, given):
            continue
        shape = first[:2] if len(first) >= 2 and out[0].dtype == torch.int64 else None
        out.append(replace(companion, shape=shape or (first[:1] + companion.shape[1:])))
    return out


def _check_length(loaded: LoadedModel, spec: InputSpec, main: InputSpec | None) -> None:
    """Refuse token ids (``spec``, or the unnamed first spec standing for ``main``) longer
    than the model's positions, before the model runs into them."""
    name = main.name if main is not None else spec.name
    limit = loaded.max_positions
    if (limit is not None and name in ("input_ids", "decoder_input_ids")
            and spec.dtype == torch.int64 and len(spec.shape) >= 1):
        limit.check(spec.shape[-1], spec)


def _integer_input(name: str | None) -> bool:
    """An input that holds indices or a 0/1 mask by the transformers convention:
    ``*_ids`` (``decoder_input_ids``, ``token_type_ids``, ``position_ids``) and
    ``*attention_mask`` (``head_mask`` multiplies, and stays floating)."""
    return name is not None and (name.endswith("_ids") or name.endswith("attention_mask"))


def _embeds_given(name: str | None, given: set[str | None]) -> bool:
    """``decoder_inputs_embeds`` or ``labels`` stand in for ``decoder_input_ids``."""
    if name == "decoder_input_ids":
        return bool({"decoder_inputs_embeds", "labels"} & given)
    return False
