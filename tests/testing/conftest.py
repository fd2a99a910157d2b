"""Fixtures of the contract kit's own tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.testing.broken_drivers import BROKEN, install

from idmint.coordinate import DRIVERS


@pytest.fixture
def registered(tmp_path: Path) -> Iterator[Path]:
    """The broken drivers' package, on this process's path (its site directory)."""
    site = install(tmp_path / "site", BROKEN)
    sys.path.insert(0, str(site))
    DRIVERS.forget()
    try:
        yield site
    finally:
        sys.path.remove(str(site))
        DRIVERS.forget()
