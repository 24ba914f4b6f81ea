"""The browser tests' fixture: a factory of a real gateway plus headless Chromium."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser.chromium import chromium
from tests.browser.support import Session, session_factory


@pytest.fixture
def session(tmp_path: Path) -> Session:
    """A factory: a healthy gateway plus a browser; both are closed when the block ends."""
    return session_factory(tmp_path, chromium())
