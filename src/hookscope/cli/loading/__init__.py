"""Turn command-line strings into a model and example inputs.

Where it sits: the command line (``cli/app.py``) parses its options, then calls
:func:`load_model` with the model spec, the ``--config`` overrides and the device; with
no ``--input`` it asks :func:`default_input_specs` for the model's usual inputs, which
``cli/input_specs.py`` turns into tensors, ready for ``hookscope.trace(model, *args,
**kwargs)``. Nothing here knows about typer, and torchvision/transformers are imported
only when a spec names them.

Model specs::

    path/to/file.py:factory        a function, nn.Module class or nn.Module instance in a file
    package.module:factory         the same, in an importable module
    torchvision:resnet50           torchvision.models.get_model(name, weights=None)
    transformers:llama[/TASK]      a model type, built from its default config; TASK is one of
                                   base, causal-lm, masked-lm, seq2seq-lm,
                                   sequence-classification (seq-cls), image-classification

Weights are always random: nothing is ever downloaded. On ``device="meta"`` the model is
built without allocating memory, so a 70B-parameter config builds in a second.

Every mistake in a spec raises :class:`~hookscope.errors.SpecError` with a one-line
message that names the bad value and says how to fix it.

The package has one module per source: ``files.py`` (the user's files and modules),
``vision.py`` (torchvision), ``hf.py`` (transformers), and ``common.py`` for what they
share (the spec forms, :class:`LoadedModel`, building on a device); ``hf_inputs.py``
reads a transformers model's default inputs from its signature and config, and
``guard.py`` keeps a model too large for the memory available on the meta device.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from hookscope.cli.input_specs import parse_device
from hookscope.cli.loading.common import (
    LoadedModel,
    ModelSource,
    build,
    complete_input_specs,
    default_input_specs,
    split_spec,
)
from hookscope.cli.loading.files import factory, import_file, import_module, user_loaded
from hookscope.cli.loading.guard import TooLarge, too_large
from hookscope.cli.loading.hf import TASK_ALIASES, TRANSFORMERS_TASKS, load_transformers
from hookscope.cli.loading.vision import load_torchvision
from hookscope.core.meta import META
from hookscope.errors import SpecError

__all__ = [
    "TASK_ALIASES",
    "TRANSFORMERS_TASKS",
    "LoadedModel",
    "ModelSource",
    "TooLarge",
    "complete_input_specs",
    "default_input_specs",
    "load_model",
]


def load_model(
    spec: str,
    *,
    config: dict[str, object] | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    on_too_large: TooLarge = TooLarge.STOP,
) -> LoadedModel:
    """Build the model that ``spec`` names.

    A torchvision or transformers model built without an explicit ``device`` is built on
    the meta device first; when its parameters and buffers do not fit in the memory
    available (``guard.py``), it stays there (``on_too_large=META``, with
    ``LoadedModel.notice`` saying why) or the build stops (``STOP``).

    Args:
        spec: ``file.py:factory``, ``package.module:factory``, ``torchvision:NAME`` or
            ``transformers:TYPE[/TASK]``. A factory is called with no arguments; it may
            also be an ``nn.Module`` class or instance.
        config: config overrides (see :func:`parse_config_overrides`); only for
            ``transformers:`` specs. ``attn_implementation`` and ``dtype`` are passed to
            ``from_config`` rather than set on the config.
        device: ``None`` (build as the code does), ``"cpu"``, ``"cuda[:N]"`` or ``"meta"``
            (no memory is allocated).
        dtype: cast the model's floating parameters and buffers to this dtype.
        on_too_large: what to do with a model too large for the memory available.

    Returns:
        The model with its default inputs and vocabulary size, when known.

    Raises:
        SpecError: the spec, overrides or device are wrong, building the model failed,
            or it is too large and ``on_too_large`` is ``STOP``.

    Example:
        >>> loaded = load_model("torchvision:resnet18", device="meta")
        >>> [str(s) for s in default_input_specs(loaded)]
        ['1,3,224,224:float32']
    """
    source, target, name = split_spec(spec.strip())
    dev = parse_device(device)
    if config and source is not ModelSource.TRANSFORMERS:
        raise SpecError(
            f"config overrides ({', '.join(config)}) only apply to 'transformers:NAME' models, "
            f"not to {spec!r}; drop them, or set the values in your factory"
        )
    if dev is None and source in (ModelSource.TORCHVISION, ModelSource.TRANSFORMERS):
        on_meta = _load(spec, source, target, name, config, META, dtype)
        reason = too_large(on_meta.model, spec.strip(), None)
        if reason is not None and on_too_large is TooLarge.META:
            notice = (
                f"{reason}; analysing it on the meta device (shapes, parameters, FLOPs, no "
                "values); pass --device cpu to build it there anyway"
            )
            return replace(on_meta, notice=notice)
        if reason is not None:
            raise SpecError(
                f"{reason}; this command needs real values: run it with --device meta "
                "(shapes and FLOPs only), on a smaller --config, or force --device cpu"
            )
    return _load(spec, source, target, name, config, dev, dtype)


def _load(
    spec: str,
    source: ModelSource,
    target: str,
    name: str,
    config: dict[str, object] | None,
    dev: torch.device | None,
    dtype: torch.dtype | None,
) -> LoadedModel:
    if source is ModelSource.TRANSFORMERS:
        return load_transformers(spec, name, dict(config or {}), dev, dtype=dtype)
    if source is ModelSource.TORCHVISION:
        loaded = load_torchvision(spec, name, dev)
    else:
        module = import_file(target, spec) if source is ModelSource.FILE else import_module(target)
        model = build(factory(module, name, target), dev, what=f"factory {name!r} in {target!r}")
        loaded = user_loaded(model, spec, source)
    if dtype is not None:
        loaded.model.to(dtype)  # casts floating parameters and buffers only
    return loaded
