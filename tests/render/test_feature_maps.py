"""plot_feature_maps (issue 11): a PNG of channel grids and histograms; a clear error
for input that holds no tensor."""

from __future__ import annotations

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
