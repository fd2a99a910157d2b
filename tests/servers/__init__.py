"""Real ZooKeeper, etcd, PostgreSQL, Redis and MariaDB servers for idmint's tests.

* :mod:`tests.servers.ports` hands out free TCP ports on 127.0.0.1;
* :mod:`tests.servers.zookeeper` runs ZooKeeper members (``ZooKeeperEnsemble``) and
  expires kazoo sessions on demand (``expire_session``);
* :mod:`tests.servers.etcd` runs etcd members (``EtcdCluster``), optionally with TLS
  and authentication;
* :mod:`tests.servers.postgres`, :mod:`tests.servers.redis` and
  :mod:`tests.servers.mariadb` run one server each;
* :mod:`tests.servers.fixtures` gives them to the tests, one of each per session.

This module holds what they share: :class:`ServerProcess`, one server OS process
started in its own process group with its output in a log file,
:func:`wait_until`, the polling loop used for readiness checks,
:class:`SingleServer`, the lifecycle of a server of one process (PostgreSQL, Redis,
MariaDB), and :class:`Cluster`, that of a cluster of members (ZooKeeper, etcd).

Every process started through :class:`ServerProcess` is killed when the interpreter
exits (``atexit``), whatever state the tests left it in. On Linux the process is also
started under ``setpriv --pdeathsig KILL`` when that is available, so that it dies with
the test runner even when the runner itself is killed and ``atexit`` never runs.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Generic, TypeVar

from idmint.testing.minting import wait_for

from .ports import LOOPBACK

__all__ = [
    "Cluster",
    "Member",
    "ServerError",
    "ServerProcess",
    "SingleServer",
    "issue_server_certificate",
    "wait_until",
]


class ServerError(RuntimeError):
    """A test server could not be started or did not become ready."""


_live: set[ServerProcess] = set()
_live_lock = threading.Lock()


def _pdeathsig_prefix() -> list[str]:
    """Return the argv prefix that makes the child die with this process, if any.

    ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child exits, so it is
    only used for processes started from the main thread, which lives as long as the
    interpreter.
    """
    if not sys.platform.startswith("linux"):
        return []
    if threading.current_thread() is not threading.main_thread():
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return []
    return [setpriv, "--pdeathsig", "KILL", "--"]


class ServerProcess:
    """One server process, in its own process group, logging to a file.

    The process is started by :meth:`start`, can be stopped and started again any
    number of times (the log file is appended to), and is killed at interpreter exit if
    it is still running then.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Describe a process; nothing is started until :meth:`start`.

        :param name: a short name used in error messages (``"zookeeper-1"``).
        :param argv: the command line.
        :param log_path: file receiving the process's stdout and stderr.
        :param cwd: working directory (default: the current one).
        :param env: extra environment variables, added to this process's environment.
        """
        self.name = name
        self.argv: list[str] = list(argv)
        self.log_path = log_path
        self.cwd = cwd
        self.env: dict[str, str] = dict(env or {})
        self._popen: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<ServerProcess {self.name} pid={self.pid} {state}>"

    @property
    def pid(self) -> int | None:
        """The process id of the last started process, or ``None`` if never started."""
        return self._popen.pid if self._popen is not None else None

    @property
    def running(self) -> bool:
        """Whether the process has been started and has not exited."""
        return self._popen is not None and self._popen.poll() is None

    @property
    def returncode(self) -> int | None:
        """Exit status of the last started process; ``None`` while it runs."""
        return self._popen.poll() if self._popen is not None else None

    def start(self) -> None:
        """Start the process in a new session (and so a new process group)."""
        if self.running:
            raise ServerError(f"{self.name} is already running (pid {self.pid})")
        if not self.argv or shutil.which(self.argv[0]) is None:
            raise ServerError(
                f"{self.name}: executable {self.argv[:1]} not found; "
                "install the test servers with scripts/install-test-deps.sh"
            )
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._close_log()
        self._log = self.log_path.open("ab")
        env = {**os.environ, **self.env}
        with _live_lock:
            self._popen = subprocess.Popen(
                [*_pdeathsig_prefix(), *self.argv],
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                env=env,
                start_new_session=True,
            )
            _live.add(self)

    def terminate(self) -> None:
        """Send ``SIGTERM`` to the process group without waiting (see :meth:`stop`)."""
        popen = self._popen
        if popen is not None and popen.poll() is None:
            _killpg(popen.pid, signal.SIGTERM)

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate the process group, wait, and kill it if it lingers past ``timeout``."""
        self._signal_and_wait(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """Kill the process group at once (``SIGKILL``) and reap the process."""
        self._signal_and_wait(signal.SIGKILL, 10.0)

    def check_alive(self) -> None:
        """Raise :class:`ServerError`, with the end of the log, if the process has exited."""
        code = self.returncode
        if self._popen is not None and code is not None:
            raise ServerError(
                f"{self.name} exited with status {code}; end of {self.log_path}:\n"
                + self.log_tail()
            )

    def log_tail(self, max_lines: int = 30) -> str:
        """Return the last ``max_lines`` lines of the log file (for error messages)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-max_lines:])

    def _signal_and_wait(self, sig: signal.Signals, timeout: float) -> None:
        popen = self._popen
        if popen is not None and popen.poll() is None:
            _killpg(popen.pid, sig)
            try:
                popen.wait(timeout)
            except subprocess.TimeoutExpired:
                _killpg(popen.pid, signal.SIGKILL)
                popen.wait()
        with _live_lock:
            _live.discard(self)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def _killpg(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


@atexit.register
def _terminate_all() -> None:
    """Stop every process still running when the interpreter exits."""
    with _live_lock:
        processes = list(_live)
    # Signal them all first so that they shut down in parallel, then reap each.
    for process in processes:
        process.terminate()
    for process in processes:
        process.stop(timeout=5.0)


def issue_server_certificate(
    ca_path: Path,
    cert_path: Path,
    key_path: Path,
    name: str,
    client: tuple[Path, Path] | None = None,
) -> None:
    """A throw-away CA (its PEM at ``ca_path``) and a certificate it signed for
    127.0.0.1 and localhost (``cert_path``; its key, readable by its owner only, at
    ``key_path``): a TLS test server's, made once (nothing is done if it exists).
    ``client``: where a client certificate the same CA signed goes, and its key."""
    if cert_path.exists():
        return
    try:
        import trustme
    except ImportError as error:  # pragma: no cover - a test dependency
        raise ServerError("TLS test servers need trustme (the test extra)") from error
    for path in (ca_path, cert_path, key_path):
        path.parent.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="idmint tests")
    issued = ca.issue_cert(LOOPBACK, "localhost", common_name=name)
    ca.cert_pem.write_to_path(str(ca_path))
    issued.private_key_pem.write_to_path(str(key_path))
    cert_path.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
    key_path.chmod(0o600)
    if client is not None:
        client_cert, client_key = client
        issued = ca.issue_cert("client.idmint.test", common_name=f"{name} client")
        issued.private_key_pem.write_to_path(str(client_key))
        client_cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
        client_key.chmod(0o600)


def wait_until(
    predicate: Callable[[], bool],
    *,
    timeout: float,
    description: str,
    interval: float = 0.05,
    check: Callable[[], None] | None = None,
) -> None:
    """Poll ``predicate`` until it returns true or ``timeout`` seconds have passed.

    The driver kit's :func:`idmint.testing.wait_for` with the harness's longer
    default poll. Use it only when there is nothing to wait on (a server's port,
    a remote state); prefer events when the condition is signalled.

    :param check: called before every poll to fail fast (for example
        :meth:`ServerProcess.check_alive`); its exceptions propagate.
    :raises TimeoutError: naming ``description``, if the condition is still false
        after ``timeout``.
    """
    wait_for(predicate, timeout=timeout, what=description, check=check, interval=interval)


class SingleServer:
    """A server of one process on 127.0.0.1 (PostgreSQL, Redis, MariaDB): what stops,
    kills, freezes and thaws it, whatever the server.

    A subclass sets :attr:`port`, :attr:`process` and :attr:`kind`, and writes
    :meth:`start`, which builds the command line and calls :meth:`_start_and_wait`.
    Its data directory (:attr:`data_dir`) is ``data`` in :attr:`_data_parent`.
    """

    kind: str
    """The server's name in messages (``"PostgreSQL"``)."""

    port: int
    process: ServerProcess
    _data_parent: Path | None = None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<{type(self).__name__} {LOOPBACK}:{self.port} {state}>"

    @property
    def host(self) -> str:
        return LOOPBACK

    @property
    def running(self) -> bool:
        return self.process.running

    @property
    def data_dir(self) -> Path:
        if self._data_parent is None:
            raise ServerError("the server has no data directory before start()")
        return self._data_parent / "data"

    def start(self, timeout: float = 60.0) -> None:
        """Start the server (same port and data as before) and wait until it answers."""
        raise NotImplementedError

    def _start_and_wait(self, ready: Callable[[], bool], timeout: float) -> None:
        """Start :attr:`process` (its argv set) and wait until ``ready()``."""
        self.process.start()
        wait_until(
            ready,
            timeout=timeout,
            description=f"{self.kind} on {LOOPBACK}:{self.port}",
            check=self.process.check_alive,
        )

    def stop(self, timeout: float = 10.0) -> None:
        """A clean shutdown (``SIGTERM``), thawed first; ``SIGKILL`` after ``timeout``."""
        self.thaw()
        self.process.stop(timeout)

    def kill(self) -> None:
        """``SIGKILL``: no shutdown, as a crash; recovery (if any) at the next start.

        Not thawed first: ``SIGKILL`` ends a stopped process too, and a frozen server
        must not answer again before it dies.
        """
        self.process.kill()

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop the server for good (a subclass also deletes data kept outside ``tmpdir``)."""
        self.stop()

    def freeze(self) -> None:
        """``SIGSTOP`` to the server's process group: connections stay, nothing answers,
        as a stalled VM does."""
        self._signal_group(signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal_group(signal.SIGCONT)

    def _signal_group(self, signum: signal.Signals) -> None:
        pid = self.process.pid
        if self.running and pid is not None:
            _killpg(pid, signum)


@dataclass
class Member:
    """One member of a :class:`Cluster`: its ports, its directory and its process."""

    client_port: int
    peer_port: int
    directory: Path
    process: ServerProcess

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"


_M = TypeVar("_M", bound=Member)


class Cluster(Generic[_M]):
    """Members of one server on 127.0.0.1, numbered from 0 (ZooKeeper, etcd): what
    stops and starts a member and waits for them, whatever the server.

    A subclass sets :attr:`size`, :attr:`_members` and :attr:`kind`, and writes
    :meth:`start`, :meth:`_relaunch` (start a stopped member on its own data),
    and :meth:`serves` (whether a member answers clients); :meth:`_ready` says when the
    running members serve together (a quorum wants a leader too).
    """

    kind: str
    """The server's name in messages (``"etcd"``)."""

    size: int
    _members: Sequence[_M]

    start_timeout: float = 30.0
    """How long a member or the cluster may take to serve."""

    def __init__(self, size: int, tmpdir: Path | str, client_ports: Sequence[int] | None) -> None:
        """Check the number of members against the client ports asked for, if any."""
        if size < 1:
            raise ValueError(f"a {self.kind} cluster has at least one member, not {size}")
        if client_ports is not None and len(client_ports) != size:
            raise ValueError(f"{size} members need {size} client ports, not {client_ports}")
        self.size = size
        self.tmpdir = Path(tmpdir)

    def start(self, timeout: float | None = None) -> None:
        raise NotImplementedError

    def stop(self, timeout: float = 10.0) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Stop every member for good."""
        self.stop()

    def _relaunch(self, index: int) -> None:
        raise NotImplementedError

    def serves(self, index: int) -> bool:
        raise NotImplementedError

    def _ready(self, running: list[int]) -> bool:
        """Whether the members ``running`` serve together (by default: each serves)."""
        return all(self.serves(i) for i in running)

    def client_port(self, index: int) -> int:
        """Client port of member ``index``."""
        return self._members[index].client_port

    def log_path(self, index: int) -> Path:
        """Log file of member ``index``."""
        return self._members[index].process.log_path

    def is_running(self, index: int) -> bool:
        """Whether the process of member ``index`` is running."""
        return self._members[index].process.running

    def stop_member(self, index: int, *, kill: bool = False, timeout: float = 10.0) -> None:
        """Stop member ``index``; ``kill=True`` sends ``SIGKILL`` (a crash) at once."""
        process = self._members[index].process
        if kill:
            process.kill()
        else:
            process.stop(timeout)

    def start_member(self, index: int, timeout: float | None = None) -> None:
        """Start member ``index`` again (same ports and data) and wait until it serves."""
        if not self.is_running(index):
            self._relaunch(index)
        self.wait_member_ready(index, timeout)

    @contextlib.contextmanager
    def member_stopped(self, index: int, *, kill: bool = False) -> Iterator[None]:
        """Stop member ``index`` for the duration of a ``with`` block.

        On entry the member is stopped and the block runs once the other members serve
        again (:meth:`wait_ready`: with a leader, if they are a quorum); on exit the
        member is started and the whole cluster awaited.
        """
        self.stop_member(index, kill=kill)
        try:
            if any(self.is_running(i) for i in range(self.size)):
                self.wait_ready()
            yield
        finally:
            self.start_member(index)
            self.wait_ready()

    def heal(self, timeout: float | None = None) -> None:
        """Start any stopped member and wait until the whole cluster serves."""
        self.start(timeout)

    def wait_member_ready(self, index: int, timeout: float | None = None) -> None:
        """Wait until member ``index`` serves clients."""
        wait_until(
            lambda: self.serves(index),
            timeout=self.start_timeout if timeout is None else timeout,
            description=f"{self.kind} member {index} to serve",
            check=self._members[index].process.check_alive,
        )

    def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until the running members serve together (:meth:`_ready`).

        Stopped members are ignored, so this also waits for the survivors to elect a
        new leader after :meth:`stop_member`.

        :raises ServerError: if a running member exits meanwhile, or none runs.
        :raises TimeoutError: if the cluster does not become ready in time.
        """
        running = [i for i in range(self.size) if self.is_running(i)]
        if not running:
            raise ServerError(f"no {self.kind} member is running")

        def check() -> None:
            for i in running:
                self._members[i].process.check_alive()

        wait_until(
            lambda: self._ready(running),
            timeout=self.start_timeout if timeout is None else timeout,
            description=f"{self.kind} members {running} to serve",
            check=check,
        )
