"""Make the screenshot of the HTML report shown in ``docs/guides/report.md``.

A small GPT-2 (random weights) traced with FLOPs and a backward pass, its report opened
in headless Chromium exactly as the browser tests open it (``tools/report_browser.py``),
the heaviest calls sorted first, and the top of the page saved as
``docs/images/report.png``::

    python tools/make_report_screenshot.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

import hookscope

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report_browser

OUT = Path(__file__).resolve().parents[1] / "docs" / "images" / "report.png"


def main() -> int:
    reason = report_browser.missing()
    if reason is not None:
        print(f"cannot make the screenshot: {reason}", file=sys.stderr)
        return 1
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(n_layer=2, n_embd=64, n_head=2)).eval()
    trace = hookscope.trace(model, torch.randint(0, 100, (1, 16)), backward=True, ops=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "report.html"
        trace.to_html(path)
        with report_browser.chromium() as browser:
            opened = report_browser.open_report(browser, path, width=1200, height=1000)
            opened.page.screenshot(path=str(OUT))
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
