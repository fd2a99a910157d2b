"""``idmint serve --workers N``: N worker processes on one port, and the supervisor.

The supervisor is the process ``idmint serve`` started. It claims nothing and
serves nothing; it

* reserves the port: binds it with ``SO_REUSEPORT`` without listening, so
  ``--port 0`` gives one port for every worker and nobody else can take it
  while workers come and go (a process of another user cannot join; one of the
  same user that also sets ``SO_REUSEPORT`` could, as for any such server);
* starts each worker as a new interpreter (``python -m idmint.server.worker``,
  never a fork of itself, so nothing the supervisor holds is inherited) and
  hands it the server's configuration, whole, over a private socket pair, where the worker answers
  ``ready`` or why it could not start;
* prints the startup line once every worker serves; if one cannot start, stops
  the others and fails with its error (one line, the CLI's exit status);
* replaces a worker that dies (after a pause if it keeps dying), under the same
  index and with its predecessor's counters (:mod:`idmint.server.siblings`);
* kills (SIGKILL) and so replaces a worker whose event loop stops turning: each
  worker's loop says it is alive every ``HEARTBEAT_S``, and one not heard from
  for ``worker_timeout`` seconds would otherwise keep its share of new
  connections and answer none. Messages that arrived while the supervisor
  itself was stopped are read before anyone is judged silent;
* on SIGHUP tells each worker (over its control socket) to re-read its
  token and TLS files;
* on SIGTERM/SIGINT sends each worker SIGTERM, waits while they finish their
  in-flight requests and release their claims, and returns 0 (1 if one had to
  be killed). A second SIGINT is passed on: uvicorn then stops at once.

Each worker listens on a socket of its own bound to the port with
``SO_REUSEPORT``: the kernel spreads new connections over the listening
sockets by a hash of the connection's addresses. One listening socket shared
by all workers spreads as timing allows: each worker's event loop accepts
whenever it wakes, and one may take every connection (uvicorn's own workers
left one idle for a whole benchmark run; see docs/benchmarks.md).

A worker's claims are its own: ``local://`` frees them when the process dies;
ZooKeeper and etcd let them expire. Its replacement claims anew, under the
hold-off and high-water mark rules like any other process, so it never reuses
a millisecond of its predecessor's.

A worker whose supervisor disappears (SIGKILL) sees its control socket close
and stops as on SIGTERM.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import idmint
from idmint.errors import ConfigurationError, IdmintError, error_from_json
from idmint.server.config import ServerConfig
from idmint.server.limits import GRACEFUL_SHUTDOWN_S
from idmint.server.sockets import bound_socket

__all__ = ["serve_workers"]

log = logging.getLogger("idmint.server")

STOP_TIMEOUT_S = GRACEFUL_SHUTDOWN_S + 10
"""How long a worker may take to stop after SIGTERM before it is killed:
uvicorn's wait for in-flight requests, then the claims' release."""

STABLE_S = 10.0
"""A worker that served this long before dying is replaced at once; one that
died sooner (or never started) after a pause that doubles each time."""

FIRST_PAUSE_S = 0.5
MAX_PAUSE_S = 30.0


@dataclasses.dataclass
class _Worker:
    """One worker's place (its index) and the process holding it now, if any."""

    index: int
    generation: int = -1
    process: subprocess.Popen[bytes] | None = None
    control: socket.socket | None = None
    received: bytes = b""
    ready: bool = False
    started_at: float = 0.0
    heard_at: float = 0.0
    """When the supervisor last read a message from this worker (monotonic)."""
    killed_silent: bool = False
    quick_deaths: int = 0
    restart_at: float | None = None
    failure: dict[str, Any] | None = None


class _WorkerFailed(Exception):
    """A worker could not start; ``args[0]`` is the error to raise."""


def serve_workers(config: ServerConfig, *, announce: Callable[[int], None] | None) -> int:
    """Run ``config.workers`` workers on ``config.host:config.port`` until SIGTERM/SIGINT.

    See the module. Each worker is handed ``config`` whole.
    """
    if not sys.platform.startswith("linux"):
        # BSD's and macOS's SO_REUSEPORT lets every worker bind, then gives one of
        # them all the connections.
        raise ConfigurationError(
            "idmint serve --workers needs Linux, whose SO_REUSEPORT spreads connections "
            "over the workers; elsewhere run one server per port behind a proxy, or "
            "create_app under uvicorn --workers"
        )
    if threading.current_thread() is not threading.main_thread():
        raise ConfigurationError(
            "idmint serve with workers must run in the main thread: its supervisor "
            "handles SIGTERM, SIGINT and SIGCHLD"
        )
    if not sys.executable:
        raise ConfigurationError("cannot start workers: the Python interpreter's path is unknown")
    reservation = _reserve_port(config.host, config.port)
    run_dir = Path(tempfile.mkdtemp(prefix="idmint-serve-"))
    try:
        supervisor = _Supervisor(config, reservation.getsockname()[1], run_dir)
        return supervisor.run(announce)
    finally:
        reservation.close()
        shutil.rmtree(run_dir, ignore_errors=True)


def _reserve_port(host: str, port: int) -> socket.socket:
    """The port, bound with ``SO_REUSEPORT`` but not listening: the workers' to share.

    Bound alone first: a port anyone holds (even with ``SO_REUSEPORT``, such as
    another ``idmint serve --workers``) is refused here, not joined.
    """
    alone = bound_socket(host, port, shared_port=False)
    chosen = alone.getsockname()[1]
    alone.close()
    return bound_socket(host, chosen, shared_port=True)


class _Supervisor:
    def __init__(self, config: ServerConfig, port: int, run_dir: Path) -> None:
        self.config = config
        self.worker_timeout = config.worker_timeout
        self.port = port
        self.run_dir = run_dir
        self.workers = [_Worker(index) for index in range(config.workers)]
        self.selector = selectors.DefaultSelector()
        self.stop_signal: int | None = None
        self.forced = False
        self.kill_at: float | None = None
        self.killed: list[int] = []
        self.unclean: list[int] = []
        self._signals: list[int] = []

    # -- the loop ------------------------------------------------------------------------
    def run(self, announce: Callable[[int], None] | None) -> int:
        with self._signals_woken() as woken:
            self.selector.register(woken, selectors.EVENT_READ)
            try:
                for worker in self.workers:
                    try:
                        self._spawn(worker)
                    except OSError as error:
                        raise IdmintError(
                            f"cannot start worker {worker.index}: {error.strerror or error}"
                        ) from None
                self._supervise(woken, announce)
            except BaseException:
                self._kill_all()
                raise
            finally:
                for worker in self.workers:
                    self._forget_control(worker)
                self.selector.close()
        status = 1 if self.killed or self.unclean else 0
        if self.stop_signal is not None:
            trouble = sorted({*self.killed, *self.unclean})
            log.info(
                "stopped by %s: %s; exit status %d",
                signal.Signals(self.stop_signal).name,
                f"workers {', '.join(map(str, trouble))} did not stop cleanly (see above)"
                if trouble
                else f"the {len(self.workers)} workers released their claims",
                status,
            )
        return status

    def _supervise(self, woken: socket.socket, announce: Callable[[int], None] | None) -> None:
        starting = True
        while True:
            self._wait(woken)
            if self.stop_signal is not None and self.kill_at is None:
                self._stop_all()
            failed = self._failed_to_start() if starting else None
            if failed is not None:
                self._stop_all()
                self._wait_for_all_to_exit(woken)
                raise failed
            if starting and all(worker.ready for worker in self.workers):
                starting = False
                if self.stop_signal is None:
                    for worker in self.workers:
                        self._go(worker)
                    if announce is not None:
                        announce(self.port)
            if self.kill_at is not None and not self._alive():
                return
            self._restart_due()

    def _wait(self, woken: socket.socket) -> None:
        """Until a signal, a worker's message or exit, or the next deadline."""
        timeout = self._next_deadline()
        for key, _ in self.selector.select(timeout):
            if key.fileobj is woken:
                with contextlib.suppress(BlockingIOError):
                    while woken.recv(4096):
                        pass
            else:
                self._read_control(key.data)
        self._handle_signals()
        self._reap()
        self._kill_silent()
        if self.kill_at is not None and time.monotonic() >= self.kill_at:
            self._kill_stragglers()

    def _next_deadline(self) -> float | None:
        deadlines = [w.restart_at for w in self.workers if w.restart_at is not None]
        deadlines += [w.heard_at + self.worker_timeout for w in self._judged()]
        if self.kill_at is not None and self.kill_at < math.inf:
            deadlines.append(self.kill_at)
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - time.monotonic())

    def _judged(self) -> list[_Worker]:
        """Serving workers that must be heard from (none while the server stops)."""
        if self.worker_timeout <= 0 or self.kill_at is not None:
            return []
        return [
            w
            for w in self.workers
            if w.ready and w.process is not None and w.control is not None and not w.killed_silent
        ]

    def _kill_silent(self) -> None:
        """SIGKILL serving workers not heard from for ``worker_timeout``: replaced when reaped.

        A worker that looks silent has its control socket read first: after the
        supervisor itself was stopped, ``select`` may report its timeout before
        the messages that arrived meanwhile.
        """
        for worker in self._judged():
            if time.monotonic() - worker.heard_at < self.worker_timeout:
                continue
            while self._read_control(worker):
                pass
            silent = time.monotonic() - worker.heard_at
            if silent < self.worker_timeout or worker.process is None:
                continue
            assert worker.process is not None
            log.error(
                "worker %d (pid %d) has not been heard from for %.1f s "
                "(--worker-timeout %g): killing it",
                worker.index,
                worker.process.pid,
                silent,
                self.worker_timeout,
            )
            worker.killed_silent = True
            with contextlib.suppress(ProcessLookupError):
                worker.process.kill()

    def _wait_for_all_to_exit(self, woken: socket.socket) -> None:
        while self._alive():
            self._wait(woken)

    def _alive(self) -> bool:
        return any(worker.process is not None for worker in self.workers)

    # -- signals ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def _signals_woken(self) -> Any:
        """Signals write to a socket the loop selects on (and are noted for the loop)."""
        woken, wake = socket.socketpair()
        woken.setblocking(False)
        wake.setblocking(False)

        def note(signum: int, frame: FrameType | None) -> None:
            self._signals.append(signum)

        handled = (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP)
        previous_fd = signal.set_wakeup_fd(wake.fileno(), warn_on_full_buffer=False)
        previous = {signum: signal.signal(signum, note) for signum in handled}
        try:
            yield woken
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            signal.set_wakeup_fd(previous_fd)
            woken.close()
            wake.close()

    def _handle_signals(self) -> None:
        signals, self._signals = self._signals, []
        if signal.SIGHUP in signals and self.stop_signal is None:
            self._reload_all()  # once for however many arrived since the last look
        for signum in signals:
            if signum in (signal.SIGCHLD, signal.SIGHUP):
                continue  # _reap looks at every worker
            if self.stop_signal is None:
                self.stop_signal = signum
                log.info(
                    "%s: stopping the %d workers (in-flight requests are finished)",
                    signal.Signals(signum).name,
                    len(self.workers),
                )
            elif signum == signal.SIGINT and not self.forced:
                # A second Ctrl-C: uvicorn stops at once without waiting for requests.
                self.forced = True
                self._signal_all(signal.SIGINT)

    def _reload_all(self) -> None:
        """SIGHUP, passed on: each worker re-reads its token and TLS files.

        Over the control socket rather than as a signal: a worker that has not
        yet set its handler up would be ended by SIGHUP's default. One that is
        still starting reads the message once it serves (and read the files
        when it started anyway); a replacement started later reads the files
        as they are then.
        """
        told = 0
        for worker in self.workers:
            if worker.control is not None:
                with contextlib.suppress(OSError):  # gone: its replacement reads the files
                    worker.control.sendall(b'{"reload": true}\n')
                    told += 1
        log.info("SIGHUP: %d workers re-read their credentials", told)

    # -- workers ---------------------------------------------------------------------------
    def _spawn(self, worker: _Worker) -> None:
        worker.generation += 1
        worker.restart_at = None
        worker.ready = False
        worker.killed_silent = False
        worker.failure = None
        worker.received = b""
        ours, theirs = socket.socketpair()
        place = {
            "index": worker.index,
            "count": len(self.workers),
            "generation": worker.generation,
            "port": self.port,
            "run_dir": str(self.run_dir),
            "config": self.config.to_json(),
        }
        env = dict(os.environ)
        # The workers import the idmint this process runs, wherever it was imported from.
        source = str(Path(idmint.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")]))
        try:
            worker.process = subprocess.Popen(
                [sys.executable, "-m", "idmint.server.worker", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env=env,
                # Ctrl-C reaches the supervisor alone, which stops each worker once.
                start_new_session=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        worker.started_at = time.monotonic()
        with contextlib.suppress(OSError):  # it died at once: reaped like any other death
            ours.sendall(json.dumps(place).encode() + b"\n")
        ours.setblocking(False)
        worker.control = ours
        self.selector.register(ours, selectors.EVENT_READ, worker)

    def _read_control(self, worker: _Worker) -> bool:
        """Read what the worker sent; False once there is nothing more for now."""
        control = worker.control
        if control is None:
            return False
        try:
            data = control.recv(65536)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:  # the worker is exiting; SIGCHLD follows
            self._forget_control(worker)
            return False
        worker.received += data
        worker.heard_at = time.monotonic()
        while b"\n" in worker.received:
            line, _, worker.received = worker.received.partition(b"\n")
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if "ready" in message:
                worker.ready = True
                if worker.generation > 0:
                    self._go(worker)
                    log.info(
                        "worker %d replaced: pid %d serves (restart %d)",
                        worker.index,
                        message["ready"],
                        worker.generation,
                    )
            elif "failed" in message:
                failed = message["failed"]
                worker.failure = failed if isinstance(failed, dict) else {}
        return True

    def _go(self, worker: _Worker) -> None:
        """Tell a ready worker the server is up: it passes on what it logged meanwhile."""
        if worker.control is not None:
            with contextlib.suppress(OSError):
                worker.control.sendall(b'{"go": true}\n')

    def _forget_control(self, worker: _Worker) -> None:
        if worker.control is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(worker.control)
            worker.control.close()
            worker.control = None

    def _reap(self) -> None:
        for worker in self.workers:
            process = worker.process
            if process is None or process.poll() is None:
                continue
            # Read what it said before it went (its "failed" message, say).
            while worker.control is not None and self._read_control(worker):
                pass
            self._forget_control(worker)
            worker.process = None
            if self.kill_at is not None:
                # A worker that never served held nothing worth reporting (SIGTERM may
                # even reach it before it handles signals); one that served must stop
                # cleanly.
                if worker.ready and process.returncode != 0 and worker.index not in self.killed:
                    log.error(
                        "worker %d %s while stopping",
                        worker.index,
                        _exit_description(process.returncode),
                    )
                    self.unclean.append(worker.index)
                continue  # stopping: it was meant to go
            if worker.generation == 0 and not worker.ready:
                continue  # the first start failed: _failed_to_start reports it
            self._schedule_restart(worker, process.returncode)

    def _schedule_restart(self, worker: _Worker, status: int) -> None:
        served = time.monotonic() - worker.started_at
        if worker.ready and served >= STABLE_S:
            worker.quick_deaths = 0
            pause = 0.0
        else:
            worker.quick_deaths += 1
            pause = min(MAX_PAUSE_S, FIRST_PAUSE_S * 2 ** (worker.quick_deaths - 1))
        how = _exit_description(status)
        if worker.failure is not None:
            log.error(
                "worker %d could not start: %s; trying again in %.1f s",
                worker.index,
                worker.failure.get("message", "?"),
                pause,
            )
        else:
            log.warning(
                "worker %d %s after %.1f s; starting a replacement%s",
                worker.index,
                how,
                served,
                f" in {pause:.1f} s" if pause else "",
            )
        worker.ready = False
        worker.restart_at = time.monotonic() + pause

    def _restart_due(self) -> None:
        if self.kill_at is not None:
            return
        now = time.monotonic()
        for worker in self.workers:
            if worker.restart_at is not None and worker.restart_at <= now:
                try:
                    self._spawn(worker)
                except OSError as error:  # out of processes or memory: try again later
                    worker.quick_deaths += 1
                    pause = min(MAX_PAUSE_S, FIRST_PAUSE_S * 2 ** (worker.quick_deaths - 1))
                    log.error(  # noqa: TRY400 - the reason is the message, not a bug
                        "cannot start worker %d: %s; trying again in %.1f s",
                        worker.index,
                        error.strerror or error,
                        pause,
                    )
                    worker.restart_at = time.monotonic() + pause

    def _failed_to_start(self) -> BaseException | None:
        """The error of a worker whose first start failed, once it has exited."""
        for worker in self.workers:
            if worker.generation != 0 or worker.ready or worker.process is not None:
                continue
            if worker.restart_at is not None:
                continue  # it served, then died: replaced like any other
            if self.stop_signal is not None:
                return None  # stopped while starting: not a failure
            if worker.failure is not None:
                return _error_from(worker.index, worker.failure)
            return IdmintError(
                f"worker {worker.index} exited before it could serve (see its log above)"
            )
        return None

    # -- stopping --------------------------------------------------------------------------
    def _stop_all(self) -> None:
        if self.kill_at is None:
            self.kill_at = time.monotonic() + STOP_TIMEOUT_S
        for worker in self.workers:
            worker.restart_at = None
        self._signal_all(signal.SIGTERM)

    def _signal_all(self, signum: int) -> None:
        for worker in self.workers:
            if worker.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.send_signal(signum)

    def _kill_stragglers(self) -> None:
        for worker in self.workers:
            if worker.process is not None and worker.process.poll() is None:
                log.error(
                    "worker %d (pid %d) did not stop within %d s: killed; its claims "
                    "are released by the kernel (local://) or expire",
                    worker.index,
                    worker.process.pid,
                    STOP_TIMEOUT_S,
                )
                self.killed.append(worker.index)
                worker.process.kill()
        self.kill_at = math.inf  # no second round: SIGCHLD reaps them

    def _kill_all(self) -> None:
        for worker in self.workers:
            if worker.process is not None and worker.process.poll() is None:
                worker.process.kill()
                worker.process.wait()


def _exit_description(status: int) -> str:
    if status < 0:
        try:
            return f"was killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"was killed by signal {-status}"
    return f"exited with status {status}"


def _error_from(index: int, failure: dict[str, Any]) -> BaseException:
    """The worker's error, as the same class: the CLI's exit status depends on it."""
    return error_from_json(failure, prefix=f"worker {index}: ")
