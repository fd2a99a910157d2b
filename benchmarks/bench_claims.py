"""Claiming generator IDs through ZooKeeper, etcd, PostgreSQL, Redis and MySQL: latency, pool fill,
hand-over, renewal load, round trips, the cost of a store that forgets.

    .venv/bin/pip install -e '.[zookeeper,etcd,postgres,redis,mysql,test]'
    scripts/install-test-deps.sh      # java + libzookeeper-java, etcd, postgresql, redis, mariadb
    .venv/bin/python benchmarks/bench_claims.py            # full run (~3 min)
    .venv/bin/python benchmarks/bench_claims.py --quick    # smaller samples (~1 min)
    .venv/bin/python benchmarks/bench_claims.py --only fill --fill-limit 300

Servers: the benchmark starts its own standalone ZooKeeper and single-member
etcd on free ports of 127.0.0.1 with the integration-test harness
(``tests/servers``: ``ZooKeeperEnsemble(1, tmpdir)``, ``EtcdCluster(1, tmpdir)``,
imported from the repository root) and stops them at the end. ZooKeeper fsyncs
its transaction log before it answers a write, as production runs it
(``--zk-force-sync no`` turns that off, as the tests do); etcd always fsyncs.
PostgreSQL (the harness's ``PostgresServer``) flushes its log at each commit
(``--pg-fsync no``: the tests' settings); Redis runs without persistence, the
case the driver is built to survive; MariaDB (``MariaDbServer``) with the tests'
settings (the log flushed once a second). Each store's 64 processes are also
given as a ratio of their p99 to that of 64 processes that only connect and make
one trivial request on the same store (the floor). Every run uses a
fresh root / prefix. Run it on a quiet machine: client, servers and renewal
traffic all share the same cores.

Claimants are separate processes (``multiprocessing`` forkserver, idmint,
kazoo and etcd3gw preloaded), as claimants are separate services in real
life; times are taken with ``time.monotonic()``, which is system-wide on Linux.

*Claim latency*: 64 processes wait on a barrier, then each times
``new_generator("uid64", coordinator=url)`` and its first ID. p50/p99/max are pooled
over the runs; "all claimed" is the first call to the last return. ZooKeeper
is run with java-uniqueid's queue lock (``queue=true``, the default) and
without (``queue=false``). The same 64 claimants as threads of one process are
shown for comparison (the GIL serialises their client-side work), and one
claimant alone (22 claims one after the other, the first 2 not counted) as
the floor. "Server requests per claim" counts what the server received during
the run (ZooKeeper ``mntr`` zk_packets_received, pings included; etcd
grpc_server_started_total) over the claims made.

*Pool fill*: 16 processes claim the 2,048-ID pool between them, each making
its share of claims one after the other (``new_generator(...)`` each: one
session or lease per claim) and holding them all. Held claims keep renewing
while the pool fills; the fill uses a 30 s session timeout / TTL
(``--fill-ttl``) because at the 10 s default the renewals of 2,048 claims
alone need about 1.3 cores of client CPU for etcd (2 HTTP requests, ~2 ms of
CPU, per claim every 3 s), which on a 2-core machine starves everything else
and makes leases expire. Reported: the time from the barrier to the last
claim and claims/s, the median claim latency over the first and the last
quarter of the claims, claims lost while held and the claims' states when
released (all active when healthy), and ``list_claims()`` on the full pool.
A fill still running after 90 s (``--fill-limit``) is stopped and reported
as far as it got: on a quiet 2-core machine etcd needs 70 to 100 s.

*Hand-over*: a holder process claims ``generators=0-0``; a successor with
``generators=0-0`` is already waiting in ``claim()`` when the holder is killed
(``SIGKILL``) or closes its claim. Reported, from the kill or from the return
of ``close()``: when the holder's ephemeral node / lease key disappeared
(session expiry or lease expiry; polled every 20 ms), when idmint's hold-off on
the ID ended (``HighWaterMark.holdoff_until_ms`` of the mark the holder left,
i.e. ceiling + skew after a crash, max(ceiling, release + TTL) + skew after a
release), and when the successor's ``claim()`` returned. A bystander claiming
the free ``generators=1-1`` is started at the same moment: its latency shows
whether a waiting successor blocks other claimants. All scenarios of one TTL
run concurrently (they mostly wait on timers).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import logging
import math
import multiprocessing as mp
import os
import queue
import resource
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

PRELOAD = [
    "idmint.coordinate",
    "idmint.coordinate.zookeeper",
    "idmint.coordinate.etcd",
    "kazoo.client",
    "kazoo.retry",
    "kazoo.security",
    "kazoo.handlers.threading",
    "etcd3gw",
    "etcd3gw.exceptions",
    "requests",
    "claimant_preload",
]

LATENCY_CASES: dict[str, tuple[str, str, dict[str, object]]] = {
    "zk-queue": ("ZooKeeper queue=true", "zk", {"queue": "true"}),
    "zk-queued": ("ZooKeeper queue=true, a ticket queued", "zk", {"queue": "true"}),
    "zk-lockfree": ("ZooKeeper queue=false", "zk", {"queue": "false"}),
    "etcd": ("etcd", "etcd", {}),
}
"""The claim-latency cases by the name ``--cases`` gives them. ``zk-queued`` (not run
by default) starts with a ticket in java-uniqueid's queue that sorts after every
claimant's, as a Java claimant waiting its turn leaves it: every claimant then queues
and takes the lock in turn, so the run times the protocol's hand-overs in series."""

QUEUED_TICKET = "nr-99999999999999-9999"

Sample = tuple[float, float, int | None, str | None, float]
"""(monotonic start, monotonic end, generator or None, error or None, CPU seconds the
claimant's process spent on the claim, all its threads)."""


# -- what runs in the claimant processes ---------------------------------------------------


class _LostClaims(logging.StreamHandler):  # type: ignore[type-arg]
    """Counts idmint's "claim lost ...; claiming again" warnings, prints the others."""

    count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "claim lost" in record.getMessage():
            _LostClaims.count += 1
        elif record.levelno >= logging.WARNING:
            super().emit(record)


def _worker_setup() -> None:
    """Count lost claims, quiet kazoo's connection chatter, allow one socket per claim."""
    logging.getLogger("idmint.coordinate").addHandler(_LostClaims())
    logging.getLogger("idmint.coordinate").propagate = False
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _timed_claim(url: str) -> tuple[Sample, Any]:
    """``new_generator("uid64", coordinator=url)`` and its first ID, timed; the generator."""
    from idmint import new_generator

    start, cpu = time.monotonic(), time.process_time()
    try:
        generator: Any = new_generator("uid64", coordinator=url)  # uid64's: has .generator
        generator.generate()
    except Exception as error:
        failed = f"{type(error).__name__}: {error}"
        return (start, time.monotonic(), None, failed, time.process_time() - cpu), None
    end = time.monotonic()
    return (start, end, generator.generator, None, time.process_time() - cpu), generator


def _report_losses(results: Queue[Any], claims: Sequence[Any]) -> None:
    """Tell the parent how often claims were lost, renewals failed, and claims' states now."""
    held = [generator.claim for generator in claims if generator is not None]
    failures = sum(claim.renewal_failures for claim in held)
    states = collections.Counter(claim.state.value for claim in held)
    results.put(("losses", _LostClaims.count, failures, dict(states)))


def _claimant_process(url: str, barrier: Barrier, results: Queue[Any], release: Connection) -> None:
    """One claimant: wait for the others, claim, report, hold until released."""
    _worker_setup()
    barrier.wait(60)
    sample, claim = _timed_claim(url)
    results.put([sample])
    release.poll(300)
    _report_losses(results, [claim])
    if claim is not None:
        claim.close()


def _connecting_process(
    url: str, barrier: Barrier, results: Queue[Any], release: Connection
) -> None:
    """What a claimant's process cannot avoid: connect and make one trivial request
    (PostgreSQL and MySQL ``SELECT 1``, Redis ``PING``), timed as a claim is; held until
    released."""
    _worker_setup()
    barrier.wait(60)
    start, cpu = time.monotonic(), time.process_time()
    connection: Any
    if url.startswith("redis"):
        import redis

        connection = redis.Redis.from_url(url)
        connection.ping()
    elif url.startswith("mysql"):
        from urllib.parse import unquote, urlsplit

        import pymysql

        where = urlsplit(url)
        connection = pymysql.connect(
            host=where.hostname,
            port=where.port or 3306,
            user=unquote(where.username or ""),
            password=unquote(where.password or ""),
            database=where.path.strip("/"),
        )
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchall()
    else:
        import psycopg

        connection = psycopg.connect(url, autocommit=True)
        connection.execute("SELECT 1").fetchall()
    results.put([(start, time.monotonic(), None, None, time.process_time() - cpu)])
    release.poll(300)
    results.put(("losses", 0, 0, {}))
    connection.close()


def _claimant_threads(url: str, count: int, results: Queue[Any], release: Connection) -> None:
    """``count`` claimants as threads of this one process."""
    _worker_setup()
    barrier = threading.Barrier(count)
    samples: list[Sample] = []
    claims: list[Any] = []
    lock = threading.Lock()

    def one() -> None:
        barrier.wait(60)
        sample, claim = _timed_claim(url)
        with lock:
            samples.append(sample)
            claims.append(claim)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results.put(samples)
    release.poll(300)
    _report_losses(results, claims)
    for claim in claims:
        if claim is not None:
            claim.close()


def _filler(
    url: str, count: int, barrier: Barrier, results: Queue[Any], release: Connection
) -> None:
    """Make ``count`` claims one after the other (reporting each), hold them until released.

    Stops early when released (the parent's time limit) or after 5 failed claims.
    """
    _worker_setup()
    barrier.wait(60)
    claims: list[Any] = []
    failed = 0
    for _ in range(count):
        if release.poll(0):
            break
        sample, claim = _timed_claim(url)
        results.put([sample])
        if claim is not None:
            claims.append(claim)
        else:
            failed += 1
            if failed >= 5:
                break  # something is badly wrong; the errors are reported
    release.poll(600)
    _report_losses(results, claims)
    for claim in claims:
        claim.close()


def _holder(url: str, events: Queue[Any], close_now: Connection) -> None:
    """Claim, report, then close when told (or be killed before that).

    Told through a pipe, not a ``multiprocessing.Event``: setting an Event
    whose waiter was killed while waiting blocks for ever.
    """
    _worker_setup()
    sample, claim = _timed_claim(url)
    events.put(("held", sample, os.getpid()))
    if claim is None:
        return
    close_now.poll(600)
    start = time.monotonic()
    claim.close()
    events.put(("closed", start, time.monotonic()))


def _one_claim(url: str, events: Queue[Any], tag: str) -> None:
    """Claim once, report when it returned, release at once."""
    _worker_setup()
    events.put((f"{tag}-calling", time.monotonic()))
    sample, claim = _timed_claim(url)
    events.put((tag, sample))
    if claim is not None:
        claim.close()


# -- statistics and tables -----------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of non-empty ``values``."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f}" if seconds >= 0.1 else f"{seconds * 1000:.1f}"


@dataclass
class Run:
    """What one batch of claimant processes saw."""

    samples: list[Sample]
    listed: int
    """Claims ``list_claims()`` showed while they were all held."""
    list_s: float
    requests: int
    """Requests the server received during the claims (ZooKeeper: with pings)."""
    fsyncs: tuple[int, float] | None = None
    """etcd only: WAL fsyncs during the claims and the seconds they took."""
    lost: int = 0
    """Claims lost (and made again) while held, until the claims were released."""
    renewal_failures: int = 0
    states: dict[str, int] = field(default_factory=dict)
    """States of the claims when they were released (all "active" when healthy)."""
    notes: list[str] = field(default_factory=list)

    @property
    def good(self) -> list[Sample]:
        return [s for s in self.samples if s[3] is None]

    def problems(self, expected: int) -> list[str]:
        """What went wrong: the summary first, then each failed claim's error."""
        errors: list[str] = []
        good = self.good
        generators = [s[2] for s in good if s[2] is not None]
        if len(set(generators)) != len(generators):
            doubles = sorted({g for g in generators if generators.count(g) > 1})
            errors.append(f"DUPLICATE generator IDs handed out: {doubles}")
        if self.listed != len(good) or len(good) != expected:
            errors.append(f"{len(good)} of {expected} claimed, list_claims() shows {self.listed}")
        errors += self.notes
        if self.lost or self.renewal_failures:
            errors.append(
                f"claims lost while held (each then tried to claim again): {self.lost}; "
                f"failed renewals: {self.renewal_failures}"
            )
        unhealthy = {state: n for state, n in self.states.items() if state != "active"}
        if unhealthy:
            errors.append(f"claims not active when released: {unhealthy}")
        return errors + [s[3] for s in self.samples if s[3] is not None]


@dataclass
class LatencyRow:
    coordinator: str
    claimants: str
    skip: int = 0
    latencies: list[float] = field(default_factory=list)
    spans: list[float] = field(default_factory=list)
    requests: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    run_p99s: list[float] = field(default_factory=list)
    """Each run's own p99, for targets that every run must meet."""
    cpu: list[float] = field(default_factory=list)
    """CPU seconds each claim cost its process (all threads)."""
    floor: LatencyRow | None = None
    """The same claimants connecting and making one trivial request, on the same store."""

    def p99_over_floor(self) -> float | None:
        """This row's p99 as a multiple of its floor's."""
        if self.floor is None or not self.latencies or not self.floor.latencies:
            return None
        return percentile(self.latencies, 99) / percentile(self.floor.latencies, 99)

    def add(self, run: Run, expected: int) -> None:
        good = run.good
        self.errors += run.problems(expected)
        latencies = [end - start for start, end, *_ in good[self.skip :]]
        self.cpu += [sample[4] for sample in good[self.skip :]]
        self.latencies += latencies
        if latencies:
            self.run_p99s.append(percentile(latencies, 99))
        if good and not self.skip:
            self.spans.append(max(s[1] for s in good) - min(s[0] for s in run.samples))
        self.requests.append(run.requests / max(1, len(good)))


@dataclass
class FillRow:
    coordinator: str
    claims: int
    workers: int
    run: Run

    @property
    def total_s(self) -> float:
        good = self.run.good
        return max(s[1] for s in good) - min(s[0] for s in self.run.samples) if good else math.nan

    @property
    def latencies(self) -> list[float]:
        """Claim latencies in the order the claims returned."""
        return [s[1] - s[0] for s in sorted(self.run.good, key=lambda s: s[1])]


@dataclass
class HandoverRow:
    coordinator: str
    ttl_s: float
    case: str
    close_s: float | None = None
    gone_s: float | None = None
    holdoff_s: float | None = None
    claimed_s: float | None = None
    bystander_s: float | None = None
    errors: list[str] = field(default_factory=list)


def _fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


# -- the benchmark -----------------------------------------------------------------------


@dataclass
class Servers:
    zk_hosts: str
    zk_port: int
    etcd_endpoint: str
    four_letter_word: Callable[[int, str], str | None]

    def requests(self, kind: str) -> int:
        """Requests the server has received so far (ZooKeeper: packets, with pings)."""
        if kind == "zk":
            answer = self.four_letter_word(self.zk_port, "mntr") or ""
            for line in answer.splitlines():
                name, _, value = line.partition("\t")
                if name == "zk_packets_received":
                    return int(value)
            return 0
        return round(self._etcd_metric("grpc_server_started_total{"))

    def etcd_fsyncs(self) -> tuple[int, float]:
        """WAL fsyncs etcd has made so far, and the seconds they took."""
        count = self._etcd_metric("etcd_disk_wal_fsync_duration_seconds_count")
        return round(count), self._etcd_metric("etcd_disk_wal_fsync_duration_seconds_sum")

    def _etcd_metric(self, prefix: str) -> float:
        """The sum of every sample of etcd's metric(s) whose line starts with ``prefix``."""
        with urllib.request.urlopen(f"http://{self.etcd_endpoint}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        return sum(
            float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix)
        )

    def queue_ticket(self, root: str) -> None:
        """Leave a ticket at the back of ``root``'s queue (see ``zk-queued``)."""
        from kazoo.client import KazooClient

        client = KazooClient(hosts=self.zk_hosts)
        client.start(timeout=10)
        try:
            client.create(f"{root}/queue/{QUEUED_TICKET}", makepath=True)
        finally:
            client.stop()
            client.close()

    def url(self, kind: str, root: str, **options: object) -> str:
        query = "&".join(f"{key}={value}" for key, value in options.items())
        host = self.zk_hosts if kind == "zk" else self.etcd_endpoint
        return f"{kind}://{host}{root}" + (f"?{query}" if query else "")


ZK_SYNCED = {"forceSync": "yes", "preAllocSize": "65536"}
"""ZooKeeper's own defaults, as production runs it: the transaction log is fsync'ed
before a write is answered, and grows in 64 MiB steps (the test harness turns both
off)."""


@contextlib.contextmanager
def private_servers(*, zk_force_sync: bool = True) -> Iterator[Servers]:
    """A standalone ZooKeeper and a one-member etcd on free ports, from the test harness.

    ZooKeeper syncs its log as production does unless ``zk_force_sync`` is False.
    """
    sys.path.insert(0, str(REPO))
    from tests.servers.etcd import EtcdCluster
    from tests.servers.zookeeper import ZooKeeperEnsemble, four_letter_word

    with tempfile.TemporaryDirectory(prefix="idmint-bench-") as tmp:
        zookeeper = ZooKeeperEnsemble(
            1, Path(tmp) / "zk", extra_cfg=ZK_SYNCED if zk_force_sync else None
        )
        etcd = EtcdCluster(1, Path(tmp) / "etcd")
        try:
            zookeeper.start()
            etcd.start()
            yield Servers(
                zookeeper.hosts, zookeeper.client_port(0), etcd.endpoints[0], four_letter_word
            )
        finally:
            zookeeper.stop()
            etcd.stop()


def fresh_root() -> str:
    return f"/bench-{uuid.uuid4().hex[:12]}"


class Bench:
    def __init__(self, servers: Servers, ctx: ForkServerContext) -> None:
        self.servers = servers
        self.ctx = ctx

    def _collect(self, results: Queue[Any], expected: int, timeout: float) -> list[Sample]:
        """Samples until ``expected`` have come or ``timeout`` has passed."""
        samples: list[Sample] = []
        deadline = time.monotonic() + timeout
        while len(samples) < expected:
            try:
                samples += results.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
        return samples

    def _join(self, processes: Sequence[BaseProcess], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        for process in processes:
            process.join(max(0.1, deadline - time.monotonic()))
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGKILL)
                process.join()

    def _list(self, url: str) -> tuple[int, float, str | None]:
        """How many claims ``list_claims()`` shows, how long it took, what went wrong."""
        from idmint.coordinate import connect

        start = time.monotonic()
        try:
            coordinator = connect(url)
            try:
                rows = coordinator.list_claims()
            finally:
                coordinator.close()
        except Exception as error:
            return -1, time.monotonic() - start, f"{type(error).__name__}: {error}"
        return len(rows), time.monotonic() - start, None

    def _run(
        self,
        kind: str,
        url: str,
        workers: Sequence[tuple[Any, tuple[Any, ...]]],
        *,
        expected: int,
        limit_s: float,
        while_held: Callable[[], None] | None = None,
    ) -> Run:
        """Start ``(target, args)`` workers, collect ``expected`` samples (or stop after
        ``limit_s``), run ``while_held`` if given, then release their claims."""
        results: Queue[Any] = self.ctx.Queue()
        release, release_all = self.ctx.Pipe(duplex=False)
        processes = [
            self.ctx.Process(target=target, args=(url, *args, results, release))
            for target, args in workers
        ]
        before = self.servers.requests(kind)
        fsyncs = self.servers.etcd_fsyncs() if kind == "etcd" else None
        for process in processes:
            process.start()
        samples: list[Sample] = []
        requests = 0
        try:
            samples = self._collect(results, expected, limit_s)
            requests = self.servers.requests(kind) - before
            if fsyncs is not None:
                count, took = self.servers.etcd_fsyncs()
                fsyncs = (count - fsyncs[0], took - fsyncs[1])
            if while_held is not None:
                while_held()
        finally:
            listed, list_s, list_error = self._list(url)
            release_all.close()  # EOF wakes every holder at once
            lost = failures = reported = 0
            states: collections.Counter[str] = collections.Counter()
            deadline = time.monotonic() + 90
            while reported < len(processes):
                try:  # a worker that died, or is still stuck in a claim, reports nothing
                    message = results.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if message and message[0] == "losses":  # not a claim that came in late
                    reported += 1
                    lost += message[1]
                    failures += message[2]
                    states.update(message[3])
            silent = len(processes) - reported
            self._join(processes, 120)
            release.close()
        run = Run(samples, listed, list_s, requests, fsyncs, lost, failures, dict(states))
        if silent:
            run.notes.append(f"{silent} worker(s) did not report their claims' states")
        if len(samples) < expected:
            run.notes.append(
                f"stopped after {limit_s:g} s with {len(samples)} of {expected} claims"
            )
        if list_error:
            run.notes.append(f"list_claims() failed: {list_error}")
        return run

    # 1. claim latency ------------------------------------------------------------------
    def latency_rows(
        self, runs: int, claimants: int, cases: Sequence[str], *, threads: bool = True
    ) -> list[LatencyRow]:
        rows: list[LatencyRow] = []
        for name in cases:
            label, kind, options = LATENCY_CASES[name]
            for as_threads in (False, True) if threads else (False,):
                how = f"{claimants} threads, 1 process" if as_threads else f"{claimants} processes"
                row = LatencyRow(label, how)
                for _ in range(runs):
                    root = fresh_root()
                    if name == "zk-queued":
                        self.servers.queue_ticket(root)
                    url = self.servers.url(kind, root, **options)
                    if as_threads:
                        workers: list[tuple[Any, tuple[Any, ...]]] = [
                            (_claimant_threads, (claimants,))
                        ]
                    else:
                        barrier = self.ctx.Barrier(claimants)
                        workers = [(_claimant_process, (barrier,))] * claimants
                    run = self._run(kind, url, workers, expected=claimants, limit_s=60)
                    row.add(run, claimants)
                rows.append(row)
            # The floor: one claimant alone, claims one after the other (all held).
            row = LatencyRow(label, "1 process, alone", skip=2)  # 2 warm-up claims
            root = fresh_root()
            if name == "zk-queued":
                self.servers.queue_ticket(root)
            url = self.servers.url(kind, root, **options)
            alone = [(_filler, (22, self.ctx.Barrier(1)))]
            row.add(self._run(kind, url, alone, expected=22, limit_s=60), 22)
            rows.append(row)
        return rows

    # 2. pool fill --------------------------------------------------------------------
    def fill(
        self, label: str, kind: str, claims: int, workers: int, limit_s: float, **options: object
    ) -> FillRow:
        if claims < 2048:
            options = {**options, "generators": f"0-{claims - 1}"}
        url = self.servers.url(kind, fresh_root(), **options)
        barrier = self.ctx.Barrier(workers)
        shares = [claims // workers + (i < claims % workers) for i in range(workers)]
        fillers = [(_filler, (share, barrier)) for share in shares]
        run = self._run(kind, url, fillers, expected=claims, limit_s=limit_s)
        return FillRow(label, claims, workers, run)

    # 3. hand-over ----------------------------------------------------------------------
    def handover(
        self, label: str, kind: str, ttl_s: int, case: str, **options: object
    ) -> HandoverRow:
        ttl_option = "session_timeout" if kind == "zk" else "ttl"
        root = fresh_root()
        common = {**options, ttl_option: ttl_s, "claim_timeout": 120}
        url = self.servers.url(kind, root, generators="0-0", **common)
        bystander_url = self.servers.url(kind, root, generators="1-1", **common)
        row = HandoverRow(label, ttl_s, case)
        events: Queue[Any] = self.ctx.Queue()
        told, close_now = self.ctx.Pipe(duplex=False)
        holder = self.ctx.Process(target=_holder, args=(url, events, told))
        holder.start()
        spawned: list[BaseProcess] = [holder]
        try:
            self._handover(
                row,
                kind=kind,
                root=root,
                url=url,
                bystander_url=bystander_url,
                events=events,
                close_now=close_now,
                holder=holder,
                spawned=spawned,
            )
        except Exception as error:
            row.errors.append(f"{type(error).__name__}: {error}")
        finally:
            with contextlib.suppress(OSError):
                close_now.send("close")
            self._join(spawned)
            told.close()
            close_now.close()
        return row

    def _handover(
        self,
        row: HandoverRow,
        *,
        kind: str,
        root: str,
        url: str,
        bystander_url: str,
        events: Queue[Any],
        close_now: Connection,
        holder: BaseProcess,
        spawned: list[BaseProcess],
    ) -> None:
        got: dict[str, Any] = {}

        def expect(name: str, timeout: float) -> Any:
            deadline = time.monotonic() + timeout
            while name not in got:
                item = events.get(timeout=max(0.1, deadline - time.monotonic()))
                got[item[0]] = item[1:]
            return got[name]

        (sample, _pid) = expect("held", 30)
        if sample[3] is not None:
            raise RuntimeError(f"the holder could not claim: {sample[3]}")
        successor = self.ctx.Process(target=_one_claim, args=(url, events, "successor"))
        successor.start()
        spawned.append(successor)
        expect("successor-calling", 30)
        time.sleep(1.5)  # let it reach its wait for the ID to come free
        if "successor" in got:
            raise RuntimeError("the successor claimed while the holder held generator 0")
        probe = _KeyProbe(kind, self.servers, root)
        bystander = self.ctx.Process(target=_one_claim, args=(bystander_url, events, "bystander"))
        if row.case == "kill":
            assert holder.pid is not None
            zero = time.monotonic()
            zero_wall_ms = time.time_ns() // 1_000_000
            os.kill(holder.pid, signal.SIGKILL)
        else:
            close_now.send("close")
            start, zero = expect("closed", 30)
            zero_wall_ms = time.time_ns() // 1_000_000 - round((time.monotonic() - zero) * 1000)
            row.close_s = zero - start
        bystander.start()
        spawned.append(bystander)
        gone = probe.wait_gone(timeout=120)
        row.gone_s = gone - zero
        mark = probe.mark()
        if mark is not None:
            ttl_ms = round(float(row.ttl_s) * 1000)
            row.holdoff_s = (mark.holdoff_until_ms(ttl_ms, 1000) - zero_wall_ms) / 1000
        (claimed,) = expect("successor", 150)
        if claimed[3] is not None:
            raise RuntimeError(f"the successor failed: {claimed[3]}")
        row.claimed_s = claimed[1] - zero
        (by,) = expect("bystander", 150)
        if by[3] is not None:
            row.errors.append(f"bystander failed: {by[3]}")
        else:
            row.bystander_s = by[1] - by[0]
        probe.close()


class _KeyProbe:
    """Polls the claim key of generator 0 and reads its high-water mark."""

    def __init__(self, kind: str, servers: Servers, root: str) -> None:
        from idmint.coordinate import connect

        self.kind = kind
        self.root = root
        coordinator: Any = connect(servers.url(kind, root))  # the driver's own attributes
        self.coordinator = coordinator
        self.client: Any = None
        if kind == "zk":
            self.client, _ = self.coordinator.client()
        self.exists: Callable[[], bool]
        if kind == "zk":
            self.exists = lambda: self.client.exists(f"{root}/pool/0") is not None
        else:
            gateway = self.coordinator.gateway
            self.exists = lambda: gateway.get(f"{root}/pool/0:0") is not None

    def wait_gone(self, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while self.exists():
            if time.monotonic() > deadline:
                raise TimeoutError("the holder's claim key never went away")
            time.sleep(0.02)
        return time.monotonic()

    def mark(self) -> Any:
        if self.kind == "zk":
            from idmint.coordinate.zookeeper import read_mark

            mark, _ = read_mark(self.client, f"{self.root}/hwm/0")
            return mark
        marks = self.coordinator.read_marks()
        found = marks.get((0, 0))
        return found[0] if found else None

    def close(self) -> None:
        if self.client is not None:
            self.client.stop()
            self.client.close()
        self.coordinator.close()


def run_concurrently(jobs: Sequence[Callable[[], HandoverRow]]) -> list[HandoverRow]:
    rows: list[HandoverRow | None] = [None] * len(jobs)

    def run(index: int) -> None:
        rows[index] = jobs[index]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [row for row in rows if row is not None]


# -- output ------------------------------------------------------------------------------


def print_latency(rows: list[LatencyRow], runs: int) -> None:
    print(
        "\n### Claim latency: concurrent `new_generator(..., coordinator=url)` to its first ID, "
        f"{runs} run(s) pooled\n"
    )
    print(
        "| coordinator | claimants | n | p50 ms | p99 ms | max ms | all claimed s "
        "| server requests per claim | client CPU ms per claim | p99 of each run ms |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for row in rows:
        values = row.latencies
        span = f"{statistics.median(row.spans):.2f}" if row.spans else "-"
        if values:
            cells = f"{ms(percentile(values, 50))} | {ms(percentile(values, 99))} | "
            cells += ms(max(values))
        else:
            cells = "- | - | -"
        requests = f"{statistics.mean(row.requests):.1f}" if row.requests else "-"
        each = ", ".join(ms(p99) for p99 in row.run_p99s) if len(row.run_p99s) > 1 else "-"
        threads = "threads" in row.claimants  # one process's CPU is every claim's
        cpu = f"{statistics.mean(row.cpu) * 1000:.1f}" if row.cpu and not threads else "-"
        print(
            f"| {row.coordinator} | {row.claimants} | {len(values)} | {cells} | {span} "
            f"| {requests} | {cpu} | {each} |"
        )
    _print_errors((row.coordinator, row.claimants, row.errors) for row in rows)
    ratios = [(row, row.p99_over_floor()) for row in rows]
    print("\n| store | claimants | p99 ms | floor p99 ms | p99 / floor |")
    print("|---|---|---:|---:|---:|")
    for row, ratio in ratios:
        if ratio is not None and row.floor is not None:
            print(
                f"| {row.coordinator} | {row.claimants} | {ms(percentile(row.latencies, 99))} "
                f"| {ms(percentile(row.floor.latencies, 99))} | {ratio:.1f} |"
            )


def print_fill(rows: list[FillRow], ttl_s: int) -> None:
    print(f"\n### Filling the pool: each claim its own session / lease ({ttl_s} s), all held\n")
    print(
        "| coordinator | claims | workers | total s | claims/s | p50 ms | p99 ms "
        "| p50 first 1/4 ms | p50 last 1/4 ms | server requests per claim "
        "| list_claims() s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        values = row.latencies
        quarter = max(1, len(values) // 4)
        if values:
            cells = (
                f"{ms(percentile(values, 50))} | {ms(percentile(values, 99))} | "
                f"{ms(statistics.median(values[:quarter]))} | "
                f"{ms(statistics.median(values[-quarter:]))}"
            )
        else:
            cells = "- | - | - | -"
        rate = len(values) / row.total_s if row.total_s else math.nan
        requests = row.run.requests / max(1, len(values))
        claimed = f"{len(values):,}"
        if len(values) < row.claims:
            claimed += f" of {row.claims:,}"
        print(
            f"| {row.coordinator} | {claimed} | {row.workers} | {row.total_s:.1f} | "
            f"{rate:,.0f} | {cells} | {requests:.1f} | {row.run.list_s:.2f} |"
        )
    for row in rows:
        if row.run.fsyncs:
            count, took = row.run.fsyncs
            print(
                f"\n{row.coordinator}: {count:,} WAL fsyncs during the fill, "
                f"{took / max(1, count) * 1000:.1f} ms each on average, {took:.1f} s in all."
            )
    _print_errors((row.coordinator, f"{row.claims}", row.run.problems(row.claims)) for row in rows)


def print_handover(rows: list[HandoverRow]) -> None:
    print("\n### Hand-over of generators=0-0 to a waiting successor (seconds)\n")
    print(
        "Zero is the SIGKILL, or the return of the holder's `close()`. *key gone*: the "
        "ephemeral node / leased key disappeared (session or lease expiry, or the "
        "release); *hold-off ends*: `holdoff_until_ms` of the holder's mark; "
        "*claimed*: the successor's `claim()` returned; *bystander*: latency of a "
        "`generators=1-1` claim started at zero.\n"
    )
    print(
        "| coordinator | TTL s | case | close() | key gone | hold-off ends | claimed "
        "| claimed - max(gone, hold-off) | bystander |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        late = None
        if row.claimed_s is not None and row.gone_s is not None:
            late = row.claimed_s - max(row.gone_s, row.holdoff_s or -math.inf)
        print(
            f"| {row.coordinator} | {row.ttl_s:g} | {row.case} | {_fmt_s(row.close_s)} | "
            f"{_fmt_s(row.gone_s)} | {_fmt_s(row.holdoff_s)} | {_fmt_s(row.claimed_s)} | "
            f"{_fmt_s(late)} | {_fmt_s(row.bystander_s)} |"
        )
    _print_errors((row.coordinator, f"{row.ttl_s:g} s {row.case}", row.errors) for row in rows)


def _print_errors(items: Iterable[tuple[str, str, list[str]]]) -> None:
    for name, what, errors in items:
        for error in list(dict.fromkeys(errors))[:10]:
            count = errors.count(error)
            print(f"\n**{name}, {what}:** {f'{count} x ' if count > 1 else ''}{error}")


# -- PostgreSQL and Redis -------------------------------------------------------------------
# The database coordinators, in the same run as ZooKeeper and etcd: their own servers,
# pools and cases, through the same claimant processes and Bench._run.

STORE_PRELOAD = [
    "idmint.coordinate.postgres",
    "idmint.coordinate.redis",
    "idmint.coordinate.mysql",
    "psycopg",
    "redis",
    "pymysql",
]
STORE_KINDS = (("PostgreSQL", "postgres"), ("Redis", "redis"), ("MariaDB", "mysql"))


@dataclass
class StoreServers:
    """A PostgreSQL and a Redis server of the benchmark's own, requests counted on each.

    PostgreSQL counts statements with ``pg_stat_statements`` (a connection's
    start-up is not a statement; the set-up statement a new connection sends with
    its first request is); each reading leaves out the readings before it, so the
    difference of two is what others asked for between them. Redis counts the
    commands clients sent, as ``MONITOR`` shows them, leaving out those scripts
    ran (``INFO commandstats`` counts both).
    """

    postgres: Any
    redis: Any
    mariadb: Any
    database: str
    """The PostgreSQL database of the pools (the claims tests')."""
    _pg_admin: Any = None
    _redis_admin: Any = None
    _readings: collections.Counter[str] = field(default_factory=collections.Counter)
    _redis_commands: Any = None
    """tests.servers.redis.RedisCommands, from the first reading on."""

    def backend(self, kind: str) -> Any:
        """The claims tests' description of the store (URLs, pools)."""
        from tests.integration.claims_helpers import Backend

        servers = {"postgres": self.postgres, "redis": self.redis, "mysql": self.mariadb}
        return Backend(kind, servers[kind])

    def url(self, kind: str, root: str, **options: object) -> str:
        ttl = options.pop("ttl", None)
        url: str = self.backend(kind).url(root, ttl=ttl, **options)
        return url

    def requests(self, kind: str) -> int:
        """Requests the server has answered so far (PostgreSQL: statements)."""
        if kind == "postgres":
            own = self._readings[kind]
            self._readings[kind] += 1
            row = (
                self._pg()
                .execute(
                    "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s "
                    "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s",
                    (self.database,),
                )
                .fetchone()
            )
            return int(row[0]) - own
        if kind == "mysql":
            # Statements clients sent; each reading is one more.
            own = self._readings[kind]
            self._readings[kind] += 1
            rows = self.mariadb.sql("SHOW GLOBAL STATUS LIKE 'Questions'")
            return int(rows[0][1]) - own
        if self._redis_commands is None:
            self._redis_commands = self.redis.commands()
        return len(self._redis_commands.sent())

    def settled_pool(self, kind: str) -> str:
        """A new pool whose record says it has been seen since long ago in the store's
        current incarnation: claims need not settle (see docs/coordination.md)."""
        from tests.integration.claims_helpers import settle_pool

        backend = self.backend(kind)
        root: str = backend.new_root(settled=False)
        settle_pool(backend, root)
        return root

    def new_pool(self, kind: str) -> str:
        """A pool that does not exist yet: its first claims settle."""
        root: str = self.backend(kind).new_root(settled=False)
        return root

    def restart(self, kind: str) -> None:
        """Restart the server: a new incarnation (Redis comes back empty)."""
        if kind == "postgres":
            self._close_pg()
            self.postgres.stop()
            self.postgres.start()
        elif kind == "mysql":
            self.mariadb.restart()
            self._readings[kind] = 0  # its count starts again from 0
        else:
            self._close_redis()
            if self._redis_commands is not None:  # its count starts again from 0
                self._redis_commands.close()
                self._redis_commands = None
            self.redis.restart()

    def _pg(self) -> Any:
        if self._pg_admin is None or self._pg_admin.closed:
            import psycopg

            self._pg_admin = psycopg.connect(
                **self.postgres.connection_settings(self.database), autocommit=True
            )
        return self._pg_admin

    def _redis(self) -> Any:
        if self._redis_admin is None:
            self._redis_admin = self.redis.client()
        return self._redis_admin

    def _close_pg(self) -> None:
        if self._pg_admin is not None:
            self._pg_admin.close()
            self._pg_admin = None

    def _close_redis(self) -> None:
        if self._redis_admin is not None:
            self._redis_admin.close()
            self._redis_admin = None

    def close(self) -> None:
        self._close_pg()
        self._close_redis()
        if self._redis_commands is not None:
            self._redis_commands.close()


@contextlib.contextmanager
def private_store_servers(*, pg_fsync: bool = True) -> Iterator[StoreServers]:
    """PostgreSQL (the test harness's settings, but flushing its log at each commit as
    production does unless ``pg_fsync`` is False) and Redis without persistence (what
    the driver is built to survive), on free ports."""
    sys.path.insert(0, str(REPO))
    from tests.integration.claims_helpers import CLAIMS_DATABASE
    from tests.servers.mariadb import MariaDbServer
    from tests.servers.postgres import FAST_SETTINGS, PostgresServer
    from tests.servers.redis import RedisServer

    with tempfile.TemporaryDirectory(prefix="idmint-bench-stores-") as tmp:
        settings = {
            **FAST_SETTINGS,
            **(
                {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
                if pg_fsync
                else {}
            ),
            "max_connections": "300",
            "shared_preload_libraries": "pg_stat_statements",
            "pg_stat_statements.track_utility": "on",
            "pg_stat_statements.track_planning": "on",
        }
        postgres = PostgresServer(Path(tmp) / "postgres", settings=settings)
        redis = RedisServer(Path(tmp) / "redis", persistence=False)
        mariadb = MariaDbServer(Path(tmp) / "mariadb")
        servers = StoreServers(postgres, redis, mariadb, CLAIMS_DATABASE)
        try:
            postgres.start()
            postgres.create_database(CLAIMS_DATABASE)
            postgres.psql("CREATE EXTENSION pg_stat_statements", CLAIMS_DATABASE)
            redis.start()
            mariadb.start()
            mariadb.create_database(CLAIMS_DATABASE)
            yield servers
        finally:
            servers.close()
            postgres.close()
            redis.stop()
            mariadb.close()


def store_latency_rows(
    bench: Bench, runs: int, claimants: int, *, threads: bool = True
) -> list[LatencyRow]:
    """Claim latency on settled pools (64 processes, 64 threads, one alone), then 64
    processes on a brand-new pool, whose first claims settle (TTL + skew)."""
    servers: StoreServers = bench.servers  # type: ignore[assignment]
    rows: list[LatencyRow] = []
    for label, kind in STORE_KINDS:
        for as_threads in (False, True) if threads else (False,):
            how = f"{claimants} threads, 1 process" if as_threads else f"{claimants} processes"
            row = LatencyRow(label, how)
            for _ in range(runs):
                url = servers.url(kind, servers.settled_pool(kind))
                if as_threads:
                    workers: list[tuple[Any, tuple[Any, ...]]] = [(_claimant_threads, (claimants,))]
                else:
                    barrier = bench.ctx.Barrier(claimants)
                    workers = [(_claimant_process, (barrier,))] * claimants
                row.add(bench._run(kind, url, workers, expected=claimants, limit_s=60), claimants)
            rows.append(row)
            if not as_threads:
                claims = row
        row = LatencyRow(label, "1 process, alone", skip=2)
        url = servers.url(kind, servers.settled_pool(kind))
        alone = [(_filler, (22, bench.ctx.Barrier(1)))]
        row.add(bench._run(kind, url, alone, expected=22, limit_s=60), 22)
        rows.append(row)
        row = LatencyRow(
            f"{label}: connect + 1 request, no claim (the floor)", f"{claimants} processes"
        )
        bare = servers.url(kind, servers.new_pool(kind)).split("?")[0]  # the client's own
        barrier = bench.ctx.Barrier(claimants)
        workers = [(_connecting_process, (barrier,))] * claimants
        run = bench._run(kind, bare, workers, expected=claimants, limit_s=60)
        run.listed = len(run.good)  # no claims, so none listed
        row.add(run, claimants)
        rows.append(row)
        claims.floor = row
        row = LatencyRow(f"{label}, brand-new pool (settles TTL + skew)", f"{claimants} processes")
        url = servers.url(kind, servers.new_pool(kind))
        barrier = bench.ctx.Barrier(claimants)
        workers = [(_claimant_process, (barrier,))] * claimants
        row.add(bench._run(kind, url, workers, expected=claimants, limit_s=90), claimants)
        rows.append(row)
    return rows


def store_fill(
    bench: Bench, label: str, kind: str, *, claims: int, workers: int, limit_s: float, ttl_s: int
) -> FillRow:
    """The pool fill of :meth:`Bench.fill` on a settled pool of ``kind``."""
    servers: StoreServers = bench.servers  # type: ignore[assignment]
    options: dict[str, object] = {"ttl": ttl_s}
    if claims < 2048:
        options["generators"] = f"0-{claims - 1}"
    url = servers.url(kind, servers.settled_pool(kind), **options)
    barrier = bench.ctx.Barrier(workers)
    shares = [claims // workers + (i < claims % workers) for i in range(workers)]
    run = bench._run(
        kind,
        url,
        [(_filler, (share, barrier)) for share in shares],
        expected=claims,
        limit_s=limit_s,
    )
    return FillRow(label, claims, workers, run)


@dataclass
class LoadRow:
    """Requests a server answered while ``holders`` claims were held, nothing else asked."""

    coordinator: str
    holders: int
    ttl_s: float
    seconds: float = math.nan
    requests: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def per_s(self) -> float:
        return self.requests / self.seconds

    @property
    def per_holder_per_minute(self) -> float:
        return self.per_s * 60 / self.holders


def renewal_load(
    bench: Bench,
    label: str,
    kind: str,
    url: str,
    *,
    holders: int,
    workers: int,
    ttl_s: float,
    window_s: float,
) -> LoadRow:
    """Hold ``holders`` claims, wait a renewal, count the server's requests for ``window_s``."""
    row = LoadRow(label, holders, ttl_s)
    workers = min(workers, holders)
    barrier = bench.ctx.Barrier(workers)
    shares = [holders // workers + (i < holders % workers) for i in range(workers)]

    def count_while_held() -> None:
        time.sleep(ttl_s / 3)  # every claim has renewed once: the steady state
        before = bench.servers.requests(kind)
        start = time.monotonic()
        time.sleep(window_s)
        row.requests = bench.servers.requests(kind) - before
        row.seconds = time.monotonic() - start

    fillers = [(_filler, (share, barrier)) for share in shares]
    run = bench._run(kind, url, fillers, expected=holders, limit_s=120, while_held=count_while_held)
    row.errors += run.problems(holders)
    return row


def load_rows(bench: Bench, store_bench: Bench, holders: int, window_s: float) -> list[LoadRow]:
    """The renewal load of ``holders`` claims at the default TTL (10 s) on each server,
    and of one claim alone on each database."""
    stores: StoreServers = store_bench.servers  # type: ignore[assignment]
    ttl = 10
    workers = 16
    cases = [
        (bench, "ZooKeeper", "zk", bench.servers.url("zk", fresh_root(), queue="false")),
        (bench, "etcd", "etcd", bench.servers.url("etcd", fresh_root())),
    ]
    for label, kind in STORE_KINDS:
        cases.append((store_bench, label, kind, stores.url(kind, stores.settled_pool(kind))))
    rows = [
        renewal_load(
            on, label, kind, url, holders=holders, workers=workers, ttl_s=ttl, window_s=window_s
        )
        for on, label, kind, url in cases
    ]
    for label, kind in STORE_KINDS:
        url = stores.url(kind, stores.settled_pool(kind))
        rows.append(
            renewal_load(
                store_bench, label, kind, url, holders=1, workers=1, ttl_s=ttl, window_s=window_s
            )
        )
    return rows


@dataclass
class ForgettingRow:
    """Time to the first ID of a claim on one ID, its predecessor's mark proven or not."""

    coordinator: str
    ttl_s: float
    case: str
    first_id_s: float = math.nan
    proven: bool | None = None
    requests: int | None = None
    errors: list[str] = field(default_factory=list)


def _first_id(url: str) -> tuple[float, bool, Any]:
    """Seconds from ``new_generator`` to its first ID; whether the claim was proven."""
    from idmint import new_generator

    start = time.monotonic()
    generator = new_generator("uid64", coordinator=url)
    generator.generate()
    took = time.monotonic() - start
    return took, bool(getattr(generator.claim, "proven", False)), generator


def forgetting_rows(store_bench: Bench, ttls: Sequence[int]) -> list[ForgettingRow]:
    """The cost of the guarantee for a store that forgets: generator 0 of a settled pool,
    claimed after a clean release in the store's current incarnation (the mark is
    proven), and after the store restarted (a new incarnation: nothing is proven, the
    claim settles TTL + skew). Each claim is made once the release's hold-off has
    passed, so that only the settling shows."""
    servers: StoreServers = store_bench.servers  # type: ignore[assignment]
    skew_s = 1.0
    rows: list[ForgettingRow] = []
    for ttl in ttls:
        for label, kind in STORE_KINDS:
            url = servers.url(
                kind, servers.settled_pool(kind), ttl=ttl, generators="0-0", claim_timeout=60
            )
            proven = ForgettingRow(label, ttl, "a mark of this incarnation (proven)")
            restarted = ForgettingRow(label, ttl, "after a restart (a new incarnation)")
            try:
                _, _, first = _first_id(url)
                first.close()
                time.sleep(ttl + skew_s + 0.2)  # the release's hold-off
                before = servers.requests(kind)
                proven.first_id_s, proven.proven, second = _first_id(url)
                proven.requests = servers.requests(kind) - before
                second.close()
                time.sleep(ttl + skew_s + 0.2)
                servers.restart(kind)
                restarted.first_id_s, restarted.proven, third = _first_id(url)
                third.close()
            except Exception as error:
                restarted.errors.append(f"{type(error).__name__}: {error}")
            rows += [proven, restarted]
    return rows


class RoundTrips:
    """A TCP relay in front of a server that counts round trips: each time the server
    answers after the client spoke, whatever the protocol (pipelined requests
    answered together count once; TCP's own handshake not at all)."""

    def __init__(self, target: tuple[str, int]) -> None:
        import socket

        self.target = target
        self.count = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket

        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            threading.Thread(target=self._relay, args=(client, server), daemon=True).start()

    def _relay(self, client: Any, server: Any) -> None:
        import selectors

        spoke = False  # the client sent something the server has not answered yet
        with selectors.DefaultSelector() as selector:
            selector.register(client, selectors.EVENT_READ, server)
            selector.register(server, selectors.EVENT_READ, client)
            while True:
                for key, _ in selector.select():
                    try:
                        data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    except OSError:
                        data = b""
                    if not data:
                        client.close()
                        server.close()
                        return
                    if key.fileobj is client:
                        spoke = True
                    elif spoke:
                        spoke = False
                        with self._lock:
                            self.count += 1
                    key.data.sendall(data)

    def close(self) -> None:
        self._listener.close()


def _claims_one_by_one(url: str, steps: Connection, results: Queue[Any]) -> None:
    """Claim once (a new process, no connection yet), report; claim again when told
    (connected now), report; release both when told."""
    _worker_setup()
    held = []
    for _ in range(2):
        steps.recv()
        sample, claim = _timed_claim(url)
        held.append(claim)
        results.put(sample)
    steps.recv()
    for claim in held:
        if claim is not None:
            claim.close()
    results.put("closed")


@dataclass
class RoundTripRow:
    coordinator: str
    first: int | None = None
    """Round trips of the first claim of a new process (connecting included)."""
    second: int | None = None
    """Round trips of a second claim in the same process (connected)."""
    errors: list[str] = field(default_factory=list)


def round_trip_rows(bench: Bench, store_bench: Bench) -> list[RoundTripRow]:
    """Round trips of one claim alone on a settled pool, through a counting relay."""
    stores: StoreServers = store_bench.servers  # type: ignore[assignment]
    host, _, port = bench.servers.etcd_endpoint.rpartition(":")
    cases: list[tuple[str, tuple[str, int], Callable[[str], str]]] = [
        ("etcd", (host, int(port)), lambda at: f"etcd://{at}{fresh_root()}")
    ]
    for label, kind in STORE_KINDS:
        server = stores.backend(kind).server
        root = stores.settled_pool(kind)
        direct = stores.url(kind, root)
        # A server that has run the scripts before, as a fleet's has (a Redis that
        # has not answers the first EVALSHA of each script with NOSCRIPT: one more
        # round trip for each, once in its life).
        _, _, generator = _first_id(direct)
        generator.close()
        where = f"{server.host}:{server.port}"
        cases.append((label, (server.host, server.port), partial(_via, direct=direct, where=where)))
        if kind == "postgres":  # without libpq's offer of TLS, which a server without refuses
            plain = f"{direct}&sslmode=disable"
            cases.append(
                (
                    f"{label}, sslmode=disable",
                    (server.host, server.port),
                    partial(_via, direct=plain, where=where),
                )
            )
    rows = []
    for label, target, url_at in cases:
        row = RoundTripRow(label)
        relay = RoundTrips(target)
        url = url_at(f"127.0.0.1:{relay.port}")
        results: Queue[Any] = bench.ctx.Queue()
        steps, tell = bench.ctx.Pipe(duplex=False)
        process = bench.ctx.Process(target=_claims_one_by_one, args=(url, steps, results))
        process.start()
        try:
            row.first, row.second = (_counted_claim(relay, tell, results) for _ in range(2))
            tell.send("close")
            results.get(timeout=60)
        except Exception as error:
            row.errors.append(f"{type(error).__name__}: {error}")
        finally:
            bench._join([process], 30)
            relay.close()
        rows.append(row)
    return rows


def _counted_claim(relay: RoundTrips, tell: Connection, results: Queue[Any]) -> int:
    """Round trips of the claim the worker makes when told."""
    before = relay.count
    tell.send("claim")
    sample = results.get(timeout=60)
    if sample[3] is not None:
        raise RuntimeError(sample[3])
    return relay.count - before


def _via(at: str, *, direct: str, where: str) -> str:
    return direct.replace(where, at, 1)


def _server_cpu_s(pgid: int) -> float:
    """CPU seconds the processes of group ``pgid`` used (those they waited for included)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[2]) == pgid:
            total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    return total / os.sysconf("SC_CLK_TCK")


def _etcd_pid(endpoint: str) -> int:
    """The etcd process serving ``endpoint`` (host:port), by its command line."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                argv = cmdline.read().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"etcd") and any(endpoint.encode() in arg for arg in argv):
            return int(entry)
    raise RuntimeError(f"no etcd process serves {endpoint}")


@dataclass
class CpuRow:
    coordinator: str
    claims: int = 0
    client_s: list[float] = field(default_factory=list)
    server_s: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def cpu_rows(bench: Bench, store_bench: Bench, runs: int, claimants: int) -> list[CpuRow]:
    """CPU time per claim, the claimant's and the server's, of 64 processes claiming at
    once (settled pools): what the latency of many claimants on few cores comes from,
    and less sensitive than the latency to what else the machine runs."""
    stores: StoreServers = store_bench.servers  # type: ignore[assignment]
    cases: list[tuple[Bench, str, str, Callable[[], str], int]] = [
        (
            bench,
            "etcd",
            "etcd",
            lambda: bench.servers.url("etcd", fresh_root()),
            _etcd_pid(bench.servers.etcd_endpoint),
        ),
        *(
            (
                store_bench,
                label,
                kind,
                partial(_settled_url, stores, kind),
                stores.backend(kind).server.process.pid,
            )
            for label, kind in STORE_KINDS
        ),
    ]
    rows = []
    for on, label, kind, new_url, pgid in cases:
        row = CpuRow(label)
        for _ in range(runs):
            barrier = on.ctx.Barrier(claimants)
            before = _server_cpu_s(pgid)
            after: list[float] = []
            run = on._run(
                kind,
                new_url(),
                [(_claimant_process, (barrier,))] * claimants,
                expected=claimants,
                limit_s=60,
                while_held=lambda: after.append(_server_cpu_s(pgid)),  # noqa: B023
            )
            row.errors += run.problems(claimants)
            row.claims += len(run.good)
            row.latencies += [end - start for start, end, *_ in run.good]
            row.client_s += [cpu for *_, cpu in run.good]
            row.server_s += after[0] - before if after else math.nan
        rows.append(row)
    return rows


def _settled_url(stores: StoreServers, kind: str) -> str:
    return stores.url(kind, stores.settled_pool(kind))


def print_cpu(rows: list[CpuRow], claimants: int) -> None:
    print(
        f"\n### CPU per claim: {claimants} processes claiming at once (settled pools), "
        "the claimant's from `new_generator` to its first ID, the server's over the claims\n"
    )
    print(
        "| coordinator | claims | claimant ms (median) | claimant ms (mean) "
        "| server ms (mean) | claimant + server ms | p99 latency ms |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        if not row.claims:
            print(f"| {row.coordinator} | 0 | - | - | - | - | - |")
            continue
        client = statistics.mean(row.client_s) * 1000
        server = row.server_s / row.claims * 1000
        print(
            f"| {row.coordinator} | {row.claims} | {statistics.median(row.client_s) * 1000:.1f} "
            f"| {client:.1f} | {server:.1f} | {client + server:.1f} "
            f"| {ms(percentile(row.latencies, 99))} |"
        )
    _print_errors((row.coordinator, "CPU", row.errors) for row in rows)


def print_round_trips(rows: list[RoundTripRow]) -> None:
    print(
        "\n### Round trips of one claim alone (settled pool), counted by a relay in front of "
        "the server\n"
    )
    print("| coordinator | first claim of a new process | a second claim, connected |")
    print("|---|---:|---:|")
    for row in rows:
        first = "-" if row.first is None else str(row.first)
        second = "-" if row.second is None else str(row.second)
        print(f"| {row.coordinator} | {first} | {second} |")
    _print_errors((row.coordinator, "round trips", row.errors) for row in rows)


def print_load(rows: list[LoadRow]) -> None:
    print(
        "\n### Renewal load: requests the server answered while the claims were held "
        "(TTL 10 s, nothing else running)\n"
    )
    print(
        "| coordinator | holders | window s | requests/s | per holder per minute "
        "| requests/s for 2,048 holders (extrapolated) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        if not row.requests:
            print(f"| {row.coordinator} | {row.holders} | - | - | - | - |")
            continue
        print(
            f"| {row.coordinator} | {row.holders:,} | {row.seconds:.0f} | {row.per_s:,.1f} "
            f"| {row.per_holder_per_minute:.1f} | {row.per_s * 2048 / row.holders:,.0f} |"
        )
    _print_errors((row.coordinator, f"{row.holders} holders", row.errors) for row in rows)


def print_forgetting(rows: list[ForgettingRow]) -> None:
    print(
        "\n### What a store that forgets costs: `new_generator` to the first ID, "
        "generator 0 of a settled pool (skew 1 s)\n"
    )
    print("| coordinator | TTL s | predecessor's mark | first ID s | proven | requests |")
    print("|---|---:|---|---:|---|---:|")
    for row in rows:
        requests = "-" if row.requests is None else str(row.requests)
        proven = "-" if row.proven is None else ("yes" if row.proven else "no")
        print(
            f"| {row.coordinator} | {row.ttl_s:g} | {row.case} | {row.first_id_s:.3f} "
            f"| {proven} | {requests} |"
        )
    _print_errors((row.coordinator, row.case, row.errors) for row in rows)


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--load-holders",
        type=int,
        default=512,
        help="claims held while the renewal load is counted (default 512)",
    )
    parser.add_argument(
        "--load-window",
        type=float,
        help="s over which the renewal load is counted (default 60; 20 with --quick)",
    )


def store_sections(
    parts: set[str], bench: Bench, store_bench: Bench, args: argparse.Namespace, ttls: Sequence[int]
) -> None:
    """CPU and round trips of a claim, the renewal load (every server) and what a
    store that forgets costs."""
    if "cpu" in parts:
        section = time.monotonic()
        runs = 1 if args.quick else 2
        print_cpu(cpu_rows(bench, store_bench, runs, 64), 64)
        print(f"\n({time.monotonic() - section:.0f} s)")
    if "round-trips" in parts:
        section = time.monotonic()
        print_round_trips(round_trip_rows(bench, store_bench))
        print(f"\n({time.monotonic() - section:.0f} s)")
    if "load" in parts:
        section = time.monotonic()
        window = args.load_window or (20 if args.quick else 60)
        print_load(load_rows(bench, store_bench, args.load_holders, window))
        print(f"\n({time.monotonic() - section:.0f} s)")
    if "forgetting" in parts:
        section = time.monotonic()
        print_forgetting(forgetting_rows(store_bench, ttls))
        print(f"\n({time.monotonic() - section:.0f} s)")


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="1 run per row, 512-ID fill, hand-over at TTL 2 s only"
    )
    parser.add_argument(
        "--only",
        choices=("latency", "cpu", "fill", "handover", "load", "forgetting", "round-trips"),
        action="append",
        help="parts to run",
    )
    parser.add_argument(
        "--zk-force-sync",
        choices=("yes", "no"),
        default="yes",
        help="whether ZooKeeper fsyncs its log before answering a write, as production "
        "does (yes, the default) or not (no: the test harness's setting)",
    )
    parser.add_argument(
        "--cases",
        nargs="+",
        choices=sorted(LATENCY_CASES),
        default=[name for name in LATENCY_CASES if name != "zk-queued"],
        help="claim-latency cases to run (default: all)",
    )
    parser.add_argument(
        "--pg-fsync",
        choices=("yes", "no"),
        default="yes",
        help="whether PostgreSQL flushes its log at each commit, as production does (yes, "
        "the default) or not (no: the test harness's setting)",
    )
    parser.add_argument("--runs", type=int, help="claim-latency runs per row (default 2; 1 quick)")
    parser.add_argument(
        "--no-threads",
        action="store_true",
        help="skip the claim-latency rows of 64 claimants as threads of one process",
    )
    parser.add_argument(
        "--fill-ttl",
        type=int,
        default=30,
        help="session timeout / lease TTL (s) of the pool-fill claims (default 30)",
    )
    parser.add_argument(
        "--fill-limit",
        type=float,
        default=90,
        help="s after which a pool fill is stopped and reported as it is (default 90)",
    )
    add_store_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    parts = set(args.only or ("latency", "fill", "handover", "load", "forgetting", "round-trips"))
    runs = args.runs or (1 if args.quick else 2)
    claimants = 64
    fill_claims = 512 if args.quick else 2048
    workers = 16
    ttls = (2,) if args.quick else (2, 10)
    fill_ttl = {"session_timeout": args.fill_ttl}, {"ttl": args.fill_ttl}

    ctx = mp.get_context("forkserver")
    assert isinstance(ctx, ForkServerContext)
    # Python 3.11's forkserver starts with the default sys.path, not ours: it finds
    # claimant_preload, beside this file, through the environment it inherits.
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    ctx.set_forkserver_preload(PRELOAD + STORE_PRELOAD)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("kazoo").setLevel(logging.ERROR)

    load = os.getloadavg()
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start; "
        f"ZooKeeper forceSync={args.zk_force_sync}"
    )
    began = time.monotonic()
    with (
        private_servers(zk_force_sync=args.zk_force_sync == "yes") as servers,
        private_store_servers(pg_fsync=args.pg_fsync == "yes") as stores,
    ):
        bench = Bench(servers, ctx)
        store_bench = Bench(stores, ctx)  # type: ignore[arg-type]
        if "latency" in parts:
            section = time.monotonic()
            rows = bench.latency_rows(runs, claimants, args.cases, threads=not args.no_threads)
            rows += store_latency_rows(store_bench, runs, claimants, threads=not args.no_threads)
            print_latency(rows, runs)
            print(f"\n({time.monotonic() - section:.0f} s)")
        if "fill" in parts:
            section = time.monotonic()
            zk_ttl, etcd_ttl = fill_ttl
            limit = args.fill_limit
            fills = [
                bench.fill("ZooKeeper queue=true", "zk", fill_claims, workers, limit, **zk_ttl),
                bench.fill(
                    "ZooKeeper queue=false",
                    "zk",
                    fill_claims,
                    workers,
                    limit,
                    queue="false",
                    **zk_ttl,
                ),
                bench.fill("etcd", "etcd", fill_claims, workers, limit, **etcd_ttl),
            ]
            fills += [
                store_fill(
                    store_bench,
                    label,
                    kind,
                    claims=fill_claims,
                    workers=workers,
                    limit_s=limit,
                    ttl_s=args.fill_ttl,
                )
                for label, kind in STORE_KINDS
            ]
            print_fill(fills, args.fill_ttl)
            print(f"\n({time.monotonic() - section:.0f} s)")
        if "handover" in parts:
            section = time.monotonic()
            handovers: list[HandoverRow] = []
            for ttl in ttls:
                jobs: list[Callable[[], HandoverRow]] = []
                for case in ("kill", "close"):
                    jobs += [
                        partial(bench.handover, "ZooKeeper queue=true", "zk", ttl, case),
                        partial(
                            bench.handover, "ZooKeeper queue=false", "zk", ttl, case, queue="false"
                        ),
                        partial(bench.handover, "etcd", "etcd", ttl, case),
                    ]
                handovers += run_concurrently(jobs)
            print_handover(handovers)
            print(f"\n({time.monotonic() - section:.0f} s)")
        store_sections(parts, bench, store_bench, args, ttls)
    load = os.getloadavg()
    print(
        f"\n{time.monotonic() - began:.0f} s in all; load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
