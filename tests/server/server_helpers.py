"""Helpers for the ID server tests (``tests/server/test_*.py``): real processes, real HTTP.

* :class:`IdmintServer` runs ``python -m idmint serve --port 0 ...`` in a subprocess,
  learns its port from the line it prints when it listens, and stops it with a signal.
* :func:`private_zookeeper` runs a standalone ZooKeeper of the test harness
  (:mod:`tests.servers.zookeeper`) for one module and always stops it.
* :func:`parse_metrics` reads the Prometheus text of ``/metrics``.
* :func:`server_has_read` and :func:`nothing_received` read the kernel's socket queues
  (``/proc/net/tcp``): the tests use them to know that the server has read a request,
  and not yet answered it, without sleeping.
* :func:`list_claims` runs ``idmint claims list`` against a coordinator URL.
* :func:`get_alone` sends one request on a connection of its own: with
  ``--workers N`` each new connection may reach another worker.
* :func:`assert_json_error` checks the ``{"error", "detail"}`` body every error carries.

Waiting is on a condition with a deadline (:func:`tests.servers.wait_until`) or on a
process event (a printed line, an exit); nothing sleeps in place of synchronisation.
"""

from __future__ import annotations

import contextlib
import csv
import http.client
import json
import os
import queue
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import httpx
from tests.cli_process import ClosedOnExit
from tests.servers import wait_until
from tests.servers.zookeeper import ZooKeeperEnsemble

__all__ = [
    "DATA",
    "LOOPBACK",
    "ClientThreads",
    "IdmintServer",
    "JsonValue",
    "Samples",
    "TcpQueues",
    "assert_json_error",
    "client",
    "get_alone",
    "id_line",
    "in_threads",
    "list_claims",
    "load_rows",
    "metric",
    "metric_labels",
    "nothing_received",
    "parse_metrics",
    "private_pool",
    "private_zookeeper",
    "running_server",
    "server_has_read",
    "tcp_queues",
    "unique_zk_root",
    "wait_for",
    "wait_until",
]

LOOPBACK = "127.0.0.1"
DATA = Path(__file__).resolve().parent.parent / "data"
"""The golden vectors of every scheme (``tests/data/*.csv``)."""

START_TIMEOUT_S = 60.0
"""How long a server may take to print that it listens (a claim in ZooKeeper included)."""

_ANNOUNCE = re.compile(r"idmint server for (\S+) IDs: open (https?)://(\[[^]]+\]|[^:/]+):(\d+)/")

JsonValue = Any
"""What ``json.loads`` returns."""

C = TypeVar("C", bound="ClientThreads")


class IdmintServer(ClosedOnExit):
    """One ``idmint serve`` process on 127.0.0.1 and a free port.

    ``IdmintServer("--scheme", "muid").start()`` returns once the server has printed
    ``idmint server for <scheme> IDs: open http://HOST:PORT/`` (uvicorn prints that
    line only after the lifespan startup, so the generators exist and claims are
    held). Its stderr goes to a temporary file (:meth:`stderr_text`). ``env`` adds
    environment variables (``IDMINT_*`` settings) to the test's own.
    """

    def __init__(
        self,
        *args: str,
        token: str | None = None,
        env: dict[str, str] | None = None,
        verify: ssl.SSLContext | None = None,
    ) -> None:
        self.args = list(args)
        self.token = token
        self.verify = verify
        """How :meth:`client` checks an https server (and the certificate it presents)."""
        self.env = dict(env or {})
        self.url = ""
        self.port = 0
        self.scheme = ""
        self.stdout_lines: list[str] = []
        self._popen: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._token_dir: tempfile.TemporaryDirectory[str] | None = None
        self._stderr: IO[str] | None = None

    # -- lifecycle ------------------------------------------------------------------
    def argv(self) -> list[str]:
        argv = [sys.executable, "-m", "idmint", "serve", "--host", LOOPBACK, "--port", "0"]
        argv += self.args
        if self.token is not None:
            self._token_dir = tempfile.TemporaryDirectory(prefix="idmint-token-")
            path = Path(self._token_dir.name) / "token"
            path.write_text(self.token + "\n", encoding="utf-8")
            argv += ["--token-file", str(path)]
        return argv

    def spawn(self) -> None:
        """Start the process without waiting for it to listen."""
        # Closed by close(): the file outlives this method.
        self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        self._popen = subprocess.Popen(
            [*_pdeathsig_prefix(), *self.argv()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            encoding="utf-8",
            errors="replace",
            env={**os.environ, **self.env, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
        assert self._popen.stdout is not None
        threading.Thread(target=self._read_stdout, args=(self._popen.stdout,), daemon=True).start()

    def start(self, timeout: float = START_TIMEOUT_S) -> IdmintServer:
        """Start the process and wait until it listens; raise with its stderr if it exits."""
        self.spawn()
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise TimeoutError(
                f"idmint serve did not listen within {timeout:g}s:\n{self.stderr_text()}"
            ) from None
        match = _ANNOUNCE.search(line or "")
        if match is None:
            self.wait(timeout=10)
            raise RuntimeError(
                f"idmint serve {' '.join(self.args)} did not start "
                f"(status {self.returncode}); stdout {line!r}; stderr:\n{self.stderr_text()}"
            )
        self.scheme = match.group(1)
        self.port = int(match.group(4))
        self.url = f"{match.group(2)}://{match.group(3)}:{self.port}"
        return self

    def _read_stdout(self, stream: IO[str]) -> None:
        for line in stream:
            self.stdout_lines.append(line)
            self._lines.put(line)
        self._lines.put(None)

    @property
    def pid(self) -> int:
        assert self._popen is not None, "not started"
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return None if self._popen is None else self._popen.poll()

    def send_signal(self, signum: int) -> None:
        assert self._popen is not None, "not started"
        self._popen.send_signal(signum)

    def wait(self, timeout: float) -> int:
        """Wait for the process to exit and return its status."""
        assert self._popen is not None, "not started"
        return self._popen.wait(timeout)

    def terminate_and_wait(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait for the exit (SIGKILL if it lingers past ``timeout``)."""
        if self._popen is None:
            return 0
        if self._popen.poll() is None:
            self._popen.send_signal(signal.SIGTERM)
        try:
            return self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        if self._popen is not None and self._popen.poll() is None:
            self._popen.kill()
            self._popen.wait()

    def close(self) -> None:
        """Stop the process if it runs and free its resources."""
        try:
            if self._popen is not None and self._popen.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.terminate_and_wait(timeout=15)
        finally:
            self.kill()
            if self._popen is not None and self._popen.stdout is not None:
                self._popen.stdout.close()
            if self._stderr is not None:
                self._stderr.close()
                self._stderr = None
            if self._token_dir is not None:
                self._token_dir.cleanup()
                self._token_dir = None

    def stderr_text(self) -> str:
        if self._stderr is None:
            return ""
        # pread, not seek and read: the server writes through the same open file,
        # and moving its offset would make it write over what it wrote before.
        fd = self._stderr.fileno()
        data = os.pread(fd, os.fstat(fd).st_size, 0)
        return data.decode("utf-8", "replace")

    # -- HTTP -----------------------------------------------------------------------
    def client(self, *, authorized: bool = True, timeout: float = 30.0) -> httpx.Client:
        """A client for this server (with its bearer token unless ``authorized=False``)."""
        headers = {}
        if authorized and self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        return client(self.url, headers=headers, timeout=timeout, verify=self.verify)


@contextlib.contextmanager
def running_server(
    *args: str,
    token: str | None = None,
    env: dict[str, str] | None = None,
    verify: ssl.SSLContext | None = None,
) -> Iterator[IdmintServer]:
    """``idmint serve --port 0 *args``, started, and stopped (SIGTERM) on exit."""
    with IdmintServer(*args, token=token, env=env, verify=verify) as server:
        server.start()
        yield server


def client(
    base_url: str,
    *,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
    verify: ssl.SSLContext | None = None,
) -> httpx.Client:
    """An httpx client that ignores proxy settings from the environment.

    ``verify``: the TLS context for an https server (default: httpx's, the system CAs).
    """
    return httpx.Client(
        base_url=base_url,
        headers=headers,
        timeout=timeout,
        trust_env=False,
        verify=verify if verify is not None else True,
    )


def _pdeathsig_prefix() -> list[str]:
    """``setpriv --pdeathsig KILL --`` when available: the server dies with the test run.

    As in :mod:`tests.servers`, only from the main thread (the signal fires when the
    forking *thread* exits).
    """
    if not sys.platform.startswith("linux"):
        return []
    if threading.current_thread() is not threading.main_thread():
        return []
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def id_line(body: str | bytes) -> str:
    """The ID in a ``/v1/id`` body: exactly one line, newline-terminated (a shell prompt
    after ``curl .../v1/id`` starts on a line of its own)."""
    text = body.decode() if isinstance(body, bytes) else body
    assert text.endswith("\n"), repr(text)
    assert text.count("\n") == 1, repr(text)
    return text[:-1]


def get_alone(port: int, path: str, *, timeout: float = 30.0) -> tuple[int, bytes]:
    """``GET path`` on a new connection, closed after: the status and the body."""
    connection = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    try:
        connection.request("GET", path, headers={"Connection": "close"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


# -- errors, metrics, vectors -------------------------------------------------------------


def in_threads(count: int, work: Callable[[], list[str]]) -> list[str]:
    """Run ``work`` in ``count`` threads at once; every list it returned, joined.

    An exception in any thread (a failed assertion included) is raised here.
    """
    with ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(work) for _ in range(count)]
        return [text for future in futures for text in future.result(timeout=120)]


def assert_json_error(response: httpx.Response, status: int) -> dict[str, str]:
    """Check ``response`` is the JSON error ``{"error", "detail"}`` with ``status``."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"] == "application/json", response.headers
    body = response.json()
    assert set(body) == {"error", "detail"}, body
    assert isinstance(body["error"], str), body
    assert isinstance(body["detail"], str), body
    assert body["error"], body
    assert body["detail"], body
    return body  # type: ignore[no-any-return]


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
"""``{(sample name, {(label, value), ...}): value}``."""


def parse_metrics(text: str) -> Samples:
    """Prometheus text parsed by prometheus_client's own parser (what a scraper reads).

    Fails on text the parser rejects, and on a sample given twice (same name and labels).
    """
    from prometheus_client.parser import text_string_to_metric_families

    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in samples, f"sample given twice: {sample}"
            samples[key] = sample.value
    return samples


def metric(samples: Samples, name: str, **labels: str) -> float:
    """The sample ``name`` with exactly ``labels`` (0 when absent, as for a new counter)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def metric_labels(samples: Samples, name: str) -> list[dict[str, str]]:
    """The label sets of every sample called ``name``."""
    return [dict(labels) for sample, labels in samples if sample == name]


def load_rows(name: str) -> list[dict[str, str]]:
    """The rows of ``tests/data/<name>``, skipping ``#`` comment lines."""
    with (DATA / name).open(newline="") as handle:
        lines = [line for line in handle if not line.startswith("#")]
    return list(csv.DictReader(lines))


# -- sockets --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TcpQueues:
    """One TCP socket of ``/proc/net/tcp``: its ports, state and queue lengths."""

    local_port: int
    remote_port: int
    state: int
    tx_queue: int
    rx_queue: int


TCP_ESTABLISHED = 1


def tcp_queues() -> list[TcpQueues]:
    """The IPv4 TCP sockets of this network namespace (``/proc/net/tcp``)."""
    rows = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state, queues = fields[1], fields[2], fields[3], fields[4]
        tx, rx = queues.split(":")
        rows.append(
            TcpQueues(
                local_port=int(local.split(":")[1], 16),
                remote_port=int(remote.split(":")[1], 16),
                state=int(state, 16),
                tx_queue=int(tx, 16),
                rx_queue=int(rx, 16),
            )
        )
    return rows


def server_has_read(server_port: int, client_ports: Sequence[int]) -> bool:
    """Whether the server has read everything each client connection sent it."""
    sockets = {
        row.remote_port: row
        for row in tcp_queues()
        if row.local_port == server_port and row.state == TCP_ESTABLISHED
    }
    return all(port in sockets and sockets[port].rx_queue == 0 for port in client_ports)


def nothing_received(client_ports: Sequence[int]) -> bool:
    """Whether no byte of an answer waits in any of these client sockets."""
    sockets = {row.local_port: row for row in tcp_queues() if row.state == TCP_ESTABLISHED}
    return all(port in sockets and sockets[port].rx_queue == 0 for port in client_ports)


# -- ZooKeeper --------------------------------------------------------------------------------


@contextlib.contextmanager
def private_zookeeper(directory: Path) -> Iterator[ZooKeeperEnsemble]:
    """A standalone ZooKeeper of the test harness, stopped on exit whatever happened."""
    ensemble = ZooKeeperEnsemble(1, directory)
    try:
        ensemble.start()
        yield ensemble
    finally:
        ensemble.stop()


def wait_for(
    predicate: Callable[[], bool],
    *,
    timeout: float,
    description: str,
    explain: Callable[[], str],
) -> None:
    """:func:`wait_until`, adding ``explain()`` (the state seen) to a timeout's message."""
    try:
        wait_until(predicate, timeout=timeout, description=description)
    except TimeoutError as error:
        raise TimeoutError(f"{error}\n{explain()}") from None


class ClientThreads(ClosedOnExit):
    """``threads`` threads, each running :meth:`run` (which loops until :attr:`stopping`
    is set), from the ``with`` block's start (or :meth:`start`) to its end (or
    :meth:`close`): the load tests put on a server."""

    def __init__(self, threads: int) -> None:
        self.stopping = threading.Event()
        name = type(self).__name__.lower()
        self._threads = [
            threading.Thread(target=self.run, name=f"{name}-{index}", daemon=True)
            for index in range(threads)
        ]

    def run(self) -> None:
        raise NotImplementedError

    def start(self: C) -> C:
        for thread in self._threads:
            thread.start()
        return self

    def __enter__(self: C) -> C:
        return self.start()

    def close(self) -> None:
        self.stopping.set()
        for thread in self._threads:
            thread.join(timeout=60)
            assert not thread.is_alive(), f"{thread.name} is stuck"


def private_pool(tmp_path: Path) -> dict[str, str]:
    """The environment of a server with a ``local://`` directory of the test's own, and a
    temporary directory for its run directory (which a killed supervisor leaves behind)."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return {"IDMINT_LOCAL_DIR": str(tmp_path / "pool"), "TMPDIR": str(tmp_path / "tmp")}


def unique_zk_root() -> str:
    return f"/idmint-server-{uuid.uuid4().hex[:12]}"


def list_claims(url: str) -> list[JsonValue]:
    """The claims under a coordinator URL, as ``idmint claims list --format json`` shows."""
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "idmint",
            "claims",
            "list",
            "--coordinator",
            url,
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return [json.loads(line) for line in completed.stdout.splitlines() if line.strip()]
