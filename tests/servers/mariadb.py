"""A MariaDB server for the mysql:// driver's tests and benchmarks.

:class:`MariaDbServer` runs Debian's MariaDB (package ``mariadb-server``:
``mariadbd`` and ``mariadb-install-db``) in a fresh data directory, listening on a
free port of 127.0.0.1 only::

    server = MariaDbServer(tmp_path)
    server.start()
    url = server.url("orders")          # mysql://idmint:<password>@127.0.0.1:PORT/orders
    server.sql("SELECT 1")              # as root
    server.stop()

``root`` logs in without a password over TCP (the harness's own administration);
the driver's tests use the user ``idmint``, whose password (:attr:`password`) the
server asks for: a wrong one is refused as a real deployment refuses it. With
``tls=True`` it also serves TLS, from a private CA (``trustme``,
:attr:`MariaDbServer.ca_path`), to clients that ask for it, and :data:`TLS_USER`
(the same password) is let in only over TLS (``REQUIRE SSL``), :data:`X509_USER` only
with a client certificate the CA signed (``REQUIRE X509``). Without ``tls`` the
driver's default (PyMySQL's unverified TLS attempt) finds no TLS to try. The server
runs as root (``--user=root``), in its own temporary directory. It is tuned for
tests: the log flushed once a second, no binary log, a small buffer pool. A server
starts in about two seconds.
"""

from __future__ import annotations

import atexit
import re
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from . import ServerError, ServerProcess, SingleServer, issue_server_certificate
from .ports import LOOPBACK, free_port

__all__ = ["TLS_USER", "USER", "X509_USER", "MariaDbServer"]

USER = "idmint"
"""The user the driver's tests connect as (password: :attr:`MariaDbServer.password`)."""
TLS_USER = "idmint_tls"
"""A user as :data:`USER` whom the server lets in only over TLS."""
X509_USER = "idmint_x509"
"""A user as :data:`USER` whom the server lets in only with a client certificate its CA
signed (:attr:`MariaDbServer.client_cert_path`)."""


class MariaDbServer(SingleServer):
    """One MariaDB server on 127.0.0.1 with a data directory of its own."""

    kind = "MariaDB"

    database = "idmint"
    """A database made at the first start, which :data:`USER` may use."""

    def __init__(self, tmpdir: Path | str, *, port: int | None = None, tls: bool = False) -> None:
        self.tmpdir = Path(tmpdir)
        self.tls = tls
        self.port = port or free_port()
        self.password = secrets.token_urlsafe(12)
        self._data_parent: Path | None = None
        self.process = ServerProcess("mariadbd", ["mariadbd"], log_path=self.tmpdir / "mariadb.log")
        self._databases: set[str] = set()

    def url(self, database: str = "idmint", scheme: str = "mysql", **options: object) -> str:
        """The driver's URL for ``database`` (made if missing), as :data:`USER`."""
        self.create_database(database)
        query = "&".join(f"{name}={value}" for name, value in options.items())
        return f"{scheme}://{USER}:{self.password}@{LOOPBACK}:{self.port}/{database}" + (
            f"?{query}" if query else ""
        )

    @property
    def ca_path(self) -> Path:
        """PEM of the CA that signed the server's certificate (``tls``; made at the first start)."""
        return self.tmpdir / "tls" / "ca.pem"

    @property
    def client_cert_path(self) -> Path:
        """PEM of a client certificate the server's CA signed (``tls``), for :data:`X509_USER`."""
        return self.tmpdir / "tls" / "client.pem"

    @property
    def client_key_path(self) -> Path:
        """The key of :attr:`client_cert_path`."""
        return self.tmpdir / "tls" / "client-key.pem"

    def start(self, timeout: float = 60.0) -> None:
        """Make the data directory (first time only), start the server, wait until ready."""
        if self.running:
            return
        first = self._data_parent is None
        if first:
            self._install()
        mariadbd = shutil.which("mariadbd") or shutil.which("mysqld") or "/usr/sbin/mariadbd"
        self.process.argv = [
            mariadbd,
            "--no-defaults",
            f"--datadir={self.data_dir}",
            f"--socket={self.data_dir.parent / 'mariadb.sock'}",
            f"--pid-file={self.data_dir.parent / 'mariadb.pid'}",
            f"--port={self.port}",
            f"--bind-address={LOOPBACK}",
            "--user=root",
            f"--tmpdir={self.data_dir.parent}",
            "--server-id=1",
            "--skip-name-resolve",
            "--skip-log-bin",
            "--innodb-buffer-pool-size=32M",
            "--innodb-log-file-size=16M",
            "--innodb-flush-log-at-trx-commit=2",
            "--max-connections=300",
            "--log-error",  # to stderr: the log file
            *self._tls_arguments(),
        ]
        self._start_and_wait(self._ready, timeout)
        if first:
            self.sql(
                f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{self.password}'",
                f"GRANT ALL ON *.* TO '{USER}'@'%'",
            )
            if self.tls:
                self.sql(
                    f"CREATE USER '{TLS_USER}'@'%' IDENTIFIED BY '{self.password}' REQUIRE SSL",
                    f"GRANT ALL ON *.* TO '{TLS_USER}'@'%'",
                    f"CREATE USER '{X509_USER}'@'%' IDENTIFIED BY '{self.password}' REQUIRE X509",
                    f"GRANT ALL ON *.* TO '{X509_USER}'@'%'",
                )
            self.create_database(self.database)

    def stop(self, timeout: float = 30.0) -> None:
        """A clean shutdown (``SIGTERM``)."""
        super().stop(timeout)

    def close(self) -> None:
        """Stop the server and delete its data directory."""
        self.stop()
        if self._data_parent is not None:
            shutil.rmtree(self._data_parent, ignore_errors=True)
            self._data_parent = None

    # -- administration ------------------------------------------------------------

    def connect(self, database: str | None = None, **settings: Any) -> Any:
        """A PyMySQL connection as root (autocommit)."""
        import pymysql

        return pymysql.connect(
            host=LOOPBACK,
            port=self.port,
            user="root",
            password="",
            database=database,
            autocommit=True,
            connect_timeout=5,
            **settings,
        )

    def sql(self, *statements: str, database: str | None = None) -> list[tuple[Any, ...]]:
        """Run ``statements`` as root; the rows of the last."""
        connection = self.connect(database)
        try:
            rows: list[tuple[Any, ...]] = []
            with connection.cursor() as cursor:
                for statement in statements:
                    cursor.execute(statement)
                    rows = list(cursor.fetchall())
            return rows
        finally:
            connection.close()

    def create_database(self, name: str) -> str:
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            raise ValueError(f"database name {name!r} is not a plain lower-case identifier")
        if name not in self._databases:
            self.sql(f"CREATE DATABASE IF NOT EXISTS {name}")
            self._databases.add(name)
        return name

    # -- internals -----------------------------------------------------------------

    def _install(self) -> None:
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        self._data_parent = Path(tempfile.mkdtemp(prefix="idmint-mariadb-"))
        atexit.register(self.close)
        install = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
        if install is None:
            raise ServerError(
                "no mariadb-install-db; run scripts/install-test-deps.sh (Debian package "
                "mariadb-server)"
            )
        completed = subprocess.run(
            [
                install,
                "--no-defaults",
                f"--datadir={self.data_dir}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
                f"--tmpdir={self._data_parent}",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=180,
            cwd=self._data_parent,
        )
        if completed.returncode != 0:
            raise ServerError(
                f"mariadb-install-db failed with status {completed.returncode}:\n"
                f"{completed.stdout}{completed.stderr}"
            )

    def _tls_arguments(self) -> list[str]:
        """``mariadbd``'s TLS options (none without ``tls``); certificates made on first use."""
        if not self.tls:
            return []
        cert, key = self.ca_path.parent / "server.pem", self.ca_path.parent / "server-key.pem"
        client = (self.client_cert_path, self.client_key_path)
        issue_server_certificate(self.ca_path, cert, key, "mariadb", client)
        return [f"--ssl-ca={self.ca_path}", f"--ssl-cert={cert}", f"--ssl-key={key}"]

    def _ready(self) -> bool:
        try:
            self.sql("SELECT 1")
        except Exception:
            return False
        return True
