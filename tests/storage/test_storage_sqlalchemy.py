"""idmint.sqlalchemy on SQLite and a real PostgreSQL: round trips, order, index use, defaults."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from tests.servers.postgres import PostgresServer

from idmint import (
    ConfigurationError,
    Elastic64,
    IdValue,
    InvalidId,
    Mode,
    Muid,
    MuidGenerator,
    Short60,
    Short60Generator,
    Snowflake,
    Uid64,
    Uid64Generator,
    Uid64V1,
    Uuid7,
)
from idmint.schemes import elastic64 as e64
from idmint.schemes import uid64 as u64
from idmint.schemes import uuid7 as uu
from idmint.sqlalchemy import (
    Elastic64Type,
    IdType,
    InvalidColumnValue,
    MuidType,
    Short60Type,
    SnowflakeType,
    Uid64Type,
    Uid64V1Type,
    Uuid7Type,
)

TOP = 1 << 63
MAX64 = (1 << 64) - 1
# Time-sequential uid64 IDs reach 2**63 at this timestamp (2039-09-07).
TS_AT_TOP = 1 << 41
NODE_BITS = 12


def fresh_table(engine: sa.Engine, name: str, *columns: sa.Column[Any]) -> sa.Table:
    """Create table ``name`` anew (dropped first if a previous run left it)."""
    metadata = sa.MetaData()
    table = sa.Table(name, metadata, *columns)
    metadata.drop_all(engine)
    metadata.create_all(engine)
    return table


# -- values ------------------------------------------------------------------------


def time_sequential(timestamp_ms: int, sequence: int = 0, generator: int = 0) -> Uid64:
    return Uid64.build(
        timestamp_ms=timestamp_ms,
        sequence=sequence,
        generator=generator,
        mode=Mode.TIME_SEQUENTIAL,
    )


EDGES: dict[str, list[IdValue]] = {
    "uid64": [
        Uid64(value)
        for value in (0, 1, TOP - 2, TOP - 1, TOP, TOP + 1, MAX64 - 1, MAX64, 0x0123456789ABCDEF)
    ]
    + [Uid64.build(timestamp_ms=1_700_000_000_000, generator=2047, cluster=15)]
    + [time_sequential(TS_AT_TOP - 1, 63, 2047), time_sequential(TS_AT_TOP)],
    "uid64-v1": [Uid64V1(value) for value in (0, 0x3FF, TOP - 1 - 0xFC00, TOP, MAX64 - 0xFC00)],
    "elastic64": [
        Elastic64(value, node_bits=NODE_BITS) for value in (0, 1, TOP - 1, TOP, e64.MAX_VALUE)
    ],
    "short60": [Short60(value) for value in (0, 1, 11093174944930914, (1 << 60) - 1)],
    "snowflake": [
        Snowflake.of("sonyflake")(value) for value in (0, 1, 1212092628029698048, TOP - 1)
    ],
    "muid": [
        Muid(value)
        for value in (
            0,
            1,
            0xFF,
            1 << 7,
            1 << 8,
            (1 << 127) - 1,
            1 << 127,
            (1 << 128) - 1,
            0x05D5EAC793E61F17B9F5B9479DF94AC0,
        )
    ],
}

EDGES["uuid7"] = [
    Uuid7.build(timestamp_ms=0),
    Uuid7.build(timestamp_ms=0, random=1),
    Uuid7.build(timestamp_ms=1, counter=0x3F),  # the counter's low part, atop rand_b
    Uuid7.build(timestamp_ms=1, counter=0x40),  # its high part, in rand_a
    Uuid7("017F22E2-79B0-7CC3-98C4-DC0C0C07398F"),  # RFC 9562's example
    Uuid7.build(timestamp_ms=(1 << 47) - 1, counter=uu.MAX_COUNTER, node=uu.MAX_NODE),
    Uuid7.last_at(uu.MAX_TIMESTAMP_MS),
]

COLUMN_TYPES: dict[str, Callable[[], IdType[Any]]] = {
    "uid64": Uid64Type,
    "uid64-v1": Uid64V1Type,
    "elastic64": lambda: Elastic64Type(node_bits=NODE_BITS),
    "short60": Short60Type,
    "muid": MuidType,
    "uuid7": Uuid7Type,
    "snowflake": lambda: SnowflakeType("sonyflake"),
}


def input_forms(value: IdValue) -> list[object]:
    """Every way a caller may hand the value to a column."""
    return [value, str(value), value.int, value.bytes]  # type: ignore[attr-defined]


# -- round trips ---------------------------------------------------------------------


@pytest.mark.parametrize("scheme", list(EDGES))
def test_every_scheme_round_trips_from_every_input_form(engine: sa.Engine, scheme: str) -> None:
    table = fresh_table(
        engine,
        f"round_trip_{scheme.replace('-', '_')}",
        sa.Column("row", sa.Integer, primary_key=True),
        sa.Column("value", COLUMN_TYPES[scheme](), nullable=True),
    )
    expected: dict[int, IdValue | None] = {}
    rows: list[dict[str, object]] = []
    for value in EDGES[scheme]:
        for form in input_forms(value):
            expected[len(rows)] = value
            rows.append({"row": len(rows), "value": form})
    expected[len(rows)] = None
    rows.append({"row": len(rows), "value": None})
    with engine.begin() as connection:
        connection.execute(table.insert(), rows)
        got = dict(connection.execute(sa.select(table.c.row, table.c.value)).all())
        # Equality lookups convert their operand the same way.
        for value in EDGES[scheme]:
            hits = connection.execute(
                sa.select(sa.func.count()).where(table.c.value == str(value))
            ).scalar_one()
            assert hits == 4, value
    assert got == expected
    for row, value in got.items():
        assert type(value) is type(expected[row])


def test_column_types_in_the_database(engine: sa.Engine) -> None:
    table = fresh_table(
        engine,
        "column_types",
        *(sa.Column(name.replace("-", "_"), make()) for name, make in COLUMN_TYPES.items()),
    )
    columns = {
        column["name"]: column["type"] for column in sa.inspect(engine).get_columns(table.name)
    }
    for name in ("uid64", "uid64_v1", "elastic64", "short60"):
        assert isinstance(columns[name], sa.BigInteger), (name, columns[name])
    if engine.dialect.name == "postgresql":
        assert isinstance(columns["muid"], sa.Uuid), columns["muid"]
        assert isinstance(columns["uuid7"], sa.Uuid), columns["uuid7"]
    else:
        assert isinstance(columns["muid"], sa.LargeBinary), columns["muid"]
        # sa.Uuid's fallback: 32 hex digits, which sort as the UUIDs do.
        assert columns["uuid7"].length == 32, columns["uuid7"]


# -- order ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def order_tables(engine: sa.Engine) -> dict[str, sa.Table]:
    return {
        scheme: fresh_table(
            engine,
            f"order_{scheme.replace('-', '_')}",
            sa.Column("value", make(), primary_key=True),
        )
        for scheme, make in COLUMN_TYPES.items()
    }


def check_database_order(engine: sa.Engine, table: sa.Table, values: Sequence[IdValue]) -> None:
    """ORDER BY, and a range condition, agree with the value type's comparisons."""
    shuffled = list(values)
    random.Random(len(values)).shuffle(shuffled)
    column = table.c.value
    pivot = shuffled[0]
    with engine.begin() as connection:
        connection.execute(table.delete())
        connection.execute(table.insert(), [{"value": value} for value in shuffled])
        ascending = connection.execute(sa.select(column).order_by(column)).scalars().all()
        descending = connection.execute(sa.select(column).order_by(column.desc())).scalars().all()
        above = connection.execute(sa.select(column).where(column > pivot).order_by(column))
        above_pivot = above.scalars().all()
    assert ascending == sorted(values)
    assert descending == sorted(values, reverse=True)
    assert above_pivot == sorted(value for value in values if value > pivot)


def uid64_fields(mode: Mode, timestamps: st.SearchStrategy[int]) -> st.SearchStrategy[Uid64]:
    return st.builds(
        lambda timestamp, sequence, generator, cluster: Uid64.build(
            timestamp_ms=timestamp,
            sequence=sequence,
            generator=generator,
            cluster=cluster,
            mode=mode,
        ),
        timestamps,
        st.integers(0, u64.MAX_SEQUENCE),
        st.integers(0, u64.MAX_GENERATOR),
        st.integers(0, u64.MAX_CLUSTER),
    )


ANY_TIME = st.integers(0, u64.MAX_TIMESTAMP_MS)
NEAR_TOP = st.integers(TS_AT_TOP - 5_000, TS_AT_TOP + 5_000)
UID64_VALUES = st.one_of(
    uid64_fields(Mode.SPREAD, ANY_TIME),  # half of them at or above 2**63
    uid64_fields(Mode.TIME_SEQUENTIAL, ANY_TIME),
    uid64_fields(Mode.TIME_SEQUENTIAL, NEAR_TOP),  # either side of 2**63
    st.sampled_from(EDGES["uid64"]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(UID64_VALUES, min_size=2, max_size=40, unique=True))
def test_uid64_order_by_is_python_order(
    engine: sa.Engine, order_tables: dict[str, sa.Table], values: list[Uid64]
) -> None:
    check_database_order(engine, order_tables["uid64"], values)


def test_uid64_order_across_the_top_bit(
    engine: sa.Engine, order_tables: dict[str, sa.Table]
) -> None:
    spread_ids = Uid64Generator(generator=5).batch(64)
    values = [
        *EDGES["uid64"],
        *spread_ids,
        *(time_sequential(TS_AT_TOP + delta, delta % 64) for delta in range(-50, 50)),
    ]
    assert sum(value.int >= TOP for value in values) >= 50
    assert sum(value.int < TOP for value in values) >= 50
    check_database_order(engine, order_tables["uid64"], sorted(set(values)))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
@pytest.mark.parametrize("scheme", ["uid64-v1", "elastic64", "short60", "muid", "uuid7"])
def test_other_schemes_order_by_is_python_order(
    engine: sa.Engine, order_tables: dict[str, sa.Table], scheme: str, data: st.DataObject
) -> None:
    value_type = type(EDGES[scheme][0])
    if value_type is Elastic64:
        ints = st.integers(0, e64.MAX_VALUE).map(lambda v: Elastic64(v, node_bits=NODE_BITS))
    elif value_type is Uid64V1:
        ints = st.integers(0, MAX64).map(lambda v: Uid64V1(v & ~u64.V1_RESERVED_MASK))
    elif value_type is Uuid7:
        ints = st.integers(0, ((uu.MAX_TIMESTAMP_MS + 1) << 80) - 1).map(
            lambda v: Uuid7(v & ~uu.VERSION_VARIANT_MASK | uu.VERSION_VARIANT_BITS)
        )
    else:
        ints = st.integers(0, value_type._max_int).map(value_type.from_int)
    values = data.draw(
        st.lists(
            st.one_of(ints, st.sampled_from(EDGES[scheme])), min_size=2, max_size=30, unique=True
        )
    )
    check_database_order(engine, order_tables[scheme], values)


# -- range queries by time use the index -------------------------------------------------

# scheme -> (column type, ID at time t for row i, the lowest ID of time t)
TIME_ORDERED: dict[
    str, tuple[Callable[[], IdType[Any]], Callable[[int, int], IdValue], Callable[[int], IdValue]]
] = {
    "uid64": (
        Uid64Type,
        lambda t, i: time_sequential(t, i % 64, i % 2048),
        time_sequential,
    ),
    "elastic64": (
        lambda: Elastic64Type(node_bits=NODE_BITS),
        lambda t, i: Elastic64.build(timestamp_ms=t, node=i % 4096, node_bits=NODE_BITS),
        lambda t: Elastic64.build(timestamp_ms=t, node=0, node_bits=NODE_BITS),
    ),
    "muid": (
        MuidType,
        lambda t, i: Muid.build(timestamp_us=t * 1000, medallion=(1 << 48) + i),
        lambda t: Muid.build(timestamp_us=t * 1000, medallion=0),
    ),
    "short60": (
        Short60Type,
        lambda t, i: Short60.build(timestamp_ms=t, sequence=i % 512, random=i % 512),
        lambda t: Short60.build(timestamp_ms=t),
    ),
    "uuid7": (
        Uuid7Type,
        lambda t, i: Uuid7.build(timestamp_ms=t, counter=i, node=i % 65536, random=i),
        Uuid7.first_at,
    ),
    "snowflake": (
        SnowflakeType,
        lambda t, i: Snowflake.build(timestamp_ms=t, worker=i % 1024, sequence=i % 4096),
        lambda t: Snowflake.build(timestamp_ms=t),
    ),
}


def milliseconds(value: Any) -> int:
    return value.timestamp_us // 1000 if isinstance(value, Muid) else value.timestamp_ms  # type: ignore[no-any-return]


def query_plan(connection: sa.Connection, query: sa.Select[Any]) -> str:
    compiled = query.compile(connection, compile_kwargs={"literal_binds": True})
    if connection.dialect.name == "postgresql":
        rows = connection.exec_driver_sql(f"EXPLAIN {compiled}").scalars()
    else:
        rows = (row[-1] for row in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}"))
    return "\n".join(rows)


@pytest.mark.parametrize("scheme", list(TIME_ORDERED))
def test_a_range_by_time_is_an_index_range_scan(engine: sa.Engine, scheme: str) -> None:
    make_type, make_id, lowest_at = TIME_ORDERED[scheme]
    table = fresh_table(
        engine,
        f"events_{scheme}",
        sa.Column("id", make_type(), primary_key=True),
        sa.Column("payload", sa.Integer, nullable=False),
    )
    # 20,000 IDs a second apart; for uid64 and elastic64 the span straddles 2**63.
    start = TS_AT_TOP - 10_000_000 if scheme == "uid64" else 1_700_000_000_000
    if scheme == "elastic64":
        start = (TOP >> 16) - 10_000_000
    ids = [make_id(start + i * 1000, i) for i in range(20_000)]
    with engine.begin() as connection:
        connection.execute(
            table.insert(), [{"id": value, "payload": i} for i, value in enumerate(ids)]
        )
        if engine.dialect.name == "postgresql":
            connection.exec_driver_sql(f"ANALYZE {table.name}")
        else:
            connection.exec_driver_sql("ANALYZE")
    low, high = start + 9_900_000, start + 10_100_000  # 200 s, across 2**63 for the 64-bit
    query = (
        sa.select(table.c.id)
        .where(table.c.id >= lowest_at(low), table.c.id < lowest_at(high))
        .order_by(table.c.id)
    )
    with engine.connect() as connection:
        found = connection.execute(query).scalars().all()
        plan = query_plan(connection, query)
    expected = [value for value in ids if low <= milliseconds(value) < high]
    assert len(expected) == 200
    assert found == expected
    if engine.dialect.name == "postgresql":
        assert f"{table.name}_pkey" in plan, plan
        assert "Index Cond" in plan, plan
        assert "Seq Scan" not in plan, plan
    else:
        assert "SEARCH" in plan, plan
        assert "id>? AND id<?" in plan, plan


# -- what the stored values look like to SQL ------------------------------------------------

# docs/storage.md shows these expressions; the tests keep them true.
PG_UID64_HEX = "lpad(to_hex(id # x'8000000000000000'::bigint), 16, '0')"
PG_HEX_TO_STORED = "('x' || :hex)::bit(64)::bigint # x'8000000000000000'::bigint"
PG_ELASTIC64_DECIMAL = "(id::numeric + 9223372036854775808)::text"
PG_MUID_HEX = "upper(replace(id::text, '-', ''))"
SQLITE_MUID_HEX = "hex(id)"
SQLITE_UID64_HEX = "printf('%016x', (id | (1 << 63)) - (id & (1 << 63)))"
# SQLite has no integer above 2**63 - 1: exact for elastic64 IDs below 2**63 (until 6429).
SQLITE_ELASTIC64_DECIMAL = "id + 9223372036854775807 + 1"


def test_the_documented_sql_reads_stored_ids_back(engine: sa.Engine) -> None:
    uid64s = [*EDGES["uid64"], *Uid64Generator(generator=9).batch(20)]
    postgres = engine.dialect.name == "postgresql"
    elastic64s = [value for value in EDGES["elastic64"] if postgres or value.int < TOP]
    uid_table = fresh_table(engine, "raw_uid64", sa.Column("id", Uid64Type(), primary_key=True))
    elastic_table = fresh_table(
        engine,
        "raw_elastic64",
        sa.Column("id", Elastic64Type(node_bits=NODE_BITS), primary_key=True),
    )
    muids = EDGES["muid"]
    muid_table = fresh_table(engine, "raw_muid", sa.Column("id", MuidType(), primary_key=True))
    with engine.begin() as connection:
        connection.execute(muid_table.insert(), [{"id": value} for value in muids])
        muid_sql = PG_MUID_HEX if postgres else SQLITE_MUID_HEX
        muid_texts = connection.exec_driver_sql(f"SELECT {muid_sql} FROM raw_muid").scalars().all()
        connection.execute(uid_table.insert(), [{"id": value} for value in uid64s])
        connection.execute(elastic_table.insert(), [{"id": value} for value in elastic64s])
        hex_sql = PG_UID64_HEX if postgres else SQLITE_UID64_HEX
        texts = connection.exec_driver_sql(f"SELECT {hex_sql} FROM raw_uid64").scalars().all()
        decimal_sql = PG_ELASTIC64_DECIMAL if postgres else SQLITE_ELASTIC64_DECIMAL
        decimals = connection.exec_driver_sql(f"SELECT {decimal_sql} FROM raw_elastic64")
        decimal_texts = [str(decimal) for decimal in decimals.scalars()]
        if postgres:
            # ...and the other way: a hex ID written in SQL finds its row.
            for value in uid64s:
                found = connection.execute(
                    sa.text(f"SELECT count(*) FROM raw_uid64 WHERE id = {PG_HEX_TO_STORED}"),
                    {"hex": str(value)},
                ).scalar_one()
                assert found == 1, value
    assert sorted(texts) == sorted(str(value) for value in uid64s)
    assert sorted(muid_texts) == sorted(str(value) for value in muids)
    assert sorted(decimal_texts) == sorted(str(value) for value in elastic64s)


# -- bad values ---------------------------------------------------------------------------


def test_bad_values_raise_invalid_id(engine: sa.Engine) -> None:
    table = fresh_table(
        engine,
        "bad_values",
        sa.Column("n", sa.Integer, primary_key=True),
        sa.Column("uid", Uid64Type()),
        sa.Column("v1", Uid64V1Type()),
        sa.Column("elastic", Elastic64Type(node_bits=NODE_BITS)),
        sa.Column("muid", MuidType()),
    )
    bad_rows: list[tuple[dict[str, object], str]] = [
        ({"uid": "0123456789abcdeg"}, "bad character 'g' at position 15"),
        ({"uid": "123"}, "expected 16 hex digits, got 3 characters"),
        ({"uid": -1}, "value -1 is out of range"),
        ({"uid": 1 << 64}, "out of range"),
        ({"uid": True}, "cannot read an ID from bool"),
        ({"uid": 1.5}, "cannot read an ID from float"),
        ({"uid": Short60(5)}, "cannot read an ID from Short60"),
        ({"uid": b"\x00" * 7}, "expected 8 bytes, got 7"),
        ({"v1": Uid64(0xFC00)}, "reserved bits 10..15 are set"),
        ({"elastic": Elastic64(5, node_bits=10)}, "holds IDs of node_bits=12"),
        ({"elastic": "12a"}, "bad character 'a'"),
        ({"muid": "05D5EAC793E61F-17B9F5B9479DF94AC0"}, "dashed form must have groups"),
    ]
    with engine.begin() as connection:
        for n, (values, message) in enumerate(bad_rows):
            with pytest.raises(InvalidId, match=message) as caught:
                connection.execute(table.insert().values(n=n, **values))
            assert isinstance(caught.value, InvalidColumnValue)
        with pytest.raises(InvalidId, match="expected 16 hex digits"):
            connection.execute(sa.select(table).where(table.c.uid == "nope"))
        assert connection.execute(sa.select(sa.func.count()).select_from(table)).scalar_one() == 0
        # A value that is no ID of the scheme, written behind the type's back, is
        # refused when read rather than turned into something else.
        connection.execute(
            sa.text("INSERT INTO bad_values (n, v1) VALUES (1, :v)"), {"v": 0xFC00 - TOP}
        )
        with pytest.raises(InvalidId, match="reserved bits"):
            connection.execute(sa.select(table.c.v1)).all()


def test_elastic64_type_needs_a_valid_width() -> None:
    with pytest.raises(ConfigurationError, match="node_bits 7 is out of range"):
        Elastic64Type(node_bits=7)
    with pytest.raises(TypeError):
        Elastic64Type()  # type: ignore[call-arg]


# -- column defaults that mint ---------------------------------------------------------------


class Base(DeclarativeBase):
    pass


_threads_generator = Uid64Generator(generator=5)


class MintedRow(Base):
    __tablename__ = "minted_rows"

    id: Mapped[Uid64] = mapped_column(
        Uid64Type(), primary_key=True, default=_threads_generator.generate
    )
    worker: Mapped[int]


def test_a_minting_default_under_eight_threads_gives_no_duplicate_key(engine: sa.Engine) -> None:
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    threads_count, orm_commits, rows_per_commit, core_rows = 8, 10, 10, 100
    barrier = threading.Barrier(threads_count)
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            barrier.wait(timeout=30)
            for _ in range(orm_commits):
                with Session(engine) as session:
                    session.add_all(MintedRow(worker=worker) for _ in range(rows_per_commit))
                    session.commit()
            with engine.begin() as connection:
                connection.execute(
                    MintedRow.__table__.insert(),
                    [{"worker": worker}] * core_rows,  # type: ignore[attr-defined]
                )
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    with Session(engine) as session:
        ids = session.scalars(sa.select(MintedRow.id)).all()
    assert len(ids) == threads_count * (orm_commits * rows_per_commit + core_rows)
    assert len(set(ids)) == len(ids)
    assert all(value.generator == 5 for value in ids)


@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
def test_a_minting_default_in_async_sessions(postgres: PostgresServer, driver: str) -> None:
    database = postgres.create_database("storage_async")
    muids = MuidGenerator(medallion=(1 << 48) + 3)
    short_ids = Short60Generator(node=11)

    class AsyncBase(DeclarativeBase):
        pass

    class Document(AsyncBase):
        __tablename__ = f"documents_{driver}"

        id: Mapped[Muid] = mapped_column(MuidType(), primary_key=True, default=muids.generate)
        short: Mapped[Short60] = mapped_column(
            Short60Type(), unique=True, default=short_ids.generate
        )
        task: Mapped[int]

    async def scenario() -> list[tuple[Muid, Short60]]:
        engine = create_async_engine(postgres.url(f"postgresql+{driver}", database))
        try:
            async with engine.begin() as connection:
                await connection.run_sync(AsyncBase.metadata.drop_all)
                await connection.run_sync(AsyncBase.metadata.create_all)
            sessions = async_sessionmaker(engine, expire_on_commit=False)

            async def add(task: int) -> None:
                async with sessions() as session:
                    session.add_all(Document(task=task) for _ in range(25))
                    await session.commit()

            await asyncio.gather(*(add(task) for task in range(8)))
            async with AsyncSession(engine) as session:
                rows = await session.execute(
                    sa.select(Document.id, Document.short).order_by(Document.id)
                )
                return [tuple(row) for row in rows]  # type: ignore[misc]
        finally:
            await engine.dispose()

    rows = asyncio.run(scenario())
    assert len(rows) == 200
    assert len({muid for muid, _ in rows}) == 200
    assert [muid for muid, _ in rows] == sorted(muid for muid, _ in rows)
    assert all(type(muid) is Muid and type(short) is Short60 for muid, short in rows)
    assert all(muid.medallion == (1 << 48) + 3 for muid, _ in rows)
