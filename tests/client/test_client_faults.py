"""The client when servers die, lose their claims, come and go, and when its process forks."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import httpx
import pytest
from tests.cli_process import CliProcess, assert_one_error_line, run_idmint
from tests.server.server_helpers import (
    IdmintServer,
    metric,
    parse_metrics,
    private_zookeeper,
    running_server,
)
from tests.servers import wait_until
from tests.servers.zookeeper import ZooKeeperEnsemble

from idmint.client import AsyncIdClient, IdClient
from idmint.discovery import Discovery
from idmint.errors import NoServerAnswered
from idmint.schemes import Uid64, parse_id

pytestmark = pytest.mark.integration

Pair = tuple[IdmintServer, IdmintServer]


def generator_of(server: IdmintServer) -> int:
    with server.client() as http:
        value = parse_id(http.get("/v1/id").text.strip(), "uid64")
    assert isinstance(value, Uid64)
    return value.generator


def answers(server: IdmintServer, route: str, code: str) -> float:
    """How many requests to ``route`` the server answered with ``code``."""
    with server.client() as http:
        samples = parse_metrics(http.get("/metrics").text)
    return metric(samples, "idmint_http_requests_total", route=route, code=code)


# -- a server dies -------------------------------------------------------------------------


def test_a_server_killed_mid_run_costs_the_caller_nothing() -> None:
    with IdmintServer() as doomed, IdmintServer() as survivor:
        doomed.start()
        survivor.start()
        doomed_generator = generator_of(doomed)
        survivor_generator = generator_of(survivor)
        drawn: list[Uid64] = []
        killed = threading.Event()
        with IdClient([doomed.url, survivor.url], min_batch=200, max_batch=200) as ids:
            while not {doomed_generator, survivor_generator} <= {v.generator for v in drawn}:
                drawn.append(ids.get())  # type: ignore[arg-type]

            # Kill it from another thread while this one keeps drawing.
            def kill() -> None:
                doomed.kill()
                killed.set()

            killer = threading.Thread(target=kill)
            killer.start()
            while not killed.is_set():
                drawn.append(ids.get())  # type: ignore[arg-type]
            after = [ids.get() for _ in range(5000)]
            killer.join()
    every = drawn + after
    assert len(set(every)) == len(every), "an ID was handed out twice"
    # Once the buffer held before the kill is spent, every ID is the survivor's.
    assert {value.generator for value in after[-2000:]} == {survivor_generator}  # type: ignore[attr-defined]


def test_the_async_client_rides_out_a_killed_server() -> None:
    with IdmintServer() as doomed, IdmintServer() as survivor:
        doomed.start()
        survivor.start()

        async def draw() -> list[Uid64]:
            # max_batch keeps the buffer (two batches at most) well under the 1000 IDs
            # checked below: a batch grown to the rate could hold more of the doomed's IDs.
            async with AsyncIdClient(
                [doomed.url, survivor.url], min_batch=200, max_batch=200
            ) as ids:
                values = [await ids.get() for _ in range(1000)]
                await asyncio.to_thread(doomed.kill)
                values += [await ids.get() for _ in range(5000)]
            return values  # type: ignore[return-value]

        values = asyncio.run(draw())
        survivor_generator = generator_of(survivor)
    assert len(set(values)) == len(values)
    assert {value.generator for value in values[-1000:]} == {survivor_generator}


def test_a_server_with_a_lost_claim_is_asked_again_only_once_ready(tmp_path: Path) -> None:
    with private_zookeeper(tmp_path / "zk") as zk:
        # One fleet, two coordinators: each given its own half of the generator IDs.
        url = (
            f"zk://{zk.hosts}/client-{uuid.uuid4().hex[:8]}"
            "?session_timeout=2&wait_timeout=1&generators=0-1023"
        )
        with (
            IdmintServer("--coordinator", url) as claimed,
            IdmintServer("--coordinator", "local://?generators=1024-2047") as local,
        ):
            claimed.start()
            local.start()
            claimed_generator = generator_of(claimed)
            with (
                httpx.Client(base_url=claimed.url, trust_env=False, timeout=10) as http,
                IdClient([claimed.url, local.url], min_batch=100, max_batch=100) as ids,
            ):
                drawn = ids.get_many(1000)
                assert claimed_generator in {v.generator for v in drawn}  # type: ignore[attr-defined]

                zk.stop_member(0)
                wait_until(
                    lambda: http.get("/readyz").status_code == 503,
                    timeout=30,
                    description="the ZooKeeper-claimed server to stop being ready",
                )
                refused_before = answers(claimed, "/v1/ids", "503")
                probed_before = answers(claimed, "/readyz", "503")
                during: list[Uid64] = []

                def probed_three_times() -> bool:
                    during.extend(ids.get_many(100))  # type: ignore[arg-type]
                    return answers(claimed, "/readyz", "503") - probed_before >= 3

                # Refills go on (without an error) while the client probes the
                # server's /readyz, after each backoff, three times.
                wait_until(probed_three_times, timeout=60, description="3 probes of /readyz")
                refused = answers(claimed, "/v1/ids", "503") - refused_before
                # One 503 set it aside: IDs were not asked of it again after a backoff.
                assert refused == 1, refused

                zk.start_member(0)
                wait_until(
                    lambda: http.get("/readyz").status_code == 200,
                    timeout=60,
                    description="the server to be ready again once ZooKeeper is back",
                )
                later: list[Uid64] = []
                # Its session may have expired in the outage: then it holds another
                # generator ID now (a claim starts at a random free one).
                recovered_generator = generator_of(claimed)

                def claimed_server_used_again() -> bool:
                    later.extend(ids.get_many(200))  # type: ignore[arg-type]
                    return recovered_generator in {value.generator for value in later}

                wait_until(
                    claimed_server_used_again,
                    timeout=30,
                    description="the client to take IDs from the recovered server",
                )
    every = drawn + during + later
    assert len(set(every)) == len(every)


# -- servers come and go through discovery ------------------------------------------------------


def test_servers_registered_while_running_are_used_and_left_ones_dropped(
    zk: ZooKeeperEnsemble,
) -> None:
    discovery = f"zk://{zk.hosts}/client-{uuid.uuid4().hex[:8]}"
    with (
        running_server("--scheme", "muid", "--discovery", discovery) as other_scheme,
        running_server("--discovery", discovery) as first,
        IdClient(discovery=discovery, scheme="uid64") as ids,
    ):
        wait_until(
            lambda: ids.servers == [first.url],
            timeout=30,
            description=f"the client to find {first.url} (and not the muid server)",
        )
        assert other_scheme.url not in ids.servers
        before = ids.get_many(500)
        assert {v.generator for v in before} == {generator_of(first)}  # type: ignore[attr-defined]

        with running_server("--discovery", discovery) as second:
            wait_until(
                lambda: second.url in ids.servers,
                timeout=30,
                description="the client to see the server registered while it runs",
            )
            second_generator = generator_of(second)
            from_second: list[Uid64] = []

            def second_server_used() -> bool:
                from_second.extend(ids.get_many(300))  # type: ignore[arg-type]
                return second_generator in {value.generator for value in from_second}

            wait_until(second_server_used, timeout=30, description="IDs from the new server")
        # SIGTERMed: it deregistered, and the client lets it go at once.
        wait_until(
            lambda: ids.servers == [first.url],
            timeout=30,
            description="the client to drop the server that left",
        )
        after = ids.get_many(2000)
    every = before + from_second + after
    assert len(set(every)) == len(every)


def test_the_async_client_follows_discovery(zk: ZooKeeperEnsemble) -> None:
    discovery = f"zk://{zk.hosts}/client-{uuid.uuid4().hex[:8]}"
    with running_server("--discovery", discovery) as server:

        async def draw() -> list[Uid64]:
            async with AsyncIdClient(discovery=discovery, timeout=10) as ids:
                return await ids.get_many(500)  # type: ignore[return-value]

        values = asyncio.run(draw())
        assert {value.generator for value in values} == {generator_of(server)}


def test_no_server_registered_is_named_in_the_error(zk: ZooKeeperEnsemble) -> None:
    discovery = f"zk://{zk.hosts}/client-{uuid.uuid4().hex[:8]}"
    with (
        IdClient(discovery=discovery, timeout=0.5) as ids,
        pytest.raises(NoServerAnswered, match="no ID server is registered"),
    ):
        ids.get()


# -- fork ---------------------------------------------------------------------------------------

_FORKING = textwrap.dedent(
    """
    import os, sys
    from idmint.client import IdClient

    ids = IdClient(sys.argv[1:], min_batch=1000)
    print("parent", ids.get(), flush=True)  # the buffer now holds ~1000 more
    pid = os.fork()
    if pid == 0:
        for value in ids.get_many(1500):
            print("child", value)
        sys.stdout.flush()
        os._exit(0)
    os.waitpid(pid, 0)
    for value in ids.get_many(1500):
        print("parent", value)
    ids.close()
    """
)


_FORKING_MANY = textwrap.dedent(
    """
    import os, sys
    from idmint.client import IdClient

    ids = IdClient(sys.argv[1:])
    for _ in range(6):
        ids.get_many(20_000)  # a busy parent: its batches grow to its rate
    children = []
    for _ in range(30):
        pid = os.fork()
        if pid == 0:
            try:
                got = ids.get_many(100)
                os._exit(0 if len(set(got)) == 100 else 3)
            except BaseException as error:
                print("child", type(error).__name__, error, flush=True)
                os._exit(4)
        children.append(pid)
    failed = [pid for pid in children if os.waitpid(pid, 0)[1] != 0]
    print("failed", len(failed), flush=True)
    ids.close()
    """
)


def test_thirty_fork_children_of_a_busy_client_each_get_what_they_ask(
    pair: Pair,
) -> None:
    """Each child relearns its rate from nothing: 100 IDs, not the parent's batch each.

    Thirty children once each asked one server for the parent's batch (tens of
    thousands of IDs) at once, and all thirty gave up with none, where thirty fresh
    clients got theirs.
    """
    done = subprocess.run(
        [sys.executable, "-c", _FORKING_MANY, pair[0].url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "failed 0", done.stdout


def test_a_fork_child_never_hands_out_its_parents_buffer(pair: Pair) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _FORKING, pair[0].url, pair[1].url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    child = [text for who, text in rows if who == "child"]
    parent = [text for who, text in rows if who == "parent"]
    assert len(child) == 1500
    assert len(parent) == 1501
    assert len(set(child + parent)) == len(child) + len(parent), "an ID went to both"


# -- idmint fetch -----------------------------------------------------------------------------


def test_fetch_prints_ids_from_the_servers(pair: Pair) -> None:
    done = run_idmint("fetch", "--server", pair[0].url, "--server", pair[1].url, "--count", "2500")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    assert len(lines) == len(set(lines)) == 2500
    assert all(isinstance(parse_id(line, "uid64"), Uid64) for line in lines)
    as_json = run_idmint("fetch", "--server", pair[0].url, "--format", "json", "--count", "2")
    assert as_json.returncode == 0, as_json.stderr
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [row["scheme"] for row in rows] == ["uid64", "uid64"]


def test_fetch_through_discovery(zk: ZooKeeperEnsemble) -> None:
    discovery = f"zk://{zk.hosts}/client-{uuid.uuid4().hex[:8]}"
    with running_server("--discovery", discovery) as server:
        done = run_idmint("fetch", "--discovery", discovery, "--count", "3", "--timeout", "20")
        assert done.returncode == 0, done.stderr
        texts = done.stdout.split()
        generators = {parse_id(text, "uid64").generator for text in texts}  # type: ignore[attr-defined]
        assert generators == {generator_of(server)}


def test_fetch_until_interrupted_stops_cleanly_on_sigterm(pair: Pair) -> None:
    with CliProcess("fetch", "--server", pair[0].url, "--count", "0") as fetch:
        fetch.wait_for_lines(5000, timeout=60)
        fetch.popen.send_signal(signal.SIGTERM)
        status = fetch.popen.wait(30)
    assert status == 128 + signal.SIGTERM, fetch.stderr
    assert fetch.stderr == ""
    for line in fetch.lines:
        parse_id(line, "uid64")


FETCH = [sys.executable, "-m", "idmint", "fetch", "--server"]


@pytest.mark.parametrize("redirect", ["> /dev/full", ">&-"])
def test_fetch_into_an_unwritable_stdout_exits_74(pair: Pair, redirect: str) -> None:
    done = subprocess.run(
        ["sh", "-c", f'exec "$@" {redirect}', "sh", *FETCH, pair[0].url, "--count", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 74, done.stderr
    assert assert_one_error_line(done.stderr).startswith("idmint: error: cannot write to stdout")


def test_fetch_with_no_server_answering_exits_69() -> None:
    done = run_idmint("fetch", "--server", "http://127.0.0.1:1", "--timeout", "0.5")
    assert done.returncode == 69
    line = assert_one_error_line(done.stderr)
    assert "http://127.0.0.1:1" in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "one of the arguments --server --discovery is required"),
        (["--server", "ftp://x:1"], "not http://host:port"),
        (["--server", "http://a:1", "--discovery", "zk://a:1"], "not allowed with"),
        (["--server", "http://a:1", "--timeout", "0"], "timeout"),
        (["--server", "http://a:1", "--count", "-1"], "must be >= 0"),
        (["--server", "http://a:1", "--token-file", "/nonexistent/token"], "cannot read"),
        (["--server", "http://a:1", "--scheme", "elastic64"], "node_bits"),
    ],
)
def test_fetch_usage_errors_exit_2(args: list[str], message: str) -> None:
    done = run_idmint("fetch", *args)
    assert done.returncode == 2, done.stderr
    assert message in assert_one_error_line(done.stderr)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("fetch-token\n")
    return path


def test_fetch_sends_the_token_from_a_file(token_file: Path) -> None:
    with running_server(token="fetch-token") as server:
        done = run_idmint("fetch", "--server", server.url, "--token-file", str(token_file))
        assert done.returncode == 0, done.stderr
        # A refused token is not an outage: 77 at once, not 69 after the timeout.
        refused = run_idmint("fetch", "--server", server.url, "--timeout", "60")
        assert refused.returncode == 77
        line = assert_one_error_line(refused.stderr)
        assert f"{server.url}: 401" in line
        assert "--token-file" in line
        from_env = subprocess.run(
            [sys.executable, "-m", "idmint", "fetch", "--server", server.url],
            capture_output=True,
            text=True,
            env={**os.environ, "IDMINT_TOKEN_FILE": str(token_file)},
            check=False,
            timeout=60,
        )
        assert from_env.returncode == 0, from_env.stderr


def test_a_server_bound_to_every_address_registers_one_clients_can_reach(
    zk: ZooKeeperEnsemble,
) -> None:
    discovery = f"zk://{zk.hosts}/client-{uuid.uuid4().hex[:8]}"
    with running_server("--host", "0.0.0.0", "--discovery", discovery) as server:
        with Discovery(discovery) as looking:
            (instance,) = looking.instances("idmint")
        assert (instance.host, instance.port) == (socket.getfqdn(), server.port)
