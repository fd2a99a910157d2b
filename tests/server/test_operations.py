"""What an operator relies on, against real ``idmint serve`` processes.

Probes (``/livez``, ``/readyz``), HEAD that issues nothing, the page's files cached by
ETag, the startup line's URL for IPv6 and wildcard addresses, settings from ``IDMINT_*``
environment variables (flags win; a bad value names its variable) and the log on
stderr (text or JSON lines, the access log, an unexpected error with its traceback).
The outage cases (readiness through a lost coordinator, the log of a lost claim) are in
test_fault.py.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import json
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.cli_process import run_idmint
from tests.server.server_helpers import (
    LOOPBACK,
    IdmintServer,
    assert_json_error,
    client,
    metric,
    parse_metrics,
    running_server,
)
from tests.servers import wait_until
from tests.servers.ports import free_port

from idmint.schemes import parse_id
from idmint.server import create_app
from idmint.server.app import ROUTES
from idmint.server.logs import server_logging
from idmint.server.routes import Router
from idmint.server.run import browser_url, startup_line

JSON = "application/json"
TOKEN = "operations-t0ken"


@pytest.fixture(scope="module")
def server() -> Iterator[IdmintServer]:
    """A default server of this module's own (its counters move only for these tests)."""
    with running_server("--access-log", "--log-format", "json") as started:
        yield started


@pytest.fixture
def http(server: IdmintServer) -> Iterator[httpx.Client]:
    with server.client() as opened:
        yield opened


# -- probes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/livez", "/readyz", "/healthz"])
def test_probes_answer_ok(http: httpx.Client, path: str) -> None:
    answer = http.get(path)
    assert (answer.status_code, answer.headers["content-type"]) == (200, JSON)
    assert answer.json() == {"status": "ok"}
    assert answer.headers["cache-control"] == "no-store"


@pytest.mark.parametrize("path", ["/livez", "/readyz"])
def test_probes_need_no_token(path: str) -> None:
    with running_server(token=TOKEN) as guarded, guarded.client(authorized=False) as http:
        assert http.get(path).status_code == 200
        assert http.head("/v1/id").status_code == 401


# -- HEAD ------------------------------------------------------------------------------------


def test_head_issues_no_id(http: httpx.Client) -> None:
    """HEAD /v1/id and /v1/ids answer as GET would, without issuing or counting an ID."""

    # The server claimed a free generator ID on this host: read which.
    held = http.get("/v1/claims").json()["claims"][0]["identity"].split()

    def issued() -> tuple[float, float]:
        samples = parse_metrics(http.get("/metrics").text)
        return (
            metric(samples, "idmint_ids_served_total"),
            metric(
                samples, "idmint_ids_issued_total", slot="0", generator=held[1], cluster=held[3]
            ),
        )

    before = issued()
    for _ in range(20):
        one = http.head("/v1/id")
        assert (one.status_code, one.content) == (200, b"")
        assert one.headers["content-type"] == "text/plain; charset=utf-8"
        many = http.head("/v1/ids", params={"count": 1000})
        assert (many.status_code, many.content) == (200, b"")
        assert many.headers["content-type"] == JSON
    assert issued() == before
    parse_id(http.get("/v1/id").text, "uid64")  # while GET does, and is counted
    assert issued() == (before[0] + 1, before[1] + 1)


@pytest.mark.parametrize("count", ["0", "x", "10001"])
def test_head_checks_the_count(http: httpx.Client, count: str) -> None:
    answer = http.head("/v1/ids", params={"count": count})
    assert answer.status_code == 422
    assert answer.content == b""


# -- static files ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/static/app.js", "/static/style.css"])
def test_static_files_are_revalidated_by_etag(http: httpx.Client, path: str) -> None:
    first = http.get(path)
    assert first.status_code == 200
    etag = first.headers["etag"]
    assert re.fullmatch(r'"[0-9a-f]{32}"', etag), etag
    assert first.headers["cache-control"] == "no-cache"

    for condition in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        unchanged = http.get(path, headers={"If-None-Match": condition})
        assert unchanged.status_code == 304, condition
        assert unchanged.content == b""
        assert unchanged.headers["etag"] == etag
    changed = http.get(path, headers={"If-None-Match": '"an-older-version"'})
    assert changed.status_code == 200
    assert changed.content == first.content
    assert http.get("/static/app.js").headers["etag"] != http.get("/").headers["etag"]


# -- the startup line --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8000/"),
        ("::1", "http://[::1]:8000/"),
        ("0.0.0.0", "http://127.0.0.1:8000/"),
        ("::", "http://[::1]:8000/"),
        ("fe80::1%eth0", "http://[fe80::1%25eth0]:8000/"),
        ("localhost", "http://localhost:8000/"),
    ],
)
def test_browser_url(host: str, url: str) -> None:
    assert browser_url(host, 8000) == url


def test_startup_line_says_when_it_listens_everywhere() -> None:
    assert startup_line("uid64", "0.0.0.0", 80) == (
        "idmint server for uid64 IDs: open http://127.0.0.1:80/ "
        "(listening on all IPv4 addresses, port 80)"
    )
    assert startup_line("uid64", "::1", 80) == "idmint server for uid64 IDs: open http://[::1]:80/"


@pytest.mark.parametrize("host", ["::1", "0.0.0.0"])
def test_the_printed_url_is_served(host: str) -> None:
    """What ``idmint serve --host`` prints is a URL that answers (IPv6 in brackets)."""
    with running_server("--host", host) as started:
        line = started.stdout_lines[0]
        match = re.search(r"open (http://\S+/)", line)
        assert match is not None, line
        with client(match.group(1)) as http:
            assert http.get("/livez").status_code == 200
        if host == "0.0.0.0":
            assert "listening on all IPv4 addresses" in line


# -- settings from the environment -------------------------------------------------------------


class ServerWithoutAddress(IdmintServer):
    """``idmint serve`` without ``--host``/``--port``: they come from the environment."""

    def argv(self) -> list[str]:
        argv = super().argv()
        at = argv.index("--host")
        del argv[at : at + 4]
        return argv


def test_settings_come_from_the_environment(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    environment = {
        "IDMINT_HOST": LOOPBACK,
        "IDMINT_PORT": "0",
        "IDMINT_SCHEME": "elastic64",
        "IDMINT_COORDINATOR": "static://?node=5&node_bits=9",
        "IDMINT_GENERATORS": "2",
        "IDMINT_MAX_COUNT": "7",
        "IDMINT_TOKEN_FILE": str(token_file),
        "IDMINT_LOG_FORMAT": "json",
        "IDMINT_LOG_LEVEL": "debug",
        "IDMINT_ACCESS_LOG": "yes",
    }
    with ServerWithoutAddress(env=environment) as started:
        started.token = TOKEN
        started.start()
        assert started.scheme == "elastic64"
        with started.client() as http:
            claims = http.get("/v1/claims").json()["claims"]
            assert [row["identity"] for row in claims] == ["node 5", "node 6"]
            assert_json_error(http.get("/v1/ids", params={"count": 8}), 422)
            assert len(http.get("/v1/ids", params={"count": 7}).json()["ids"]) == 7
        with started.client(authorized=False) as http:
            assert_json_error(http.get("/v1/id"), 401)
        lines = [json.loads(line) for line in started.stderr_text().splitlines()]
        assert any(line["logger"] == "uvicorn.access" for line in lines), lines
        # At debug, uvicorn's own INFO lines pass too (hidden at the default, info).
        assert any(line["logger"] == "uvicorn.error" for line in lines), lines


def test_flags_win_over_the_environment() -> None:
    environment = {"IDMINT_SCHEME": "muid", "IDMINT_MAX_COUNT": "3"}
    with (
        running_server("--scheme", "short60", env=environment) as started,
        started.client() as http,
    ):
        assert started.scheme == "short60"
        assert_json_error(http.get("/v1/ids", params={"count": 4}), 422)  # from the variable


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("IDMINT_PORT", "http", "environment variable IDMINT_PORT: 'http' is not a whole number"),
        ("IDMINT_PORT", "70000", "environment variable IDMINT_PORT must be 0..65535, got 70000"),
        ("IDMINT_GENERATORS", "65", "environment variable IDMINT_GENERATORS must be 1..64"),
        ("IDMINT_SCHEME", "uuid", "environment variable IDMINT_SCHEME must be one of uid64,"),
        ("IDMINT_LOG_FORMAT", "yaml", "environment variable IDMINT_LOG_FORMAT must be one of"),
        ("IDMINT_LOG_LEVEL", "loud", "environment variable IDMINT_LOG_LEVEL must be one of"),
        ("IDMINT_ACCESS_LOG", "maybe", "environment variable IDMINT_ACCESS_LOG: 'maybe'"),
        ("IDMINT_REQUEST_TIMEOUT", "-1", "environment variable IDMINT_REQUEST_TIMEOUT must be"),
        ("IDMINT_TOKEN_FILE", "/nonexistent/token", "IDMINT_TOKEN_FILE: cannot read /nonex"),
    ],
)
def test_a_bad_variable_is_named(variable: str, value: str, message: str) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "idmint", "serve"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        # A port of its own (a token file is read once the port is taken), unless
        # the port is the variable under test.
        env={**_environment_without_idmint(), "IDMINT_PORT": "0", variable: value},
    )
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.splitlines() == [completed.stderr.strip()], completed.stderr
    assert message in completed.stderr, completed.stderr


def _environment_without_idmint() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("IDMINT_")}


def test_help_names_every_variable() -> None:
    from idmint.server.config import SERVE_SETTINGS

    completed = run_idmint("serve", "--help")
    assert completed.returncode == 0
    text = " ".join(completed.stdout.split())
    for setting in SERVE_SETTINGS:
        assert setting.variable in text, setting.variable
        assert setting.flag in text, setting.flag


# -- logging ----------------------------------------------------------------------------------


def test_access_log_lines_are_json(server: IdmintServer, http: httpx.Client) -> None:
    assert http.get("/v1/id?marker=access-log-test").status_code == 200
    lines = [json.loads(line) for line in server.stderr_text().splitlines()]
    access = [line for line in lines if "access-log-test" in line["message"]]
    assert len(access) == 1, lines
    assert access[0]["logger"] == "uvicorn.access"
    assert access[0]["level"] == "INFO"
    assert '"GET /v1/id?marker=access-log-test HTTP/1.1" 200' in access[0]["message"]


def test_no_access_log_unless_asked() -> None:
    with running_server() as quiet, quiet.client() as http:
        assert http.get("/v1/id").status_code == 200
        assert http.get("/nowhere").status_code == 404
        # The log has the claim (at INFO), and no line for either request.
        logged = quiet.stderr_text()
        assert "/v1/id" not in logged
        assert "/nowhere" not in logged


class Broken(Exception):
    pass


def test_an_unexpected_error_is_logged_with_its_traceback() -> None:
    """A bug in a route: a JSON 500 to the client, an ERROR with the traceback in the log.

    No request can cause one (that is the point), so a route of a real app is replaced
    by one that raises, and the app is called as uvicorn calls it.
    """
    app = create_app()

    async def broken(server: Any, scope: Any) -> Any:
        raise Broken("the route failed")

    app.router = Router(
        [replace(route, handler=broken) if route.path == "/livez" else route for route in ROUTES]
    )
    stream = io.StringIO()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/livez", "headers": [], "query_string": b""}
    with server_logging(format="json", stream=stream):
        asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 500
    assert json.loads(sent[1]["body"])["error"] == "internal error"
    (line,) = [json.loads(text) for text in stream.getvalue().splitlines()]
    assert (line["level"], line["logger"]) == ("ERROR", "idmint.server")
    assert line["message"] == "unexpected error on GET /livez"
    assert line["exception"].startswith("Traceback (most recent call last):")
    assert line["exception"].rstrip().endswith("Broken: the route failed")


def test_text_log_lines() -> None:
    import logging

    stream = io.StringIO()
    with server_logging(level="warning", stream=stream):
        logging.getLogger("idmint.coordinate").info("not shown at warning")
        logging.getLogger("idmint.coordinate").warning("generator 3 cluster 0 lost")
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z WARNING idmint\.coordinate: "
        r"generator 3 cluster 0 lost\n",
        stream.getvalue(),
    )
    # Outside serve(), the library is silent again: nothing installed stays.
    assert logging.getLogger("idmint").handlers == []


# -- stopping and starting, as the log tells it ---------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_stop_says_what_it_released_and_the_status(signum: signal.Signals) -> None:
    """One process stopped by a signal: one line naming the signal, each claim given back,
    and the exit status (as ``--workers`` always said it stopped)."""
    with running_server("--generators", "2") as server, server.client() as http:
        held = [row["identity"] for row in http.get("/v1/claims").json()["claims"]]
        server.send_signal(signum)
        assert server.wait(30) == 0
        last = server.stderr_text().splitlines()[-1]
    match = re.fullmatch(
        rf"\S+ INFO idmint\.server: stopped by {signum.name}: released (.+); exit status 0", last
    )
    assert match is not None, last
    released = match.group(1).split("), ")
    assert len(released) == 2, last
    for identity, text in zip(held, released, strict=True):
        assert text.startswith(f"{identity} (generator ID claim at local://"), last


def test_a_stop_with_workers_ends_with_the_same_line(tmp_path: Path) -> None:
    with running_server("--workers", "2", env={"IDMINT_LOCAL_DIR": str(tmp_path)}) as server:
        server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0
        last = server.stderr_text().splitlines()[-1]
    assert re.fullmatch(
        r"\S+ INFO idmint\.server: stopped by SIGTERM: the 2 workers released their claims; "
        r"exit status 0",
        last,
    ), last


def test_a_slow_start_says_what_it_waits_for(tmp_path: Path) -> None:
    """A coordinator out of reach: the log says so while the server waits, then one error."""
    url = f"zk://{LOOPBACK}:{free_port()}/idmint?connect_timeout=3"
    for workers in ("1", "2"):
        done = run_idmint(
            "serve", "--host", LOOPBACK, "--port", "0", "--coordinator", url, "--workers", workers
        )
        assert done.returncode == 69, done.stderr
        waiting, error = done.stderr.splitlines()
        assert re.fullmatch(
            r"\S+ WARNING idmint\.coordinate\.waiting( \(worker 0\))?: waiting up to 3 s for "
            rf"ZooKeeper at {LOOPBACK}:\d+",
            waiting,
        ), waiting
        assert error.startswith("idmint: error: "), error
        assert re.search(r"could not reach ZooKeeper .* \(waited \d+\.\d s\)", error), error


# -- deploy/ ----------------------------------------------------------------------------------

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def environment_file(path: Path) -> dict[str, str]:
    pairs = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            pairs[name.strip()] = value.strip()
    return pairs


def test_the_example_environment_file_is_accepted() -> None:
    from idmint.server.config import SERVE_SETTINGS, ServerConfig

    pairs = environment_file(DEPLOY / "idmint.env")
    known = {setting.variable for setting in SERVE_SETTINGS}
    assert set(pairs) <= known, set(pairs) - known
    config = ServerConfig.from_sources({}, pairs)
    assert (config.host, config.port) == ("0.0.0.0", 8000)
    mentioned = set(re.findall(r"\bIDMINT_[A-Z_]+", (DEPLOY / "idmint.env").read_text()))
    assert mentioned == known, known - mentioned  # every setting shown, if commented out


def test_the_containerfile_runs_idmint_serve_with_known_settings() -> None:
    from idmint.server.config import SERVE_SETTINGS

    text = (DEPLOY / "Containerfile").read_text()
    assert "COPY deploy/container-entrypoint /opt/idmint/bin/container-entrypoint\n" in text
    assert 'ENTRYPOINT ["/opt/idmint/bin/container-entrypoint"]' in text
    known = {setting.variable for setting in SERVE_SETTINGS}
    assert set(re.findall(r"\bIDMINT_[A-Z_]+", text)) <= known
    assert "USER 10001" in text  # not root


def _image_extras() -> list[str]:
    """The extras the Containerfile installs (``pip install ".[server,...]"``)."""
    found = re.findall(r'"\.\[([a-z,]+)\]"', (DEPLOY / "Containerfile").read_text())
    assert len(found) == 1, found
    return found[0].split(",")


DRIVERS = {"zk": "zk", "etcd": "etcd", "postgresql": "postgres", "redis": "redis"}
"""The coordinator URL schemes of the drivers that need an extra, and their test backends."""


def _schemes_named_for_containers() -> set[str]:
    """The coordinator schemes deploy/ (manifests, image, entrypoint) and docs/server.md
    name."""
    texts = [path.read_text() for path in sorted(DEPLOY.rglob("*")) if path.is_file()]
    texts.append((DEPLOY.parent / "docs" / "server.md").read_text())
    return {scheme for text in texts for scheme in re.findall(r"\b([a-z]+)://", text)}


RUN_CLI = "from idmint.cli import main; sys.exit(main({argv!r}))"


def test_the_image_installs_every_driver_its_manifests_and_docs_name(
    request: pytest.FixtureRequest,
) -> None:
    """With only what the Containerfile installs, ``idmint`` claims and mints through
    each driver deploy/ and docs/server.md name, on a real server. (Once the image had
    ``.[server,zookeeper,etcd]``: the Deployment's postgresql:// pods crash-looped.)"""
    from tests.installed import modules_outside, run_without
    from tests.integration.claims_helpers import make_backend
    from tests.test_missing_extra import extra_requirements

    named = _schemes_named_for_containers() & set(DRIVERS)
    assert named == set(DRIVERS), named  # the manifests and docs name each of them
    lacking = modules_outside(extra_requirements(*_image_extras()))
    for scheme in sorted(named):
        url = make_backend(DRIVERS[scheme], request).url(ttl=2)
        argv = ["generate", "--coordinator", url, "--count", "2"]
        done = run_without(lacking, RUN_CLI.format(argv=argv), DEPLOY.parent)
        assert done.returncode == 0, f"{scheme}: {done.stderr}"
        assert len(set(done.stdout.split())) == 2
    served = run_without(lacking, "import uvicorn", DEPLOY.parent)
    assert served.returncode == 0, served.stderr


def _health(**variables: str) -> subprocess.CompletedProcess[str]:
    """deploy/container-healthcheck with ``variables`` as its only IDMINT_* settings."""
    return subprocess.run(
        [sys.executable, str(DEPLOY / "container-healthcheck")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**_environment_without_idmint(), **variables},
    )


def test_the_image_checks_its_health_on_readyz() -> None:
    """The HEALTHCHECK runs the check, which is 0 for a ready server (plain or TLS) and
    1, with one line, for one not ready or not there."""
    text = (DEPLOY / "Containerfile").read_text()
    assert "COPY deploy/container-healthcheck /opt/idmint/bin/container-healthcheck\n" in text
    assert re.search(
        r"^HEALTHCHECK .*\\\n\s+CMD \[\"/opt/idmint/bin/container-healthcheck\"\]$", text, re.M
    ), text
    with running_server() as server:
        assert _health(IDMINT_PORT=str(server.port)).returncode == 0
        assert _health(IDMINT_PORT=str(server.port), IDMINT_HOST="0.0.0.0").returncode == 0
    port = str(free_port())
    gone = _health(IDMINT_PORT=port)
    assert gone.returncode == 1
    assert gone.stderr.startswith(f"container-healthcheck: http://127.0.0.1:{port}/readyz: ")
    with _answering(503) as busy:
        refused = _health(IDMINT_PORT=str(busy))
    assert (refused.returncode, refused.stderr) == (
        1,
        f"container-healthcheck: http://127.0.0.1:{busy}/readyz answered 503\n",
    )


def test_the_image_checks_the_health_of_a_tls_server(tmp_path: Path) -> None:
    """Over https (the server's certificate is for another name: not checked), and
    under mutual TLS with the client certificate of ``idmint fetch``'s variables."""
    import trustme

    ca = trustme.CA()
    files = {}
    for name, pair in (("server", ca.issue_cert("ids.example")), ("client", ca.issue_cert("c"))):
        files[name] = tmp_path / f"{name}.pem"
        pair.private_key_and_cert_chain_pem.write_to_path(files[name])
    ca.cert_pem.write_to_path(tmp_path / "ca.pem")
    tls = ("--tls-cert", str(files["server"]))
    with running_server(*tls) as server:
        assert server.url.startswith("https://")
        port = str(server.port)
        assert _health(IDMINT_PORT=port, IDMINT_TLS_CERT=str(files["server"])).returncode == 0
        assert _health(IDMINT_PORT=port).returncode == 1  # plain http to an https port
    with running_server(*tls, "--tls-client-ca", str(tmp_path / "ca.pem")) as server:
        port, cert = str(server.port), str(files["server"])
        assert _health(IDMINT_PORT=port, IDMINT_TLS_CERT=cert).returncode == 1
        shown = _health(
            IDMINT_PORT=port, IDMINT_TLS_CERT=cert, IDMINT_FETCH_TLS_CERT=str(files["client"])
        )
        assert shown.returncode == 0, shown.stderr


@contextlib.contextmanager
def _answering(status: int) -> Iterator[int]:
    """An HTTP server on a free port answering every GET with ``status``; its port."""

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    with ThreadingHTTPServer((LOOPBACK, 0), Answer) as httpd:
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield httpd.server_address[1]
        finally:
            httpd.shutdown()
            thread.join()


def _entrypoint(*args: str, coordinator: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run deploy/container-entrypoint with this venv's ``idmint`` first on PATH."""
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    if coordinator is not None:
        env["IDMINT_COORDINATOR"] = coordinator
    return subprocess.run(
        ["sh", str(DEPLOY / "container-entrypoint"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_the_container_refuses_to_start_without_a_coordinator() -> None:
    """Containers do not share the host's pool: without a coordinator, two would both
    claim generator 0, so the image's entrypoint refuses with one line and status 2."""
    for coordinator in (None, ""):
        refused = _entrypoint("--port", "0", coordinator=coordinator)
        assert refused.returncode == 2, refused
        assert refused.stdout == ""
        [line] = refused.stderr.splitlines()
        assert line.startswith("idmint: error: a container needs IDMINT_COORDINATOR"), line
    # Named either way, it is `idmint serve` with the arguments (here: its help, so
    # that nothing is left running).
    for args, coordinator in (
        (("--help",), "static://?generator=3"),
        (("--coordinator", "static://?generator=3", "--help"), None),
        (("--coordinator=zk://zk1:2181/idmint", "--help"), None),
    ):
        served = _entrypoint(*args, coordinator=coordinator)
        assert served.returncode == 0, served
        assert served.stdout.startswith("usage: idmint serve"), served.stdout[:200]


def test_the_systemd_unit_is_valid(tmp_path: Path) -> None:
    """``systemd-analyze verify`` finds nothing to say (an unknown key would be reported)."""
    unit = (DEPLOY / "idmint.service").read_text()
    assert "ExecStart=/opt/idmint/bin/idmint serve\n" in unit
    # Paths of this machine, so that verify can check them too.
    unit = unit.replace("/opt/idmint/bin/idmint", str(Path(sys.executable).parent / "idmint"))
    unit = unit.replace("/etc/idmint/idmint.env", str(DEPLOY / "idmint.env"))
    path = tmp_path / "idmint.service"
    path.write_text(unit)
    completed = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert (completed.stdout + completed.stderr).strip() == ""


# -- ports -----------------------------------------------------------------------------

TESTS = Path(__file__).resolve().parents[1]


def _server_launches(tree: ast.Module) -> Iterator[ast.AST]:
    """Where a test starts ``idmint serve``: a command line ``... -m idmint serve ...``,
    ``run_idmint("serve", ...)``, ``CliProcess("serve", ...)`` or ``main(["serve", ...])``."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)):
            words = [str(_constant(element)) for element in node.elts]
            if " -m idmint serve " in f" {' '.join(words)} ":
                yield node
        elif isinstance(node, ast.Call) and node.args:
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            first = node.args[0]
            if name in ("run_idmint", "CliProcess") and _constant(first) == "serve":
                yield node
            command = first.elts[0] if isinstance(first, ast.List) and first.elts else None
            if name == "main" and command is not None and _constant(command) == "serve":
                yield node


def _replaces_serve(test: ast.FunctionDef) -> bool:
    """Whether the test takes the ``no_server`` fixture (as an argument or a mark)."""
    marks = " ".join(map(ast.unparse, test.decorator_list))
    return "no_server" in [a.arg for a in test.args.args] or "no_server" in marks


def _constant(node: ast.AST) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def test_every_server_a_test_starts_names_its_port() -> None:
    """``--port 0`` (or a free port, or ``IDMINT_PORT``), ``--help``, or ``serve`` itself
    replaced (``no_server``): never the default 8000, which ``scripts/run`` may be
    serving on while the tests run. (Once test_a_bad_variable_is_named failed so:
    "cannot listen on 127.0.0.1:8000: Address already in use".)"""
    unnamed = []
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
        for launch in _server_launches(tree):
            words = {_constant(node) for node in ast.walk(launch)}
            around = next(
                (f for f in functions if f.lineno <= launch.lineno <= (f.end_lineno or 0)), None
            )
            context = ast.get_source_segment(path.read_text(), around) if around else ""
            if words & {"--port", "--help"} or "IDMINT_PORT" in (context or ""):
                continue
            if around is not None and _replaces_serve(around):
                continue
            unnamed.append(f"{path.relative_to(TESTS.parent)}:{launch.lineno}")
    assert unnamed == [], unnamed


def test_a_single_server_says_what_sighup_re_read_even_when_nothing() -> None:
    """With no token file and no TLS a SIGHUP re-reads nothing, and says so: silence
    looked like a signal unheard. (Once nothing was logged; ``--workers`` said
    "N workers re-read their credentials".)"""
    with running_server() as server:
        server.send_signal(signal.SIGHUP)
        said = "credentials: none to re-read (no token file, no TLS certificate)"
        wait_until(lambda: said in server.stderr_text(), timeout=30, description="the line")
        with server.client() as api:
            assert api.get("/v1/id").status_code == 200  # and it still serves
