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
