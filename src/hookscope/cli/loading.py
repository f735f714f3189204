"""Turn command-line strings into a model and example inputs.

Where it sits: the command line (``cli/app.py``) parses its options, then calls
:func:`load_model` with the model spec, the ``--config`` overrides and the device; with
no ``--input`` it asks :func:`default_input_specs` for the model's usual inputs, which
``cli/inputs.py`` turns into tensors, ready for ``hookscope.trace(model, *args,
**kwargs)``. Nothing here knows about typer, and torchvision/transformers are imported
only when a spec names them.

Model specs::

    path/to/file.py:factory        a function, nn.Module class or nn.Module instance in a file
    package.module:factory         the same, in an importable module
    torchvision:resnet50           torchvision.models.get_model(name, weights=None)
    transformers:llama[/TASK]      a model type, built from its default config; TASK is one of
                                   base, causal-lm, masked-lm, seq-cls

Weights are always random: nothing is ever downloaded. On ``device="meta"`` the model is
built without allocating memory, so a 70B-parameter config builds in a second.

Every mistake in a spec raises :class:`~hookscope.errors.SpecError` with a one-line
message that names the bad value and says how to fix it.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import importlib.util
import inspect
import itertools
import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

from hookscope.cli.inputs import DTYPES, InputSpec, parse_device, suggest
from hookscope.errors import SpecError

__all__ = [
    "TRANSFORMERS_TASKS",
    "LoadedModel",
    "ModelSource",
    "default_input_specs",
    "load_model",
]

TRANSFORMERS_TASKS: dict[str, str] = {
    "base": "AutoModel",
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "seq-cls": "AutoModelForSequenceClassification",
}
"""Suffixes of ``transformers:TYPE/TASK`` and the auto class each one builds."""

DEFAULT_SEQ_LEN = 128
DEFAULT_IMAGE_SIZE = 224
DEFAULT_VIDEO_FRAMES = 16

_SPEC_FORMS = (
    "'file.py:factory', 'package.module:factory', 'torchvision:NAME' or 'transformers:NAME'"
)
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_BUILD_KWARGS = ("attn_implementation", "dtype")
_module_counter = itertools.count()


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


# --------------------------------------------------------------------------- model specs


def load_model(
    spec: str, *, config: dict[str, object] | None = None, device: str | torch.device | None = None
) -> LoadedModel:
    """Build the model that ``spec`` names.

    Args:
        spec: ``file.py:factory``, ``package.module:factory``, ``torchvision:NAME`` or
            ``transformers:TYPE[/TASK]``. A factory is called with no arguments; it may
            also be an ``nn.Module`` class or instance.
        config: config overrides (see :func:`parse_config_overrides`); only for
            ``transformers:`` specs. ``attn_implementation`` and ``dtype`` are passed to
            ``from_config`` rather than set on the config.
        device: ``None`` (build as the code does), ``"cpu"``, ``"cuda[:N]"`` or ``"meta"``
            (no memory is allocated).

    Returns:
        The model with its default inputs and vocabulary size, when known.

    Raises:
        SpecError: the spec, overrides or device are wrong, or building the model failed.

    Example:
        >>> loaded = load_model("torchvision:resnet18", device="meta")
        >>> [str(s) for s in default_input_specs(loaded)]
        ['1,3,224,224:float32']
    """
    source, target, name = _split_spec(spec.strip())
    dev = parse_device(device)
    if config and source is not ModelSource.TRANSFORMERS:
        raise SpecError(
            f"config overrides ({', '.join(config)}) only apply to 'transformers:NAME' models, "
            f"not to {spec!r}; drop them, or set the values in your factory"
        )
    if source is ModelSource.TORCHVISION:
        return _load_torchvision(spec, name, dev)
    if source is ModelSource.TRANSFORMERS:
        return _load_transformers(spec, name, dict(config or {}), dev)
    module = _import_file(target, spec) if source is ModelSource.FILE else _import_module(target)
    model = _build(_factory(module, name, target), dev, what=f"factory {name!r} in {target!r}")
    return _user_loaded(model, spec, source)


def _split_spec(spec: str) -> tuple[ModelSource, str, str]:
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


def _build(make: Callable[[], nn.Module], device: torch.device | None, *, what: str) -> nn.Module:
    """Call ``make`` under ``device`` and move the result there; wrap its errors."""
    try:
        return _construct(make, device)
    except SpecError:
        raise
    except (Exception, SystemExit) as e:
        raise SpecError(f"{what} {_raised(e)}") from e


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


def _raised(e: BaseException) -> str:
    """``raised TypeName: message``, or what a ``sys.exit()`` call needs to say."""
    if isinstance(e, SystemExit):
        return (
            f"called sys.exit({e.code!r}); put the code that parses arguments or exits "
            "under `if __name__ == '__main__':`"
        )
    return f"raised {_describe(e)}"


def _describe(e: BaseException) -> str:
    """``TypeName: first line of the message``, at most 200 characters."""
    lines = str(e).strip().splitlines()
    text = f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__
    return text if len(text) <= 200 else text[:199] + "…"


# ------------------------------------------------------------------ files and modules


def _import_file(path_text: str, spec: str) -> ModuleType:
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise SpecError(
            f"file {path_text!r} not found (model spec {spec!r}); "
            f"relative paths start at {os.getcwd()}"
        )
    stem = re.sub(r"\W", "_", path.stem)
    name = f"_hookscope_user_{stem}_{next(_module_counter)}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise SpecError(f"file {path_text!r} cannot be imported as Python; give a .py file")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    argv = sys.argv
    try:
        # NB: the file sees itself as the program, as under `python file.py`: a script
        # that parses its arguments when imported must not read hookscope's.
        sys.argv = [str(path)]
        with _on_sys_path(str(path.resolve().parent)):
            module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:
        del sys.modules[name]
        raise SpecError(f"importing {path_text!r} {_raised(e)}") from e
    finally:
        sys.argv = argv
    return module


def _import_module(name: str) -> ModuleType:
    try:
        with _on_sys_path(os.getcwd()):
            return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and (name == e.name or name.startswith(e.name + ".")):
            raise SpecError(
                f"module {name!r} not found; install it, or run from the directory that "
                "holds it, or give a file path instead ('path/to/file.py:factory')"
            ) from e
        raise SpecError(f"importing module {name!r} raised {_describe(e)}") from e
    except (Exception, SystemExit) as e:
        raise SpecError(f"importing module {name!r} {_raised(e)}") from e


@contextlib.contextmanager
def _on_sys_path(directory: str) -> Iterator[None]:
    """Let the user's code import its sibling modules while it is being loaded."""
    added = directory not in sys.path
    if added:
        sys.path.insert(0, directory)
    try:
        yield
    finally:
        if added and directory in sys.path:
            sys.path.remove(directory)


def _factory(module: ModuleType, name: str, where: str) -> Callable[[], nn.Module]:
    """The zero-argument callable that builds the model named ``name`` in ``module``."""
    if not hasattr(module, name):
        found = ", ".join(_callables(module)) or "none"
        raise SpecError(f"{where!r} has no attribute {name!r} (available callables: {found})")
    obj = getattr(module, name)
    if isinstance(obj, nn.Module):
        return lambda: obj
    if not callable(obj):
        raise SpecError(
            f"{name!r} in {where!r} is {type(obj).__name__}; expected a function, an "
            "nn.Module class or an nn.Module instance"
        )
    _check_no_arguments(obj, name, where)

    def make() -> nn.Module:
        result = obj()
        if not isinstance(result, nn.Module):
            raise SpecError(
                f"factory {name!r} in {where!r} returned {type(result).__name__}, "
                "expected a torch.nn.Module; make it return the model"
            )
        return result

    return make


def _check_no_arguments(obj: Callable[..., object], name: str, where: str) -> None:
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):  # builtins without a signature: just call them
        return
    try:
        signature.bind()
    except TypeError:
        needed = [p.name for p in signature.parameters.values() if p.default is p.empty]
        raise SpecError(
            f"factory {name!r} in {where!r} needs arguments ({', '.join(needed)}) but is "
            "called with none; give them defaults or wrap it in a function without parameters"
        ) from None


def _callables(module: ModuleType) -> list[str]:
    """Public names in ``module`` that could be a factory (at most ten)."""

    def fits(value: object) -> bool:
        if isinstance(value, nn.Module):
            return True
        if isinstance(value, type):
            return issubclass(value, nn.Module)
        return inspect.isfunction(value) and value.__module__ == module.__name__

    names = sorted(n for n, v in vars(module).items() if not n.startswith("_") and fits(v))
    return names[:10] + (["…"] if len(names) > 10 else [])


def _user_loaded(model: nn.Module, spec: str, source: ModelSource) -> LoadedModel:
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "main_input_name"):
        return LoadedModel(model, spec, source)
    # A transformers model from the user's own factory: same defaults as transformers:NAME.
    inputs = _transformers_inputs(model, config, float_dtype=torch.float32)
    return LoadedModel(model, spec, source, inputs, _vocab_size(config))


# --------------------------------------------------------------------------- libraries


def _require(module: str, *, spec: str, extra: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        package = module.partition(".")[0]
        raise SpecError(
            f"model spec {spec!r} needs {package}, which is not installed; "
            f"install it with pip install 'hookscope[{extra}]'"
        ) from e


def _load_torchvision(spec: str, name: str, device: torch.device | None) -> LoadedModel:
    models = _require("torchvision.models", spec=spec, extra="vision")
    names: list[str] = models.list_models()
    if name not in names:
        raise SpecError(
            f"torchvision has no model {name!r}{suggest(name.lower(), names)}; "
            "torchvision.models.list_models() lists them all"
        )
    kwargs = _torchvision_kwargs(models, name)
    what = f"building torchvision model {name!r}"
    model = _build(lambda: models.get_model(name, **kwargs), device, what=what).eval()
    inputs = _torchvision_inputs(models, name, model)
    return LoadedModel(model, spec, ModelSource.TORCHVISION, inputs)


def _torchvision_kwargs(models: ModuleType, name: str) -> dict[str, object]:
    kwargs: dict[str, object] = {"weights": None}
    if "weights_backbone" in inspect.signature(models.get_model_builder(name)).parameters:
        kwargs["weights_backbone"] = None  # its default would download ImageNet weights
    if name.endswith(("googlenet", "inception_v3")):
        # NB: the weights are random either way; this skips the slow scipy init and
        # torchvision's FutureWarning about it.
        kwargs["init_weights"] = False
    return kwargs


def _torchvision_inputs(models: ModuleType, name: str, model: nn.Module) -> tuple[InputSpec, ...]:
    """One image at the model's native size; a clip for video models, two for flow."""
    size = _torchvision_image_size(models, name, model)
    if name in models.list_models(module=models.video):
        return (InputSpec((1, 3, DEFAULT_VIDEO_FRAMES, size, size)),)
    image = InputSpec((1, 3, size, size))
    if name in models.list_models(module=models.optical_flow):
        return (image, image)
    # NB: detection models take a list of images; a batched tensor iterates as one.
    return (image,)


def _torchvision_image_size(models: ModuleType, name: str, model: nn.Module) -> int:
    size = getattr(model, "image_size", None)  # ViT: fixed by its position embedding
    if isinstance(size, int):
        return size
    try:
        crop = models.get_model_weights(name).DEFAULT.transforms().crop_size
    except (AttributeError, KeyError, ValueError):
        return DEFAULT_IMAGE_SIZE
    crop = crop[0] if isinstance(crop, (list, tuple)) else crop
    return crop if isinstance(crop, int) else DEFAULT_IMAGE_SIZE


def _load_transformers(
    spec: str, name: str, overrides: dict[str, object], device: torch.device | None
) -> LoadedModel:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: nothing is downloaded
    transformers = _require("transformers", spec=spec, extra="transformers")
    model_type, task = _split_transformers_name(name, spec, transformers.CONFIG_MAPPING.keys())
    build_kwargs = _pop_build_kwargs(overrides)
    config = _transformers_config(transformers, model_type, overrides)
    auto = getattr(transformers, TRANSFORMERS_TASKS[task])
    what = f"building transformers model {name!r}"
    model = _build(lambda: _from_config(auto, config, task, build_kwargs), device, what=what)
    float_dtype = build_kwargs.get("dtype")
    if not isinstance(float_dtype, torch.dtype):
        float_dtype = torch.float32
    inputs = _transformers_inputs(model.eval(), config, float_dtype=float_dtype)
    return LoadedModel(model, spec, ModelSource.TRANSFORMERS, inputs, _vocab_size(config))


def _split_transformers_name(name: str, spec: str, known: Any) -> tuple[str, str]:
    model_type, _, task = name.partition("/")
    types: list[str] = list(known)
    if model_type not in types:
        # A checkpoint id ('meta-llama/Llama-2-7b') often contains its type as a word.
        words = [w for w in re.split(r"[-_/.]", name.lower()) if w in types]
        hint = f" (close matches: {', '.join(dict.fromkeys(words))})" if words else ""
        raise SpecError(
            f"transformers has no model type {name!r}{hint or suggest(model_type, types)}; "
            "NAME is a model type such as 'gpt2', 'bert' or 'llama', not a checkpoint id"
        )
    task = task or "base"
    if task not in TRANSFORMERS_TASKS:
        raise SpecError(
            f"task {task!r} in model spec {spec!r} is unknown; use one of "
            f"{', '.join(TRANSFORMERS_TASKS)} (e.g. 'transformers:{model_type}/causal-lm')"
        )
    return model_type, task


def _pop_build_kwargs(overrides: dict[str, object]) -> dict[str, object]:
    """Take out the overrides that go to ``from_config`` instead of to the config."""
    kwargs = {k: overrides.pop(k) for k in _BUILD_KWARGS if k in overrides}
    if "dtype" in kwargs:
        dtype = DTYPES.get(str(kwargs["dtype"]))
        if dtype is None or not dtype.is_floating_point:
            floats = ", ".join(k for k, v in DTYPES.items() if v.is_floating_point)
            raise SpecError(f"config override dtype={kwargs['dtype']!r} is not one of {floats}")
        kwargs["dtype"] = dtype
    return kwargs


def _transformers_config(
    transformers: ModuleType, model_type: str, overrides: dict[str, Any]
) -> Any:
    auto_config = transformers.AutoConfig
    default = auto_config.for_model(model_type)
    overrides = {k: _coerce(v, getattr(default, k, None)) for k, v in overrides.items()}
    try:
        config = auto_config.for_model(model_type, **overrides)
    except Exception as e:
        raise SpecError(f"config overrides for {model_type!r} are invalid: {_describe(e)}") from e
    known = [*default.to_dict(), *getattr(default, "attribute_map", {})]
    for key in overrides:
        # A key the config does not know becomes a new attribute; one it consumed
        # (e.g. llama's rope_theta, moved into rope_parameters) does not.
        if not hasattr(default, key) and hasattr(config, key):
            raise SpecError(
                f"{type(default).__name__} has no setting {key!r}{suggest(key, known)}; "
                "check the spelling of the config override"
            )
    return config


def _coerce(value: object, default: object) -> object:
    """Give a parsed override the number type of the config's default (``1e4`` → int)."""
    if isinstance(default, bool) or isinstance(value, bool):
        return value
    if isinstance(default, int) and isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(default, float) and isinstance(value, int):
        return float(value)
    return value


def _from_config(auto: Any, config: Any, task: str, kwargs: dict[str, object]) -> nn.Module:
    try:
        model: nn.Module = auto.from_config(config, **kwargs)
    except ValueError as e:
        if not str(e).startswith("Unrecognized configuration class"):
            raise
        raise SpecError(
            f"transformers model type {config.model_type!r} has no {task!r} variant "
            f"({auto.__name__} does not take {type(config).__name__}); "
            f"use another of {', '.join(TRANSFORMERS_TASKS)}"
        ) from e
    return model


def _transformers_inputs(
    model: nn.Module, config: Any, *, float_dtype: torch.dtype
) -> tuple[InputSpec, ...]:
    main = getattr(model, "main_input_name", "input_ids")
    vocab = getattr(config, "vocab_size", None)
    if main == "input_ids" and isinstance(vocab, int):
        ids = InputSpec((1, _seq_len(config)), torch.int64, "input_ids")
        if getattr(config, "is_encoder_decoder", False):
            return (ids, InputSpec(ids.shape, torch.int64, "decoder_input_ids"))
        return (ids,)
    size, channels = getattr(config, "image_size", None), getattr(config, "num_channels", None)
    if main == "pixel_values" and size is not None and isinstance(channels, int):
        height, width = (size, size) if isinstance(size, int) else tuple(size)
        return (InputSpec((1, channels, height, width), float_dtype, "pixel_values"),)
    return ()


def _seq_len(config: Any) -> int:
    limits = [getattr(config, a, None) for a in ("max_position_embeddings", "n_positions")]
    return min([DEFAULT_SEQ_LEN, *(n for n in limits if isinstance(n, int) and n > 0)])


def _vocab_size(config: Any) -> int | None:
    get_text_config = getattr(config, "get_text_config", None)
    text_config = get_text_config() if callable(get_text_config) else config
    vocab = getattr(text_config, "vocab_size", getattr(config, "vocab_size", None))
    return vocab if isinstance(vocab, int) and vocab > 0 else None


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



