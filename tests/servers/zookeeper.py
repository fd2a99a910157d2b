"""ZooKeeper servers for integration tests, and kazoo session helpers.

:class:`ZooKeeperEnsemble` runs one member (standalone) or several (a quorum) of the
ZooKeeper server shipped by Debian's ``libzookeeper-java`` (``/usr/share/java``), each
in its own JVM listening on 127.0.0.1 free ports::

    ensemble = ZooKeeperEnsemble(3, tmp_path)
    ensemble.start()
    client = KazooClient(hosts=ensemble.hosts)
    ...
    with ensemble.member_stopped(0):
        ...  # two of three members serve
    ensemble.stop()

:func:`expire_session` expires the session of a connected ``KazooClient`` on the
server, the way ZooKeeper's and (older) kazoo's test suites do.

The JVM is tuned for start-up time rather than throughput (serial GC, C1 only, small
heap), the transaction log is not fsync'ed and is pre-allocated in 1 MiB steps; a
standalone member serves requests about a second after it is started.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import Cluster, Member, ServerError, ServerProcess
from .ports import LOOPBACK, free_port

if TYPE_CHECKING:
    from kazoo.client import KazooClient

__all__ = [
    "DigestCredentials",
    "ZooKeeperEnsemble",
    "digest",
    "expire_session",
    "four_letter_word",
    "zookeeper_classpath",
]

JARS_DIR = Path("/usr/share/java")
"""Where Debian's ``libzookeeper-java`` and its dependencies put their jars."""

REQUIRED_JARS = (
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "slf4j-api.jar",
    "metrics-core.jar",
    "snappy-java.jar",
)
"""Jars a server needs with this harness's configuration (no admin server, NIO)."""

LOGGING_JAR = "slf4j-simple.jar"
"""SLF4J binding that sends the server log to stderr (and so to the log file)."""

JVM_OPTIONS = (
    "-Xms32m",
    "-Xmx256m",
    "-Xss512k",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-Djava.net.preferIPv4Stack=true",
    "-Dzookeeper.jmx.log4j.disable=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
)
"""JVM options: a small heap and a JIT set up for fast start-up, quiet logging."""

MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

CLASSPATH_ENV = "IDMINT_ZOOKEEPER_CLASSPATH"
"""Environment variable overriding the server classpath (``:``-separated)."""


def zookeeper_classpath(jars_dir: Path = JARS_DIR) -> str:
    """Return the classpath of a ZooKeeper server.

    ``$IDMINT_ZOOKEEPER_CLASSPATH`` wins when set. Otherwise the classpath is built
    from :data:`REQUIRED_JARS` (plus :data:`LOGGING_JAR` when present) in
    ``jars_dir``.

    :raises ServerError: if a required jar is missing (install ``libzookeeper-java``;
        see ``scripts/install-test-deps.sh``).
    """
    override = os.environ.get(CLASSPATH_ENV)
    if override:
        return override
    missing = [name for name in REQUIRED_JARS if not (jars_dir / name).is_file()]
    if missing:
        raise ServerError(
            f"ZooKeeper jars missing from {jars_dir}: {', '.join(missing)}; "
            "run scripts/install-test-deps.sh (Debian package libzookeeper-java) "
            f"or set {CLASSPATH_ENV}"
        )
    jars = [jars_dir / name for name in REQUIRED_JARS]
    if (jars_dir / LOGGING_JAR).is_file():
        jars.append(jars_dir / LOGGING_JAR)
    return os.pathsep.join(str(jar) for jar in jars)


def digest(user: str, password: str) -> str:
    """Return ZooKeeper's digest of ``user:password`` (base64 of its SHA-1)."""
    sha1 = hashlib.sha1(f"{user}:{password}".encode()).digest()
    return base64.b64encode(sha1).decode("ascii")


@dataclass(frozen=True)
class DigestCredentials:
    """A user name and password for ZooKeeper's ``digest`` authentication scheme."""

    user: str
    password: str

    @property
    def auth_data(self) -> tuple[str, str]:
        """The ``(scheme, credential)`` pair for kazoo's ``auth_data`` / ``add_auth``."""
        return ("digest", f"{self.user}:{self.password}")

    @property
    def digest_id(self) -> str:
        """``user:digest``, as used in digest ACLs and in ``superDigest``."""
        return f"{self.user}:{digest(self.user, self.password)}"


def four_letter_word(port: int, command: str = "srvr", timeout: float = 2.0) -> str | None:
    """Send a four-letter command to the server on 127.0.0.1:``port``.

    :returns: the answer, or ``None`` if the server cannot be reached.
    """
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout) as sock:
            sock.sendall(command.encode("ascii"))
            chunks: list[bytes] = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
    except OSError:
        return None
    return b"".join(chunks).decode("utf-8", errors="replace")


def _mode(answer: str | None) -> str | None:
    """Extract ``Mode:`` (standalone, leader, follower, ...) from a ``srvr`` answer."""
    if answer is None:
        return None
    for line in answer.splitlines():
        if line.startswith("Mode:"):
            return line.partition(":")[2].strip()
    return None


@dataclass
class _Member(Member):
    myid: int
    election_port: int

    @property
    def config_path(self) -> Path:
        return self.directory / "zoo.cfg"


class ZooKeeperEnsemble(Cluster[_Member]):
    """One or more ZooKeeper members on 127.0.0.1, each in its own JVM.

    Members are numbered from 0 (their ZooKeeper ``myid`` is the index plus one). The
    ensemble is not started by the constructor: call :meth:`start`.
    """

    def __init__(
        self,
        size: int,
        tmpdir: Path | str,
        *,
        enforce_auth: bool = False,
        superdigest: bool = True,
        extra_cfg: Mapping[str, str | int] | None = None,
        jvm_options: tuple[str, ...] = JVM_OPTIONS,
        classpath: str | None = None,
        java: str = "java",
        client_ports: Sequence[int] | None = None,
    ) -> None:
        """Describe an ensemble and pick its ports; nothing is started until :meth:`start`.

        :param size: number of members (1 runs a standalone server).
        :param tmpdir: directory for configurations, data and logs (``zk-<myid>/``).
        :param enforce_auth: make the servers refuse clients that have not
            authenticated with the ``digest`` scheme (ZooKeeper >= 3.7,
            ``enforce.auth.enabled``). Any ``user:password`` pair authenticates, as the
            digest scheme only names the client; see :attr:`super_credentials`.
        :param superdigest: create the super user (:attr:`super_credentials`), which
            bypasses every ACL; use it to clean up nodes with restrictive ACLs.
        :param extra_cfg: ``zoo.cfg`` entries added to, or replacing, the defaults.
        :param jvm_options: options for the JVM.
        :param classpath: server classpath (default: :func:`zookeeper_classpath`).
        :param java: the ``java`` executable.
        :param client_ports: the members' client ports (default: free ports), e.g.
            ZooKeeper's usual 2181 for ``scripts/coordinators``.
        """
        super().__init__(size, tmpdir, client_ports)
        self.enforce_auth = enforce_auth
        self.super_credentials: DigestCredentials | None = (
            DigestCredentials("super", secrets.token_urlsafe(16)) if superdigest else None
        )
        self._extra_cfg: dict[str, str] = {k: str(v) for k, v in (extra_cfg or {}).items()}
        self._jvm_options = jvm_options
        self._classpath = classpath
        self._java = java
        self._members: list[_Member] = []
        for index in range(size):
            myid = index + 1
            directory = self.tmpdir / f"zk-{myid}"
            self._members.append(
                _Member(
                    myid=myid,
                    client_port=client_ports[index] if client_ports else free_port(),
                    peer_port=free_port(),
                    election_port=free_port(),
                    directory=directory,
                    process=ServerProcess(
                        f"zookeeper-{myid}", [], log_path=directory / "zookeeper.log"
                    ),
                )
            )

    def __repr__(self) -> str:
        return f"<ZooKeeperEnsemble size={self.size} hosts={self.hosts!r}>"

    # -- addresses -----------------------------------------------------------------

    @property
    def hosts(self) -> str:
        """Connection string with every member: ``127.0.0.1:p1,127.0.0.1:p2,...``."""
        return ",".join(self.member_hosts(i) for i in range(self.size))

    def member_hosts(self, index: int) -> str:
        """Connection string of member ``index`` alone: ``127.0.0.1:port``."""
        return f"{LOOPBACK}:{self._members[index].client_port}"

    @property
    def super_auth(self) -> tuple[str, str]:
        """kazoo ``auth_data`` entry of the super user.

        :raises ServerError: if the ensemble was created with ``superdigest=False``.
        """
        if self.super_credentials is None:
            raise ServerError("this ensemble has no super user (superdigest=False)")
        return self.super_credentials.auth_data

    # -- lifecycle -----------------------------------------------------------------

    kind = "ZooKeeper"
    start_timeout = 60.0

    def start(self, timeout: float | None = None) -> None:
        """Start every member and wait until the ensemble serves (:meth:`wait_ready`)."""
        for index in range(self.size):
            if not self._members[index].process.running:
                self._launch(index)
        self.wait_ready(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every member (``SIGTERM``, then ``SIGKILL`` after ``timeout``)."""
        for member in self._members:  # signal all first: they shut down in parallel
            member.process.terminate()
        for member in self._members:
            member.process.stop(timeout)

    def _relaunch(self, index: int) -> None:
        self._launch(index)

    def configure(self, **entries: str | int) -> None:
        """Add or replace ``zoo.cfg`` entries; a member started from now on uses them
        (``maxSessionTimeout=4000``: sessions made then are granted at most 4 s)."""
        self._extra_cfg.update({key: str(value) for key, value in entries.items()})

    # -- readiness -----------------------------------------------------------------

    def mode(self, index: int, timeout: float = 0.5) -> str | None:
        """``Mode:`` reported by member ``index`` (``standalone``, ``leader``,
        ``follower``), or ``None`` when it does not serve or answer within ``timeout``.

        The timeout is short on purpose: a server probed in the very first milliseconds
        after it opened its port may accept the connection and never answer.
        """
        return _mode(four_letter_word(self._members[index].client_port, timeout=timeout))

    def leader(self) -> int | None:
        """Index of the running member that leads (or serves standalone), if any."""
        for index in range(self.size):
            if self.is_running(index) and self.mode(index) in ("leader", "standalone"):
                return index
        return None

    def serves(self, index: int) -> bool:
        """Whether member ``index`` serves clients (answers ``srvr`` with a mode)."""
        return self.mode(index) is not None

    def _ready(self, running: list[int]) -> bool:
        """Whether every member of ``running`` serves and, for a quorum, one leads."""
        modes = [self.mode(i) for i in running]
        if any(mode is None for mode in modes):
            return False
        return self.size == 1 or "leader" in modes

    # -- internals -----------------------------------------------------------------

    def _config(self, member: _Member) -> dict[str, str]:
        config = {
            "tickTime": "500",
            "initLimit": "20",
            "syncLimit": "10",
            "minSessionTimeout": "1000",
            "maxSessionTimeout": "30000",
            "dataDir": str(member.data_dir),
            "clientPort": str(member.client_port),
            "clientPortAddress": LOOPBACK,
            "maxClientCnxns": "0",
            "admin.enableServer": "false",
            "4lw.commands.whitelist": "*",
            # Test data is disposable: no fsync, no 64 MiB log pre-allocation.
            "forceSync": "no",
            "preAllocSize": "1024",
            "autopurge.purgeInterval": "0",
        }
        if self.enforce_auth:
            config["enforce.auth.enabled"] = "true"
            config["enforce.auth.schemes"] = "digest"
        if self.size > 1:
            config["standaloneEnabled"] = "false"
            config["reconfigEnabled"] = "false"
            config["quorumListenOnAllIPs"] = "false"
            config["cnxTimeout"] = "1000"
            for other in self._members:
                config[f"server.{other.myid}"] = (
                    f"{LOOPBACK}:{other.peer_port}:{other.election_port};"
                    f"{LOOPBACK}:{other.client_port}"
                )
        config.update(self._extra_cfg)
        return config

    def _write_config(self, member: _Member) -> None:
        member.data_dir.mkdir(parents=True, exist_ok=True)
        if self.size > 1:
            (member.data_dir / "myid").write_text(f"{member.myid}\n")
        lines = [f"{key}={value}" for key, value in self._config(member).items()]
        member.config_path.write_text("\n".join(lines) + "\n")

    def _launch(self, index: int) -> None:
        member = self._members[index]
        self._write_config(member)
        classpath = self._classpath or zookeeper_classpath()
        properties = []
        if self.super_credentials is not None:
            properties.append(
                "-Dzookeeper.DigestAuthenticationProvider.superDigest="
                + self.super_credentials.digest_id
            )
        member.process.argv = [
            self._java,
            *self._jvm_options,
            *properties,
            "-cp",
            classpath,
            MAIN_CLASS,
            str(member.config_path),
        ]
        member.process.cwd = member.directory
        member.process.start()


def expire_session(
    client: KazooClient,
    *,
    timeout: float = 15.0,
    wait_reconnect: bool = True,
    attempts: int = 5,
) -> None:
    """Expire the session of a connected kazoo client on the server (and by default wait
    until it has reconnected with a new one): the ZooKeeper driver's contract hook, as
    :func:`idmint.testing.adapters.expire_zookeeper_session` describes."""
    from idmint.testing.adapters import expire_zookeeper_session

    expire_zookeeper_session(
        client, timeout=timeout, wait_reconnect=wait_reconnect, attempts=attempts
    )
