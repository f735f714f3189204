"""Pictures of captured activations: a grid of a conv layer's channels and a histogram
of activation values, per layer, in one PNG (or any format matplotlib writes).

Input is what :func:`hookscope.capture` returns (a mapping from call name to tensor) or
one tensor. A 4-d value ``[N, C, H, W]`` gets a grid of the first sample's first
``max_channels`` channels plus its histogram; other tensors get the histogram only.
The channels of one layer share one colour scale (the finite minimum to maximum of the
channels shown), drawn as a labelled colourbar beside the grid, so that the same colour
is the same value in every channel of the layer; layers keep scales of their own, as
their values may differ by orders of magnitude.
matplotlib is an optional dependency (``pip install 'hookscope[plot]'``); it is
imported only here, and drawn on a ``Figure`` of its own (no pyplot state, no window).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import torch

from hookscope.errors import MissingDependencyError, SpecError

_GRID_COLS = 8


def _figure_class() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise MissingDependencyError("matplotlib", "plot", needed_for="plot_feature_maps") from e
    return Figure


def _layers(source: Any) -> list[tuple[str, torch.Tensor]]:
    if isinstance(source, torch.Tensor):
        return [("tensor", source)]
    if isinstance(source, Mapping):
        found = [(str(k), v) for k, v in source.items() if isinstance(v, torch.Tensor)]
        if found:
            return found
    raise SpecError(
        "plot_feature_maps expects a tensor or a capture (a mapping from module path to "
        f"tensor), got {type(source).__name__}; capture outputs with what='output'"
    )


def plot_feature_maps(
    source: Mapping[str, Any] | torch.Tensor, path: str | os.PathLike[str], *,
    max_channels: int = 16, sample: int = 0, bins: int = 60, dpi: int = 100,
) -> None:
    """Draw each layer's channels as a grid of images, with a histogram of its values.

    Args:
        source: a capture (``{path: tensor}``) or one tensor.
        path: the image file to write (``.png``, ``.svg``, ``.pdf``).
        max_channels: channels shown per conv layer (the first ones).
        sample: which sample of the batch the channel images show.
        bins: histogram bins (the histogram uses the whole batch).
        dpi: resolution of the image.

    Raises:
        MissingDependencyError: matplotlib is not installed.
        SpecError: ``source`` holds no tensor, or an option is out of range.

    Example:
        >>> acts = hookscope.capture(model, x, select="layer1.0.conv*")
        >>> hookscope.plot_feature_maps(acts, "maps.png", max_channels=8)
    """
    for option, value, least in (("max_channels", max_channels, 1), ("bins", bins, 1),
                                 ("sample", sample, 0), ("dpi", dpi, 1)):
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= least):
            kind = "a positive" if least else "a non-negative"
            raise SpecError(f"{option}= must be {kind} integer, got {value!r}")
    folder = os.path.dirname(os.fspath(path)) or "."
    if not os.path.isdir(folder):
        problem = f"{folder!r} is a file, not a directory" if os.path.exists(folder) else \
            f"the directory {folder!r} does not exist; create it first"
        raise SpecError(f"cannot write {os.fspath(path)!r}: {problem}")
    layers = _layers(source)
    for name, t in layers:
        if t.dim() == 4 and sample >= t.shape[0]:
            raise SpecError(
                f"sample={sample} is beyond the batch of {name!r} ({t.shape[0]} "
                f"sample(s)); pass sample= from 0 to {t.shape[0] - 1}"
                if t.shape[0] else f"{name!r} is an empty batch: there is no sample to show"
            )
    figure = _feature_maps_figure(layers, max_channels=max_channels, sample=sample,
                                  bins=bins, dpi=dpi)
    figure.savefig(os.fspath(path))


def _feature_maps_figure(layers: list[tuple[str, torch.Tensor]], *, max_channels: int,
                         sample: int, bins: int, dpi: int) -> Any:
    """The matplotlib ``Figure`` of :func:`plot_feature_maps` (checked options)."""
    figure_cls = _figure_class()
    rows = [_grid_rows(t, max_channels) for _, t in layers]
    height = sum(max(r, 1) * 1.1 + 0.6 for r in rows)
    fig = figure_cls(figsize=(_GRID_COLS * 1.1 + 5, height), dpi=dpi, layout="constrained")
    subfigs = fig.subfigures(len(layers), 1, squeeze=False,
                             height_ratios=[max(r, 1) + 0.5 for r in rows])
    for (name, tensor), nrows, sub in zip(layers, rows, subfigs[:, 0], strict=True):
        _draw_layer(sub, name, tensor.detach().float().cpu(), nrows, max_channels, sample, bins)
    return fig


def _grid_rows(t: torch.Tensor, max_channels: int) -> int:
    if t.dim() != 4:
        return 0
    return math.ceil(min(t.shape[1], max_channels) / _GRID_COLS)


def _draw_layer(sub: Any, name: str, t: torch.Tensor, nrows: int, max_channels: int,
                sample: int, bins: int) -> None:
    shape = "x".join(str(s) for s in t.shape)
    sub.suptitle(f"{name}  [{shape}]", fontsize=10, x=0.0, ha="left")
    if nrows:
        grid_fig, hist_fig = sub.subfigures(1, 2, width_ratios=[_GRID_COLS * 1.1, 4])
        channels = t[sample, :max_channels]
        axes = grid_fig.subplots(nrows, _GRID_COLS, squeeze=False)
        norm = _shared_norm(channels)
        image = None
        for i, ax in enumerate(axes.flat):
            ax.set_axis_off()
            if i < channels.shape[0]:
                image = ax.imshow(channels[i].numpy(), cmap="viridis", norm=norm)
                ax.set_title(f"ch {i}", fontsize=7)
        bar = grid_fig.colorbar(image, ax=axes, shrink=0.9)
        bar.set_label("value (shared scale)", fontsize=7)
        bar.ax.tick_params(labelsize=7)
    else:
        hist_fig = sub
    ax = hist_fig.subplots()
    values = t.flatten()
    finite = values[torch.isfinite(values)]
    ax.hist(finite.numpy(), bins=bins, color="tab:blue")
    ax.set_title(f"values: mean {float(finite.mean()):.3g}, "
                 f"{float((values == 0).float().mean()) * 100:.0f}% zero", fontsize=8)
    ax.tick_params(labelsize=7)


def _shared_norm(channels: torch.Tensor) -> Any:
    """One ``Normalize`` from the finite minimum to maximum of ``channels`` (0 to 1 when
    none is finite; widened around a constant, which would have no range to colour)."""
    from matplotlib.colors import Normalize

    finite = channels[torch.isfinite(channels)]
    low, high = (float(finite.min()), float(finite.max())) if finite.numel() else (0.0, 1.0)
    if low == high:
        low, high = low - 0.5, high + 0.5
    return Normalize(vmin=low, vmax=high)
