"""Elastic node-ID claims and service-discovery lookups against a private ZooKeeper.

    .venv/bin/pip install -e '.[zookeeper]'             # kazoo
    scripts/install-test-deps.sh                        # java + libzookeeper-java
    .venv/bin/python benchmarks/bench_discovery.py            # full run (~1-2 min)
    .venv/bin/python benchmarks/bench_discovery.py --quick    # smaller (~1 min)

Server: a standalone ZooKeeper started with the integration-test harness
(``tests/servers/zookeeper.py``, ``ZooKeeperEnsemble(1, tmpdir)``: JVM tuned for
start-up, no fsync) on a free port of 127.0.0.1, stopped at the end. Every
measurement uses a fresh discovery root. Run it on a quiet machine: claimants,
renewals and the server share the same cores.

*Claiming node IDs*: 1,000 nodes (``--quick``: 300) claim node IDs through
``NodeIdCoordinator(url).claim()``, 10 processes x 100 claims (``--quick``: 3 x
100), each process keeping 2 (``--quick``: 4) claims in flight; every claim is its
own ZooKeeper session and stays held until the end, so held claims renew while
the fleet grows (session timeout 10 s, ``claim_timeout=5``). The processes start
together on a signal. Reported: how many were claimed, the time from the signal
to the last successful claim, claims/s, per-claim latency p50/p99/max, the groups
(and width) at the end, and the claims not made, by error. A process stops
claiming after its first failure (the rest count as ``skipped``), so a fleet
that cannot grow costs one claim_timeout, not one per remaining claim.

What it costs: a claim in group 0 is about 18 ZooKeeper requests; a claim in a
wider group also reads its narrower twins (at most eight znodes) and waits for
the older narrow ones to widen. On a 2-core machine the 1,000 sessions' own
renewals and kazoo threads (10 processes, ~4 threads per claim) use both cores,
so this measures the client fleet as much as the protocol.

*Lookups*: 50 instances of one service are registered (each its own session,
endpoint ``api`` and keyed endpoint ``shard:K`` for K in 0..4), then one
``Discovery`` client times ``instances()``, ``resolve("api")``,
``resolve("shard", key=...)``, ``endpoints()`` and ``snapshot()``: p50/p99 and the
ZooKeeper requests per call (the server's ``Received`` counter, pings of the 50
sessions included, so about 1% high).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from tests.servers.zookeeper import ZooKeeperEnsemble, four_letter_word  # noqa: E402

from idmint.coordinate.url import parse_url  # noqa: E402
from idmint.discovery import Discovery, NodeIdCoordinator, width_for_groups  # noqa: E402

SESSION_TIMEOUT_S = 10
CLAIM_TIMEOUT_S = 5


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def received(ensemble: ZooKeeperEnsemble) -> int:
    """The server's count of requests received (``srvr``)."""
    answer = four_letter_word(ensemble.client_port(0)) or ""
    for line in answer.splitlines():
        if line.startswith("Received:"):
            return int(line.partition(":")[2])
    raise RuntimeError(f"no Received: line in {answer!r}")


# -- claim workers (this file run with --worker) -------------------------------------------


def worker(url: str, count: int, in_flight: int) -> int:
    """Wait for 'go' on stdin, make ``count`` claims, report, hold them until stdin ends.

    After the first failed claim this worker makes no more (they are reported as
    ``skipped``): a fleet that cannot grow would otherwise cost a claim_timeout per
    remaining claim.
    """
    coordinator = NodeIdCoordinator(parse_url(url))
    held: list[Any] = []
    failed = threading.Event()

    def one(_: int) -> tuple[int | None, float, float, str]:
        started = time.monotonic()
        if failed.is_set():
            return None, started, started, "skipped"
        try:
            claim = coordinator.claim()
        except Exception as error:
            failed.set()
            return None, started, time.monotonic(), f"{type(error).__name__}"
        held.append(claim)
        identity = claim.identity
        node = identity["node"] if identity is not None else None
        return node, started, time.monotonic(), ""

    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.readline()
    with ThreadPoolExecutor(in_flight) as pool:
        results = list(pool.map(one, range(count)))
    print(json.dumps({"results": results}), flush=True)
    sys.stdin.read()  # hold the claims until the parent closes our stdin
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda claim: claim.close(), held))
    return 0


@dataclass
class ClaimRow:
    processes: int
    per_process: int
    in_flight: int
    total_s: float
    latencies: list[float]
    failures: Counter[str] = field(default_factory=Counter)
    groups: list[int] = field(default_factory=list)
    duplicates: int = 0

    @property
    def claims(self) -> int:
        return self.processes * self.per_process


def claim_run(
    ensemble: ZooKeeperEnsemble, processes: int, per_process: int, in_flight: int
) -> ClaimRow:
    url = (
        f"zk://{ensemble.hosts}/bench-{uuid.uuid4().hex}"
        f"?session_timeout={SESSION_TIMEOUT_S}&claim_timeout={CLAIM_TIMEOUT_S}"
    )
    argv = [sys.executable, __file__, "--worker", url, str(per_process), str(in_flight)]
    workers = [
        subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT
        )
        for _ in range(processes)
    ]
    try:
        for process in workers:
            assert process.stdout is not None
            json.loads(process.stdout.readline())  # ready: imports done
        go = time.monotonic()
        for process in workers:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        results: list[Any] = []
        for process in workers:
            assert process.stdout is not None
            results += json.loads(process.stdout.readline())["results"]
        good = [(started, ended) for node, started, ended, _ in results if node is not None]
        row = ClaimRow(
            processes,
            per_process,
            in_flight,
            total_s=max((ended for _, ended in good), default=go) - go,
            latencies=[ended - started for started, ended in good],
            failures=Counter(error for node, _, _, error in results if node is None),
        )
        nodes = [node for node, _, _, _ in results if node is not None]
        row.duplicates = len(nodes) - len(set(nodes))
        coordinator = NodeIdCoordinator(parse_url(url))
        client, _ = coordinator.client()
        try:
            row.groups = coordinator.groups.groups(client)
        finally:
            client.stop()
            client.close()
        return row
    finally:
        for process in workers:
            with contextlib.suppress(OSError):
                assert process.stdin is not None
                process.stdin.close()
        for process in workers:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# -- lookups ---------------------------------------------------------------------------


@dataclass
class LookupRow:
    name: str
    calls: int
    samples: list[float]
    requests_per_call: float
    result_size: int


def timed(ensemble: ZooKeeperEnsemble, name: str, call: Callable[[], Any], calls: int) -> LookupRow:
    call()  # warm: the reader's session is open, caches (none) filled
    samples = []
    before = received(ensemble)
    size = 0
    for _ in range(calls):
        started = time.perf_counter()
        result = call()
        samples.append(time.perf_counter() - started)
        size = len(result)
    requests = (received(ensemble) - before) / calls
    return LookupRow(name, calls, samples, requests, size)


def lookup_rows(ensemble: ZooKeeperEnsemble, instances: int, quick: bool) -> list[LookupRow]:
    url = f"zk://{ensemble.hosts}/bench-{uuid.uuid4().hex}?session_timeout={SESSION_TIMEOUT_S}"
    with contextlib.ExitStack() as stack:
        registrar = stack.enter_context(Discovery(url))
        for index in range(instances):
            registration = registrar.register(
                "orders",
                host=f"10.0.{index // 250}.{index % 250}",
                port=8080,
                endpoints=["api", f"shard:k{index % 5}"],
                metadata={"zone": f"z{index % 3}"},
            )
            stack.callback(registration.close)
        reader = stack.enter_context(Discovery(url))
        scale = 1 if quick else 4
        return [
            timed(ensemble, "instances('orders')", lambda: reader.instances("orders"), 50 * scale),
            timed(ensemble, "resolve('api')", lambda: reader.resolve("api"), 5 * scale),
            timed(
                ensemble,
                "resolve('shard', key='k1')",
                lambda: reader.resolve("shard", key="k1"),
                10 * scale,
            ),
            timed(ensemble, "endpoints()", reader.endpoints, 50 * scale),
            timed(ensemble, "snapshot()", reader.snapshot, 50 * scale),
        ]


@contextlib.contextmanager
def private_zookeeper() -> Iterator[ZooKeeperEnsemble]:
    with tempfile.TemporaryDirectory(prefix="bench-discovery-") as tmp:
        ensemble = ZooKeeperEnsemble(1, tmp)
        ensemble.start()
        try:
            yield ensemble
        finally:
            ensemble.stop()


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 claims, fewer lookups")
    parser.add_argument(
        "--worker", nargs=3, metavar=("URL", "COUNT", "IN_FLIGHT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.worker:
        url, count, in_flight = args.worker
        return worker(url, int(count), int(in_flight))

    processes, per_process, in_flight = (3, 100, 4) if args.quick else (10, 100, 2)
    load = os.getloadavg()[0]
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {load:.2f}; "
        f"session timeout {SESSION_TIMEOUT_S} s, claim_timeout {CLAIM_TIMEOUT_S} s\n"
    )
    with private_zookeeper() as ensemble:
        row = claim_run(ensemble, processes, per_process, in_flight)
        print(
            f"Claiming {row.claims:,} node IDs: {processes} processes x {per_process} claims, "
            f"{in_flight} in flight per process\n"
        )
        print(
            "| claimed | time to the last claim (s) | claims/s | p50 (ms) | p99 (ms) | max (ms) "
            "| groups at the end (width) | not claimed |"
        )
        print("|---:|---:|---:|---:|---:|---:|---|---|")
        ok = len(row.latencies)
        missing = ", ".join(f"{n} {kind}" for kind, n in row.failures.most_common()) or "0"
        if row.duplicates:
            missing += f"; {row.duplicates} DUPLICATE node IDs"
        groups = f"{row.groups[0]}..{row.groups[-1]}" if row.groups else "-"
        width = width_for_groups(row.groups[-1]) if row.groups else "-"
        latencies = row.latencies or [math.nan]
        print(
            f"| {ok:,} of {row.claims:,} | {row.total_s:.1f} | {ok / max(row.total_s, 1e-9):,.0f} "
            f"| {ms(statistics.median(latencies))} | {ms(percentile(latencies, 0.99))} "
            f"| {ms(max(latencies))} | {groups} ({width}) | {missing} |"
        )

        instances = 50
        lookups = lookup_rows(ensemble, instances, args.quick)
        print(f"\nLookups with {instances} registered instances (one reader session)\n")
        print("| call | calls | p50 (ms) | p99 (ms) | ZooKeeper requests per call | results |")
        print("|---|---:|---:|---:|---:|---:|")
        for lookup in lookups:
            print(
                f"| {lookup.name} | {lookup.calls} | {ms(statistics.median(lookup.samples))} "
                f"| {ms(percentile(lookup.samples, 0.99))} | {lookup.requests_per_call:,.0f} "
                f"| {lookup.result_size} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
