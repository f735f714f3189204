"""Makes the pictures of the documentation by running the examples the pages show.

Run from the repository root: ``python tools/make_doc_pictures.py`` (needs
``pip install -e ".[plot]"``). For each picture it runs the Python examples of a page,
in order, up to the one that writes the file, in a temporary directory (as the test
suite runs them: tests/doc_examples.py), and copies the file to ``docs/images/``:

- ``feature_maps.png``: the capture guide's ``plot_feature_maps(acts, "maps.png")``;
- ``grad_norms.png``: the gradients guide's ``mon.plot("grads.png")``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import matplotlib

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from doc_examples import make_sybil, setup, teardown  # noqa: E402

# picture in docs/images/ -> (page, the file its example writes)
PICTURES = {
    "feature_maps.png": ("docs/guides/capture.md", "maps.png"),
    "grad_norms.png": ("docs/guides/gradients.md", "grads.png"),
}


def run_page_until(page: Path, written: str) -> Path:
    """Runs the page's Python examples until ``written`` exists; returns a copy of it."""
    document = make_sybil().parse(page)
    namespace = document.namespace
    setup(namespace)
    try:
        for example in document:
            if example.parsed[0] == "python" and not example.parsed[1]:
                example.evaluate()
            if Path(written).exists():
                copy = Path(tempfile.mkdtemp()) / written
                shutil.copy(written, copy)
                return copy
    finally:
        teardown(namespace)
    raise SystemExit(f"no example of {page} wrote {written}")


def main() -> None:
    """Writes every picture of :data:`PICTURES` under docs/images/."""
    matplotlib.use("Agg")
    os.environ.setdefault("MPLBACKEND", "Agg")
    images = ROOT / "docs" / "images"
    images.mkdir(parents=True, exist_ok=True)
    for picture, (page, written) in PICTURES.items():
        shutil.copy(run_page_until(ROOT / page, written), images / picture)
        print(f"docs/images/{picture} from {page}")


if __name__ == "__main__":
    main()
