"""Models from torchvision: ``torchvision:NAME``, with random weights.

Where it sits: one source of :mod:`hookscope.cli.loading`. torchvision is imported
only when a spec names it (:func:`~hookscope.cli.loading.common.require`); the module
is named ``vision`` so that it never shadows the real ``torchvision`` package. Default
inputs are one image at the model's native size, a clip for video models, two images
for optical flow.
"""

from __future__ import annotations

import inspect
from types import ModuleType

import torch
from torch import nn

from hookscope.cli.input_specs import InputSpec, suggest
from hookscope.cli.loading.common import LoadedModel, ModelSource, build, require
from hookscope.errors import SpecError

__all__ = ["DEFAULT_IMAGE_SIZE", "DEFAULT_VIDEO_FRAMES", "load_torchvision"]

DEFAULT_IMAGE_SIZE = 224
DEFAULT_VIDEO_FRAMES = 16


def load_torchvision(spec: str, name: str, device: torch.device | None) -> LoadedModel:
    models = require("torchvision.models", spec=spec, extra="vision")
    names: list[str] = models.list_models()
    if name not in names:
        raise SpecError(
            f"torchvision has no model {name!r}{suggest(name.lower(), names)}; "
            "torchvision.models.list_models() lists them all"
        )
    kwargs = _torchvision_kwargs(models, name)
    what = f"building torchvision model {name!r}"
    model = build(lambda: models.get_model(name, **kwargs), device, what=what).eval()
    inputs = _torchvision_inputs(models, name, model)
    return LoadedModel(model, spec, ModelSource.TORCHVISION, inputs)


def _torchvision_kwargs(models: ModuleType, name: str) -> dict[str, object]:
    kwargs: dict[str, object] = {"weights": None}
    if "weights_backbone" in inspect.signature(models.get_model_builder(name)).parameters:
        kwargs["weights_backbone"] = None  # its default would download ImageNet weights
    if name.endswith(("googlenet", "inception_v3")):
        # the weights are random either way; this skips the slow scipy init and
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
    # detection models take a list of images; a batched tensor iterates as one.
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
