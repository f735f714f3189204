"""Open hookscope's HTML reports in a real headless browser: Debian's ``chromium``
driven by Playwright's Python package (no browser is downloaded).

Shared by the browser tests (``tests/report/test_report_browser.py``) and the docs'
screenshot (``tools/make_report_screenshot.py``), so the picture in the guide is made
by the code path the tests check. :func:`missing` says why no browser can run here
(the tests skip with that reason).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def missing() -> str | None:
    """Why no browser can be started here, or ``None``."""
    try:
        import playwright.sync_api  # noqa: F401  (only whether it imports)
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[test]')"
    if shutil.which("chromium") is None:
        return "Debian's chromium is not on the PATH (apt-get install chromium)"
    return None


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (Playwright ``Browser``), closed on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"),
                                    args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class OpenReport:
    """A report open in a page, with what the page reported while it ran."""

    page: Any
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)


def open_report(browser: Any, path: Path, *, javascript: bool = True,
                width: int = 1280, height: int = 900) -> OpenReport:
    """Load the report at ``path`` from ``file://`` in a new page of its own context.

    Console errors, uncaught exceptions and any dialog (``alert``) are collected; a
    dialog is dismissed."""
    context = browser.new_context(java_script_enabled=javascript,
                                  viewport={"width": width, "height": height})
    page = context.new_page()
    opened = OpenReport(page)
    page.on("console", lambda m: opened.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: opened.errors.append(str(e)))

    def on_dialog(dialog: Any) -> None:
        opened.dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.goto(path.resolve().as_uri())
    page.wait_for_load_state("load")
    return opened


def interactive_ms(opened: OpenReport) -> float:
    """Milliseconds from navigation start until the page's script had run (the
    report's ``js`` class set): when the table collapses, searches and sorts."""
    page = opened.page
    page.wait_for_function("document.querySelector('.hsr.js') !== null")
    value = page.evaluate("performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd")
    return float(value)
