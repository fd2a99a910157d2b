"""The ID server while its ZooKeeper goes away and comes back, under load.

A server claims two generator IDs in a private standalone ZooKeeper (session timeout
2 s, wait timeout 1 s) and three client threads ask it for IDs the whole time. The
ZooKeeper server is stopped entirely: within the session timeout ``/healthz`` turns
503 and ``/v1/*`` answer 503 with a JSON error. ZooKeeper is started again (same port,
same data): both recover, and no ID was ever served twice over the whole run.

The ZooKeeper is private to this module (the session's ``zk`` fixture lives in
``tests/integration``) and is stopped at the end whatever happened.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest
from tests.server.server_helpers import (
    IdmintServer,
    assert_json_error,
    list_claims,
    private_zookeeper,
    unique_zk_root,
    wait_for,
    wait_until,
)
from tests.servers.zookeeper import ZooKeeperEnsemble

from idmint.schemes import Uid64, parse_id

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_S = 2.0
WAIT_TIMEOUT_S = 1.0


@pytest.fixture
def zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    with private_zookeeper(tmp_path_factory.mktemp("zk-fault")) as ensemble:
        yield ensemble


@dataclass
class Answer:
    """One response a load thread got: when it arrived, its status and IDs."""

    at: float
    status: int
    ids: list[str] = field(default_factory=list)


@dataclass
class Load:
    """Client threads asking for IDs until stopped, alternating /v1/id and /v1/ids."""

    url: str
    threads: int = 3
    answers: list[Answer] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _workers: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for index in range(self.threads):
            worker = threading.Thread(target=self._run, name=f"load-{index}", daemon=True)
            worker.start()
            self._workers.append(worker)

    def stop(self) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join(timeout=30)
            assert not worker.is_alive(), f"{worker.name} is stuck"

    def count(self, status: int, since: float = 0.0) -> int:
        with self._lock:
            return sum(1 for a in self.answers if a.status == status and a.at >= since)

    def span(self, status: int) -> float:
        """Seconds between the first and the last answer with ``status``."""
        with self._lock:
            times = [a.at for a in self.answers if a.status == status]
        return max(times) - min(times) if times else 0.0

    def _record(self, answer: Answer) -> None:
        with self._lock:
            self.answers.append(answer)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=15, trust_env=False) as http:
            single = True
            while not self._stop.is_set():
                try:
                    response = http.get("/v1/id" if single else "/v1/ids?count=20")
                except httpx.HTTPError as error:
                    with self._lock:
                        self.errors.append(f"{type(error).__name__}: {error}")
                    continue
                at = time.monotonic()
                if response.status_code == 200:
                    ids = [response.text] if single else response.json()["ids"]
                    self._record(Answer(at, 200, ids))
                else:
                    try:
                        assert_json_error(response, 503)
                    except AssertionError as error:
                        with self._lock:
                            self.errors.append(f"{response.status_code}: {error}")
                    self._record(Answer(at, response.status_code))
                single = not single


def zk_log_tail(zk: ZooKeeperEnsemble, lines: int = 15) -> str:
    try:
        return "\n".join(zk.log_path(0).read_text(errors="replace").splitlines()[-lines:])
    except OSError as error:
        return repr(error)


def health(http: httpx.Client) -> int:
    return http.get("/healthz").status_code


def test_zookeeper_down_then_back_under_load(zk: ZooKeeperEnsemble) -> None:
    url = (
        f"zk://{zk.hosts}{unique_zk_root()}"
        f"?session_timeout={SESSION_TIMEOUT_S:g}&wait_timeout={WAIT_TIMEOUT_S:g}"
    )
    with IdmintServer("--coordinator", url, "--generators", "2") as server:
        server.start()
        load = Load(server.url)
        load.start()
        try:
            with httpx.Client(base_url=server.url, timeout=15, trust_env=False) as http:

                def explain() -> str:
                    try:
                        state = f"healthz: {http.get('/healthz').text}\n"
                        state += f"claims: {http.get('/v1/claims').text}\n"
                    except httpx.HTTPError as error:
                        state = f"the server does not answer: {error!r}\n"
                    return (
                        state
                        + f"load: {load.count(200)} x 200, {load.count(503)} x 503, "
                        + f"errors {load.errors[:3]}\n"
                        + f"server stderr (end):\n{server.stderr_text()[-3000:]}\n"
                        + f"ZooKeeper log (end):\n{zk_log_tail(zk)}"
                    )

                assert health(http) == 200
                wait_for(
                    lambda: load.count(200) >= 100,
                    timeout=30,
                    description="100 answers with IDs before the outage",
                    explain=explain,
                )

                # -- ZooKeeper stops entirely ---------------------------------------
                zk.stop_member(0)
                stopped = time.monotonic()
                wait_for(
                    lambda: health(http) == 503,
                    timeout=SESSION_TIMEOUT_S + 10,
                    description="/healthz to turn 503 once ZooKeeper is down",
                    explain=explain,
                )
                fenced_after = time.monotonic() - stopped
                assert fenced_after <= SESSION_TIMEOUT_S, (
                    f"/healthz turned 503 only {fenced_after:.2f}s after ZooKeeper stopped"
                )
                body = assert_json_error(http.get("/healthz"), 503)
                assert "no usable claim" in body["detail"], body
                for path in ("/v1/id", "/v1/ids?count=5"):
                    assert_json_error(http.get(path), 503)
                claims = http.get("/v1/claims").json()["claims"]
                assert [row["usable"] for row in claims] == [False, False], claims
                # Keep ZooKeeper down for longer than the session timeout, as the load
                # threads see it: past every deadline the claims could have had.
                wait_for(
                    lambda: load.span(503) > SESSION_TIMEOUT_S and load.count(503) >= 10,
                    timeout=60,
                    description="503 answers to the load threads over a session timeout",
                    explain=explain,
                )

                # -- ZooKeeper comes back (same port, same data) ----------------------
                zk.start_member(0)
                wait_for(
                    lambda: health(http) == 200,
                    timeout=60,
                    description="/healthz to recover once ZooKeeper is back",
                    explain=explain,
                )
                wait_for(
                    lambda: all(row["usable"] for row in http.get("/v1/claims").json()["claims"]),
                    timeout=60,
                    description="both claims to be usable again",
                    explain=explain,
                )
                recovered = time.monotonic()
                assert http.get("/v1/id").status_code == 200
                after = http.get("/v1/ids?count=200").json()["ids"]
                generators = {parse_id(text, "uid64").generator for text in after}  # type: ignore[attr-defined]
                assert len(generators) == 2, generators
                wait_for(
                    lambda: load.count(200, since=recovered) >= 100,
                    timeout=60,
                    description="100 answers with IDs after the recovery",
                    explain=explain,
                )
        finally:
            load.stop()

        assert not load.errors, load.errors[:10]
        every = [text for answer in load.answers for text in answer.ids]
        values = [parse_id(text, "uid64") for text in every]
        assert all(isinstance(value, Uid64) for value in values)
        assert len(set(every)) == len(every), "an ID was served twice"
        assert {answer.status for answer in load.answers} == {200, 503}

        status = server.terminate_and_wait()
        assert status in (0, 128 + signal.SIGTERM), server.stderr_text()[-3000:]
        left = list_claims(url)
        assert left == [], (
            f"the claims were not released at shutdown: {left}\n"
            f"server stderr (end):\n{server.stderr_text()[-5000:]}"
        )


def test_claim_is_made_again_after_a_failed_attempt(zk: ZooKeeperEnsemble) -> None:
    """A server whose session expired claims its generator ID again once it is free.

    The server may hold only generator 0 (``generators=0-0``) and waits at most 1 s for
    a free one (``claim_timeout=1``). It is frozen (SIGSTOP) until ZooKeeper expires
    its session, then thawed: generator 0 is held off for the TTL + skew after its
    last ceiling (about 3 s), so the first attempt to claim it again runs out of time.
    Once the hold-off has passed, a later attempt must get it. (A regression test: the
    renewal loop once left such a claim in CLAIMING for good, and the server answered
    503 until restarted.)
    """
    from kazoo.client import KazooClient

    root = unique_zk_root()
    url = (
        f"zk://{zk.hosts}{root}?generators=0-0&claim_timeout=1"
        f"&session_timeout={SESSION_TIMEOUT_S:g}&wait_timeout={WAIT_TIMEOUT_S:g}"
    )
    watcher = KazooClient(hosts=zk.hosts)
    watcher.start(timeout=30)
    try:
        with IdmintServer("--coordinator", url) as server:
            server.start()
            assert watcher.exists(f"{root}/pool/0") is not None
            server.send_signal(signal.SIGSTOP)
            try:
                wait_until(
                    lambda: watcher.exists(f"{root}/pool/0") is None,
                    timeout=30,
                    description="ZooKeeper to expire the frozen server's session",
                )
            finally:
                server.send_signal(signal.SIGCONT)
            with httpx.Client(base_url=server.url, timeout=15, trust_env=False) as http:
                wait_for(
                    lambda: health(http) == 200,
                    timeout=12,
                    description="the server to claim generator 0 again after its hold-off",
                    explain=lambda: http.get("/v1/claims").text + "\n" + server.stderr_text(),
                )
                assert parse_id(http.get("/v1/id").text, "uid64").generator == 0  # type: ignore[attr-defined]
    finally:
        watcher.stop()
        watcher.close()
