"""Fixtures of the contract kit's own tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.testing.broken_drivers import BROKEN, installed
from tests.testing.toy_lease_store import PACKAGE, REGISTERED


@pytest.fixture
def registered(tmp_path: Path) -> Iterator[Path]:
    """The broken drivers' package, on this process's path (its site directory)."""
    with installed(tmp_path / "site", BROKEN) as site:
        yield site


@pytest.fixture
def toy_site(tmp_path: Path) -> Iterator[Path]:
    """The toy lease store's package, on this process's path (its site directory)."""
    with installed(tmp_path / "site", REGISTERED, PACKAGE) as site:
        yield site
