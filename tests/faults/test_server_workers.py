"""Workers of ``idmint serve --workers N`` that die, hang or lose their supervisor.

The fault model: a worker process may be SIGKILLed at any moment, in the middle of
requests; its replacement may find its identity taken; a worker may stop answering
(SIGSTOP) while the others serve; the supervisor itself may be SIGKILLed. Whatever
happens, no ID is issued twice: a dead worker's claim is freed by the kernel (the
lock file of ``local://``), and its replacement either claims another generator ID
(the pool's hold-off keeps it off the dead one's) or, with a configured identity,
takes the same one and starts above the high-water mark its predecessor recorded.
``/metrics`` stays monotonic through all of it.

Each server gets a private ``local://`` directory, so ``idmint claims list`` shows
exactly its claims; the last test claims through the session's ZooKeeper instead
(what several hosts would use). Waiting is on conditions with deadlines, never on
sleeps.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.server.server_helpers import (
    ClientThreads,
    IdmintServer,
    Samples,
    get_alone,
    id_line,
    list_claims,
    metric,
    parse_metrics,
    private_pool,
    running_server,
    unique_zk_root,
    wait_for,
)
from tests.servers.zookeeper import ZooKeeperEnsemble

from idmint.schemes import Uid64

WAIT_S = 60.0


def pool_url(tmp_path: Path) -> str:
    return f"local://{tmp_path / 'pool'}"


def get_again(port: int, path: str, timeout: float = 30.0) -> bytes:
    """``GET path``, on a new connection again if one was reset.

    A connection the kernel queued for a worker that then died is reset with it;
    the next one goes to a live worker, as a client retrying would find.
    """
    for _ in range(20):
        try:
            status, body = get_alone(port, path, timeout=timeout)
        except (ConnectionResetError, http.client.RemoteDisconnected):
            continue
        assert status == 200, body
        return body
    raise AssertionError(f"{path}: every connection was reset")


def claims_of(port: int, timeout: float = 30.0) -> Any:
    return json.loads(get_again(port, "/v1/claims", timeout))


def generators_of(view: Any, worker: int) -> set[int]:
    found = set()
    for row in view["claims"]:
        if row["worker"] == worker:
            match = re.fullmatch(r"generator (\d+) cluster 0", row["identity"])
            assert match is not None, row
            found.add(int(match.group(1)))
    return found


def worker_pid(view: Any, worker: int) -> int:
    [entry] = [w for w in view["workers"] if w["worker"] == worker]
    return int(entry["pid"])


def scrape(port: int, timeout: float = 30.0) -> Samples:
    return parse_metrics(get_again(port, "/metrics", timeout).decode())


def gone(pid: int) -> bool:
    """The process has exited (a zombie not yet reaped counts: it holds nothing)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return re.search(r"^State:\s+Z", status, re.MULTILINE) is not None


def assert_distinct(ids: list[str]) -> None:
    twice = [value for value, seen in Counter(ids).items() if seen > 1]
    assert not twice, f"{len(twice)} of {len(ids)} IDs issued more than once, e.g. {twice[:3]}"


@dataclass
class Answer:
    started: float
    finished: float
    ids: list[str]


class Load(ClientThreads):
    """Threads asking for IDs on new connections until stopped, each answer with its times.

    Connections the dying worker had accepted fail (reset); they are counted, not
    retried: a request that failed issued no ID the client saw.
    """

    def __init__(self, port: int, threads: int = 4, count: int = 20) -> None:
        super().__init__(threads)
        self.port = port
        self.count = count
        self.answers: list[Answer] = []
        self.failures = 0
        self.refused: list[tuple[int, bytes]] = []

    def run(self) -> None:
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                status, body = get_alone(self.port, f"/v1/ids?count={self.count}", timeout=10)
            except (OSError, http.client.HTTPException):
                self.failures += 1
                continue
            if status != 200:
                self.refused.append((status, body))
                continue
            self.answers.append(Answer(started, time.monotonic(), json.loads(body)["ids"]))

    def ids(
        self, *, started_after: float = 0.0, finished_before: float = float("inf")
    ) -> list[str]:
        return [
            text
            for answer in list(self.answers)
            if answer.started > started_after and answer.finished < finished_before
            for text in answer.ids
        ]


def monotonic_counters(before: Samples, after: Samples) -> list[str]:
    """Counter and histogram samples of idmint that went down (or vanished) from before to after."""
    fell = []
    for (name, labels), value in before.items():
        if not name.startswith("idmint_"):
            continue
        if not name.endswith(("_total", "_bucket", "_count", "_sum")):
            continue
        later = after.get((name, labels))
        if later is None or later < value:
            fell.append(f"{name}{dict(labels)}: {value} -> {later}")
    return fell


def served_by(samples: Samples, worker: str) -> float:
    return metric(samples, "idmint_ids_served_total", worker=worker)


@pytest.mark.parametrize("coordinator", [None, "static://?generator=5"], ids=["claimed", "static"])
def test_a_worker_killed_under_load_is_replaced_and_no_id_repeats(
    tmp_path: Path, coordinator: str | None
) -> None:
    """SIGKILL worker 1 while 4 clients ask for IDs. The supervisor replaces it; the
    replacement claims another generator ID (the pool holds the dead worker's off while it
    starts) or the same one (configured, or once the hold-off ended), starting above the
    high-water mark its predecessor recorded. No ID is issued
    twice, and no counter of ``/metrics`` goes down."""
    options = ["--workers", "2"] + (["--coordinator", coordinator] if coordinator else [])
    with running_server(*options, env=private_pool(tmp_path)) as server:
        view = claims_of(server.port)
        victim = worker_pid(view, 1)
        victim_generators = generators_of(view, 1)
        with Load(server.port) as load:
            wait_for(
                lambda: {Uid64(t).generator for t in load.ids()} >= victim_generators,
                timeout=WAIT_S,
                description="the victim serving under load",
                explain=lambda: f"{len(load.answers)} answers",
            )
            marks = [r["high_water_mark_ms"] for r in claims_of(server.port)["claims"]]
            high_water_mark = max(
                row["high_water_mark_ms"]
                for row in claims_of(server.port)["claims"]
                if row["worker"] == 1
            )
            assert all(mark is not None for mark in marks)
            before = scrape(server.port)
            assert served_by(before, "1") > 0
            killed_at = time.monotonic()
            os.kill(victim, signal.SIGKILL)

            def replaced() -> bool:
                workers = claims_of(server.port)["workers"]
                return workers[1]["answering"] and workers[1]["pid"] != victim

            wait_for(
                replaced,
                timeout=WAIT_S,
                description="worker 1 replaced",
                explain=lambda: f"{claims_of(server.port)}\n{server.stderr_text()}",
            )
            replaced_at = time.monotonic()
            view = claims_of(server.port)
            new_generators = generators_of(view, 1)
            wait_for(
                lambda: any(
                    Uid64(t).generator in new_generators
                    for t in load.ids(started_after=replaced_at)
                ),
                timeout=WAIT_S,
                description="the replacement serving",
                explain=lambda: f"{len(load.answers)} answers, {load.failures} failures",
            )
        after = scrape(server.port)
        assert server.terminate_and_wait() == 0, server.stderr_text()
        log = server.stderr_text()
    assert load.refused == []
    everything = load.ids()
    assert_distinct(everything)
    assert re.search(r"worker 1 was killed by SIGKILL after [\d.]+ s; starting a replacement", log)
    if coordinator is not None:
        assert new_generators == victim_generators, "the same configured identity"
    # A replacement that claims the dead worker's ID (configured, or claimed once
    # the pool's hold-off ended: how soon depends on how fast it starts) starts
    # past the mark its predecessor recorded and past what it served.
    earlier = [Uid64(t) for t in load.ids(finished_before=killed_at)]
    later = [Uid64(t) for t in load.ids(started_after=replaced_at)]
    for generator in new_generators & victim_generators:
        last_before = max(i.timestamp_ms for i in earlier if i.generator == generator)
        firsts = [i.timestamp_ms for i in later if i.generator == generator]
        assert firsts, generator
        assert min(firsts) > max(high_water_mark, last_before)
    assert monotonic_counters(before, after) == []
    assert metric(after, "idmint_worker_restarts_total", worker="1") == 1
    assert metric(after, "idmint_worker_up", worker="1") == 1
    assert served_by(after, "1") >= served_by(before, "1")
    assert list_claims(pool_url(tmp_path)) == []


def test_a_replacement_whose_identity_is_taken_is_retried_while_the_other_serves(
    tmp_path: Path,
) -> None:
    """Worker 1 (generator 6) dies while its supervisor is stopped, and another process takes
    generator 6. The replacement is refused (the identity is in use) and tried again after a
    pause, while worker 0 serves and ``/metrics`` reports worker 1 down with its last counts;
    once the other process lets go, the replacement takes generator 6 above every ID of both
    earlier holders."""
    pool = private_pool(tmp_path)
    with running_server(
        "--workers", "2", "--coordinator", "static://?generator=5", env=pool
    ) as server:
        view = claims_of(server.port)
        victim = worker_pid(view, 1)
        assert generators_of(view, 1) == {6}
        seen = ids_until_one_of({6}, server.port, "worker 1 serving")
        before = scrape(server.port)
        os.kill(server.pid, signal.SIGSTOP)  # the supervisor cannot replace worker 1 yet
        try:
            os.kill(victim, signal.SIGKILL)
            wait_for(lambda: gone(victim), timeout=WAIT_S, description="worker 1 dead", explain=str)
            blocker = IdmintServer("--coordinator", "static://?generator=6", env=pool).start()
        finally:
            os.kill(server.pid, signal.SIGCONT)
        with blocker:
            blocked_ids = [id_line(get_alone(blocker.port, "/v1/id")[1]) for _ in range(50)]
            wait_for(
                lambda: "worker 1 could not start" in server.stderr_text(),
                timeout=WAIT_S,
                description="the refused replacement logged",
                explain=server.stderr_text,
            )
            assert "generator 6, cluster 0 is already in use" in server.stderr_text()
            # Worker 0 serves alone; the metrics stand in for worker 1 with its last snapshot.
            alone = [t for _ in range(20) for t in json.loads(_ids(server.port, 10))["ids"]]
            assert {Uid64(t).generator for t in alone} == {5}
            during = scrape(server.port)
            assert metric(during, "idmint_worker_up", worker="1") == 0
            assert metric(during, "idmint_worker_up", worker="0") == 1
            assert monotonic_counters(before, during) == []
            assert claims_of(server.port)["workers"][1]["answering"] is False
        # The blocker has released generator 6: the next try succeeds.
        wait_for(
            lambda: claims_of(server.port)["workers"][1]["answering"],
            timeout=WAIT_S,
            description="worker 1 replaced once generator 6 is free",
            explain=server.stderr_text,
        )
        later = ids_until_one_of({6}, server.port, "the replacement serving")
        after = scrape(server.port)
        assert server.terminate_and_wait() == 0, server.stderr_text()
    assert_distinct(seen + blocked_ids + alone + later)
    ceiling = max(Uid64(t).timestamp_ms for t in seen + blocked_ids if Uid64(t).generator == 6)
    assert min(Uid64(t).timestamp_ms for t in later if Uid64(t).generator == 6) > ceiling
    assert metric(after, "idmint_worker_restarts_total", worker="1") >= 2  # a refused try too
    assert monotonic_counters(before, after) == []
    assert list_claims(pool_url(tmp_path)) == []


def _from_a_live_worker(port: int, path: str) -> bytes:
    """``GET path``; a connection the kernel gave a stopped worker times out: try another."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(TimeoutError, OSError):
            status, body = get_alone(port, path, timeout=2.5)
            assert status == 200, body
            return body
    raise TimeoutError(f"no worker answered {path}")


def test_a_silent_worker_is_replaced_and_a_stopped_supervisor_kills_none(
    tmp_path: Path,
) -> None:
    """``--worker-timeout 2``. First the supervisor is stopped (SIGSTOP) for 4 s, longer
    than the timeout, while its workers serve: on waking it reads what they said meanwhile
    and kills neither. Then worker 1 is stopped: its event loop no longer says it is
    alive, so after 2 s the supervisor kills it and starts a replacement, which serves under
    the same generator ID above its predecessor's IDs, or another. Worker 0 keeps its
    process throughout; no ID is issued twice."""
    with running_server(
        "--workers", "2", "--worker-timeout", "2", env=private_pool(tmp_path)
    ) as server:
        view = claims_of(server.port)
        first = [worker_pid(view, 0), worker_pid(view, 1)]
        victim_generators = generators_of(view, 1)
        ids = [t for _ in range(10) for t in json.loads(_ids(server.port, 10))["ids"]]

        os.kill(server.pid, signal.SIGSTOP)
        try:
            time.sleep(4.0)  # the fault itself: a pause twice the worker timeout
        finally:
            os.kill(server.pid, signal.SIGCONT)
        ids += [t for _ in range(10) for t in json.loads(_ids(server.port, 10))["ids"]]

        os.kill(first[1], signal.SIGSTOP)
        wait_for(
            lambda: gone(first[1]),
            timeout=WAIT_S,
            description="the silent worker 1 killed",
            explain=server.stderr_text,
        )

        def replaced() -> bool:
            workers = json.loads(_from_a_live_worker(server.port, "/v1/claims"))["workers"]
            return bool(workers[1]["answering"]) and workers[1]["pid"] != first[1]

        wait_for(
            replaced,
            timeout=WAIT_S,
            description="worker 1 replaced",
            explain=server.stderr_text,
        )
        view = claims_of(server.port)
        assert worker_pid(view, 0) == first[0], "worker 0 was replaced too"
        new_generators = generators_of(view, 1)
        later = ids_until_one_of(new_generators, server.port, "the replacement serving")
        after = scrape(server.port)
        assert server.terminate_and_wait() == 0, server.stderr_text()
        log = server.stderr_text()
    assert_distinct(ids + later)
    # The silent worker was stopped for longer than its hold-off, so the replacement may
    # take the same generator ID: then only above every ID its predecessor issued.
    for generator in new_generators & victim_generators:
        before = [Uid64(t).timestamp_ms for t in ids if Uid64(t).generator == generator]
        after_ = [Uid64(t).timestamp_ms for t in later if Uid64(t).generator == generator]
        assert min(after_) > max(before), generator
    assert re.search(
        rf"worker 1 \(pid {first[1]}\) has not been heard from for [\d.]+ s "
        r"\(--worker-timeout 2\): killing it",
        log,
    ), log
    assert "worker 0 (pid" not in log, log
    assert metric(after, "idmint_worker_restarts_total", worker="0") == 0
    assert metric(after, "idmint_worker_restarts_total", worker="1") == 1
    assert list_claims(pool_url(tmp_path)) == []


def _ids(port: int, count: int) -> bytes:
    status, body = get_alone(port, f"/v1/ids?count={count}")
    assert status == 200, body
    return body


def _more(collected: list[str], port: int) -> list[str]:
    """Ask for a few more IDs (on a new connection), keep them, return them."""
    fresh: list[str] = json.loads(_ids(port, 10))["ids"]
    collected += fresh
    return fresh


def ids_until_one_of(generators: set[int], port: int, description: str) -> list[str]:
    """IDs asked for until one comes from one of ``generators``: all of them."""
    seen: list[str] = []
    wait_for(
        lambda: any(Uid64(t).generator in generators for t in _more(seen, port)),
        timeout=WAIT_S,
        description=description,
        explain=lambda: f"{len(seen)} IDs",
    )
    return seen


def test_a_stopped_worker_does_not_stop_the_whole_servers_metrics(tmp_path: Path) -> None:
    """Worker 1 is SIGSTOPped: ``/metrics`` from worker 0 still answers (after at most the
    deadline for a sibling), with worker 1 marked down and its counters from its last
    snapshot; once resumed, it answers again."""
    with running_server("--workers", "2", env=private_pool(tmp_path)) as server:
        view = claims_of(server.port)
        stopped = worker_pid(view, 1)
        before = scrape(server.port)
        os.kill(stopped, signal.SIGSTOP)
        try:
            during = _scrape_from_a_live_worker(server.port)
        finally:
            os.kill(stopped, signal.SIGCONT)
        assert metric(during, "idmint_worker_up", worker="1") == 0
        assert monotonic_counters(before, during) == []
        wait_for(
            lambda: metric(scrape(server.port), "idmint_worker_up", worker="1") == 1,
            timeout=WAIT_S,
            description="worker 1 answering again",
            explain=server.stderr_text,
        )
        assert server.terminate_and_wait() == 0, server.stderr_text()


def _scrape_from_a_live_worker(port: int) -> Samples:
    """``/metrics``; a connection the kernel gave the stopped worker times out: try another."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(TimeoutError, OSError):
            return scrape(port, timeout=2.5)
    raise TimeoutError("no worker answered /metrics")


def test_workers_of_a_killed_supervisor_stop_and_release_their_claims(tmp_path: Path) -> None:
    """SIGKILL the supervisor: each worker sees its control socket close, stops as on SIGTERM
    and releases its claims; nothing keeps listening on the port."""
    # A short TMPDIR, so that the run directory is made in it (a test's own
    # tmp_path can be too deep a path for the workers' sockets).
    run_parent = Path(tempfile.mkdtemp(prefix="idmint-test-", dir="/tmp"))
    try:
        server = IdmintServer(
            "--workers", "2", env={**private_pool(tmp_path), "TMPDIR": str(run_parent)}
        )
        with server:
            server.start()
            view = claims_of(server.port)
            pids = [worker_pid(view, 0), worker_pid(view, 1)]
            assert len(list_claims(pool_url(tmp_path))) == 2
            server.kill()
            wait_for(
                lambda: all(gone(pid) for pid in pids),
                timeout=WAIT_S,
                description="the orphaned workers stopped",
                explain=lambda: str([(pid, gone(pid)) for pid in pids]),
            )
            assert list_claims(pool_url(tmp_path)) == []
            with pytest.raises(ConnectionRefusedError):
                get_alone(server.port, "/livez", timeout=5)
        # Only the run directory is left, as docs/server.md says.
        assert [path.name[:13] for path in run_parent.iterdir()] == ["idmint-serve-"]
    finally:
        shutil.rmtree(run_parent, ignore_errors=True)


@pytest.mark.integration
def test_workers_claiming_in_zookeeper_each_hold_and_register_their_own(
    tmp_path: Path, zk: ZooKeeperEnsemble
) -> None:
    """Across hosts: workers claim through ZooKeeper, each its own ID, and each registers as an
    instance of the server in discovery. A SIGKILLed worker's claim is still held by its
    session (it expires later), so the replacement claims another ID; no ID twice."""
    root = unique_zk_root()
    url = f"zk://{zk.hosts}{root}?session_timeout=4"
    with running_server(
        "--workers",
        "2",
        "--coordinator",
        url,
        "--discovery",
        f"zk://{zk.hosts}{root}-discovery",
        env=private_pool(tmp_path),
    ) as server:
        view = claims_of(server.port)
        assert {row["coordinator"].split(" at ")[1] for row in view["claims"]} == {
            f"zk://{zk.hosts}{root}"
        }
        before = {worker: generators_of(view, worker) for worker in (0, 1)}
        assert len(before[0] | before[1]) == 2
        assert list_claims(pool_url(tmp_path)) == []  # nothing on the host's pool
        status, body = get_alone(server.port, "/v1/services")
        assert status == 200, body
        instances = json.loads(body)["services"]["idmint"]
        assert sorted(i["metadata"]["worker"] for i in instances) == ["0", "1"]
        assert {(i["port"], i["metadata"]["workers"]) for i in instances} == {(server.port, "2")}
        with Load(server.port) as load:
            wait_for(
                lambda: {Uid64(t).generator for t in load.ids()} == before[0] | before[1],
                timeout=WAIT_S,
                description="both workers serving",
                explain=lambda: f"{len(load.answers)} answers",
            )
            victim = worker_pid(view, 1)
            os.kill(victim, signal.SIGKILL)
            wait_for(
                lambda: claims_of(server.port)["workers"][1]["answering"],
                timeout=WAIT_S,
                description="worker 1 replaced",
                explain=server.stderr_text,
            )
            replaced_at = time.monotonic()
            after = generators_of(claims_of(server.port), 1)
            wait_for(
                lambda: any(
                    Uid64(t).generator in after for t in load.ids(started_after=replaced_at)
                ),
                timeout=WAIT_S,
                description="the replacement serving",
                explain=lambda: f"{len(load.answers)} answers",
            )
        assert not after & before[1]  # the dead worker's session still held its ID
        assert load.refused == []
        assert_distinct(load.ids())
        assert server.terminate_and_wait() == 0, server.stderr_text()
    # The workers released theirs; the dead one's goes when its session expires.
    assert {row["holder"] for row in list_claims(url)} <= {f"{os.uname().nodename}:{victim}"}
    wait_for(
        lambda: list_claims(url) == [],
        timeout=WAIT_S,
        description="the killed worker's session expired",
        explain=lambda: str(list_claims(url)),
    )
