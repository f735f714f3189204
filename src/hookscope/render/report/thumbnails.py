"""Feature-map thumbnails: the channels of captured activations as small inline PNGs.

Input is what :func:`hookscope.capture` returns (call name -> tensor). A value of 4
dimensions ``[N, C, H, W]`` (or 3: ``[C, H, W]``) shows the first sample's first
:data:`CHANNELS` channels, each a grey-scale PNG (black: the smallest finite value of
the channels shown, white: the largest; one scale per layer, as in
``render/feature_maps.py``, so the same grey is the same value across a layer's
channels), at most :data:`MAX_SIDE` pixels a side (every k-th pixel of a larger map).
Other values are listed with their shape, without a picture. The PNG is encoded here
(``zlib`` and ``struct``): no imaging library is needed, and the page stays one file
(``data:`` URIs).
"""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Mapping
from typing import Any

import torch

from hookscope.render.report.markup import text
from hookscope.render.units import format_stat

__all__ = ["CHANNELS", "MAX_SIDE", "feature_maps_section", "gray_png"]

CHANNELS = 8
MAX_SIDE = 64


def gray_png(pixels: bytes, width: int, height: int) -> bytes:
    """An 8-bit grey-scale PNG of ``pixels`` (row by row, one byte each)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    rows = b"".join(b"\x00" + pixels[y * width:(y + 1) * width] for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(rows, 6)) + chunk(b"IEND", b""))


def _channels(value: torch.Tensor) -> tuple[torch.Tensor, float, float] | None:
    """The channels shown (float, subsampled), and the finite min and max of them."""
    maps = value[0] if value.dim() == 4 else value
    maps = maps[:CHANNELS].detach().to("cpu", torch.float32)
    step = max(1, -(-max(maps.shape[-2:]) // MAX_SIDE))
    maps = maps[:, ::step, ::step]
    finite = maps[torch.isfinite(maps)]
    if finite.numel() == 0:
        return None
    return maps, float(finite.min()), float(finite.max())


def _images(maps: torch.Tensor, low: float, high: float) -> list[str]:
    # NB: a non-finite element is drawn black, as the smallest value
    span = high - low or 1.0
    scaled = ((maps - low) / span * 255).round().clamp(0, 255)
    scaled = torch.where(torch.isfinite(maps), scaled, torch.zeros_like(scaled)).to(torch.uint8)
    out = []
    for k, channel in enumerate(scaled):
        h, w = channel.shape
        data = base64.b64encode(gray_png(channel.contiguous().numpy().tobytes(), w, h))
        out.append(f'<img class="fmap" src="data:image/png;base64,{data.decode()}" '
                   f'width="{max(w, 48)}" alt="channel {k}" title="channel {k}">')
    return out


def feature_maps_section(maps: Mapping[str, Any]) -> str:
    """The thumbnails of every captured value (see the module docstring), or ``""``."""
    if not maps:
        return ""
    rows = []
    for name, value in maps.items():
        label = text(name)
        if not isinstance(value, torch.Tensor) or value.dim() not in (3, 4):
            shape = list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            rows.append(f"<p><b>{label}</b> {text(shape)}: not a feature map (no picture)</p>")
            continue
        shown = _channels(value)
        if shown is None:
            rows.append(f"<p><b>{label}</b>: no finite value</p>")
            continue
        maps_, low, high = shown
        scale = f"black {format_stat(low, digits=3)} … white {format_stat(high, digits=3)}"
        rows.append(f'<div class="fmaps"><p><b>{label}</b> {text(list(value.shape))}, the '
                    f"first {len(maps_)} channels of sample 0; {text(scale)}</p>"
                    f'{"".join(_images(maps_, low, high))}</div>')
    return ('<section id="hs-fmaps"><h2>Feature maps</h2>' + "".join(rows) + "</section>")
