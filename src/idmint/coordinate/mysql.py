"""Generator IDs claimed as leases in a MySQL or MariaDB table, fenced, and safe when it forgets.

URL grammar::

    mysql://[user[:password]@]host[:port]/database[?option=value&...]
    mariadb://...          the same

The port is 3306 by default; the database must exist (the tables are made in it
when missing). Needs PyMySQL (the ``mysql`` extra). ``tls=true`` (or ``ca=``)
asks for TLS and verifies the server; without it PyMySQL offers TLS unverified
and falls back to none, as libpq's ``sslmode=prefer`` does; ``tls=false`` never
offers it (a connection costs ~0.1 s less CPU: no certificates loaded).

The options (:class:`MysqlOptions`; this table is made from its declaration):

{options}

Three tables, named after ``table``::

    CREATE TABLE idmint_claims (       -- one row per identity held at least once, and
                                       -- one per space for the pool's record (cluster
                                       -- and id -1)
        space VARCHAR(32), cluster SMALLINT, id INT,
        token VARCHAR(64),             -- the holder's random token; NULL when free
        holder VARCHAR(255),           -- host:pid
        since_ms BIGINT,               -- claimed at (the holder's clock); the record's:
                                       -- since when its epoch began
        expires_ms BIGINT,             -- the lease's end, by the server's clock
        lease_ms INT,                  -- the holder's TTL; the record's: max_ttl
        ceiling_ms BIGINT, renewed_ms BIGINT, released_ms BIGINT,
        mark_holder VARCHAR(255),      -- the high-water mark ...
        mark_holders MEDIUMTEXT,       -- ... who held the identity (JSON: idmint whois) ...
        incarnation VARCHAR(200),      -- ... and the pool incarnation it was written in
        written BIGINT,                -- the pool's generation when idmint last wrote it
        PRIMARY KEY (space, cluster, id)) ENGINE=InnoDB;
    CREATE TABLE idmint_claims_witness (   -- `written` of every row of the claims table,
        space VARCHAR(32), cluster SMALLINT, id INT,   -- as idmint wrote it; and the
        written BIGINT,                                -- pool's generation (cluster
        PRIMARY KEY (space, cluster, id)) ENGINE=InnoDB;   -- and id -2)
    CREATE TABLE idmint_claims_run (k TINYINT PRIMARY KEY, run VARCHAR(32))
        ENGINE=MEMORY;                 -- the server's run: empty after every start

A role that may not create them gets a clear error: create them as the driver
does (``SHOW CREATE TABLE`` on a server where it did) and grant the URL's user
SELECT, INSERT, UPDATE and DELETE on them.

**Which clock.** A lease ends when the server's clock (``NOW(3)``, in UTC)
passes ``expires_ms``: every claimant compares against the one clock, so the
claimants' clocks may disagree. One whose end lies more than its TTL + 1 s
ahead of that clock is taken as lapsed too (the server's clock stepped back). A
holder fences itself by its own monotonic clock, and a successor starts above
its high-water mark, so a jump of the server's clock costs no duplicate.

**The store's incarnation** is ``<server_id>.<run>``: ``run`` a random value the
first claimant after the server started writes into the ``MEMORY`` table, which
a restart empties (a crash that lost the latest commits is a restart), and
``server_id`` differs between a primary and its replicas, so a failover changes
it too.

**Restores.** MySQL has no row version that a writer other than idmint
changes (PostgreSQL's ``xmin``), so idmint keeps its own witness: every take,
renewal and release is one transaction that first advances the pool's
generation (its row in the witness table, locked for the transaction: writes to
a pool are serialised on it), then writes the row with ``written`` = that
generation, and the same value in the row's witness. A row whose ``written``
differs from its witness was written by something other than idmint (a restore
of the claims table: ``DELETE`` and ``INSERT ... SELECT`` from a copy, or
``mysqldump``'s output loaded back), so the pool's memory is in doubt and it
begins a new epoch (:mod:`idmint.coordinate.leases`). A restore that also
writes the witness table back (the whole database from one copy) takes the
generation back: a holder whose last write saw a later generation ends the
epoch at its next renewal. Dumps and restores of the claims table alone, which
is what an operator restores, are found at once.

A process shares one connection per server, user and database among all its
claims: a fleet costs the server a connection per process.
"""

from __future__ import annotations

import contextlib
import hashlib
import ssl
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from idmint.coordinate import peers
from idmint.coordinate.base import ClaimInfo, HighWaterMark
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
from idmint.coordinate.options import TLS_ADVICE, TlsOptions, identifier, option, with_options_table
from idmint.coordinate.spaces import Space
from idmint.coordinate.url import CoordinatorUrl
from idmint.errors import (
    ConfigurationError,
    CoordinationError,
    CoordinatorRefused,
    CoordinatorUnavailable,
    needs_extra,
)

__all__ = ["GENERATION_ID", "MysqlCoordinator", "MysqlOptions", "MysqlStore"]

DEFAULT_TABLE = "idmint_claims"
DEFAULT_PORT = 3306
GENERATION_ID = -2
"""The cluster and id of a pool's generation in the witness table."""


@dataclass(frozen=True)
class MysqlOptions(LeaseOptions, TlsOptions):
    """The options of a ``mysql://`` or ``mariadb://`` URL."""

    table: str = option(
        "table",
        DEFAULT_TABLE,
        "the claims table (created if missing), and the prefix of its two companions: one pool",
        identifier(),
    )


__doc__ = with_options_table(__doc__, MysqlOptions)

_NOW = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"


def _import_pymysql() -> Any:
    with needs_extra("mysql", "pymysql", needed_by="mysql://"):
        import pymysql
    return pymysql


class _Connection(SqlConnection):
    """The process's connection to one server, user and database; each request
    one transaction."""

    kind = peers.MYSQL
    url_settings = "host, port and TLS settings"

    def __init__(self, settings: dict[str, Any], description: str, timeout_s: float) -> None:
        super().__init__(description, timeout_s, [(settings["host"], settings["port"])])
        self.connect_settings = settings

    def run(self, doing: str, request: Callable[[Any], Any]) -> Any:
        """``request(cursor)`` in one transaction (committed if it returns, rolled
        back if it raises), connecting first if needed."""

        def transaction(connection: Any) -> Any:
            try:
                with connection.cursor() as cursor:
                    answer = request(cursor)
                connection.commit()
            except BaseException:
                with contextlib.suppress(Exception):
                    connection.rollback()
                raise
            return answer

        return self._request(doing, transaction)

    def _connect(self, timeout_s: float) -> Any:
        pymysql = _import_pymysql()
        # Lock waits (a table locked by another session, a row held) end a little
        # before the request's own limit, so that the cause is named.
        lock_wait = max(1, int(self.timeout_s * 0.75))
        connection = pymysql.connect(
            **self.connect_settings,
            connect_timeout=timeout_s,
            read_timeout=self.timeout_s + ANSWER_SLACK_S,
            write_timeout=self.timeout_s + ANSWER_SLACK_S,
            autocommit=False,
        )
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SET time_zone = '+00:00', lock_wait_timeout = {lock_wait}, "
                    f"innodb_lock_wait_timeout = {lock_wait}"
                )
                # Each locking read sees the latest commit (the default, REPEATABLE
                # READ, would also lock the gaps between rows).
                cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        except BaseException:
            connection.close()
            raise
        return connection

    def _is_open(self, connection: Any) -> bool:
        return bool(connection.open)

    def _descriptor(self, connection: Any) -> int:
        # Closing the connection would send ``COM_QUIT`` on the socket the parent
        # shares, which ends the parent's session.
        return int(connection._sock.fileno())

    def _errors(self) -> type[BaseException]:
        return _import_pymysql().Error  # type: ignore[no-any-return]

    def _translate(self, error: BaseException, doing: str) -> CoordinationError:
        return _translate(error, doing)

    def _broken(self, error: BaseException) -> bool:
        return _broken(error)


@dataclass(frozen=True)
class _Row:
    """A row of the claims table as a look or a write reads it."""

    cluster: int
    number: int
    token: str | None
    since_ms: int | None
    expires_ms: int | None
    lease_ms: int | None
    ceiling_ms: int | None
    renewed_ms: int | None
    released_ms: int | None
    mark_holder: str | None
    mark_holders: str | None
    incarnation: str | None
    written: int | None
    intact: bool
    """Whether ``written`` is its witness's: the row is as idmint wrote it."""

    def lapsed(self, now_ms: int) -> bool:
        if self.expires_ms is None or self.lease_ms is None:
            return True
        return (
            self.expires_ms < now_ms
            or self.expires_ms > now_ms + self.lease_ms + STEP_BACK_SLACK_MS
        )

    def free(self, now_ms: int) -> bool:
        return self.token is None or self.lapsed(now_ms)

    @property
    def mark(self) -> HighWaterMark | None:
        return mark_of_columns(
            self.ceiling_ms, self.renewed_ms, self.released_ms, self.mark_holder, self.mark_holders
        )

    @property
    def version(self) -> tuple[int | None, bool]:
        """What a take compares: the generation it was written in, and whether intact."""
        return (self.written, self.intact)


_ROW_COLUMNS = (
    "c.cluster, c.id, c.token, c.since_ms, c.expires_ms, c.lease_ms, c.ceiling_ms, "
    "c.renewed_ms, c.released_ms, c.mark_holder, c.mark_holders, c.incarnation, c.written, "
    "COALESCE(c.written = w.written, FALSE)"
)


def _row(values: Any) -> _Row:
    fields = list(values)
    fields[-1] = bool(fields[-1])  # intact
    return _Row(*fields)


class MysqlStore:
    """The pool's requests, each one transaction (see the module docs)."""

    def __init__(self, connection: _Connection, table: str, description: str) -> None:
        self.connection = connection
        self.table = f"`{table}`"
        self.witness = f"`{table}_witness`"
        self.run_table = f"`{table}_run`"
        self.tables = (self.table, self.witness, self.run_table)
        self.description = description

    def _run(self, doing: str, request: Callable[[Any], Any]) -> Any:
        """``request`` in a transaction, creating the tables first if they are missing."""
        return creating_if_missing(
            lambda: self.connection.run(doing, request),
            lambda cause: getattr(cause, "args", (None,))[0] == _NO_SUCH_TABLE,
            lambda: self.connection.run(f"creating {self.table}", self._create),
            "The tables are missing and this user may not create them: create them as "
            "the mysql:// driver's documentation shows, then GRANT SELECT, INSERT, "
            f"UPDATE, DELETE ON {self.table}, {self.witness} and {self.run_table} TO the "
            "URL's user",
        )

    def _create(self, cursor: Any) -> None:
        # CREATE TABLE IF NOT EXISTS: claimants starting at once find it made.
        key = "space VARCHAR(32) NOT NULL, cluster SMALLINT NOT NULL, id INT NOT NULL"
        cursor.execute(
            f"""CREATE TABLE IF NOT EXISTS {self.table} ({key},
                token VARCHAR(64), holder VARCHAR(255), since_ms BIGINT, expires_ms BIGINT,
                lease_ms INT, ceiling_ms BIGINT, renewed_ms BIGINT, released_ms BIGINT,
                mark_holder VARCHAR(255), mark_holders MEDIUMTEXT, incarnation VARCHAR(200),
                written BIGINT,
                PRIMARY KEY (space, cluster, id)) ENGINE=InnoDB"""
        )
        cursor.execute(
            f"""CREATE TABLE IF NOT EXISTS {self.witness} ({key}, written BIGINT NOT NULL,
                PRIMARY KEY (space, cluster, id)) ENGINE=InnoDB"""
        )
        cursor.execute(
            f"""CREATE TABLE IF NOT EXISTS {self.run_table} (k TINYINT NOT NULL PRIMARY KEY,
                run VARCHAR(32) NOT NULL) ENGINE=MEMORY"""
        )

    def server(self, cursor: Any) -> tuple[int, str]:
        """The server's clock (ms) and its incarnation (see the module docs)."""
        query = f"SELECT {_NOW}, @@server_id, (SELECT run FROM {self.run_table} WHERE k = 1)"
        cursor.execute(query)
        now, server_id, run = cursor.fetchone()
        if run is None:
            # The first request since the server started: this run's value.
            cursor.execute(
                f"INSERT IGNORE INTO {self.run_table} (k, run) VALUES (1, %s)", (uuid.uuid4().hex,)
            )
            cursor.execute(query)
            now, server_id, run = cursor.fetchone()
        return int(now), f"{server_id}.{run}"

    def _rows(self, cursor: Any, space: Space, where: str, parameters: tuple[Any, ...]) -> Any:
        cursor.execute(
            f"""SELECT {_ROW_COLUMNS} FROM {self.table} c LEFT JOIN {self.witness} w
                  ON w.space = c.space AND w.cluster = c.cluster AND w.id = c.id
                WHERE c.space = %s AND {where}""",
            (space.name, *parameters),
        )
        return [_row(values) for values in cursor.fetchall()]

    def look(
        self, space: Space, cluster: int, pool: range, *, start: int, want: int | None
    ) -> Look:
        def request(cursor: Any) -> tuple[int, str, list[_Row], int]:
            now, incarnation = self.server(cursor)
            where = (
                "((c.cluster = -1 AND c.id = -1) OR (c.cluster = %s AND c.id BETWEEN %s AND %s))"
            )
            rows = self._rows(cursor, space, where, (cluster, pool.start, pool.stop - 1))
            # A row idmint wrote that is gone (deleted, or a restore from before it was
            # made) leaves its witness behind.
            cursor.execute(
                f"""SELECT COUNT(*) FROM {self.witness} w LEFT JOIN {self.table} c
                      ON c.space = w.space AND c.cluster = w.cluster AND c.id = w.id
                    WHERE w.space = %s AND c.id IS NULL
                      AND w.cluster = %s AND w.id BETWEEN %s AND %s""",
                (space.name, cluster, pool.start, pool.stop - 1),
            )
            (orphans,) = cursor.fetchone()
            return now, incarnation, rows, int(orphans)

        now, incarnation, rows, orphans = self._run("looking for a free ID", request)
        by_id = {row.number: row for row in rows if row.cluster == cluster}
        record_row = next((row for row in rows if row.cluster == -1), None)
        record = None
        if record_row is not None and record_row.intact and not orphans:
            record = PoolRecord.read(
                record_row.incarnation, record_row.since_ms, record_row.lease_ms
            )
        free = []
        order = [*range(start, pool.stop), *range(pool.start, start)]
        for number in order:
            row = by_id.get(number)
            if row is not None and not row.free(now):
                continue
            if row is not None and not row.intact:
                # Written back by something else (a restore): the pool's memory is in
                # doubt from now on, not only this identity's.
                record = None
            mark = row.mark if row is not None else None
            free.append(
                Free(
                    cluster=cluster,
                    number=number,
                    mark=mark,
                    mark_incarnation=row.incarnation if row and row.intact and mark else None,
                    version=row.version if row is not None else None,
                )
            )
            if want is not None and len(free) >= want:
                break
        record_version = record_row.version if record_row is not None else None
        return Look(incarnation, record, record_version, free)

    def _advance(self, cursor: Any, space: Space) -> int:
        """The pool's next generation, its row locked until the transaction ends."""
        cursor.execute(
            f"""INSERT INTO {self.witness} (space, cluster, id, written)
                VALUES (%s, {GENERATION_ID}, {GENERATION_ID}, LAST_INSERT_ID(1))
                ON DUPLICATE KEY UPDATE written = LAST_INSERT_ID(written + 1)""",
            (space.name,),
        )
        return int(cursor.lastrowid)

    def _write(
        self,
        cursor: Any,
        space: Space,
        identity: tuple[int, int],
        generation: int,
        values: dict[str, Any],
    ) -> None:
        """Write ``values`` into the row (made if missing), and its witness."""
        cluster, number = identity
        names = list(values)
        cursor.execute(
            f"""INSERT INTO {self.table} (space, cluster, id, {", ".join(names)}, written)
                VALUES (%s, %s, %s, {", ".join(["%s"] * len(names))}, %s)
                ON DUPLICATE KEY UPDATE {", ".join(f"{n} = VALUES({n})" for n in names)},
                    written = VALUES(written)""",
            (space.name, cluster, number, *values.values(), generation),
        )
        cursor.execute(
            f"""INSERT INTO {self.witness} (space, cluster, id, written) VALUES (%s, %s, %s, %s)
                ON DUPLICATE KEY UPDATE written = VALUES(written)""",
            (space.name, cluster, number, generation),
        )

    def _vouch_for_all(self, cursor: Any, space: Space, generation: int) -> None:
        """A new epoch: the table as it is now is what the witness vouches for (no
        mark written before is proven in it), so that what made the old epoch end
        does not end the new one too."""
        cursor.execute(
            f"UPDATE {self.table} SET written = %s WHERE space = %s", (generation, space.name)
        )
        cursor.execute(
            f"DELETE FROM {self.witness} WHERE space = %s AND cluster <> {GENERATION_ID}",
            (space.name,),
        )
        cursor.execute(
            f"""INSERT INTO {self.witness} (space, cluster, id, written)
                SELECT space, cluster, id, written FROM {self.table} WHERE space = %s""",
            (space.name,),
        )

    def _locked_row(self, cursor: Any, space: Space, cluster: int, number: int) -> _Row | None:
        rows = self._rows(
            cursor, space, "c.cluster = %s AND c.id = %s FOR UPDATE", (cluster, number)
        )
        return rows[0] if rows else None

    def take(self, space: Space, attempt: Take) -> int | None:
        free = attempt.free
        record = attempt.record

        def request(cursor: Any) -> int | None:
            generation = self._advance(cursor, space)
            now, incarnation = self.server(cursor)
            if incarnation != attempt.incarnation:
                return None
            row = self._locked_row(cursor, space, free.cluster, free.number)
            if row is not None and row.token == attempt.token:
                return generation  # an earlier send of this take landed
            if row is not None and not row.free(now):
                return None
            if (row.version if row is not None else None) != free.version:
                return None
            record_row = self._locked_row(cursor, space, -1, -1)
            if (record_row.version if record_row else None) != attempt.record_version:
                return None  # another claimant wrote the record, or it was written back
            if record is not None:
                self._vouch_for_all(cursor, space, generation)
                self._write(
                    cursor,
                    space,
                    (-1, -1),
                    generation,
                    {
                        "incarnation": record.incarnation,
                        "since_ms": record.since_ms,
                        "lease_ms": record.max_ttl_ms,
                    },
                )
            elif record_row is None or not record_row.intact:
                return None
            self._write(
                cursor,
                space,
                (free.cluster, free.number),
                generation,
                {
                    "token": attempt.token,
                    "holder": attempt.holder,
                    "since_ms": attempt.since_ms,
                    "expires_ms": now + attempt.ttl_ms,
                    "lease_ms": attempt.ttl_ms,
                    **columns_of_mark(attempt.mark),
                    "incarnation": attempt.stamp,
                },
            )
            return generation

        taken: int | None = self._run(f"claiming {space} ID {free.number}", request)
        if taken is None:
            return None
        return taken

    def _stamp(self, cursor: Any, space: Space, incarnation: str) -> str | None:
        """The pool's incarnation, for a mark written now: the record's, if the store
        can vouch for it (else None: a mark nobody can prove current)."""
        record_row = self._locked_row(cursor, space, -1, -1)
        if record_row is None or not record_row.intact or record_row.incarnation is None:
            return None
        if not record_row.incarnation.startswith(f"{incarnation}/"):
            return None
        return record_row.incarnation

    def _on_lease(
        self, doing: str, lease: Lease, seen: int, write: Callable[[Any, int, int, str], None]
    ) -> int | None:
        """``write(cursor, generation, now, incarnation)`` on ``lease`` if it carries our
        token: the pool's generation, or None. A generation below ``seen`` (the one
        our last write saw) was taken back (a restore): the record goes in doubt."""

        def request(cursor: Any) -> int | None:
            generation = self._advance(cursor, lease.space)
            if generation <= seen:
                cursor.execute(
                    f"DELETE FROM {self.witness} WHERE space = %s AND cluster = -1 AND id = -1",
                    (lease.space.name,),
                )
            now, incarnation = self.server(cursor)
            row = self._locked_row(cursor, lease.space, lease.cluster, lease.number)
            if row is None or row.token != lease.token:
                return None
            write(cursor, generation, now, incarnation)
            return generation

        answer: int | None = self._run(f"{doing} the claim", request)
        return answer

    def renew(self, lease: Lease, ttl_ms: int, mark: HighWaterMark, generation: int) -> int | None:
        def write(cursor: Any, written: int, now: int, incarnation: str) -> None:
            self._write(
                cursor,
                lease.space,
                (lease.cluster, lease.number),
                written,
                {
                    "expires_ms": now + ttl_ms,
                    "lease_ms": ttl_ms,
                    **columns_of_mark(mark),
                    "incarnation": self._stamp(cursor, lease.space, incarnation),
                },
            )

        return self._on_lease("renewing", lease, generation, write)

    def release(self, lease: Lease, mark: HighWaterMark | None, generation: int) -> None:
        def write(cursor: Any, written: int, now: int, incarnation: str) -> None:
            values: dict[str, Any] = {"token": None, "holder": None, "expires_ms": None}
            if mark is not None:
                values.update(
                    columns_of_mark(mark),
                    incarnation=self._stamp(cursor, lease.space, incarnation),
                )
            self._write(cursor, lease.space, (lease.cluster, lease.number), written, values)

        self._on_lease("releasing", lease, generation, write)

    def read_mark(self, space: Space, cluster: int, number: int) -> HighWaterMark | None:
        def request(cursor: Any) -> list[_Row]:
            rows: list[_Row] = self._rows(
                cursor, space, "c.cluster = %s AND c.id = %s", (cluster, number)
            )
            return rows

        rows: list[_Row] = self._run("reading a high-water mark", request)
        return rows[0].mark if rows else None

    def list_claims(self) -> list[ClaimInfo]:
        def request(cursor: Any) -> tuple[int, list[Any]]:
            cursor.execute(f"SELECT {_NOW}")
            (now,) = cursor.fetchone()
            cursor.execute(
                f"""SELECT space, cluster, id, holder, since_ms, ceiling_ms, expires_ms, lease_ms
                      FROM {self.table} WHERE id >= 0 AND token IS NOT NULL"""
            )
            return int(now), list(cursor.fetchall())

        now, rows = self._run("listing the claims", request)
        return in_pool_order(
            (space, cluster, number, holder, since, ceiling)
            for space, cluster, number, holder, since, ceiling, expires, lease in rows
            if expires is not None
            and lease is not None
            and not (expires < now or expires > now + lease + STEP_BACK_SLACK_MS)
        )


class MysqlCoordinator(SqlLeaseCoordinator):
    """A MySQL or MariaDB table used as a pool of generator IDs (see the module docs)."""

    store: MysqlStore
    options_type = MysqlOptions

    def __init__(self, url: CoordinatorUrl) -> None:
        options = self._take_url(url, MysqlOptions)
        host, port = self._one_server(
            url, DEFAULT_PORT, refusal="give one MySQL server (host[:port])"
        )
        database = unquote(url.path.strip("/"))
        if not database or "/" in database:
            raise ConfigurationError(
                f"{self.url}: give the database the tables live in as the URL's path "
                f"({url.scheme}://user:password@host/DATABASE)"
            )
        self.table = options.table
        self.ttl_s, self.max_ttl_s = options.ttl_s, options.max_ttl_s
        self.description = f"{url.scheme}://{host}:{port}/{database} {self.table}"
        settings: dict[str, Any] = {
            "host": host,
            "port": port,
            "user": url.username or None,
            "password": url.password or "",
            "database": database,
            "charset": "utf8mb4",
        }
        context = options.context(url, "")
        if context is not None:
            settings["ssl"] = context
        elif options.tls is False:
            # Without it, PyMySQL 2 tries TLS it does not verify (as libpq's
            # sslmode=prefer does), which MySQL 8's caching_sha2_password needs
            # unless the cryptography package is installed; its context costs
            # ~0.1 s of CPU per connection.
            settings["ssl_disabled"] = True
        # The process's connection for these settings (the password only as a digest).
        key_settings = {**settings, "ssl": repr(sorted(vars(options).items()))}
        self._connection = self._take_connection(
            hashlib.sha256(repr(sorted(key_settings.items())).encode()).hexdigest(),
            lambda: _Connection(settings, self.description, options.timeout_s),
            options.connect_timeout_s,
        )
        self.store = MysqlStore(self._connection, self.table, self.description)

    @classmethod
    def pool_within(cls, url: CoordinatorUrl, name: str) -> CoordinatorUrl:
        # Room for the companions' suffixes within MySQL's 64 characters.
        table = MysqlOptions.from_url(url).table[: 55 - len(name)]
        return url.replace(options={**url.options, **MysqlOptions.query(table=f"{table}_{name}")})


_NO_SUCH_TABLE = 1146

_REFUSED_CODES = {
    1044: "check the database in the URL and the user's grants on it",  # db access denied
    1045: "check the user and password in the URL",  # access denied
    1049: "check the database in the URL",  # unknown database
    1142: "check the user's grants on the tables",  # command denied on a table
    1227: "check the user's privileges",  # needs a privilege
    1698: "check the user and password in the URL",  # access denied (no password)
}

_LOCK_WAIT = 1205
_DEADLOCK = 1213
_OUTAGE_CODES = (1040, 1053, 1290, 1836, 1927, 2002, 2003, 2006, 2013, 2055)
"""Too many connections, shutting down, read-only (a replica), killed, cannot
connect, gone away, lost."""

_BROKEN_CODES = (1053, 1927, 2002, 2003, 2006, 2013, 2055)


def _code(error: BaseException) -> int | None:
    args = getattr(error, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def _broken(error: BaseException) -> bool:
    """Whether the connection cannot be trusted after ``error`` (it is made again)."""
    pymysql = _import_pymysql()
    return _code(error) in _BROKEN_CODES or isinstance(error, pymysql.err.InterfaceError)


def _translate(error: BaseException, doing: str) -> CoordinationError:
    """A PyMySQL error as the idmint error a caller can act on, by its error code.

    Credentials, grants, an unknown database and TLS are a refusal; a lock
    waited for too long, a connection that cannot be made or broke, a server
    shutting down, a read-only replica, an outage; anything else a
    :class:`CoordinationError` carrying the cause.
    """
    pymysql = _import_pymysql()
    code = _code(error)
    message = first_line(error)
    if code in _REFUSED_CODES:
        return CoordinatorRefused(f"{doing}: MySQL refused us ({message}); {_REFUSED_CODES[code]}")
    cause = error.__cause__ or error.__context__
    if isinstance(cause, ssl.SSLError) or "SSL" in message:
        return CoordinatorRefused(f"{doing}: the TLS handshake failed ({message}); {TLS_ADVICE}")
    if code == _LOCK_WAIT:
        return CoordinatorUnavailable(
            f"{doing}: another session holds a lock on the table ({message}); SHOW "
            "PROCESSLIST shows which (LOCK TABLES, a long transaction)"
        )
    if code == _DEADLOCK:
        # The server rolled the transaction back: nothing of it was written, and the
        # request is sent again (a look, a take) or the renewal after it comes.
        return CoordinatorUnavailable(f"{doing}: {message}")
    if code in _OUTAGE_CODES or isinstance(error, pymysql.err.InterfaceError):
        return CoordinatorUnavailable(f"{doing}: {message}")
    return CoordinationError(f"{doing}: MySQL said {message} (error {code or '-'})")
