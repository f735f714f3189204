"""plot_feature_maps (issue 11): a PNG of channel grids and histograms, one colour scale
per layer with its colourbar; a clear error for input that holds no tensor."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

import hookscope


def test_writes_a_png_for_a_capture_and_for_a_tensor(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    model = nn.Sequential(nn.Conv2d(3, 5, 3), nn.Flatten(), nn.Linear(5 * 4 * 4, 2))
    acts = hookscope.capture(model, torch.randn(2, 3, 6, 6), select=["0", "2"])
    hookscope.plot_feature_maps(acts, tmp_path / "maps.png", max_channels=4)
    hookscope.plot_feature_maps(acts["0"], tmp_path / "one.png")
    for name in ("maps.png", "one.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_channels_of_a_layer_share_one_colour_scale_with_a_labelled_colourbar(
    tmp_path: Path,
) -> None:
    """Channel 0 is scaled 100 times: with a scale per image it would look like the
    others. The oracle: the min and max of the conv's output, computed by the test."""
    pytest.importorskip("matplotlib")
    from matplotlib.image import AxesImage

    from hookscope.render import feature_maps

    torch.manual_seed(0)
    conv = nn.Conv2d(3, 5, 3)
    with torch.no_grad():
        conv.weight[0] *= 100
    model = nn.Sequential(conv, nn.ReLU(), nn.Conv2d(5, 3, 1))
    x = torch.randn(2, 3, 6, 6)
    acts = hookscope.capture(model, x, select=["0", "2"])
    fig = feature_maps._feature_maps_figure(list(acts.items()), max_channels=4, sample=1,
                                            bins=10, dpi=50)
    with torch.no_grad():
        outputs = {"0": conv(x)[1, :4], "2": model(x)[1, :4]}
    for sub, expected in zip(fig.subfigs, outputs.values(), strict=True):
        images = [a for f in sub.subfigs for ax in f.axes for a in ax.get_images()]
        assert len(images) == expected.shape[0]
        assert all(isinstance(im, AxesImage) for im in images)
        norm = images[0].norm
        assert all(im.norm is norm for im in images)  # one scale for the layer
        assert norm.vmin == pytest.approx(float(expected.min()), rel=1e-6)
        assert norm.vmax == pytest.approx(float(expected.max()), rel=1e-6)
        bar = images[-1].colorbar
        assert bar is not None and bar.mappable.norm is norm
        assert bar.ax.get_ylabel() == "value (shared scale)"
    norms = [im.norm for sub in fig.subfigs for f in sub.subfigs for ax in f.axes
             for im in ax.get_images()]
    assert len({id(n) for n in norms}) == 2  # a scale per layer: 100x apart
    hookscope.plot_feature_maps(acts, tmp_path / "maps.png", max_channels=4, sample=1)
    assert (tmp_path / "maps.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_constant_or_non_finite_layer_still_gets_a_scale(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from hookscope.render import feature_maps

    layers = [("zeros", torch.zeros(1, 2, 3, 3)), ("nan", torch.full((1, 2, 3, 3), math.nan))]
    fig = feature_maps._feature_maps_figure(layers, max_channels=2, sample=0, bins=5, dpi=50)
    limits = [(im.norm.vmin, im.norm.vmax) for sub in fig.subfigs for f in sub.subfigs
              for ax in f.axes for im in ax.get_images()]
    assert limits == [(-0.5, 0.5)] * 2 + [(0.0, 1.0)] * 2


def test_bad_input_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(hookscope.SpecError, match="expects a tensor or a capture"):
        hookscope.plot_feature_maps({"a": 1}, tmp_path / "x.png")  # type: ignore[dict-item]


@pytest.mark.parametrize(("options", "match"), [
    ({"sample": 5}, r"sample=5 is beyond the batch of 'tensor' \(2 sample"),
    ({"sample": -1}, "sample= must be a non-negative integer"),
    ({"bins": 0}, "bins= must be a positive integer"),
    ({"max_channels": True}, "max_channels= must be a positive integer"),
    ({"dpi": 0}, "dpi= must be a positive integer"),
])
def test_options_out_of_range_are_spec_errors(
    tmp_path: Path, options: dict[str, object], match: str
) -> None:
    """``sample=5`` on a batch of two showed the last sample without a word; a negative
    one and ``bins=0`` raised IndexError and ValueError from deep in matplotlib."""
    with pytest.raises(hookscope.SpecError, match=match):
        hookscope.plot_feature_maps(torch.randn(2, 4, 8, 8), tmp_path / "x.png",
                                    **options)  # type: ignore[arg-type]
    assert not (tmp_path / "x.png").exists()


def test_an_empty_batch_and_a_missing_directory_are_spec_errors(tmp_path: Path) -> None:
    with pytest.raises(hookscope.SpecError, match="empty batch"):
        hookscope.plot_feature_maps(torch.empty(0, 3, 4, 4), tmp_path / "x.png")
    with pytest.raises(hookscope.SpecError, match="does not exist"):
        hookscope.plot_feature_maps(torch.randn(1, 3, 4, 4), tmp_path / "no" / "x.png")
