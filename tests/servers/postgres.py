"""A PostgreSQL server for the storage tests and benchmarks.

:class:`PostgresServer` runs Debian's PostgreSQL (package ``postgresql``, binaries in
``/usr/lib/postgresql/<version>/bin``) in a fresh data directory made by ``initdb``,
listening on a free port of 127.0.0.1 only (no Unix socket)::

    server = PostgresServer(tmp_path)
    server.start()
    engine = sqlalchemy.create_engine(server.url("postgresql+psycopg"))
    server.create_database("orders")
    ...
    server.stop()

PostgreSQL refuses to run as root. When this process is root (CI on a fresh Debian
machine), ``initdb`` and ``postgres`` run as an unprivileged user, ``nobody`` unless
``$IDMINT_POSTGRES_USER`` names another, through ``setpriv``; the data directory
then lives in its own directory under the system temporary directory (pytest's
temporary directories are private to root), owned by that user and removed when the
server is stopped or the interpreter exits.

The server trusts every local connection (``initdb --auth=trust``): the superuser is
``postgres``, without a password. ``password="..."`` makes it ask for that password
(SCRAM) over TCP instead; ``tls=True`` serves TLS with a certificate from a private CA
(``trustme``, :attr:`PostgresServer.ca_path`). ``standby_of=primary`` makes a streaming
standby of another server, from ``pg_basebackup`` (:meth:`PostgresServer.promote` makes
it a primary, the old one left running as it was). It is tuned for tests, not durability:
no fsync, no synchronous commit, no full-page writes. A server starts in one to two
seconds.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from . import ServerError, ServerProcess, SingleServer, issue_server_certificate, wait_until
from .ports import LOOPBACK, free_port

__all__ = ["FAST_SETTINGS", "PostgresServer", "postgres_bindir"]

BINDIR_ENV = "IDMINT_POSTGRES_BINDIR"
"""Environment variable naming the directory of ``initdb`` and ``postgres``."""

USER_ENV = "IDMINT_POSTGRES_USER"
"""Environment variable naming the user PostgreSQL runs as when we are root."""

DEFAULT_USER = "nobody"
"""Exists on every Debian system; owns nothing, which suits a throwaway server."""

SUPERUSER = "postgres"

FAST_SETTINGS: Mapping[str, str] = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "150",
    "shared_buffers": "64MB",
    "log_min_messages": "warning",
}
"""Server settings for tests: durability traded for speed, a small footprint."""


def postgres_bindir() -> Path:
    """Return the directory holding ``initdb`` and ``postgres``.

    ``$IDMINT_POSTGRES_BINDIR`` wins when set; otherwise the newest version under
    ``/usr/lib/postgresql`` (Debian's layout, not on ``$PATH``).

    :raises ServerError: if no PostgreSQL server is installed.
    """
    override = os.environ.get(BINDIR_ENV)
    if override:
        return Path(override)
    candidates = []
    for bindir in Path("/usr/lib/postgresql").glob("*/bin"):
        version = bindir.parent.name
        if re.fullmatch(r"\d+(\.\d+)?", version) and (bindir / "postgres").is_file():
            candidates.append((tuple(int(part) for part in version.split(".")), bindir))
    if not candidates:
        raise ServerError(
            "no PostgreSQL server under /usr/lib/postgresql; run "
            f"scripts/install-test-deps.sh (Debian package postgresql) or set {BINDIR_ENV}"
        )
    return max(candidates)[1]


class PostgresServer(SingleServer):
    """One PostgreSQL server on 127.0.0.1 with a data directory of its own.

    Nothing is started by the constructor: call :meth:`start`.
    """

    kind = "PostgreSQL"

    def __init__(
        self,
        tmpdir: Path | str,
        *,
        settings: Mapping[str, str] = FAST_SETTINGS,
        bindir: Path | None = None,
        password: str | None = None,
        tls: bool = False,
        port: int | None = None,
        standby_of: PostgresServer | None = None,
    ) -> None:
        """Describe a server.

        :param tmpdir: directory for the log file (and the data when not root).
        :param settings: ``postgres -c`` settings.
        :param bindir: where ``initdb`` and ``postgres`` are (default:
            :func:`postgres_bindir`).
        :param password: the superuser's password, asked over TCP (default: none asked).
        :param tls: serve TLS (see :attr:`ca_path`).
        :param port: the port (default: a free one).
        :param standby_of: a running server this one is a streaming standby of.
        """
        self.tmpdir = Path(tmpdir)
        self.settings = dict(settings)
        self._bindir = bindir
        self.password = password
        self.tls = tls
        self.port = port or free_port()
        self.standby_of = standby_of
        self._run_as: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            user = os.environ.get(USER_ENV, DEFAULT_USER)
            try:
                self._run_as = pwd.getpwnam(user)
            except KeyError:
                raise ServerError(
                    f"PostgreSQL cannot run as root and user {user!r} does not exist; "
                    f"set {USER_ENV} to an unprivileged user"
                ) from None
        self._data_parent: Path | None = None
        self.process = ServerProcess(
            "postgres", ["postgres"], log_path=self.tmpdir / "postgres.log"
        )
        self._databases: set[str] = {"postgres"}

    # -- addresses -----------------------------------------------------------------

    def url(self, driver: str = "postgresql+psycopg", database: str = "postgres") -> str:
        """A SQLAlchemy URL: ``postgresql+psycopg://postgres@127.0.0.1:PORT/DATABASE``."""
        userinfo = f"{SUPERUSER}:{self.password}" if self.password else SUPERUSER
        return f"{driver}://{userinfo}@{LOOPBACK}:{self.port}/{database}"

    @property
    def ca_path(self) -> Path | None:
        """PEM of the CA that signed the server's certificate (None without TLS)."""
        return self.tmpdir / "tls" / "ca.pem" if self.tls else None

    def connection_settings(self, database: str = "postgres") -> dict[str, str | int]:
        """Host, port, user and database name, as keyword arguments (libpq, Django)."""
        return {"host": LOOPBACK, "port": self.port, "user": SUPERUSER, "dbname": database}

    # -- lifecycle -----------------------------------------------------------------

    @property
    def bindir(self) -> Path:
        if self._bindir is None:
            self._bindir = postgres_bindir()
        return self._bindir

    def start(self, timeout: float = 60.0) -> None:
        """Create the data directory (first time only), start the server, wait until ready."""
        if self.running:
            return
        if self._data_parent is None:
            self._initdb()
        options: list[str] = []
        for name, value in {
            "listen_addresses": LOOPBACK,
            "port": str(self.port),
            "unix_socket_directories": "",
            **self._tls_settings(),
            **self.settings,
        }.items():
            options += ["-c", f"{name}={value}"]
        self.process.argv = [
            *self._as_server_user(),
            str(self.bindir / "postgres"),
            "-D",
            str(self.data_dir),
            *options,
        ]
        self._start_and_wait(self._ready, timeout)

    def crash(self) -> None:
        """Immediate shutdown (``SIGQUIT``: no checkpoint, crash recovery at the next start)."""
        pid = self.process.pid
        if self.running and pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGQUIT)
            wait_until(
                lambda: not self.running, timeout=30, description="PostgreSQL to stop at once"
            )
        self.process.stop()

    def stop(self, timeout: float = 10.0) -> None:
        """Fast shutdown (``SIGINT``: clients are disconnected) and wait for the exit.

        ``SIGTERM``, what :meth:`ServerProcess.stop` sends, is PostgreSQL's *smart*
        shutdown, which waits for every client to disconnect first.
        """
        self.thaw()
        pid = self.process.pid
        if self.running and pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)
            with contextlib.suppress(TimeoutError):
                wait_until(
                    lambda: not self.running,
                    timeout=timeout,
                    description="PostgreSQL to shut down",
                )
        super().stop(timeout)

    def close(self) -> None:
        """Stop the server and delete its data directory."""
        self.stop()
        self._remove_data()

    # -- administration ------------------------------------------------------------

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run ``sql`` with ``psql`` and return its unaligned, tuples-only output."""
        completed = subprocess.run(
            [
                str(self.bindir / "psql"),
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                LOOPBACK,
                "-p",
                str(self.port),
                "-U",
                SUPERUSER,
                "-d",
                database,
                "-c",
                sql,
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
            env={**os.environ, "PGPASSWORD": self.password or "", "PGSSLMODE": "prefer"},
        )
        if completed.returncode != 0:
            raise ServerError(f"psql {sql!r} failed: {completed.stderr.strip()}")
        return completed.stdout

    def create_database(self, name: str) -> str:
        """Create database ``name`` (a plain identifier) if needed and return its name."""
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            raise ValueError(f"database name {name!r} is not a plain lower-case identifier")
        if name not in self._databases:
            self.psql(f"CREATE DATABASE {name}")
            self._databases.add(name)
        return name

    # -- internals -----------------------------------------------------------------

    def _as_server_user(self) -> list[str]:
        """The argv prefix running a command as the server's user.

        Changing user clears the parent-death signal that :class:`ServerProcess` sets,
        so it is set again after the change.
        """
        if self._run_as is None:
            return []
        return [
            "setpriv",
            f"--reuid={self._run_as.pw_uid}",
            f"--regid={self._run_as.pw_gid}",
            "--clear-groups",
            "--",
            "setpriv",
            "--pdeathsig",
            "KILL",
            "--",
        ]

    def promote(self) -> None:
        """Make this standby a primary; the server it followed runs on as it was."""
        self.psql("SELECT pg_promote()")
        self.standby_of = None

    def _initdb(self) -> None:
        if self.standby_of is not None:
            self._base_backup(self.standby_of)
            return
        parent = self._new_data_parent()
        authentication = ["--auth=trust"]
        if self.password:
            password_file = parent / "password"
            password_file.write_text(self.password + "\n")
            if self._run_as is not None:
                os.chown(password_file, self._run_as.pw_uid, self._run_as.pw_gid)
            authentication = [
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                f"--pwfile={password_file}",
            ]
        self._run_as_server_user(
            "initdb",
            "-D",
            str(self.data_dir),
            "-U",
            SUPERUSER,
            *authentication,
            "--encoding=UTF8",
            "--no-locale",
            "--no-sync",
            cwd=parent,
        )

    def _base_backup(self, primary: PostgresServer) -> None:
        """The data directory as a streaming standby of ``primary`` (``pg_basebackup -R``)."""
        parent = self._new_data_parent()
        self._run_as_server_user(
            "pg_basebackup",
            "-h",
            LOOPBACK,
            "-p",
            str(primary.port),
            "-U",
            SUPERUSER,
            "-D",
            str(self.data_dir),
            "-R",
            "-X",
            "stream",
            "--checkpoint=fast",  # a spread checkpoint holds the copy up for minutes
            "--no-sync",
            cwd=parent,
            env={**os.environ, "PGPASSWORD": primary.password or ""},
        )

    def _run_as_server_user(
        self, program: str, *args: str, cwd: Path, env: Mapping[str, str] | None = None
    ) -> None:
        """Run one of PostgreSQL's programs as the server's user; ServerError if it fails.

        ``cwd``: the program changes into no directory of its own, and root's may be
        unreadable to the server's user.
        """
        completed = subprocess.run(
            [*self._as_server_user(), str(self.bindir / program), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
            cwd=cwd,
            env=env,
        )
        if completed.returncode != 0:
            raise ServerError(
                f"{program} failed with status {completed.returncode}:\n"
                f"{completed.stdout}{completed.stderr}"
            )

    def _new_data_parent(self) -> Path:
        """A new directory for the data directory, removed when the server is closed."""
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        if self._run_as is None:
            parent = Path(tempfile.mkdtemp(prefix="postgres-", dir=self.tmpdir))
        else:
            # pytest's temporary directories are private to root: the server's user
            # could not reach a data directory inside them.
            parent = Path(tempfile.mkdtemp(prefix="idmint-postgres-"))
            parent.chmod(0o755)
            os.chown(parent, self._run_as.pw_uid, self._run_as.pw_gid)
        self._data_parent = parent
        # Registered after the ServerProcess exit hook, so it runs before it (LIFO):
        # a fast shutdown first, then the data directory goes.
        atexit.register(self.close)
        return parent

    def _tls_settings(self) -> dict[str, str]:
        """The ``ssl`` settings (certificates made on first use), or none without TLS."""
        if not self.tls or self._data_parent is None:
            return {}
        directory = self._data_parent / "tls"
        cert, key = directory / "server.pem", directory / "server-key.pem"
        if not cert.exists():
            assert self.ca_path is not None
            issue_server_certificate(self.ca_path, cert, key, "postgres")
            if self._run_as is not None:
                for path in (directory, cert, key):
                    os.chown(path, self._run_as.pw_uid, self._run_as.pw_gid)
        return {"ssl": "on", "ssl_cert_file": str(cert), "ssl_key_file": str(key)}

    def _ready(self) -> bool:
        completed = subprocess.run(
            [
                str(self.bindir / "pg_isready"),
                "-q",
                *("-h", LOOPBACK, "-p", str(self.port), "-U", SUPERUSER, "-d", "postgres"),
            ],
            check=False,
            timeout=30,
        )
        return completed.returncode == 0

    def _remove_data(self) -> None:
        if self.running or self._data_parent is None:
            return
        shutil.rmtree(self._data_parent, ignore_errors=True)
        self._data_parent = None
