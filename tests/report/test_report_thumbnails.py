"""Feature-map thumbnails: each channel's PNG decodes (with Pillow, an independent
decoder) to the captured values scaled by hand from the layer's min..max; values
that are not feature maps get no picture; ``hookscope report --capture`` adds them."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import pytest
import torch

import hookscope
from helpers import run_cli
from hookscope.examples import small_cnn

Image = pytest.importorskip("PIL.Image")


def pictures(html: str) -> list[bytes]:
    return [base64.b64decode(b) for b in re.findall(r'src="data:image/png;base64,([^"]+)"', html)]


def test_each_thumbnail_is_its_channel_scaled_to_the_layer_s_range() -> None:
    model = small_cnn()
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    maps = hookscope.capture(model, x, select=["features.0", "classifier.1"])
    html = hookscope.trace(model, x).to_html(feature_maps=maps)
    conv = maps["features.0"][0, :8]  # 16 channels: the first 8, of the first sample
    expected = ((conv - conv.min()) / (conv.max() - conv.min()) * 255).round()
    found = pictures(html)
    assert len(found) == 8
    for k, png in enumerate(found):
        image = Image.open(io.BytesIO(png))
        assert image.mode == "L" and image.size == (16, 16)
        got = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8).float()
        got = got.reshape(16, 16)
        assert torch.equal(got, expected[k])
    assert "<b>classifier.1</b> [2, 10]: not a feature map" in html


def test_a_large_map_is_subsampled_to_at_most_64_pixels_a_side() -> None:
    maps = {"big": torch.arange(200 * 130, dtype=torch.float32).reshape(1, 1, 200, 130)}
    html = hookscope.trace(torch.nn.Identity(), torch.zeros(1)).to_html(feature_maps=maps)
    (png,) = pictures(html)
    assert Image.open(io.BytesIO(png)).size == (len(range(0, 130, 4)), len(range(0, 200, 4)))


def test_the_command_captures_and_shows_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "r.html"
    code, _, err = run_cli(capsys, "report", "hookscope.examples:small_cnn", "--input",
                           "1,3,16,16", "--capture", "features.4", "-o", str(out))
    assert (code, err) == (0, "")
    html = out.read_text(encoding="utf-8")
    assert 'id="hs-fmaps"' in html and len(pictures(html)) == 8
