"""Generator IDs claimed as leases in a PostgreSQL table, fenced, and safe when it forgets.

URL grammar (libpq's, with idmint's options beside libpq's parameters)::

    postgresql://[user[:password]@][host[:port][,host[:port]...]][/dbname][?param=value&...]
    postgres://...         the same

Every libpq parameter works in the query string (``sslmode``, ``sslrootcert``,
``sslcert``, ``sslkey``, ``application_name``, ``target_session_attrs``,
``host=/run/postgresql`` for a Unix socket, ``password``, ...), beside idmint's
options (:class:`PostgresOptions`; this table is made from its declaration;
``connect_timeout`` is libpq's too, for each attempt). Needs psycopg 3 (the
``postgres`` extra).

{options}

The table, one row per identity held at least once and one per identity space
describing the pool (``cluster`` and ``id`` -1)::

    CREATE TABLE public.idmint_claims (
        space text NOT NULL,          -- generator (uid64), node (elastic64), short60
        cluster smallint NOT NULL,
        id integer NOT NULL,
        token text,                   -- the holder's random token; NULL when free
        holder text,                  -- host:pid
        since_ms bigint,              -- claimed at (the holder's clock); the pool's
                                      -- record: since when its epoch began
        expires_ms bigint,            -- the lease's end, by the server's clock
        lease_ms integer,             -- the holder's TTL; the pool's record: max_ttl
        ceiling_ms bigint,            -- the high-water mark ...
        renewed_ms bigint,
        released_ms bigint,
        mark_holder text,
        incarnation text,             -- ... and the pool incarnation it was written in
                                      -- (<postmaster start>/<epoch>); the record: the
                                      -- pool's incarnation
        written_xid bigint,           -- the transaction that wrote the row (its xmin)
        PRIMARY KEY (space, cluster, id)
    );

It is created when missing (by the first claimant; concurrent ones wait on an
advisory lock), and a table made by an older idmint gains the columns it lacks. A
role that may not create it gets a clear error: create it as above and grant the
role SELECT, INSERT and UPDATE on it.

Each request is one statement in autocommit, compared and written atomically
(a claim is an ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` on the row version
it read; a renewal an ``UPDATE ... WHERE token = <ours>``). The sessions commit
synchronously (``synchronous_commit`` off or local on the server is raised to on
for them), so a crash of the server loses none of their writes, and a
synchronous standby has every one. The store's incarnation is the
postmaster's start time: a restart or a failover to a replica changes it. Every
statement that writes a row records its own transaction in it
(``written_xid``), which the row's version (``xmin``) matches until anything
else writes the row: a restore of the table's rows (``pg_restore
--data-only``, ``INSERT ... SELECT`` from a copy) leaves rows idmint cannot vouch
for, and the pool begins a new epoch (:mod:`idmint.coordinate.leases`). A
lease ends when the server's clock (``statement_timestamp()``) passes
``expires_ms``; one whose end lies more than its TTL + 1 s ahead of that clock
is taken as lapsed too (the clock stepped back).

A process shares one connection per server, user and database among all its
claims: a fleet costs the server a connection per process, not per claim.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import unquote

from idmint.coordinate import peers
from idmint.coordinate.base import (
    ClaimInfo,
    HighWaterMark,
)
from idmint.coordinate.leases import (
    ANSWER_SLACK_S,
    STEP_BACK_SLACK_MS,
    Free,
    Lease,
    LeaseOptions,
    Look,
    PoolRecord,
    SqlConnection,
    SqlLeaseCoordinator,
    Take,
    columns_of_mark,
    creating_if_missing,
    first_line,
    in_pool_order,
    mark_of_columns,
)
from idmint.coordinate.options import identifier, option, with_options_table
from idmint.coordinate.spaces import Space
from idmint.coordinate.url import CoordinatorUrl
from idmint.errors import (
    ConfigurationError,
    CoordinationError,
    CoordinatorRefused,
    CoordinatorUnavailable,
    needs_extra,
)

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "INCARNATION_SQL",
    "WRITTEN_XID_SQL",
    "PostgresCoordinator",
    "PostgresOptions",
    "PostgresStore",
]

DEFAULT_SCHEMA = "public"
DEFAULT_TABLE = "idmint_claims"


@dataclass(frozen=True)
class PostgresOptions(LeaseOptions):
    """The options of a ``postgresql://`` URL (idmint's; the others are libpq's)."""

    passes_through: ClassVar[str | None] = "libpq parameters"

    schema: str = option(
        "schema", DEFAULT_SCHEMA, "the table's schema (created if missing)", identifier()
    )
    table: str = option(
        "table", DEFAULT_TABLE, "the table (created if missing): one pool", identifier()
    )


__doc__ = with_options_table(__doc__, PostgresOptions)

_NOW = "(extract(epoch FROM statement_timestamp()) * 1000)::bigint"
INCARNATION_SQL = "(extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint::text"
"""The store's incarnation: the postmaster's start time (µs)."""
WRITTEN_XID_SQL = "mod(txid_current(), 4294967296)"
"""The writing transaction's ID as a row's ``xmin`` shows it (32 bits)."""
_INTACT = "({row}.xmin::text::bigint IS NOT DISTINCT FROM {row}.written_xid)"
"""Whether a row is as an idmint statement wrote it (see the module docs)."""
_LAPSED = (
    "({row}.expires_ms < {now} OR {row}.expires_ms > {now} + {row}.lease_ms + "
    f"{STEP_BACK_SLACK_MS})"
)

_COLUMNS = """
    space text NOT NULL,
    cluster smallint NOT NULL,
    id integer NOT NULL,
    token text,
    holder text,
    since_ms bigint,
    expires_ms bigint,
    lease_ms integer,
    ceiling_ms bigint,
    renewed_ms bigint,
    released_ms bigint,
    mark_holder text,
    mark_holders text,
    incarnation text,
    written_xid bigint,
    PRIMARY KEY (space, cluster, id)
"""
_ADDED_COLUMNS = ("written_xid bigint", "mark_holders text")
"""Columns an older idmint's table lacks, added when it is first used."""


def _import_psycopg() -> Any:
    with needs_extra("postgres", "psycopg", needed_by="postgresql://"):
        import psycopg
    return psycopg


DEFAULT_PORT = 5432
"""Where a host of the URL without a port is asked."""


class _Connection(SqlConnection):
    """The process's connection to one server (of the URL's hosts), user and
    database; each request one statement (or a few in one round trip)."""

    kind = peers.POSTGRESQL
    url_settings = "hosts, ports and TLS settings"

    def __init__(
        self,
        conninfo: str,
        description: str,
        timeout_s: float,
        hosts: Sequence[tuple[str, int]],
    ) -> None:
        super().__init__(description, timeout_s, hosts)
        self.conninfo = conninfo

    def run(
        self,
        doing: str,
        request: Callable[[psycopg.Connection[Any]], Any],
        read: Callable[[Any], Any] | None = None,
    ) -> Any:
        """``request`` on the connection (connecting first if needed), then ``read``
        on what it returned (its cursor), errors translated.

        On a new connection the request is sent with the session's set-up
        (:meth:`_set_up_with`): it sends its statement and leaves the reading of
        the results to ``read``.
        """

        def send(connection: Any) -> Any:
            if connection.idmint_set_up:
                answer = request(connection)
            else:
                answer = self._set_up_with(connection, request)
            return answer if read is None else read(answer)

        return self._request(doing, send)

    def _set_up_with(self, connection: Any, request: Callable[[Any], Any]) -> Any:
        """The session's set-up, then ``request``, sent together: one round trip.

        Our writes must survive a crash of the server and be on a synchronous
        standby: they commit synchronously even where the server's default does
        not. No statement runs longer than a request may take, nor waits for a
        lock for longer than 3/4 of that (so that a lock held by another session
        is named as the cause). Both run in one transaction (a pipeline syncs
        once), so if ``request`` fails the set-up is undone too, and made again
        with the next request.
        """
        pg = _import_psycopg()
        set_up = (
            "SELECT set_config('synchronous_commit', CASE WHEN current_setting("
            "'synchronous_commit') IN ('off', 'local') THEN 'on' ELSE current_setting("
            "'synchronous_commit') END, false), set_config('statement_timeout', %s, false), "
            "set_config('lock_timeout', %s, false)"
        )
        timeout = (str(round(self.timeout_s * 1000)), str(round(self.timeout_s * 750)))
        if not pg.Pipeline.is_supported():  # a libpq older than 14
            connection.execute(set_up, timeout)
            connection.idmint_set_up = True
            return request(connection)
        with connection.pipeline():
            connection.execute(set_up, timeout)
            answer = request(connection)
        # Leaving the pipeline sent both and read every result.
        connection.idmint_set_up = True
        return answer

    def _connect(self, timeout_s: float) -> psycopg.Connection[Any]:
        timed = _timed_connection_class()
        # libpq takes whole seconds per attempt; the connection's requests get ours.
        connection: Any = timed.connect(
            self.conninfo, autocommit=True, connect_timeout=max(2, math.ceil(timeout_s))
        )
        # A server that answers ends a statement that runs too long itself, with an
        # error naming why; only one that does not answer at all meets this limit.
        connection.request_timeout_s = self.timeout_s + ANSWER_SLACK_S
        return connection  # type: ignore[no-any-return]

    def _is_open(self, connection: Any) -> bool:
        return not connection.closed

    def _descriptor(self, connection: Any) -> int:
        # Closing the connection (or its being garbage collected) would send
        # libpq's goodbye on the socket the parent shares, which ends the
        # parent's session.
        return int(connection.pgconn.socket)

    def _errors(self) -> type[BaseException]:
        return _import_psycopg().Error  # type: ignore[no-any-return]

    def _cause(self, error: BaseException) -> BaseException:
        return _first_error(error)

    def _translate(self, error: BaseException, doing: str) -> CoordinationError:
        return _translate(error, doing)

    def _broken(self, error: BaseException) -> bool:
        return _broken(error)

    def _first_contact(self, error: BaseException) -> Exception:
        if re.search(r"invalid .*value", first_line(error)):
            # libpq checks a parameter's value only when it connects.
            return ConfigurationError(f"{self.description}: {first_line(error)}")
        return super()._first_contact(error)


def _timed_connection_class() -> Any:
    """psycopg's Connection whose every wait gives up after the request's time limit.

    A server that stops answering (frozen, or cut off without a reset) would
    otherwise hold a renewal, and the release behind it, for as long as TCP
    takes to give up.
    """
    global _TimedConnection
    if _TimedConnection is None:
        pg = _import_psycopg()

        class TimedConnection(pg.Connection):  # type: ignore[misc,name-defined]
            request_timeout_s: float | None = None
            idmint_set_up = False
            """Whether the session's settings are made (:meth:`_Connection._set_up_with`)."""

            def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
                limit = timeout if timeout is not None else self.request_timeout_s
                return super().wait(gen, interval=interval, timeout=limit)

        _TimedConnection = TimedConnection
    return _TimedConnection


_TimedConnection: Any = None


class PostgresStore:
    """The pool's requests, each one statement (see the module docs)."""

    def __init__(self, connection: _Connection, schema: str, table: str, description: str) -> None:
        self.connection = connection
        self.schema = schema
        self.table = table
        self.description = description
        self.qualified = f'"{schema}"."{table}"'

    def _run(
        self, doing: str, request: Callable[[Any], Any], read: Callable[[Any], Any] | None = None
    ) -> Any:
        """``request`` and ``read`` (see :meth:`_Connection.run`), creating the table
        first if it is missing (or adding the columns an older idmint's table lacks)."""
        pg = _import_psycopg()
        return creating_if_missing(
            lambda: self.connection.run(doing, request, read),
            lambda cause: isinstance(cause, (pg.errors.UndefinedTable, pg.errors.UndefinedColumn)),
            lambda: self.connection.run(f"creating {self.qualified}", self._create),
            "The table is missing (or made by an older idmint) and this role may not "
            "create it: create it as the postgresql:// driver's documentation shows "
            f"(CREATE TABLE {self.qualified} ...), then GRANT SELECT, INSERT, UPDATE ON "
            f"{self.qualified} TO the URL's role",
        )

    def _create(self, connection: Any) -> None:
        # One claimant creates, the others wait for it on the lock and find it
        # made: 64 processes starting at once must not fail on each other.
        lock = int.from_bytes(f"idmint {self.qualified}".encode()[:8].ljust(8, b"\0"), "big") >> 1
        added = "".join(
            f"""
              IF NOT EXISTS (SELECT 1 FROM pg_attribute
                              WHERE attrelid = '{self.qualified}'::regclass
                                AND attname = '{column.split()[0]}' AND NOT attisdropped) THEN
                ALTER TABLE {self.qualified} ADD COLUMN {column};
              END IF;"""
            for column in _ADDED_COLUMNS
        )
        connection.execute(
            f"""
            DO $create$ BEGIN
              PERFORM pg_advisory_xact_lock({lock});
              IF to_regnamespace('"{self.schema}"') IS NULL THEN
                CREATE SCHEMA "{self.schema}";
              END IF;
              IF to_regclass('{self.qualified}') IS NULL THEN
                CREATE TABLE {self.qualified} ({_COLUMNS});
              END IF;
              {added}
            END $create$
            """
        )

    def look(
        self, space: Space, cluster: int, pool: range, *, start: int, want: int | None
    ) -> Look:
        query = f"""
            WITH srv AS (SELECT {_NOW} AS now, {INCARNATION_SQL} AS inc)
            (SELECT -1 AS id, srv.inc, r.incarnation, r.since_ms, r.lease_ms::bigint,
                    NULL::bigint, NULL::text, NULL::text, r.xmin::text,
                    {_INTACT.format(row="r")}
               FROM srv LEFT JOIN {self.qualified} r
                 ON r.space = %(space)s AND r.cluster = -1 AND r.id = -1)
            UNION ALL
            (SELECT g.id, NULL, c.incarnation, c.ceiling_ms, c.renewed_ms, c.released_ms,
                    c.mark_holder, c.mark_holders, c.xmin::text, {_INTACT.format(row="c")}
               FROM srv CROSS JOIN (SELECT generate_series(%(start)s::int, %(hi)s::int)
                                    UNION ALL
                                    SELECT generate_series(%(lo)s::int, %(start)s::int - 1)
                                   ) AS g(id)
               LEFT JOIN LATERAL (
                 SELECT *, xmin FROM {self.qualified} c
                  WHERE c.space = %(space)s AND c.cluster = %(cluster)s AND c.id = g.id
                 OFFSET 0) c ON true
              WHERE c.token IS NULL OR {_LAPSED.format(row="c", now="srv.now")}
              LIMIT %(want)s::int)
        """
        # IDs from start on, wrapping round, each looked up by its key (OFFSET 0 keeps
        # the planner from joining the whole pool instead): a look stops at the
        # ``want``-th free ID instead of reading and sorting the pool.
        parameters = {
            "space": space.name,
            "cluster": cluster,
            "lo": pool.start,
            "hi": pool.stop - 1,
            "start": start,
            "want": want,
        }
        rows = self._run(
            "looking for a free ID", lambda c: c.execute(query, parameters), _fetch_all
        )
        # The record's row (id -1) comes first: UNION ALL appends in order.
        first = rows[0]
        incarnation, record_incarnation, since, max_ttl = first[1:5]
        record_version, intact = first[8:10]
        record = PoolRecord.read(record_incarnation, since, max_ttl) if intact else None
        free = []
        for row in rows[1:]:
            number, _, stamp, ceiling, renewed, released, holder, holders, version, vouched = row
            mark = mark_of_columns(ceiling, renewed, released, holder, holders)
            if mark is not None and not vouched:
                # Written back by something else (a restore): the pool's memory is in
                # doubt from now on, not only this identity's.
                record = None
            free.append(
                Free(
                    cluster=cluster,
                    number=number,
                    mark=mark,
                    mark_incarnation=stamp if mark is not None and vouched else None,
                    version=version,
                )
            )
        return Look(str(incarnation), record, record_version, free)

    def take(self, space: Space, attempt: Take) -> int | None:
        free = attempt.free
        record = attempt.record
        query = f"""
            WITH srv AS (SELECT {_NOW} AS now, {INCARNATION_SQL} AS inc),
            rec AS (
              INSERT INTO {self.qualified} AS r (space, cluster, id, incarnation, since_ms,
                                                 lease_ms, written_xid)
              SELECT %(space)s, -1, -1, %(rec_inc)s::text, %(rec_since)s::bigint,
                     %(rec_max_ttl)s::int, {WRITTEN_XID_SQL}
                FROM srv WHERE %(write_record)s::boolean AND srv.inc = %(inc)s::text
              ON CONFLICT (space, cluster, id) DO UPDATE
                 SET incarnation = excluded.incarnation, since_ms = excluded.since_ms,
                     lease_ms = excluded.lease_ms, written_xid = excluded.written_xid
               WHERE r.xmin::text IS NOT DISTINCT FROM %(old_record)s::text
              RETURNING 1
            )
            INSERT INTO {self.qualified} AS c (space, cluster, id, token, holder, since_ms,
                expires_ms, lease_ms, ceiling_ms, renewed_ms, released_ms, mark_holder,
                mark_holders, incarnation, written_xid)
            SELECT %(space)s, %(cluster)s::smallint, %(id)s::int, %(token)s::text,
                   %(holder)s::text, %(since)s::bigint, srv.now + %(ttl)s::int, %(ttl)s::int,
                   %(ceiling_ms)s::bigint, %(renewed_ms)s::bigint, %(released_ms)s::bigint,
                   %(mark_holder)s::text, %(mark_holders)s::text, %(stamp)s::text,
                   {WRITTEN_XID_SQL}
              FROM srv
             WHERE srv.inc = %(inc)s::text
               AND (NOT %(write_record)s::boolean OR EXISTS (SELECT 1 FROM rec)
                    OR EXISTS (SELECT 1 FROM {self.qualified} o
                                WHERE o.space = %(space)s AND o.cluster = %(cluster)s::smallint
                                  AND o.id = %(id)s::int AND o.token = %(token)s::text))
            ON CONFLICT (space, cluster, id) DO UPDATE
               SET token = excluded.token, holder = excluded.holder,
                   since_ms = excluded.since_ms, expires_ms = excluded.expires_ms,
                   lease_ms = excluded.lease_ms, ceiling_ms = excluded.ceiling_ms,
                   renewed_ms = excluded.renewed_ms, released_ms = NULL,
                   mark_holder = excluded.mark_holder, mark_holders = excluded.mark_holders,
                   incarnation = excluded.incarnation,
                   written_xid = excluded.written_xid
             WHERE c.token = excluded.token
                OR ((c.token IS NULL OR {
            _LAPSED.format(row="c", now="(excluded.expires_ms - excluded.lease_ms)")
        })
                    AND c.xmin::text IS NOT DISTINCT FROM %(old_version)s::text)
            RETURNING 1
        """
        parameters = {
            "space": space.name,
            "cluster": free.cluster,
            "id": free.number,
            "token": attempt.token,
            "holder": attempt.holder,
            "since": attempt.since_ms,
            "ttl": attempt.ttl_ms,
            **columns_of_mark(attempt.mark),
            "inc": attempt.incarnation,
            "stamp": attempt.stamp,
            "write_record": record is not None,
            "rec_inc": record.incarnation if record else None,
            "rec_since": record.since_ms if record else None,
            "rec_max_ttl": record.max_ttl_ms if record else None,
            "old_record": attempt.record_version,
            "old_version": free.version,
        }
        row: object = self._run(
            f"claiming {space} ID {free.number}", lambda c: c.execute(query, parameters), _fetch_one
        )
        # The table's rows vouch for themselves (xmin): no generation is kept.
        return None if row is None else 0

    def _stamp(self) -> str:
        """The pool's incarnation, for a mark written now: the record's, if the store
        can vouch for it (else NULL: a mark nobody can prove current)."""
        return f"""(SELECT r.incarnation FROM {self.qualified} r
                     WHERE r.space = %(space)s AND r.cluster = -1 AND r.id = -1
                       AND split_part(r.incarnation, '/', 1) = {INCARNATION_SQL}
                       AND {_INTACT.format(row="r")})"""

    def renew(self, lease: Lease, ttl_ms: int, mark: HighWaterMark, generation: int) -> int | None:
        query = f"""
            UPDATE {self.qualified}
               SET expires_ms = {_NOW} + %(ttl)s::int, lease_ms = %(ttl)s::int,
                   ceiling_ms = %(ceiling_ms)s::bigint, renewed_ms = %(renewed_ms)s::bigint,
                   mark_holder = %(mark_holder)s::text, mark_holders = %(mark_holders)s::text,
                   incarnation = {self._stamp()},
                   written_xid = {WRITTEN_XID_SQL}
             WHERE space = %(space)s AND cluster = %(cluster)s AND id = %(id)s
               AND token = %(token)s
        """
        parameters = {
            **_lease_row(lease),
            "ttl": ttl_ms,
            **columns_of_mark(mark),
        }
        count: int = self._run(
            "renewing the claim", lambda c: c.execute(query, parameters), _row_count
        )
        return 0 if count == 1 else None

    def release(self, lease: Lease, mark: HighWaterMark | None, generation: int) -> None:
        ends = f"token = NULL, holder = NULL, expires_ms = NULL, written_xid = {WRITTEN_XID_SQL}"
        if mark is not None:
            ends += (
                ", ceiling_ms = %(ceiling_ms)s::bigint, renewed_ms = %(renewed_ms)s::bigint,"
                " released_ms = %(released_ms)s::bigint, mark_holder = %(mark_holder)s::text,"
                " mark_holders = %(mark_holders)s::text,"
                f" incarnation = {self._stamp()}"
            )
        query = f"""
            UPDATE {self.qualified} SET {ends}
             WHERE space = %(space)s AND cluster = %(cluster)s AND id = %(id)s
               AND token = %(token)s
        """
        parameters: dict[str, Any] = _lease_row(lease)
        if mark is not None:
            parameters.update(columns_of_mark(mark))
        self._run("releasing the claim", lambda c: c.execute(query, parameters))

    def read_mark(self, space: Space, cluster: int, number: int) -> HighWaterMark | None:
        query = f"""
            SELECT ceiling_ms, renewed_ms, released_ms, mark_holder, mark_holders
              FROM {self.qualified}
             WHERE space = %s AND cluster = %s AND id = %s AND ceiling_ms IS NOT NULL
        """
        row = self._run(
            "reading a high-water mark",
            lambda c: c.execute(query, (space.name, cluster, number)),
            _fetch_one,
        )
        return None if row is None else mark_of_columns(*row)

    def list_claims(self) -> list[ClaimInfo]:
        query = f"""
            WITH srv AS (SELECT {_NOW} AS now)
            SELECT c.space, c.cluster, c.id, c.holder, c.since_ms, c.ceiling_ms
              FROM {self.qualified} c, srv
             WHERE c.id >= 0 AND c.token IS NOT NULL AND NOT {
            _LAPSED.format(row="c", now="srv.now")
        }
             ORDER BY c.space, c.cluster, c.id
        """
        rows = self._run("listing the claims", lambda c: c.execute(query), _fetch_all)
        return in_pool_order(rows)


class PostgresCoordinator(SqlLeaseCoordinator):
    """A PostgreSQL table used as a pool of generator IDs (see the module docs)."""

    store: PostgresStore
    options_type = PostgresOptions

    def __init__(self, url: CoordinatorUrl) -> None:
        options = self._take_url(url, PostgresOptions)
        self.schema, self.table = options.schema, options.table
        self.ttl_s, self.max_ttl_s = options.ttl_s, options.max_ttl_s
        conninfo, where = _conninfo(url, PostgresOptions.others(url))
        self.description = f"{url.scheme}://{where} {self.schema}.{self.table}"
        hosts = [(host, port or DEFAULT_PORT) for host, port in url.hosts]
        self._connection = self._take_connection(
            conninfo,
            lambda: _Connection(conninfo, self.description, options.timeout_s, hosts),
            options.connect_timeout_s,
        )
        self.store = PostgresStore(self._connection, self.schema, self.table, self.description)

    @classmethod
    def pool_within(cls, url: CoordinatorUrl, name: str) -> CoordinatorUrl:
        table = PostgresOptions.from_url(url).table[: 62 - len(name)]
        return url.replace(
            options={**url.options, **PostgresOptions.query(table=f"{table}_{name}")}
        )


def _lease_row(lease: Lease) -> dict[str, Any]:
    """The parameters that name a lease's row, and the token it must carry."""
    return {
        "space": lease.space.name,
        "cluster": lease.cluster,
        "id": lease.number,
        "token": lease.token,
    }


def _fetch_all(cursor: Any) -> list[Any]:
    return cursor.fetchall()  # type: ignore[no-any-return]


def _fetch_one(cursor: Any) -> Any:
    return cursor.fetchone()


def _row_count(cursor: Any) -> int:
    return int(cursor.rowcount)


def _conninfo(url: CoordinatorUrl, libpq: Mapping[str, str]) -> tuple[str, str]:
    """libpq's connection string for the URL, checked by libpq; and where it points."""
    pg = _import_psycopg()
    parameters: dict[str, Any] = {"application_name": "idmint", **libpq}
    if url.hosts:
        parameters["host"] = ",".join(host for host, _ in url.hosts)
        ports = [str(port or DEFAULT_PORT) for _, port in url.hosts]
        if any(port for _, port in url.hosts):
            parameters["port"] = ",".join(ports)
    if url.username:
        parameters["user"] = url.username
    if url.password:
        parameters["password"] = url.password
    database = unquote(url.path.strip("/"))
    if database:
        parameters["dbname"] = database
    try:
        conninfo = pg.conninfo.make_conninfo("", **parameters)
    except pg.ProgrammingError as error:
        known = ", ".join(sorted(PostgresOptions.names()))
        raise ConfigurationError(
            f"{url.redacted()}: {first_line(error)}; idmint takes {known}, and every "
            "other option must be a libpq parameter"
        ) from None
    where = (
        ",".join(f"{host}:{port or DEFAULT_PORT}" for host, port in url.hosts) or "(local socket)"
    )
    return conninfo, f"{where}/{database}" if database else where


def _broken(error: BaseException) -> bool:
    """Whether the connection cannot be trusted after ``error`` (it is then made again):
    not after a statement the server itself cut short."""
    pg = _import_psycopg()
    if getattr(error, "sqlstate", None) in _CUT_SHORT_STATES:
        return False
    return isinstance(error, (pg.OperationalError, pg.InterfaceError))


def _first_error(error: BaseException) -> BaseException:
    """The error that ended a request: leaving a pipeline with a request still
    unanswered raises psycopg's own ("cannot exit pipeline mode while busy") over
    the error that cut the request short."""
    context = error.__context__
    if "pipeline mode" in first_line(error) and isinstance(context, Exception):
        return context
    return error


def _timed_out(error: BaseException) -> bool:
    """Whether ``error`` is the connection's own time limit (the server did not answer)."""
    return type(error).__name__ == "_WaitTimeout"


_LOCK_TIMEOUT_STATE = "55P03"
_STATEMENT_TIMEOUT_STATE = "57014"
_CUT_SHORT_STATES = (_LOCK_TIMEOUT_STATE, _STATEMENT_TIMEOUT_STATE)
"""A lock waited for, a statement run, for too long: the server cut it short itself."""

_REFUSED_STATES = ("28000", "28P01", "42501")
"""invalid authorization, invalid password, insufficient privilege."""

_OUTAGE_STATES = ("57P01", "57P02", "57P03", "25006", "53300")
"""Admin or crash shutdown, cannot connect now, read-only (a standby), too many
connections."""

_REFUSED_MESSAGES = (
    "password authentication failed",
    "no password supplied",
    "pg_hba.conf",
    "certificate",
    "does not support SSL",
    "does not exist",
)
"""What libpq says, in words only, when it cannot connect because it was refused:
no SQLSTATE comes with a failed connection."""


def _translate(error: BaseException, doing: str) -> CoordinationError:
    """A psycopg error as the idmint error a caller can act on, by its SQLSTATE.

    Credentials, permissions and TLS are a refusal; a connection that cannot
    be made or broke, a server shutting down or starting, a statement that
    took too long, a standby, an outage; anything else a
    :class:`CoordinationError` carrying the cause.
    """
    pg = _import_psycopg()
    state = getattr(error, "sqlstate", None) or ""
    message = first_line(error)
    if state in _REFUSED_STATES:
        return CoordinatorRefused(
            f"{doing}: PostgreSQL refused us ({message}); check the user and password in "
            "the URL and the role's privileges on the schema and table"
        )
    if state == _LOCK_TIMEOUT_STATE:
        return CoordinatorUnavailable(
            f"{doing}: another session holds a lock on the table ({message}); pg_locks shows which"
        )
    if state == _STATEMENT_TIMEOUT_STATE:
        return CoordinatorUnavailable(
            f"{doing}: the statement ran longer than the URL's timeout ({message}); the "
            "server is overloaded"
        )
    if _timed_out(error):
        return CoordinatorUnavailable(
            f"{doing}: no answer from the server within the URL's timeout + "
            f"{ANSWER_SLACK_S:g} s (frozen, or cut off from us)"
        )
    if state in _OUTAGE_STATES or state.startswith("08"):
        return CoordinatorUnavailable(f"{doing}: {message}")
    if isinstance(error, pg.OperationalError) and not state:
        # A connection that failed or broke: libpq says why in words only.
        if any(word in message for word in _REFUSED_MESSAGES):
            return CoordinatorRefused(
                f"{doing}: PostgreSQL refused us ({message}); check the user, password and "
                "database in the URL, and sslmode/sslrootcert (the CA that signed the "
                "server's certificate)"
            )
        return CoordinatorUnavailable(f"{doing}: {message}")
    if isinstance(error, pg.InterfaceError):
        return CoordinatorUnavailable(f"{doing}: {message}")
    if state == "3D000":
        return CoordinatorRefused(f"{doing}: {message}; check the database in the URL")
    return CoordinationError(f"{doing}: PostgreSQL said {message} (SQLSTATE {state or '-'})")
