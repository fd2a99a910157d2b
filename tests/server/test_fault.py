"""The ID server while its ZooKeeper goes away and comes back, under load.

A server claims two generator IDs in a private standalone ZooKeeper (session timeout
2 s, wait timeout 1 s) and three client threads ask it for IDs the whole time. The
ZooKeeper server is stopped entirely: within the session timeout ``/healthz`` and
``/readyz`` turn 503 and ``/v1/*`` answer 503 with a JSON error, while ``/livez``
stays 200 (the process is alive, only not ready). ZooKeeper is started again (same
port, same data): both recover, and no ID was ever served twice over the whole run.
A server whose session expires logs the loss and the new claim (JSON log lines).
With etcd stopped, a claim's deadline passes without any state change in the
library: ``/v1/claims`` shows it suspended, never "active" next to "usable": false.

The ZooKeeper is private to this module (the session's ``zk`` fixture lives in
``tests/integration``) and is stopped at the end whatever happened.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from tests.server.server_helpers import (
    ClientThreads,
    IdmintServer,
    assert_json_error,
    id_line,
    list_claims,
    private_zookeeper,
    unique_zk_root,
    wait_for,
    wait_until,
)
from tests.servers.etcd import EtcdCluster
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


class Load(ClientThreads):
    """Client threads asking for IDs until stopped, alternating /v1/id and /v1/ids."""

    def __init__(self, url: str, threads: int = 3) -> None:
        super().__init__(threads)
        self.url = url
        self.answers: list[Answer] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()

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

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=15, trust_env=False) as http:
            single = True
            while not self.stopping.is_set():
                try:
                    response = http.get("/v1/id" if single else "/v1/ids?count=20")
                except httpx.HTTPError as error:
                    with self._lock:
                        self.errors.append(f"{type(error).__name__}: {error}")
                    continue
                at = time.monotonic()
                if response.status_code == 200:
                    ids = [id_line(response.text)] if single else response.json()["ids"]
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


def check_claims_agree(http: httpx.Client) -> list[dict[str, object]]:
    """Each claim row's state agrees with its usability: active exactly when usable."""
    rows: list[dict[str, object]] = http.get("/v1/claims").json()["claims"]
    for row in rows:
        assert (row["state"] == "active") == row["usable"], row
        assert (row["problem"] is None) == row["usable"], row
    return rows


def log_lines(server: IdmintServer) -> list[dict[str, str]]:
    """The server's stderr, every line parsed as the JSON object it must be."""
    return [json.loads(line) for line in server.stderr_text().splitlines()]


def test_zookeeper_down_then_back_under_load(zk: ZooKeeperEnsemble) -> None:
    url = short_session_url(zk, unique_zk_root())
    with IdmintServer("--coordinator", url, "--generators", "2", "--log-format", "json") as server:
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
                assert assert_json_error(http.get("/readyz"), 503) == body
                assert http.get("/livez").status_code == 200
                for path in ("/v1/id", "/v1/ids?count=5"):
                    assert_json_error(http.get(path), 503)
                claims = check_claims_agree(http)
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
                assert http.get("/readyz").status_code == 200
                check_claims_agree(http)
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
            load.close()

        assert not load.errors, load.errors[:10]
        every = [text for answer in load.answers for text in answer.ids]
        values = [parse_id(text, "uid64") for text in every]
        assert all(isinstance(value, Uid64) for value in values)
        assert len(set(every)) == len(every), "an ID was served twice"
        assert {answer.status for answer in load.answers} == {200, 503}
        # The outage in the log: each claim suspended, then back. A claim comes back
        # either in the same session ("resumed") or, when ZooKeeper expired the session
        # before the client reconnected (a restart restores sessions, but a slow
        # reconnect can still miss the timeout), as lost and then re-claimed.
        messages = [line["message"] for line in log_lines(server)]

        def count(pattern: str) -> int:
            return sum(1 for m in messages if re.search(pattern, m))

        assert count(r": generator \d+ cluster 0 suspended\b") >= 2, messages
        resumed = count(r": generator \d+ cluster 0 resumed\b")
        lost = count(r": generator \d+ cluster 0 lost\b")
        reclaimed = count(r": re-claimed as generator \d+ cluster 0\b")
        assert reclaimed == lost, messages
        assert resumed + reclaimed >= 2, messages

        status = server.terminate_and_wait()
        assert status in (0, 128 + signal.SIGTERM), server.stderr_text()[-3000:]
        left = list_claims(url)
        assert left == [], (
            f"the claims were not released at shutdown: {left}\n"
            f"server stderr (end):\n{server.stderr_text()[-5000:]}"
        )


def short_session_url(zk: ZooKeeperEnsemble, root: str, query: str = "") -> str:
    """A URL of ``root`` whose sessions expire (and waits give up) soon; ``query``: more."""
    return (
        f"zk://{zk.hosts}{root}?{query}"
        f"session_timeout={SESSION_TIMEOUT_S:g}&wait_timeout={WAIT_TIMEOUT_S:g}"
    )


@pytest.fixture
def watcher(zk: ZooKeeperEnsemble) -> Iterator[Any]:
    """A client of the test's own, to see the claims' nodes come and go."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zk.hosts)
    client.start(timeout=30)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def frozen_until_its_claim_is_gone(server: IdmintServer, watcher: Any, node: str) -> None:
    """Stop ``server`` (SIGSTOP) until ZooKeeper expires its session, which takes its
    claim's ``node`` away; then let it go on."""
    server.send_signal(signal.SIGSTOP)
    try:
        wait_until(
            lambda: watcher.exists(node) is None,
            timeout=30,
            description="ZooKeeper to expire the frozen server's session",
        )
    finally:
        server.send_signal(signal.SIGCONT)


def test_claim_is_made_again_after_a_failed_attempt(zk: ZooKeeperEnsemble, watcher: Any) -> None:
    """A server whose session expired claims its generator ID again once it is free.

    The server may hold only generator 0 (``generators=0-0``) and waits at most 1 s for
    a free one (``claim_timeout=1``). It is frozen (SIGSTOP) until ZooKeeper expires
    its session, then thawed: generator 0 is held off for the TTL + skew after its
    last ceiling (about 3 s), so the first attempt to claim it again runs out of time.
    Once the hold-off has passed, a later attempt must get it. (A regression test: the
    renewal loop once left such a claim in CLAIMING for good, and the server answered
    503 until restarted.)
    """
    root = unique_zk_root()
    url = short_session_url(zk, root, "generators=0-0&claim_timeout=1&")
    with IdmintServer("--coordinator", url) as server:
        server.start()
        assert watcher.exists(f"{root}/pool/0") is not None
        frozen_until_its_claim_is_gone(server, watcher, f"{root}/pool/0")
        with httpx.Client(base_url=server.url, timeout=15, trust_env=False) as http:
            wait_for(
                lambda: health(http) == 200,
                timeout=12,
                description="the server to claim generator 0 again after its hold-off",
                explain=lambda: http.get("/v1/claims").text + "\n" + server.stderr_text(),
            )
            assert parse_id(http.get("/v1/id").text, "uid64").generator == 0  # type: ignore[attr-defined]


def test_a_lost_claim_is_logged_with_its_identity(zk: ZooKeeperEnsemble, watcher: Any) -> None:
    """A server whose ZooKeeper session expires says so on stderr, naming the identities.

    The server (``--log-format json``) logs its claim of a generator at INFO. It is
    frozen (SIGSTOP) until ZooKeeper expires its session, then thawed: it logs the loss
    of that generator at WARNING, once, then the new claim (another generator: the
    first is held off) at WARNING, once. ``/metrics`` counts the loss. Every stderr
    line is JSON with ``time``, ``level``, ``logger`` and ``message``.
    """
    root = unique_zk_root()
    url = short_session_url(zk, root)
    with IdmintServer("--coordinator", url, "--log-format", "json") as server:
        server.start()
        claimed = [line for line in log_lines(server) if "claimed" in line["message"]]
        assert [(line["level"], line["logger"]) for line in claimed] == [
            ("INFO", "idmint.coordinate")
        ], claimed
        # A claimant alone starts at a random free ID, as claimants at once do.
        first = re.search(r": claimed generator (\d+) cluster 0$", claimed[0]["message"])
        assert first is not None, claimed
        generator = int(first.group(1))

        frozen_until_its_claim_is_gone(server, watcher, f"{root}/pool/{generator}")
        with httpx.Client(base_url=server.url, timeout=15, trust_env=False) as http:
            wait_for(
                lambda: "re-claimed" in server.stderr_text() and health(http) == 200,
                timeout=30,
                description="the server to log a new claim and be ready again",
                explain=lambda: http.get("/v1/claims").text + "\n" + server.stderr_text(),
            )
            metrics = http.get("/metrics").text
            assert 'idmint_claim_losses_total{slot="0"} 1' in metrics.splitlines(), metrics
            (row,) = check_claims_agree(http)
            assert row["state"] == "active"
        lines = log_lines(server)

    for line in lines:
        assert {"time", "level", "logger", "message"} <= set(line), line
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["time"]), line
    lost = [line for line in lines if " lost: " in line["message"]]
    assert len(lost) == 1, lines
    assert lost[0]["level"] == "WARNING"
    assert f": generator {generator} cluster 0 lost: " in lost[0]["message"], lost
    again = [line for line in lines if "re-claimed" in line["message"]]
    assert len(again) == 1, lines
    assert again[0]["level"] == "WARNING"
    match = re.search(
        rf": re-claimed as generator (\d+) cluster 0 "
        rf"\(was generator {generator} cluster 0\)$",
        again[0]["message"],
    )
    assert match is not None, again
    assert lines.index(lost[0]) < lines.index(again[0])


@pytest.fixture
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(1, tmp_path_factory.mktemp("etcd-fault"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def test_a_claim_past_its_deadline_is_shown_suspended(etcd: EtcdCluster) -> None:
    """etcd stopped: the lapsed claims are shown suspended, not active, and counted as failing.

    etcd claims have no connection state: when renewals fail the library's state stays
    ACTIVE and only the deadline (TTL 2 s) stops the generators. The server shows such a
    claim as ``suspended`` with the reason, so ``state`` agrees with ``usable``;
    ``/readyz`` is 503 while ``/livez`` stays 200, and the renewal failures are counted.
    The 503 says the shared reason once, naming both identities, and the log says once at
    WARNING that IDs cannot be issued (the renewals' own lines are INFO), and once at
    INFO when they can again. Once etcd is back the claims are active and usable again.
    """
    url = f"etcd://127.0.0.1:{etcd.client_port(0)}{unique_zk_root()}?ttl=2&timeout=0.5"
    with IdmintServer("--coordinator", url, "--generators", "2", "--log-format", "json") as server:
        server.start()
        with httpx.Client(base_url=server.url, timeout=15, trust_env=False) as http:
            rows = check_claims_agree(http)
            assert [row["state"] for row in rows] == ["active", "active"]
            etcd.stop_member(0)
            try:
                wait_for(
                    lambda: http.get("/readyz").status_code == 503,
                    timeout=30,
                    description="/readyz to turn 503 once etcd is down",
                    explain=server.stderr_text,
                )
                assert http.get("/livez").status_code == 200
                rows = check_claims_agree(http)
                for row in rows:
                    assert (row["state"], row["usable"]) == ("suspended", False), row
                    assert "no renewal before the claim's deadline" in str(row["problem"]), row
                body = assert_json_error(http.get("/readyz"), 503)
                detail = body["detail"]
                for row in rows:
                    assert str(row["identity"]) in detail, detail
                assert detail.count("no renewal before the claim's deadline") == 1, detail
                assert detail.count("no etcd member answered") == 1, detail
                assert detail.count(f"127.0.0.1:{etcd.client_port(0)}") <= 2, detail
                for path in ("/v1/id", "/v1/ids?count=3"):
                    assert assert_json_error(http.get(path), 503) == body
                metrics = http.get("/metrics").text
                failures = re.search(
                    r'^idmint_claim_renewal_failures_total\{slot="0"\} (\d+)$', metrics, re.M
                )
                assert failures is not None, metrics
                assert int(failures.group(1)) >= 1
                wait_for(
                    lambda: any(
                        "cannot be issued" in line["message"] for line in log_lines(server)
                    ),
                    timeout=30,
                    description="the server to log that it stopped issuing",
                    explain=server.stderr_text,
                )
            finally:
                etcd.start_member(0)
            wait_for(
                lambda: http.get("/readyz").status_code == 200,
                timeout=30,
                description="/readyz to recover once etcd is back",
                explain=lambda: http.get("/v1/claims").text + "\n" + server.stderr_text(),
            )
            wait_for(
                lambda: any("issued again" in line["message"] for line in log_lines(server)),
                timeout=30,
                description="the server to log that it issues again",
                explain=server.stderr_text,
            )
            # /readyz needs one usable claim; the other renews on its own schedule.
            wait_for(
                lambda: [row["state"] for row in check_claims_agree(http)] == ["active", "active"],
                timeout=30,
                description="both claims to be active again",
                explain=lambda: http.get("/v1/claims").text,
            )
        lines = log_lines(server)
    stopped = [line for line in lines if "cannot be issued" in line["message"]]
    resumed = [line for line in lines if "issued again" in line["message"]]
    assert [line["level"] for line in stopped] == ["WARNING"], stopped
    assert [line["level"] for line in resumed] == ["INFO"], resumed
    assert lines.index(stopped[0]) < lines.index(resumed[0])
    assert stopped[0]["message"].startswith("IDs cannot be issued (answering 503): ")
    warnings = [line for line in lines if line["level"] == "WARNING"]
    assert warnings == stopped, "one WARNING for the whole outage"
