"""Primary keys in PostgreSQL: idmint-minted IDs against BIGSERIAL and gen_random_uuid().

    scripts/install-test-deps.sh                                  # Debian's postgresql
    scripts/bootstrap-venv '.[test,sqlalchemy]'                   # SQLAlchemy, psycopg
    .venv/bin/python benchmarks/bench_storage.py                  # 100,000 rows, 3 rounds
    .venv/bin/python benchmarks/bench_storage.py --rows 20000 --rounds 1   # quick look

Server: a private PostgreSQL on a free port of 127.0.0.1, started with the test
harness (``tests/servers/postgres.py``, imported from the repository root) and
stopped at the end. It runs without fsync or synchronous commit (as in the tests)
and with 256 MB of shared buffers, so the figures are the CPU and buffer cost of
each kind of key (index maintenance, page splits, row width), not the disk's.

Each kind of key gets a fresh table ``(id <key> PRIMARY KEY, payload integer, note
text)`` and the same client path: SQLAlchemy Core inserting batches of 1,000 rows
(one transaction each, psycopg 3, ``insertmanyvalues``), the key coming from the
column's default: the server's for BIGSERIAL and ``gen_random_uuid()``, idmint's
generator (``default=generator.generate``, through :mod:`idmint.sqlalchemy`) for
the others. Rates are rows over the wall time of the whole load. Index size is
``pg_relation_size`` of the primary key's index after the load (and a VACUUM
ANALYZE, which does not shrink B-tree indexes). Kinds run in turn, in a new
order each round; the table reports each kind's median over the rounds, and
ratios against BIGSERIAL.

idmint keys are loaded two ways: minted by the column default during the load
(end to end: minting, the column type's conversion, the database), and minted
before the timer starts and passed as values (the column type's conversion and
the database's cost of the key only). A uid64 generator mints at most 64 IDs per
millisecond (64,000/s) for its identity, so a load through one generator's
column default cannot pass that rate, and waits for the clock while the batch
is built. muid's ``generate()`` gives each ID its own microsecond; the minted-
before muids come from one transaction (consecutive offsets).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import sqlalchemy as sa  # noqa: E402
from sqlalchemy.dialects import postgresql  # noqa: E402
from tests.servers.postgres import FAST_SETTINGS, PostgresServer  # noqa: E402

from idmint import Mode, MuidGenerator, Uid64Generator  # noqa: E402
from idmint.sqlalchemy import MuidType, Uid64Type  # noqa: E402

BATCH = 1000


@dataclass
class Kind:
    name: str
    key_column: Callable[[], sa.Column[Any]]
    key_bytes: int
    premint: Callable[[int], list[Any]] | None = None
    """Mints the keys before the load (``None``: the column's default makes them)."""


def kinds() -> list[Kind]:
    # Every kind gets generators of its own identity, as one process of a fleet would.
    def uid64_default(mode: Mode, generator: int) -> Callable[[], sa.Column[Any]]:
        def column() -> sa.Column[Any]:
            ids = Uid64Generator(generator=generator, mode=mode)
            return sa.Column("id", Uid64Type(), primary_key=True, default=ids.generate)

        return column

    def uid64_premint(mode: Mode, generator: int) -> Callable[[int], list[Any]]:
        return lambda count: list(Uid64Generator(generator=generator, mode=mode).batch(count))

    def muid_default() -> sa.Column[Any]:
        ids = MuidGenerator(medallion=(1 << 48) + 11)
        return sa.Column("id", MuidType(), primary_key=True, default=ids.generate)

    def muid_premint(count: int) -> list[Any]:
        with MuidGenerator(medallion=(1 << 48) + 12).transaction() as transaction:
            return list(transaction.batch(count))

    def uid64_column() -> sa.Column[Any]:
        return sa.Column("id", Uid64Type(), primary_key=True)

    def muid_column() -> sa.Column[Any]:
        return sa.Column("id", MuidType(), primary_key=True)

    time_sequential, spread = Mode.TIME_SEQUENTIAL, Mode.SPREAD
    return [
        Kind(
            "BIGSERIAL (server default)",
            lambda: sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
            8,
        ),
        Kind(
            "uuid gen_random_uuid() (server default)",
            lambda: sa.Column(
                "id",
                postgresql.UUID(as_uuid=True),
                primary_key=True,
                server_default=sa.text("gen_random_uuid()"),
            ),
            16,
        ),
        Kind("uid64 time-sequential, column default", uid64_default(time_sequential, 21), 8),
        Kind(
            "uid64 time-sequential, minted before",
            uid64_column,
            8,
            uid64_premint(time_sequential, 22),
        ),
        Kind("uid64 spread, column default", uid64_default(spread, 23), 8),
        Kind("uid64 spread, minted before", uid64_column, 8, uid64_premint(spread, 24)),
        Kind("muid, column default", muid_default, 16),
        Kind("muid (transaction batch), minted before", muid_column, 16, muid_premint),
    ]


@dataclass
class Result:
    rows_per_s: float
    index_bytes: int
    table_bytes: int


def load(engine: sa.Engine, kind: Kind, rows: int, table_name: str) -> Result:
    metadata = sa.MetaData()
    table = sa.Table(
        table_name,
        metadata,
        kind.key_column(),
        sa.Column("payload", sa.Integer, nullable=False),
        sa.Column("note", sa.Text, nullable=False),
    )
    metadata.drop_all(engine)
    metadata.create_all(engine)
    keys = kind.premint(rows) if kind.premint is not None else None
    batches = [
        [
            {"payload": n, "note": f"row {n}"} | ({} if keys is None else {"id": keys[n]})
            for n in range(start, min(start + BATCH, rows))
        ]
        for start in range(0, rows, BATCH)
    ]
    started = time.perf_counter()
    for batch in batches:
        with engine.begin() as connection:
            connection.execute(table.insert(), batch)
    elapsed = time.perf_counter() - started
    with engine.connect() as connection:
        connection.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
            f"VACUUM ANALYZE {table_name}"
        )
        count = connection.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
        index_bytes = connection.exec_driver_sql(
            f"SELECT pg_relation_size('{table_name}_pkey')"
        ).scalar_one()
        table_bytes = connection.exec_driver_sql(
            f"SELECT pg_relation_size('{table_name}')"
        ).scalar_one()
    if count != rows:
        raise RuntimeError(f"{kind.name}: {count} rows in the table, expected {rows}")
    metadata.drop_all(engine)
    return Result(rows / elapsed, int(index_bytes), int(table_bytes))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-storage-") as tmp:
        server = PostgresServer(
            Path(tmp), settings={**FAST_SETTINGS, "shared_buffers": "256MB", "max_wal_size": "2GB"}
        )
        server.start()
        try:
            server.create_database("bench")
            engine = sa.create_engine(server.url("postgresql+psycopg", "bench"))
            version = engine.connect().exec_driver_sql("SHOW server_version").scalar_one()
            results: dict[str, list[Result]] = {kind.name: [] for kind in kinds()}
            shuffler = random.Random(14)
            for round_number in range(args.rounds):
                order = kinds()
                shuffler.shuffle(order)
                for position, kind in enumerate(order):
                    result = load(engine, kind, args.rows, f"bench_{round_number}_{position}")
                    results[kind.name].append(result)
                    print(
                        f"round {round_number + 1} {kind.name}: {result.rows_per_s:,.0f} rows/s, "
                        f"index {result.index_bytes / 2**20:.2f} MiB",
                        file=sys.stderr,
                    )
            engine.dispose()
        finally:
            server.close()

    print(
        f"\nPostgreSQL {version}, {args.rows:,} rows in batches of {BATCH:,}, "
        f"{args.rounds} round(s), median of the rounds per kind\n"
    )
    print(
        "| primary key | key bytes | rows/s | vs BIGSERIAL | index MiB | vs BIGSERIAL | table MiB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    base: Result | None = None
    for kind in kinds():
        runs = results[kind.name]
        rate = statistics.median(run.rows_per_s for run in runs)
        index = statistics.median(run.index_bytes for run in runs)
        table = statistics.median(run.table_bytes for run in runs)
        if base is None:
            base = Result(rate, int(index), int(table))
        print(
            f"| {kind.name} | {kind.key_bytes} | {rate:,.0f} | {rate / base.rows_per_s:.2f} "
            f"| {index / 2**20:.2f} | {index / base.index_bytes:.2f} | {table / 2**20:.2f} |"
        )


if __name__ == "__main__":
    main()
