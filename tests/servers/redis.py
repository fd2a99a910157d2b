"""Redis servers for the tests, benchmarks and scripts/coordinators.

:class:`RedisServer` runs Debian's ``redis-server`` (package ``redis-server``) on a
free port of 127.0.0.1, with its data in a directory of its own::

    server = RedisServer(tmp_path, persistence=True)
    server.start()
    client = server.client()          # redis-py, as the superuser
    server.restart()                  # same port; with persistence, same data
    server.stop()

``persistence=True`` keeps an append-only file written on every command
(``appendfsync always``, as a deployment that must not lose a claim runs it);
``False`` keeps nothing, as a cache does: a restart comes back empty. No RDB
snapshots either way.

``tls=True`` serves TLS only, from a private CA (``trustme``, :attr:`ca_path`), and
does not ask for client certificates. ``acl=True`` protects the default user with a
password (:attr:`admin_password`) and adds the user :data:`USER` with its own password
(:attr:`user_password`), allowed every command on keys starting with
:data:`USER_KEYS` only. ``mode="cluster"`` starts a Redis Cluster node (one node, no
slots: enough to be recognised as one) and ``mode="sentinel"`` a Sentinel.

``replica_of=primary`` starts a replica of another server (:meth:`wait_replicating`
waits for it to be in sync, :meth:`promote` makes it a primary, ``REPLICAOF NO
ONE``, the primary left running as it was); ``settings`` adds any other
``redis-server`` option (``{"min-replicas-to-write": "1"}``).

:meth:`freeze` and :meth:`thaw` send ``SIGSTOP`` and ``SIGCONT``: the server keeps its
connections but answers nothing, as a stalled VM does.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import ServerError, ServerProcess, SingleServer, issue_server_certificate, wait_until
from .ports import LOOPBACK, free_port

if TYPE_CHECKING:
    import redis

__all__ = ["USER", "USER_KEYS", "RedisCommands", "RedisServer"]

USER = "idmint"
"""The ACL user of an ``acl=True`` server."""

USER_KEYS = "idmint-"
"""The key prefix :data:`USER` may touch (``~idmint-*``)."""


class RedisServer(SingleServer):
    """One ``redis-server`` on 127.0.0.1; nothing is started by the constructor."""

    kind = "Redis"

    def __init__(
        self,
        tmpdir: Path | str,
        *,
        persistence: bool = True,
        tls: bool = False,
        acl: bool = False,
        mode: str = "standalone",
        port: int | None = None,
        replica_of: RedisServer | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        if mode not in ("standalone", "cluster", "sentinel"):
            raise ValueError(f"no Redis mode {mode!r}")
        self.tmpdir = Path(tmpdir)
        self.persistence = persistence
        self.tls = tls
        self.acl = acl
        self.mode = mode
        self.port = port or free_port()
        self.replica_of = replica_of
        self.settings = dict(settings or {})
        self.admin_password = secrets.token_urlsafe(12) if acl else None
        self.user_password = secrets.token_urlsafe(12) if acl else None
        self._ca: Any = None
        self._data_parent = self.tmpdir
        self.process = ServerProcess(
            f"redis-{self.port}", ["redis-server"], log_path=self.tmpdir / "redis.log"
        )

    # -- addresses -----------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def ca_path(self) -> Path | None:
        """PEM of the CA that signed the server's certificate (None without TLS)."""
        return self.tmpdir / "tls" / "ca.pem" if self.tls else None

    def url(self, prefix: str | None = None, *, user: bool = False, **options: object) -> str:
        """An idmint coordinator URL for this server (``redis://`` or ``rediss://``)."""
        scheme = "rediss" if self.tls else "redis"
        userinfo = ""
        if self.acl:
            userinfo = f"{USER}:{self.user_password}@" if user else f":{self.admin_password}@"
        query = dict(options)
        if prefix is not None:
            query["prefix"] = prefix
        if self.tls:
            query.setdefault("ca", str(self.ca_path))
        text = f"{scheme}://{userinfo}{self.endpoint}/0"
        if query:
            text += "?" + "&".join(f"{key}={value}" for key, value in query.items())
        return text

    # -- lifecycle -----------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Start the server (same port and data as before) and wait until it answers."""
        if self.running:
            return
        data = self.data_dir
        data.mkdir(parents=True, exist_ok=True)
        argv = ["redis-server"]
        if self.mode == "sentinel":
            # A Sentinel rewrites its configuration file: it must have one.
            config = self.tmpdir / "sentinel.conf"
            if not config.exists():
                config.write_text(f"port {self.port}\nbind {LOOPBACK}\n")
            argv += [str(config), "--sentinel"]
        port = (
            ["--port", "0", "--tls-port", str(self.port)]
            if self.tls
            else ["--port", str(self.port)]
        )
        argv += [*port, "--bind", LOOPBACK, "--dir", str(data)]
        argv += ["--daemonize", "no", "--logfile", ""]
        if self.mode != "sentinel":
            argv += ["--save", "", "--appendonly", "yes" if self.persistence else "no"]
            argv += ["--appendfsync", "always"]
        if self.replica_of is not None:
            argv += ["--replicaof", LOOPBACK, str(self.replica_of.port)]
        for name, value in self.settings.items():
            argv += [f"--{name}", value]
        if self.mode == "cluster":
            argv += ["--cluster-enabled", "yes", "--cluster-config-file", str(data / "nodes.conf")]
        if self.tls:
            files = self._tls_files()
            argv += ["--tls-cert-file", str(files["cert"]), "--tls-key-file", str(files["key"])]
            argv += ["--tls-ca-cert-file", str(files["ca"]), "--tls-auth-clients", "no"]
        if self.acl:
            acl_file = self.tmpdir / "users.acl"
            acl_file.write_text(
                f"user default on >{self.admin_password} ~* &* +@all\n"
                f"user {USER} on >{self.user_password} ~{USER_KEYS}* +@all\n"
            )
            argv += ["--aclfile", str(acl_file)]
        self.process.argv = argv
        self._start_and_wait(self.answers, timeout)

    def wait_replicating(self, timeout: float = 30.0) -> None:
        """Wait until this replica is in sync with its primary and acknowledging."""
        primary = self.replica_of
        if primary is None:
            raise ServerError(f"{self} replicates nothing")

        def in_sync() -> bool:
            link = self.info("replication").get("master_link_status")
            replicas = primary.info("replication")
            acknowledged = [
                value
                for name, value in replicas.items()
                if name.startswith("slave")
                and isinstance(value, dict)
                and value.get("port") == self.port
                and value.get("state") == "online"
            ]
            return link == "up" and bool(acknowledged) and acknowledged[0].get("lag", 99) <= 1

        wait_until(in_sync, timeout=timeout, description=f"{self} to replicate {primary}")

    def promote(self) -> None:
        """Make this replica a primary (``REPLICAOF NO ONE``); its old primary runs on."""
        with self.client() as client:
            client.replicaof("NO", "ONE")
        self.replica_of = None

    # -- clients -------------------------------------------------------------------

    def client(self, **options: Any) -> redis.Redis:
        """A redis-py client as the default user (the superuser)."""
        import redis

        settings: dict[str, Any] = {
            "host": LOOPBACK,
            "port": self.port,
            "password": self.admin_password,
            "socket_timeout": 5,
            "socket_connect_timeout": 5,
        }
        if self.tls:
            settings.update(ssl=True, ssl_ca_certs=str(self.ca_path))
        settings.update(options)
        return redis.Redis(**settings)

    def answers(self) -> bool:
        """Whether the server answers PING."""
        import redis

        try:
            with self.client(socket_timeout=1, socket_connect_timeout=1) as client:
                return bool(client.ping())
        except (redis.RedisError, OSError):
            return False

    def info(self, section: str = "server") -> dict[str, Any]:
        with self.client() as client:
            found: dict[str, Any] = client.info(section)
            return found

    def commands(self) -> RedisCommands:
        """A log of the commands clients send from now on (close it when done)."""
        return RedisCommands(self)

    def _tls_files(self) -> dict[str, Path]:
        directory = self.tmpdir / "tls"
        files = {"ca": directory / "ca.pem", "cert": directory / "server.pem"}
        files["key"] = directory / "server-key.pem"
        issue_server_certificate(files["ca"], files["cert"], files["key"], "redis")
        return files


class RedisCommands:
    """The commands clients send a Redis server, from its ``MONITOR`` stream.

    Commands that scripts run (``MONITOR`` shows them as the ``lua`` client's) are
    left out: ``INFO commandstats`` counts them as calls too. Each entry is
    redis-py's reading of a ``MONITOR`` line (``client_port``, ``command``, ...).
    """

    def __init__(self, server: RedisServer) -> None:
        self._client = server.client(socket_timeout=None)
        self._monitor = self._client.monitor().__enter__()  # type: ignore[no-untyped-call]
        self._sender = server.client()
        self._lock = threading.Lock()
        self._sent: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                command = self._monitor.next_command()
            except Exception:  # closed, or the server went away
                return
            if command["client_type"] != "lua":
                with self._lock:
                    self._sent.append(command)

    def sent(self, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Every command sent so far, once the stream has caught up with now."""
        marker = f"caught-up-{uuid.uuid4().hex}"
        self._sender.echo(marker)

        def caught_up() -> bool:
            with self._lock:
                return any(marker in command["command"] for command in self._sent)

        wait_until(caught_up, timeout=timeout, description="MONITOR to catch up", interval=0.01)
        with self._lock:
            return [c for c in self._sent if not c["command"].startswith("ECHO caught-up-")]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._monitor.connection.disconnect()
        self._client.close()
        self._sender.close()
