"""Chromium for the browser tests, driven by Playwright: Playwright's own build where it
was downloaded (``python -m playwright install chromium``), else Debian's package; without
either the test is skipped, naming what is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

sync_api = pytest.importorskip("playwright.sync_api")

ROOT = Path(__file__).resolve().parents[2]
#: Screenshots of the page (``docs/`` holds copies for docs/operating.md).
ARTIFACTS = ROOT / "tmp" / "artifacts"
SYSTEM_CHROMIUM = Path("/usr/bin/chromium")  # Debian's package `chromium`
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def launch_chromium(playwright):
    """Playwright's own Chromium where it was downloaded, else the system's."""
    try:
        return playwright.chromium.launch(args=CHROMIUM_FLAGS)
    except sync_api.Error as own:
        if not SYSTEM_CHROMIUM.exists():
            pytest.skip(
                "no browser: Playwright's Chromium is not installed (python -m playwright "
                f"install chromium: {str(own).splitlines()[0]}) and {SYSTEM_CHROMIUM} "
                "(Debian package chromium) is missing"
            )
        return playwright.chromium.launch(executable_path=str(SYSTEM_CHROMIUM), args=CHROMIUM_FLAGS)
