"""Real ZooKeeper and etcd servers for idmint's integration tests.

The harness is split in three modules:

* :mod:`tests.servers.ports` hands out free TCP ports on 127.0.0.1;
* :mod:`tests.servers.zookeeper` runs ZooKeeper members (``ZooKeeperEnsemble``) and
  expires kazoo sessions on demand (``expire_session``);
* :mod:`tests.servers.etcd` runs etcd members (``EtcdCluster``), optionally with TLS
  and authentication.

This module holds what they share: :class:`ServerProcess`, one server OS process
started in its own process group with its output in a log file, and
:func:`wait_until`, the polling loop used for readiness checks.

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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from idmint.testing.minting import wait_for

__all__ = ["ServerError", "ServerProcess", "wait_until"]


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
