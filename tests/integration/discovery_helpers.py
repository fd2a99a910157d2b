"""Helpers for the discovery tests (``test_discovery_nodes.py``, ``test_discovery_registry.py``).

* :func:`unique_root`, :func:`zk_url`: a discovery root no other test uses, and its URL.
* :func:`raw_client`: a plain kazoo client (its own session) to look at, or tamper
  with, what idmint wrote; :func:`group_members`, :func:`published` read the node-ID
  layout documented in :mod:`idmint.coordinate.zookeeper_groups`.
* :class:`ClaimWorker`: a separate process holding many node-ID claims, each its own
  ZooKeeper session, driven over a line protocol (run this module as
  ``python -m tests.integration.discovery_helpers claim-worker URL``). Hundreds of
  sessions are spread over a few of them so that no single interpreter (one GIL) has
  to keep them all alive.
* :class:`ElasticMinter`: mints elastic64 IDs from a generator in a thread, a few per
  millisecond, keeping every ID with the width it was minted at; :class:`CliMinter`
  does the same with ``idmint generate --format json`` in another process.
* :class:`EventLog`: collects the ``(kind, instance)`` calls of discovery watches.
* :class:`CliProcess`, :func:`run_idmint`, :func:`assert_one_error_line`: the CLI.

Waiting is always on a condition with a deadline (:func:`wait_for`); nothing sleeps in
place of synchronisation.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from tests.cli_process import CliProcess, assert_one_error_line, now_ms, run_idmint
from tests.servers import wait_until
from tests.servers.zookeeper import ZooKeeperEnsemble, four_letter_word

__all__ = [
    "REPO_ROOT",
    "ClaimWorker",
    "CliMinter",
    "CliProcess",
    "ElasticMinter",
    "EventLog",
    "assert_one_error_line",
    "group_members",
    "now_ms",
    "published",
    "raw_client",
    "run_idmint",
    "serving_member",
    "unique_root",
    "wait_for",
    "width_runs",
    "zk_url",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 15.0


def unique_root() -> str:
    """A discovery root no other test uses."""
    return f"/d-{uuid.uuid4().hex}"


def zk_url(
    ensemble: ZooKeeperEnsemble,
    root: str,
    *,
    credentials: tuple[str, str] | None = None,
    hosts: str | None = None,
    **options: object,
) -> str:
    """``zk://[user:password@]hosts/root?options`` for ``ensemble``."""
    userinfo = ""
    if credentials is not None:
        userinfo = f"{quote(credentials[0], safe='')}:{quote(credentials[1], safe='')}@"
    text = f"zk://{userinfo}{hosts or ensemble.hosts}{root}"
    return f"{text}?{urlencode(options)}" if options else text


def wait_for(
    predicate: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    check: Callable[[], None] | None = None,
) -> float:
    """Wait until ``predicate()`` holds (short polls); return the monotonic time it did."""
    wait_until(predicate, timeout=timeout, description=what, interval=0.01, check=check)
    return time.monotonic()


# -- looking at ZooKeeper directly ------------------------------------------------------


@contextlib.contextmanager
def raw_client(
    ensemble: ZooKeeperEnsemble,
    *,
    auth: tuple[str, str] | None = None,
    hosts: str | None = None,
    timeout: float = 10.0,
) -> Iterator[KazooClient]:
    """A started kazoo client with its own session, closed on exit.

    ``auth`` is a ``(user, password)`` pair for the digest scheme.
    """
    client = KazooClient(
        hosts=hosts or ensemble.hosts,
        timeout=timeout,
        auth_data=[("digest", f"{auth[0]}:{auth[1]}")] if auth else None,
    )
    client.start(timeout=TIMEOUT)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def group_members(client: KazooClient, root: str) -> dict[int, list[int]]:
    """``{group: [node IDs held in it]}`` for every group znode under ``root/nodes``."""
    nodes = f"{root}/nodes"
    client.sync(nodes)
    found: dict[int, list[int]] = {}
    for name in client.get_children(nodes):
        group = int(name, 16)
        try:
            children = client.get_children(f"{nodes}/{name}")
        except NoNodeError:
            continue
        found[group] = sorted(group << 8 | int(child, 16) for child in children)
    return dict(sorted(found.items()))


def published(client: KazooClient, root: str, node: int) -> dict[str, Any] | None:
    """What the holder of ``node`` publishes in its znode (``None`` if nobody holds it)."""
    try:
        data, _ = client.get(f"{root}/nodes/{node >> 8:02X}/{node & 0xFF:02X}")
    except NoNodeError:
        return None
    info: dict[str, Any] = json.loads(data)
    return info


def serving_member(ensemble: ZooKeeperEnsemble, session_id: int) -> int | None:
    """Index of the member the session ``session_id`` is connected to (``cons``)."""
    needle = f"sid=0x{session_id:x},"
    for index in range(ensemble.size):
        if not ensemble.is_running(index):
            continue
        answer = four_letter_word(ensemble.client_port(index), "cons") or ""
        if needle in answer:
            return index
    return None


# -- many claims in other processes ------------------------------------------------------


@dataclass
class ClaimResult:
    node: int
    seconds: float


@dataclass
class WorkerReport:
    """One answer of a claim worker."""

    claimed: list[ClaimResult]
    errors: list[str]
    released: list[int]
    threads: int
    fds: int
    held: int


class ClaimWorker:
    """A process holding node-ID claims at ``url``; a context manager.

    ``claim(n, parallel)`` makes ``n`` claims, ``parallel`` at a time, each its own
    session; ``release(nodes)`` closes the claims of those node IDs, concurrently;
    ``stats()`` reports threads and open file descriptors. Start several, then call
    ``ready()`` on each (their interpreters start in parallel). Leaving the block (or
    ``close()``) closes stdin: the worker releases what it holds and exits.
    """

    def __init__(self, url: str, log_path: Path) -> None:
        self.url = url
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.discovery_helpers", "claim-worker", url],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        self.nodes: list[int] = []
        self.baseline: WorkerReport | None = None

    def ready(self) -> WorkerReport:
        """Wait until the worker has started; its first report is the baseline."""
        if self.baseline is None:
            self.baseline = self._read()
        return self.baseline

    def _send(self, command: dict[str, Any]) -> WorkerReport:
        assert self.popen.stdin is not None
        self.popen.stdin.write(json.dumps(command) + "\n")
        self.popen.stdin.flush()
        return self._read()

    def _read(self) -> WorkerReport:
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline()
        if not line:
            self.popen.wait(10)
            raise AssertionError(
                f"claim worker exited with {self.popen.returncode}; log {self.log_path}:\n"
                + self.log_path.read_text(errors="replace")[-3000:]
            )
        raw = json.loads(line)
        report = WorkerReport(
            claimed=[ClaimResult(node, seconds) for node, seconds in raw.get("claimed", [])],
            errors=list(raw.get("errors", [])),
            released=list(raw.get("released", [])),
            threads=int(raw["threads"]),
            fds=int(raw["fds"]),
            held=int(raw["held"]),
        )
        released = set(report.released)
        held = set(self.nodes) | {result.node for result in report.claimed}
        self.nodes = sorted(held - released)
        return report

    def start_claims(self, count: int, parallel: int) -> None:
        """Send a claim command without waiting for the answer (see :meth:`finish`)."""
        assert self.popen.stdin is not None
        self.popen.stdin.write(
            json.dumps({"op": "claim", "count": count, "parallel": parallel}) + "\n"
        )
        self.popen.stdin.flush()

    def start_release(self, nodes: Sequence[int]) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(json.dumps({"op": "release", "nodes": list(nodes)}) + "\n")
        self.popen.stdin.flush()

    def finish(self) -> WorkerReport:
        """The answer to the command sent last."""
        return self._read()

    def claim(self, count: int, parallel: int) -> WorkerReport:
        return self._send({"op": "claim", "count": count, "parallel": parallel})

    def release(self, nodes: Sequence[int]) -> WorkerReport:
        return self._send({"op": "release", "nodes": list(nodes)})

    def stats(self) -> WorkerReport:
        return self._send({"op": "stats"})

    def close(self) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(BrokenPipeError, OSError):
                assert self.popen.stdin is not None
                self.popen.stdin.close()
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        for stream in (self.popen.stdin, self.popen.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._log.close()

    def __enter__(self) -> ClaimWorker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _worker_main(url: str) -> int:
    """The claim worker's side of :class:`ClaimWorker` (JSON lines on stdin/stdout)."""
    from idmint.coordinate.url import parse_url
    from idmint.coordinate.zookeeper import NodeIdCoordinator
    from idmint.coordinate.zookeeper_groups import NodeIdClaim

    coordinator = NodeIdCoordinator(parse_url(url))
    held: dict[int, NodeIdClaim] = {}

    def report(**extra: Any) -> None:
        answer = {
            "threads": threading.active_count(),
            "fds": len(os.listdir("/proc/self/fd")),
            "held": len(held),
            **extra,
        }
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()

    def one_claim(_: int) -> tuple[NodeIdClaim | None, float, str]:
        started = time.monotonic()
        try:
            claim = coordinator.claim()
        except Exception as error:
            return None, time.monotonic() - started, f"{type(error).__name__}: {error}"
        return claim, time.monotonic() - started, ""

    report()
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "claim":
            count = int(command["count"])
            with ThreadPoolExecutor(max(1, int(command["parallel"]))) as pool:
                results = list(pool.map(one_claim, range(count)))
            claimed, errors = [], []
            for claim, seconds, error in results:
                if claim is None:
                    errors.append(error)
                    continue
                assert claim.node is not None
                held[claim.node] = claim
                claimed.append((claim.node, seconds))
            report(claimed=claimed, errors=errors)
        elif command["op"] == "release":
            chosen = [held.pop(node) for node in command["nodes"]]
            with ThreadPoolExecutor(max(1, min(len(chosen), 16))) as pool:
                list(pool.map(lambda claim: claim.close(), chosen))
            report(released=[claim.node for claim in chosen])
        else:
            report()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda claim: claim.close(), list(held.values())))
    return 0


# -- minting ---------------------------------------------------------------------------


@dataclass
class ElasticMinter:
    """Mints from an elastic64 generator in a thread until stopped.

    Each round takes ``per_round`` IDs with ``batch()`` and then yields the CPU for
    ``pause_s`` (pacing, so that a handful of minters do not starve the ZooKeeper
    sessions of a 2-core machine); ``values[i]`` is an ID's 64 bits and ``widths[i]``
    the node-ID width it was minted at.
    """

    generator: Any
    per_round: int = 8
    pause_s: float = 0.0005
    values: list[int] = field(default_factory=list)
    widths: list[int] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> ElasticMinter:
        self._thread = threading.Thread(target=self._run, name="elastic-minter", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        values, widths = self.values, self.widths
        while not self._stop.is_set():
            try:
                batch = self.generator.batch(self.per_round)
            except Exception as error:
                self.errors.append(error)
                if len(self.errors) > 100:
                    return
                continue
            for value in batch:
                values.append(value.int)
                widths.append(value.node_bits)
            # Pacing, not synchronisation: leave the CPU to the sessions.
            self._stop.wait(self.pause_s)

    @property
    def last_width(self) -> int | None:
        return self.widths[-1] if self.widths else None

    def wait_for_width(self, width: int, *, count: int = 50, timeout: float = 15.0) -> None:
        """Wait until the last ``count`` IDs (at least) were minted at ``width``."""

        def done() -> bool:
            widths = self.widths
            return len(widths) >= count and all(w == width for w in widths[-count:])

        wait_for(done, timeout=timeout, what=f"IDs at width {width}", check=self._check)

    def _check(self) -> None:
        if self.errors:
            raise AssertionError(f"minting failed: {self.errors[:3]!r}")
        if self._thread is None or not self._thread.is_alive():
            raise AssertionError("the minting thread is not running")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            assert not self._thread.is_alive(), "the minting thread did not stop"

    def segments(self) -> list[tuple[int, int, int]]:
        return width_runs(self.widths)

    def __enter__(self) -> ElasticMinter:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def width_runs(widths: Sequence[int]) -> list[tuple[int, int, int]]:
    """``(width, first index, last index)`` of each run of IDs at one width, in order."""
    runs: list[tuple[int, int, int]] = []
    for index, width in enumerate(widths):
        if runs and runs[-1][0] == width:
            runs[-1] = (width, runs[-1][1], index)
        else:
            runs.append((width, index, index))
    return runs


class CliMinter:
    """``idmint generate --scheme elastic64 --coordinator URL --count 0 --format json``.

    The process claims its own node ID and mints as fast as it can; every ID comes
    with its node and width. ``stop()`` sends SIGTERM and checks the clean exit (143).
    """

    def __init__(self, url: str) -> None:
        self.process = CliProcess(
            "generate",
            "--scheme",
            "elastic64",
            "--coordinator",
            url,
            "--count",
            "0",
            "--format",
            "json",
        )
        self.values: list[int] = []
        self.widths: list[int] = []
        self.nodes: set[int] = set()
        self.exit_status: int | None = None

    def node(self, timeout: float = 30.0) -> int:
        """The node ID it claimed (waits for its first ID)."""
        self.process.wait_for_lines(1, timeout=timeout)
        node: int = json.loads(self.process.lines[0])["node"]
        return node

    def wait_for_width(self, width: int, *, count: int = 50, timeout: float = 15.0) -> None:
        def done() -> bool:
            lines = self.process.lines[-count:]
            return len(lines) == count and all(
                json.loads(line)["node_bits"] == width for line in lines
            )

        def check() -> None:
            if not self.process.running:
                raise AssertionError(f"idmint generate exited: {self.process.stderr}")

        wait_for(done, timeout=timeout, what=f"idmint generate at width {width}", check=check)

    def stop(self) -> None:
        if self.exit_status is not None:
            return
        self.process.send(signal.SIGTERM)
        self.exit_status = self.process.wait(30)
        for line in self.process.lines:
            fields = json.loads(line)
            self.values.append(int(fields["id"]))
            self.widths.append(int(fields["node_bits"]))
            self.nodes.add(int(fields["node"]))

    def segments(self) -> list[tuple[int, int, int]]:
        return width_runs(self.widths)

    def close(self) -> None:
        self.process.close()


# -- watches ---------------------------------------------------------------------------


class EventLog:
    """Collects ``callback(kind, instance)`` calls of a discovery watch."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, kind: str, instance: Any) -> None:
        with self._lock:
            self.events.append((kind, instance))

    def of(self, kind: str) -> list[Any]:
        with self._lock:
            return [instance for k, instance in self.events if k == kind]

    def nodes(self, kind: str, service: str | None = None) -> list[int]:
        return [i.node for i in self.of(kind) if service is None or i.service == service]

    def wait(self, kind: str, node: int, *, timeout: float, service: str | None = None) -> float:
        """Wait until ``kind`` was reported for ``node``; return when it was seen."""
        return wait_for(
            lambda: node in self.nodes(kind, service),
            timeout=timeout,
            what=f"watch event {kind!r} for node {node}",
        )


# -- the CLI ---------------------------------------------------------------------------


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "claim-worker":
        sys.stderr.write("usage: python -m tests.integration.discovery_helpers claim-worker URL\n")
        raise SystemExit(2)
    raise SystemExit(_worker_main(sys.argv[2]))
