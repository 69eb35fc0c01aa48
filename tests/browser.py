"""Headless Chromium for the tests marked ``browser`` (.ci/run's browser tier; .ci/chromium_env installs it
from Debian's packages): where it is, and the flags every headless start here takes."""

from __future__ import annotations

import shutil

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
"""The executables tried, in order."""

HEADLESS = ("--headless", "--no-sandbox", "--disable-gpu")
"""Headless, as root in a container (no sandbox), without a GPU."""


def chromium() -> str:
    """The path of a Chromium here; without one the calling test skips, saying how to get one."""
    browser = next((b for b in map(shutil.which, BROWSERS) if b), None)
    if browser is None:
        pytest.skip("no Chromium here (Debian: apt-get install chromium; .ci/run's browser tier installs it)")
    return browser
