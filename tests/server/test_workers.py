"""Several worker processes behind one port: ``idmint serve --workers N`` and other servers'.

The promise under test: however many processes serve one port, no ID is issued
twice, because each worker claims its own generator IDs when it starts (never
a parent before a fork). Before the host-local default, ``uvicorn --factory
idmint.server.app:create_app --workers 2`` gave 4 clients 1,200 IDs of which
928 were distinct: both workers were generator 0.

Every server here gets a private ``local://`` directory (``IDMINT_LOCAL_DIR``), so
``idmint claims list`` shows exactly its claims. Requests go on new connections
(:func:`get_alone`): the kernel spreads connections, not requests, over the
workers. Killing workers is in ``tests/faults/test_server_workers.py``.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli_process import assert_one_error_line, run_idmint
from tests.server.server_helpers import (
    LOOPBACK,
    IdmintServer,
    get_alone,
    id_line,
    in_threads,
    list_claims,
    metric,
    metric_labels,
    parse_metrics,
    private_pool,
    running_server,
    server_has_read,
    wait_for,
)

from idmint.schemes import Uid64
from idmint.server.config import available_cores

START_TIMEOUT_S = 60.0


def pool_url(tmp_path: Path) -> str:
    return f"local://{tmp_path / 'pool'}"


def claims_of(port: int) -> Any:
    status, body = get_alone(port, "/v1/claims")
    assert status == 200, body
    return json.loads(body)


def ids_from(port: int, requests: int, count: int) -> list[str]:
    """``requests`` times ``GET /v1/ids?count=N`` (``/v1/id`` for 1), each on a new connection."""
    ids: list[str] = []
    for _ in range(requests):
        if count == 1:
            status, body = get_alone(port, "/v1/id")
            assert status == 200, body
            ids.append(id_line(body))
        else:
            status, body = get_alone(port, f"/v1/ids?count={count}")
            assert status == 200, body
            ids += json.loads(body)["ids"]
    return ids


def assert_distinct(ids: list[str]) -> None:
    twice = [value for value, seen in Counter(ids).items() if seen > 1]
    assert not twice, f"{len(twice)} of {len(ids)} IDs issued more than once, e.g. {twice[:3]}"


def generator_of(row: dict[str, Any]) -> int:
    match = re.fullmatch(r"generator (\d+) cluster 0", row["identity"])
    assert match is not None, row
    return int(match.group(1))


# -- idmint serve --workers N -----------------------------------------------------------------


@pytest.mark.parametrize(("workers", "generators"), [(2, 2), (4, 1)])
def test_workers_under_load_never_issue_an_id_twice(
    tmp_path: Path, workers: int, generators: int
) -> None:
    """Each worker holds distinct generator IDs, connections reach every worker, no ID twice,
    and ``/metrics`` from whichever worker answers adds up to what the clients got."""
    with running_server(
        "--workers", str(workers), "--generators", str(generators), env=private_pool(tmp_path)
    ) as server:
        assert server.stdout_lines[0].rstrip().endswith(f"({workers} worker processes)")
        view = claims_of(server.port)
        assert [w["worker"] for w in view["workers"]] == list(range(workers))
        assert all(w["answering"] for w in view["workers"])
        pids = {w["pid"] for w in view["workers"]}
        assert len(pids) == workers
        assert server.pid not in pids  # the supervisor claims nothing
        rows = view["claims"]
        assert Counter(row["worker"] for row in rows) == dict.fromkeys(range(workers), generators)
        assert all(row["state"] == "active" and row["usable"] for row in rows)
        worker_of = {generator_of(row): row["worker"] for row in rows}
        assert len(worker_of) == workers * generators  # every generator ID held once
        held = list_claims(pool_url(tmp_path))
        assert sorted(row["generator"] for row in held) == sorted(worker_of)
        assert {row["holder"].rpartition(":")[2] for row in held} == {str(pid) for pid in pids}

        threads, requests_each = 8, 16
        ids = in_threads(threads, lambda: ids_from(server.port, requests_each // 2, 1))
        ids += in_threads(threads, lambda: ids_from(server.port, requests_each // 2, 50))
        assert len(ids) == threads * requests_each // 2 * 51
        assert_distinct(ids)
        used = Counter(Uid64(text).generator for text in ids)
        assert set(used) <= set(worker_of), (used, worker_of)
        # 128 connections: each worker gets some, unless the kernel hands them all to a few.
        assert {worker_of[g] for g in used} == set(range(workers)), used

        samples = parse_metrics(get_alone(server.port, "/metrics")[1].decode())
        served = {
            labels["worker"]: metric(samples, "idmint_ids_served_total", **labels)
            for labels in metric_labels(samples, "idmint_ids_served_total")
        }
        assert set(served) == {str(i) for i in range(workers)}
        assert sum(served.values()) == len(ids)
        for worker in range(workers):
            mine = [row for row in rows if row["worker"] == worker]
            for slot, row in enumerate(mine):
                issued = metric(
                    samples,
                    "idmint_ids_issued_total",
                    worker=str(worker),
                    slot=str(slot),
                    generator=str(generator_of(row)),
                    cluster="0",
                )
                assert issued == used[generator_of(row)], (worker, slot, row)
            assert metric(samples, "idmint_worker_up", worker=str(worker)) == 1
            assert metric(samples, "idmint_worker_restarts_total", worker=str(worker)) == 0
            assert metric(samples, "process_open_fds", worker=str(worker)) > 0

        def requests_counted() -> float:
            text = get_alone(server.port, "/metrics")[1].decode()
            scraped = parse_metrics(text)
            return sum(
                metric(scraped, "idmint_http_requests_total", **labels)
                for labels in metric_labels(scraped, "idmint_http_requests_total")
                if labels["route"] in ("/v1/id", "/v1/ids")
            )

        # A request is counted just after its answer is sent: wait for the last ones.
        wait_for(
            lambda: requests_counted() == threads * requests_each,
            timeout=10,
            description="every ID request counted",
            explain=lambda: f"counted {requests_counted()} of {threads * requests_each}",
        )
        assert server.terminate_and_wait() == 0, server.stderr_text()
    assert list_claims(pool_url(tmp_path)) == []


def test_one_worker_is_the_single_process_server(tmp_path: Path) -> None:
    """``--workers 1`` (the default) runs no supervisor: the process itself claims and serves."""
    with running_server("--workers", "1", env=private_pool(tmp_path)) as server:
        assert "worker" not in server.stdout_lines[0]
        view = claims_of(server.port)
        assert "workers" not in view
        assert "worker" not in view["claims"][0]
        held = list_claims(pool_url(tmp_path))
        assert [row["holder"].rpartition(":")[2] for row in held] == [str(server.pid)]
        assert get_alone(server.port, "/readyz") == (200, b'{"status":"ok"}')


def test_workers_start_under_a_temporary_directory_too_deep_for_a_socket(
    tmp_path: Path,
) -> None:
    """A ``TMPDIR`` whose path is too long for the workers' unix sockets (108 bytes at
    most, as a job runner's or a test's can be): the run directory goes to /tmp instead."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    env = {**private_pool(tmp_path), "TMPDIR": str(deep)}
    with running_server("--workers", "2", env=env) as server:
        ids = ids_from(server.port, 8, 10)
        assert_distinct(ids)
        workers = claims_of(server.port)["workers"]
        assert all(w["answering"] for w in workers)
        # Other servers (other tests running beside this one) have run directories
        # in /tmp too: ours is the one whose worker 0 is our worker 0.
        [run_dir] = [
            path
            for path in Path("/tmp").glob("idmint-serve-*")
            if _snapshot_pid(path / "worker-0.json") == workers[0]["pid"]
        ]
        assert run_dir.stat().st_mode & 0o777 == 0o700
    assert not run_dir.exists()


def _snapshot_pid(path: Path) -> int | None:
    """The pid in a worker's snapshot file, if it is there to read."""
    try:
        return int(json.loads(path.read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def test_configured_identities_give_each_worker_its_own_block(tmp_path: Path) -> None:
    """``static://?generator=7`` with 2 workers of 2: worker 0 holds 7 and 8, worker 1 9 and 10,
    and a third process asking for 9 is refused while the server holds it."""
    with running_server(
        "--workers",
        "2",
        "--generators",
        "2",
        "--coordinator",
        "static://?generator=7",
        env=private_pool(tmp_path),
    ) as server:
        rows = claims_of(server.port)["claims"]
        blocks = {
            worker: [generator_of(r) for r in rows if r["worker"] == worker] for worker in (0, 1)
        }
        assert blocks == {0: [7, 8], 1: [9, 10]}
        ids = in_threads(4, lambda: ids_from(server.port, 8, 20))
        assert_distinct(ids)
        assert {Uid64(text).generator for text in ids} <= {7, 8, 9, 10}
        refused = run_idmint("generate", "--generator", "9", env=private_pool(tmp_path))
        assert refused.returncode == 1, refused
        assert "generator 9, cluster 0 is already in use" in assert_one_error_line(refused.stderr)


def run_serve(tmp_path: Path, *options: str, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "idmint", "serve", "--host", LOOPBACK, "--port", "0", *options],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **private_pool(tmp_path), **(env or {})},
    )


def test_a_worker_that_cannot_claim_stops_the_server_with_one_line(tmp_path: Path) -> None:
    """Worker 1's identity (8) is held by another process: the server does not start, says so in
    one line with the status of an identity in use (1), and worker 0 gives its claim back."""
    pool = private_pool(tmp_path)
    with running_server("--coordinator", "static://?generator=8", env=pool) as holder:
        completed = run_serve(tmp_path, "--workers", "2", "--coordinator", "static://?generator=7")
        assert completed.returncode == 1, completed
        assert completed.stdout == ""
        line = assert_one_error_line(completed.stderr)
        assert "worker 1: generator 8, cluster 0 is already in use on this host" in line
        held = list_claims(pool_url(tmp_path))
        assert [(row["generator"], row["holder"].rpartition(":")[2]) for row in held] == [
            (8, str(holder.pid))
        ]
    assert list(Path(tmp_path / "tmp").iterdir()) == []  # the run directory is gone


@pytest.mark.parametrize(
    ("options", "environment", "message"),
    [
        (("--workers", "0"), {}, "idmint: error: --workers must be 1..1024, got 0"),
        (("--workers", "1025"), {}, "idmint: error: --workers must be 1..1024, got 1025"),
        (("--workers", "two"), {}, "'two' is not a whole number or auto"),
        (("--workers", "1.5"), {}, "'1.5' is not a whole number or auto"),
        (("--workers", "-2"), {}, "'-2' is not a whole number or auto"),
        (("--workers", ""), {}, "'' is not a whole number or auto"),
        (
            (),
            {"IDMINT_WORKERS": "0"},
            "idmint: error: environment variable IDMINT_WORKERS must be 1..1024, got 0",
        ),
        (
            (),
            {"IDMINT_WORKERS": "many"},
            "environment variable IDMINT_WORKERS: 'many' is not a whole number or auto",
        ),
        (
            ("--workers", "2", "--coordinator", "static://?generator=2047"),
            {},
            "worker 1: generator 2048 is out of range; expected 0..2047",
        ),
    ],
)
def test_bad_workers_exit_2_with_one_line(
    tmp_path: Path, options: tuple[str, ...], environment: dict[str, str], message: str
) -> None:
    completed = run_serve(tmp_path, *options, env=environment)
    assert completed.returncode == 2, completed
    assert message in assert_one_error_line(completed.stderr)
    assert completed.stdout == ""


def test_a_coordinator_out_of_reach_is_one_line_and_69(tmp_path: Path) -> None:
    """Every worker fails to claim at once: still one line (the first failure), status 69."""
    url = "zk://127.0.0.1:1/idmint?connect_timeout=1"
    completed = run_serve(tmp_path, "--workers", "4", "--coordinator", url)
    assert completed.returncode == 69, completed
    line = assert_one_error_line(completed.stderr)
    assert re.search(
        r"worker \d: could not reach ZooKeeper at 127\.0\.0\.1:1 \(waited 1\.\d s\)", line
    )
    assert completed.stdout == ""


def test_workers_from_the_environment_and_auto(tmp_path: Path) -> None:
    """``IDMINT_WORKERS=2`` is used when no flag is given; ``--workers auto`` wins over a bad one
    and means one worker per core this process may run on."""
    with running_server(env={**private_pool(tmp_path), "IDMINT_WORKERS": "2"}) as server:
        assert server.stdout_lines[0].rstrip().endswith("(2 worker processes)")
        assert len(claims_of(server.port)["workers"]) == 2
    cores = available_cores()
    with running_server(
        "--workers", "auto", env={**private_pool(tmp_path), "IDMINT_WORKERS": "many"}
    ) as server:
        line = server.stdout_lines[0].rstrip()
        if cores > 1:
            assert line.endswith(f"({cores} worker processes)"), line
            assert len(claims_of(server.port)["workers"]) == cores
        else:
            assert "worker" not in line


def test_a_port_held_by_workers_is_not_joined(tmp_path: Path) -> None:
    """The workers share their port with ``SO_REUSEPORT``: a second server (of the same user,
    with or without workers) must not slip into the group and take half the connections."""
    with running_server("--workers", "2", env=private_pool(tmp_path)) as server:
        for options in (("--workers", "2"), ()):
            completed = run_serve(tmp_path, *options, "--port", str(server.port))
            assert completed.returncode == 2, completed
            line = assert_one_error_line(completed.stderr)
            assert f"cannot listen on 127.0.0.1:{server.port}" in line


def test_sigterm_drains_every_worker_and_releases_every_claim(tmp_path: Path) -> None:
    """Requests in flight in both workers at SIGTERM are answered in full; then every claim is
    released, the run directory removed, and the supervisor exits 0."""
    import http.client

    server = IdmintServer("--workers", "2", env=private_pool(tmp_path))
    with server:
        server.start()
        connections = []
        for _ in range(24):
            connection = http.client.HTTPConnection(LOOPBACK, server.port, timeout=60)
            connection.request("GET", "/v1/ids?count=5000")
            connections.append(connection)
        client_ports = [c.sock.getsockname()[1] for c in connections]
        wait_for(
            lambda: server_has_read(server.port, client_ports),
            timeout=30,
            description="every request read by a worker",
            explain=lambda: "",
        )
        server.send_signal(signal.SIGTERM)
        answers: queue.Queue[tuple[int, bytes]] = queue.Queue()

        def read(connection: http.client.HTTPConnection) -> None:
            response = connection.getresponse()
            answers.put((response.status, response.read()))
            connection.close()

        readers = [threading.Thread(target=read, args=(c,)) for c in connections]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(timeout=60)
        ids = []
        while not answers.empty():
            status, body = answers.get()
            assert status == 200, body
            ids += json.loads(body)["ids"]
        assert len(ids) == 24 * 5000
        assert_distinct(ids)
        assert len({Uid64(text).generator for text in ids}) == 2  # both workers were draining
        assert server.wait(timeout=60) == 0, server.stderr_text()
        assert " ERROR " not in server.stderr_text(), server.stderr_text()
        assert "Traceback" not in server.stderr_text(), server.stderr_text()
    assert list_claims(pool_url(tmp_path)) == []
    assert list(Path(tmp_path / "tmp").iterdir()) == []


# -- create_app under other servers' workers ---------------------------------------------------


class ForeignServer:
    """An ASGI server of someone else's running ``create_app``; its URL read from its log."""

    def __init__(self, argv: list[str], env: dict[str, str], announce: str) -> None:
        self.argv = argv
        self.env = env
        self.announce = re.compile(announce)
        self.lines: list[str] = []
        self.process: subprocess.Popen[str] | None = None
        self.port = 0

    def __enter__(self) -> ForeignServer:
        self.process = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **self.env},
            start_new_session=True,
        )
        found: queue.Queue[int | None] = queue.Queue()

        def drain() -> None:
            assert self.process is not None
            assert self.process.stderr is not None
            for line in self.process.stderr:
                self.lines.append(line)
                match = self.announce.search(line)
                if match:
                    found.put(int(match.group(1)))
            found.put(None)

        threading.Thread(target=drain, daemon=True).start()
        port = found.get(timeout=START_TIMEOUT_S)
        assert port is not None, "".join(self.lines)
        self.port = port
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


UVICORN = [sys.executable, "-m", "uvicorn", "--factory", "idmint.server.app:create_app"]
GUNICORN = [sys.executable, "-m", "gunicorn", "-k", "uvicorn_worker.UvicornWorker", "-w", "2"]
APP_FACTORY_CALL = "idmint.server.app:create_app()"


def uvicorn_workers() -> Iterator[Any]:
    yield pytest.param(
        [*UVICORN, "--workers", "2", "--host", LOOPBACK, "--port", "0"],
        r"Uvicorn running on http://127\.0\.0\.1:(\d+)",
        id="uvicorn --workers 2",
    )
    for preload in ((), ("--preload",)):
        yield pytest.param(
            [*GUNICORN, "-b", f"{LOOPBACK}:0", "--no-control-socket", *preload, APP_FACTORY_CALL],
            r"Listening at: http://127\.0\.0\.1:(\d+)",
            id="gunicorn -w 2 " + " ".join(preload),
        )


@pytest.mark.parametrize(("argv", "announce"), list(uvicorn_workers()))
def test_create_app_under_other_servers_workers_claims_per_worker(
    tmp_path: Path, argv: list[str], announce: str
) -> None:
    """Each worker claims its own generator ID when its app starts (ASGI lifespan), also when
    gunicorn makes the app before forking (``--preload``): 4 clients, 1,200 distinct IDs."""
    with ForeignServer(argv, private_pool(tmp_path), announce) as server:
        wait_for(
            lambda: len(list_claims(pool_url(tmp_path))) == 2,
            timeout=START_TIMEOUT_S,
            description="each worker's claim",
            explain=lambda: f"{list_claims(pool_url(tmp_path))}\n{''.join(server.lines)}",
        )
        held = list_claims(pool_url(tmp_path))
        holders = {row["holder"] for row in held}
        assert len(holders) == 2, held
        assert server.process is not None
        assert not any(h.endswith(f":{server.process.pid}") for h in holders)  # not the parent
        ids = in_threads(4, lambda: ids_from(server.port, 300, 1))
        assert len(ids) == 1200
        assert_distinct(ids)
        assert {Uid64(text).generator for text in ids} <= {row["generator"] for row in held}
    wait_for(
        lambda: list_claims(pool_url(tmp_path)) == [],
        timeout=30,
        description="the workers' claims released",
        explain=lambda: str(list_claims(pool_url(tmp_path))),
    )
