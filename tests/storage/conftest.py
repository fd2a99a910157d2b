"""Fixtures for the storage tests: a real PostgreSQL server and SQLite, through SQLAlchemy.

The PostgreSQL server (``tests/servers/postgres.py``) starts the first time a test
asks for it and serves the rest of the session; each test module works in its own
database. SQLite databases are files in temporary directories (threads need a
file, not ``:memory:``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from tests.servers.postgres import PostgresServer

DIALECTS = ("sqlite", "postgresql")


def make_engine(
    dialect: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    *,
    database: str,
    driver: str = "psycopg",
) -> sa.Engine:
    """A SQLAlchemy engine on a fresh SQLite file or on PostgreSQL database ``database``."""
    if dialect == "sqlite":
        # A long busy timeout: the concurrency test has eight writers on one file.
        return sa.create_engine(
            f"sqlite:///{tmp_path / (database + '.sqlite')}",
            connect_args={"timeout": 60},
        )
    server: PostgresServer = request.getfixturevalue("postgres")
    server.create_database(database)
    return sa.create_engine(server.url(f"postgresql+{driver}", database), pool_size=10)


@pytest.fixture(scope="module", params=DIALECTS)
def engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[sa.Engine]:
    """An engine per dialect, shared by a module; tables are the tests' own business."""
    module = request.module.__name__.rpartition(".")[2]
    engine = make_engine(
        request.param, request, tmp_path_factory.mktemp(module), database=module.lower()
    )
    try:
        yield engine
    finally:
        engine.dispose()
