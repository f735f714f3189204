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
from dataclasses import dataclass
from types import ModuleType

import torch
from torch import nn

from hookscope.cli.inputs import InputSpec
from hookscope.errors import SpecError

__all__ = [
    "LoadedModel",
    "ModelSource",
    "build",
    "default_input_specs",
    "describe",
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
    """

    model: nn.Module
    spec: str
    source: ModelSource
    default_inputs: tuple[InputSpec, ...] = ()
    vocab_size: int | None = None


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
        # NB: the code computed with tensors while building (torchvision's regnet calls
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


def describe(e: BaseException) -> str:
    """``TypeName: first line of the message``, at most 200 characters."""
    lines = str(e).strip().splitlines()
    text = f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__
    return text if len(text) <= 200 else text[:199] + "…"


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
    ``1x3x16xSxS`` clip; optical-flow models two images. transformers: ``input_ids`` of
    ``1x128`` (fewer if the model has fewer positions), plus ``decoder_input_ids`` for
    encoder-decoders; image models ``pixel_values`` of ``1xCxHxW`` from the config.

    Raises:
        SpecError: nothing is known about the model's inputs (its own factory, or a
            transformers model whose main input is neither token ids nor an image).
    """
    if loaded.default_inputs:
        return list(loaded.default_inputs)
    raise SpecError(
        f"model {loaded.spec!r} has no default inputs; pass them with --input, "
        "e.g. --input 1,3,224,224 or --input input_ids=1,128:int64"
    )
