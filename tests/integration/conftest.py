"""Fixtures of the integration tests; every test collected here is marked ``integration``.

The servers (``zk``, ``zk3``, ``zk_auth``, ``etcd``, ``etcd3``, ``etcd_secure``) are the
session's, from ``tests/servers/fixtures.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.claims_helpers import Backend, make_backend

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of this directory (and only those) ``integration``."""
    for item in items:
        if item.path.resolve().is_relative_to(_HERE):
            item.add_marker(pytest.mark.integration)


# -- coordinators for the claims tests (test_claims_*.py) ------------------------------


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> Backend:
    """The coordinator a claims test runs against, by indirect parametrization::

        @pytest.mark.parametrize("backend", CLAIMED_BACKENDS, indirect=True)

    Its server (a session fixture) is started on first use; see ``claims_helpers``.
    """
    name = getattr(request, "param", None)
    if not isinstance(name, str):
        raise TypeError("parametrize `backend` indirectly with a backend name")
    return make_backend(name, request)


@pytest.fixture
def exit_stack() -> Iterator[contextlib.ExitStack]:
    """An ExitStack closed after the test: generators, processes, mint threads."""
    with contextlib.ExitStack() as stack:
        yield stack
