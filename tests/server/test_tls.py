"""The ID server over TLS, and its credentials rotated without a restart.

Real ``idmint serve`` processes with certificates made by trustme (a CA, its
server and client certificates, a second CA, expired and expiring ones),
clients over real sockets: httpx, ``http.client``, ``idmint.client`` and
``idmint fetch``. What is checked:

* https with and without a client certificate; mutual TLS refuses a client
  without one, or with one from another CA, at the handshake;
* a certificate or key that cannot be used stops the start with one line
  naming its flag or variable (status 2); one about to expire is a WARNING
  and a metric; a key every user may read is a WARNING;
* hostile connections: garbage or plain HTTP instead of a ClientHello, a
  handshake that never ends (cut at the request timeout, not asyncio's 60 s);
* SIGHUP re-reads the certificate, key and token file under a steady load:
  no request fails, no claim changes, connections made before keep going,
  new handshakes get the new certificate, a removed token is refused; the
  same with ``--workers 2`` (the supervisor passes SIGHUP on), where a worker
  replaced after the rotation loads the files as they are; a storm of SIGHUPs
  loses no reload; a file that fails to load keeps the old credentials;
* clients: ``idmint fetch`` and ``IdClient``/``AsyncIdClient`` over TLS, a
  certificate they cannot verify is one error naming the server (77), a token
  file re-read when the server refuses it, discovery giving https URLs.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import http.client
import json
import logging
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from tests.cli_process import assert_one_error_line
from tests.server.server_helpers import (
    LOOPBACK,
    ClientThreads,
    IdmintServer,
    metric,
    parse_metrics,
    running_server,
    wait_until,
)
from tests.servers.zookeeper import ZooKeeperEnsemble

from idmint.client import AsyncIdClient, IdClient
from idmint.errors import ConfigurationError, ServerRefused
from idmint.server.config import ServerConfig
from idmint.server.credentials import Credentials, read_certificate

TOKEN_1 = "first-token-1111"
TOKEN_2 = "second-token-2222"


# -- certificates ----------------------------------------------------------------------------


@dataclass
class Pair:
    """A certificate (then its chain) and its key, as PEM files."""

    cert: Path
    key: Path

    def sha256(self) -> str:
        return read_certificate(str(self.cert)).sha256


class Pki:
    """Files made by trustme under ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ca = trustme.CA()
        self.ca_file = self._write("ca.pem", self.ca.cert_pem.bytes())
        self.server = self.issue("server")
        self.client = self.issue("client", "client@idmint.test")
        self.other_ca = trustme.CA()
        self.other_ca_file = self._write("other-ca.pem", self.other_ca.cert_pem.bytes())
        other = self.other_ca.issue_cert("client@idmint.test")
        self.other_client = Pair(
            self._write("other-client.pem", b"".join(p.bytes() for p in other.cert_chain_pems)),
            self._write("other-client.key", other.private_key_pem.bytes()),
        )
        now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
        self.expired = self.issue(
            "expired", not_before=now - dt.timedelta(days=30), not_after=now - dt.timedelta(days=1)
        )
        self.expiring = self.issue("expiring", not_after=now + dt.timedelta(days=2))

    def issue(self, name: str, *identities: str, **validity: dt.datetime) -> Pair:
        leaf = self.ca.issue_cert(*(identities or (LOOPBACK, "localhost")), **validity)
        return Pair(
            self._write(f"{name}.pem", b"".join(p.bytes() for p in leaf.cert_chain_pems)),
            self._write(f"{name}.key", leaf.private_key_pem.bytes()),
        )

    def _write(self, name: str, data: bytes) -> Path:
        path = self.directory / name
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    def context(self, client: Pair | None = None, *, ca: Path | None = None) -> ssl.SSLContext:
        """A client context trusting the CA (or ``ca``), presenting ``client`` if given."""
        context = ssl.create_default_context(cafile=str(ca or self.ca_file))
        if client is not None:
            context.load_cert_chain(str(client.cert), str(client.key))
        return context


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def tls_args(pair: Pair, client_ca: Path | None = None) -> list[str]:
    args = ["--tls-cert", str(pair.cert), "--tls-key", str(pair.key)]
    return args + (["--tls-client-ca", str(client_ca)] if client_ca else [])


def replace_file(path: Path, data: bytes) -> None:
    """Replace ``path`` at once (a rename), as an operator's tooling should."""
    staged = path.with_name(path.name + ".new")
    staged.write_bytes(data)
    staged.chmod(0o600)
    staged.replace(path)


def served_sha256(port: int, context: ssl.SSLContext) -> str:
    """The fingerprint of the certificate a new handshake with the server gets."""
    with (
        socket.create_connection((LOOPBACK, port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=LOOPBACK) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return hashlib.sha256(der).hexdigest()


def closed_without_answer(port: int, sent: bytes, *, timeout: float = 20.0) -> bytes:
    """Send ``sent`` on a new TCP connection; what comes back before the server closes it.

    ``TimeoutError`` if the server keeps it open for ``timeout`` seconds.
    """
    with socket.create_connection((LOOPBACK, port), timeout=timeout) as raw:
        if sent:
            raw.sendall(sent)
        received = b""
        try:
            while chunk := raw.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
        return received


# -- https, mutual TLS ------------------------------------------------------------------------


def test_https_serves_the_api_and_the_page(pki: Pki) -> None:
    with running_server(*tls_args(pki.server), verify=pki.context()) as server:
        assert server.url.startswith("https://")
        with server.client() as http:
            assert http.get("/v1/id").status_code == 200
            page = http.get("/")
            assert page.status_code == 200
            assert "<html" in page.text.lower()
            assert len(http.get("/v1/ids", params={"count": 5}).json()["ids"]) == 5
        # TLS 1.2 is the oldest offered (older ones are not even configurable here:
        # the system's OpenSSL refuses them), and a TLS 1.2 client is served.
        twelve = pki.context()
        twelve.maximum_version = ssl.TLSVersion.TLSv1_2
        with httpx.Client(verify=twelve, trust_env=False) as http:
            assert http.get(f"{server.url}/livez").status_code == 200
        # A client that does not trust the server's CA gets no answer.
        with pytest.raises(httpx.ConnectError), httpx.Client(trust_env=False) as http:
            http.get(f"{server.url}/livez")


def test_the_server_context_offers_tls_1_2_and_newer_without_renegotiation(pki: Pki) -> None:
    config = ServerConfig(tls_cert=str(pki.server.cert), tls_key=str(pki.server.key))
    context = Credentials(config).context
    assert context is not None
    assert context.current.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.current.options & ssl.OP_NO_RENEGOTIATION
    assert context.current.verify_mode == ssl.CERT_NONE  # no client CA: nothing asked


def test_mutual_tls_needs_a_certificate_from_the_client_ca(pki: Pki) -> None:
    with running_server(
        *tls_args(pki.server, client_ca=pki.ca_file), verify=pki.context(pki.client)
    ) as server:
        with server.client() as http:
            assert http.get("/v1/id").status_code == 200
        # Without a certificate, or with one of another CA: the handshake fails.
        for context in (pki.context(), pki.context(pki.other_client)):
            with (
                pytest.raises((httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError)),
                httpx.Client(verify=context, trust_env=False) as http,
            ):
                http.get(f"{server.url}/livez")
        with server.client() as http:  # and the server serves on
            assert http.get("/livez").status_code == 200
        assert "Traceback" not in server.stderr_text()


# -- credentials that cannot be used ------------------------------------------------------------


def _encrypted_key(pki: Pki) -> Path:
    key = serialization.load_pem_private_key(pki.server.key.read_bytes(), password=None)
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase"),
    )
    path = pki.directory / "encrypted.key"
    path.write_bytes(data)
    return path


def _garbage(pki: Pki) -> Path:
    path = pki.directory / "garbage.pem"
    path.write_bytes(b"not PEM at all\n")
    return path


BAD_FILES: dict[str, tuple[Callable[[Pki], dict[str, str]], str]] = {
    "expired": (
        lambda p: {"tls_cert": str(p.expired.cert), "tls_key": str(p.expired.key)},
        "--tls-cert: the certificate in .*expired.pem expired on 20",
    ),
    "unreadable certificate": (
        lambda p: {"tls_cert": str(p.directory / "missing.pem"), "tls_key": str(p.server.key)},
        "--tls-cert: cannot read .*missing.pem: No such file or directory",
    ),
    "certificate file without a certificate": (
        lambda p: {"tls_cert": str(_garbage(p)), "tls_key": str(p.server.key)},
        "--tls-cert: .*garbage.pem: no PEM certificate in it",
    ),
    "key of another certificate": (
        lambda p: {"tls_cert": str(p.server.cert), "tls_key": str(p.client.key)},
        "--tls-key: the key in .*client.key does not match the certificate in .*server.pem",
    ),
    "no key": (
        lambda p: {"tls_cert": str(p.server.cert)},  # the key is not in the certificate file
        "--tls-cert: no private key for the certificate can be read from .*server.pem",
    ),
    "garbage key": (
        lambda p: {"tls_cert": str(p.server.cert), "tls_key": str(_garbage(p))},
        "--tls-key: no private key for the certificate can be read from .*garbage.pem",
    ),
    "unreadable key": (
        lambda p: {"tls_cert": str(p.server.cert), "tls_key": str(p.directory / "none.key")},
        "--tls-key: cannot read .*none.key: No such file or directory",
    ),
    "encrypted key": (
        lambda p: {"tls_cert": str(p.server.cert), "tls_key": str(_encrypted_key(p))},
        "--tls-key: the key in .*encrypted.key is encrypted",
    ),
    "client CA without certificates": (
        lambda p: {**tls_files(p.server), "tls_client_ca": str(_garbage(p))},
        "--tls-client-ca: cannot read CA certificates from .*garbage.pem",
    ),
    "empty token file": (
        lambda p: {"token_file": str(_empty(p))},
        "--token-file: .*empty.tokens is empty",
    ),
    "a token file that is not one": (
        lambda p: {"token_file": str(_written(p, "huge.tokens", "a-token\n" * 10_000))},
        "--token-file: .*huge.tokens is longer than 65,536 characters",
    ),
    "a token with a space": (
        lambda p: {"token_file": str(_written(p, "spaced.tokens", "two words\n"))},
        "--token-file: line 1 of .*spaced.tokens is not one token",
    ),
}


def tls_files(pair: Pair) -> dict[str, str]:
    return {"tls_cert": str(pair.cert), "tls_key": str(pair.key)}


def _written(pki: Pki, name: str, text: str) -> Path:
    path = pki.directory / name
    path.write_text(text)
    path.chmod(0o600)
    return path


def _empty(pki: Pki) -> Path:
    return _written(pki, "empty.tokens", "# only a comment\n\n")


@pytest.mark.parametrize("case", BAD_FILES, ids=str)
def test_a_file_that_cannot_be_used_is_one_line_naming_its_flag(pki: Pki, case: str) -> None:
    files, expected = BAD_FILES[case]
    given = files(pki)
    config = ServerConfig.from_sources(given, {})
    with pytest.raises(ConfigurationError, match=expected) as refused:
        Credentials(config)
    assert "\n" not in str(refused.value)


def test_an_expired_certificate_stops_idmint_serve_with_status_2(pki: Pki) -> None:
    environment = {
        **os.environ,
        "IDMINT_TLS_CERT": str(pki.expired.cert),
        "IDMINT_TLS_KEY": str(pki.expired.key),
    }
    for args, named in (
        (tls_args(pki.expired), "--tls-cert"),
        ([], "environment variable IDMINT_TLS_CERT"),
        (["--workers", "2", *tls_args(pki.expired)], "worker 0: --tls-cert"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "idmint", "serve", "--host", LOOPBACK, "--port", "0", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=environment,
        )
        assert done.returncode == 2, done.stderr
        assert done.stdout == ""
        line = assert_one_error_line(done.stderr).replace("worker 1:", "worker 0:")
        assert line.startswith(f"idmint: error: {named}: the certificate in "), line
        assert "expired on" in line


def test_a_certificate_about_to_expire_is_a_warning_and_a_metric(pki: Pki) -> None:
    with running_server(*tls_args(pki.expiring), verify=pki.context()) as server:
        warnings = [line for line in server.stderr_text().splitlines() if "expires in" in line]
        assert len(warnings) == 1, server.stderr_text()
        assert " WARNING " in warnings[0]
        assert "--tls-cert" in warnings[0]
        with server.client() as http:
            samples = parse_metrics(http.get("/metrics").text)
        expiry = metric(samples, "idmint_tls_certificate_expiry_timestamp_seconds")
        assert expiry == read_certificate(str(pki.expiring.cert)).not_after


def test_a_key_every_user_may_read_is_a_warning(
    pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key = tmp_path / "open.key"
    key.write_bytes(pki.server.key.read_bytes())
    key.chmod(0o644)
    tokens = _written(pki, "open.tokens", TOKEN_1 + "\n")
    tokens.chmod(0o644)
    config = ServerConfig(tls_cert=str(pki.server.cert), tls_key=str(key), token_file=str(tokens))
    with caplog.at_level(logging.WARNING, logger="idmint.server"):
        Credentials(config)
    warned = [r.getMessage() for r in caplog.records if "readable by every user" in r.getMessage()]
    assert len(warned) == 2, warned
    assert any("private key file" in message and str(key) in message for message in warned)
    assert any("token file" in message for message in warned)
    key.chmod(0o640)  # the group (ssl-cert, say) may: no warning
    tokens.chmod(0o600)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="idmint.server"):
        Credentials(config)
    assert not [r for r in caplog.records if "readable by every user" in r.getMessage()]


# -- hostile connections ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def quick_tls_server(pki: Pki) -> Iterator[IdmintServer]:
    """A TLS server whose request timeout (hence handshake limit) is 1 s."""
    with running_server(
        *tls_args(pki.server), "--request-timeout", "1", verify=pki.context()
    ) as server:
        yield server


@pytest.mark.parametrize(
    "sent",
    [
        b"",  # nothing at all
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # the start of a ClientHello, no more
    ],
    ids=["silent", "half a ClientHello"],
)
def test_a_handshake_that_never_ends_is_cut_at_the_request_timeout(
    quick_tls_server: IdmintServer, sent: bytes
) -> None:
    """asyncio's own limit is 60 s: waiting 20 s for the close tells them apart."""
    assert closed_without_answer(quick_tls_server.port, sent, timeout=20) == b""


@pytest.mark.parametrize(
    "sent",
    [
        b"GET /v1/id HTTP/1.1\r\nHost: x\r\n\r\n",  # plain HTTP to the TLS port
        bytes(range(256)) * 4,  # garbage
        b"\x16\x03\x01\x00\x05hello",  # a record that is not a ClientHello
    ],
    ids=["plain HTTP", "garbage", "not a ClientHello"],
)
def test_what_is_not_tls_is_closed_without_a_traceback(
    quick_tls_server: IdmintServer, sent: bytes
) -> None:
    closed_without_answer(quick_tls_server.port, sent)
    with quick_tls_server.client() as http:
        assert http.get("/v1/id").status_code == 200
    assert "Traceback" not in quick_tls_server.stderr_text()


# -- rotation --------------------------------------------------------------------------------


class KeptConnection:
    """One keep-alive connection, used twice a second (within the server's idle limit)
    until stopped: every answer, and the socket and certificate each came on.

    ``ask()`` may also be called from the test while the thread runs: one request
    at a time on the connection. What stopped the thread is in ``errors``.
    """

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        self.connection = http.client.HTTPSConnection(LOOPBACK, port, context=context, timeout=10)
        self.statuses: list[int] = []
        self.sockets: set[int] = set()
        self.certificates: set[str] = set()
        self.errors: list[BaseException] = []
        self._turn = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> KeptConnection:
        self.ask()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self.connection.close()

    def ask(self) -> None:
        with self._turn:
            self.connection.request("GET", "/livez")
            response = self.connection.getresponse()
            response.read()
            self.statuses.append(response.status)
            sock = self.connection.sock
            assert isinstance(sock, ssl.SSLSocket)
            self.sockets.add(id(sock))
            der = sock.getpeercert(binary_form=True)
            assert der is not None
            self.certificates.add(hashlib.sha256(der).hexdigest())

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.ask()
            except Exception as error:  # the test sees it in errors
                self.errors.append(error)
                return


class Load(ClientThreads):
    """Threads asking for IDs over TLS until stopped: a new connection every few
    requests (so handshakes happen throughout), keep-alive in between.

    Every ID and every failure is kept; ``token`` may be switched while it runs.
    """

    def __init__(self, port: int, context: ssl.SSLContext, token: str, threads: int = 2) -> None:
        super().__init__(threads)
        self.port = port
        self.context = context
        self.token = token
        self.ids: list[str] = []
        self.failures: list[str] = []
        self.connections = 0
        self._lock = threading.Lock()

    def count(self) -> int:
        with self._lock:
            return len(self.ids) + len(self.failures)

    def keeps_going(self, requests: int = 30) -> None:
        """Wait until ``requests`` more have been made (the load spans what came before)."""
        target = self.count() + requests
        wait_until(lambda: self.count() >= target, timeout=60, description="more requests")

    def run(self) -> None:
        while not self.stopping.is_set():
            connection = http.client.HTTPSConnection(
                LOOPBACK, self.port, context=self.context, timeout=10
            )
            with self._lock:
                self.connections += 1
            try:
                for _ in range(5):
                    connection.request(
                        "GET", "/v1/ids?count=3", headers={"Authorization": f"Bearer {self.token}"}
                    )
                    response = connection.getresponse()
                    body = response.read()
                    with self._lock:
                        if response.status == 200:
                            self.ids += json.loads(body)["ids"]
                        else:
                            self.failures.append(f"{response.status} {body[:200]!r}")
            except (OSError, http.client.HTTPException) as error:
                with self._lock:
                    self.failures.append(f"{type(error).__name__}: {error}")
            finally:
                connection.close()


def claims_of(server: IdmintServer, context: ssl.SSLContext, token: str) -> list[object]:
    with httpx.Client(
        verify=context, trust_env=False, headers={"Authorization": f"Bearer {token}"}
    ) as http:
        answer = http.get(f"{server.url}/v1/claims")
        assert answer.status_code == 200, answer.text
        rows = answer.json()["claims"]
    return sorted(
        json.dumps({k: v for k, v in row.items() if k != "high_water_mark_ms"}) for row in rows
    )


def status_with(server: IdmintServer, context: ssl.SSLContext, token: str) -> int:
    """The status of ``/v1/id`` with ``token``, on a new connection."""
    with httpx.Client(
        verify=context, trust_env=False, headers={"Authorization": f"Bearer {token}"}
    ) as http:
        return http.get(f"{server.url}/v1/id").status_code


@dataclass
class Rotation:
    """One server's files: certificate, key and token file, replaced as an operator would."""

    pki: Pki
    directory: Path

    def __post_init__(self) -> None:
        self.cert = self.directory / "server.pem"
        self.key = self.directory / "server.key"
        self.tokens = self.directory / "tokens"
        self.first = self.pki.issue("first")
        self.install(self.first)
        replace_file(self.tokens, f"{TOKEN_1}\n".encode())

    def install(self, pair: Pair) -> None:
        replace_file(self.key, pair.key.read_bytes())
        replace_file(self.cert, pair.cert.read_bytes())

    def args(self) -> list[str]:
        return [
            "--tls-cert",
            str(self.cert),
            "--tls-key",
            str(self.key),
            "--token-file",
            str(self.tokens),
        ]


def wait_for_certificate(
    port: int, context: ssl.SSLContext, sha256: str, *, handshakes: int = 1
) -> None:
    """Until ``handshakes`` new handshakes in a row get the certificate ``sha256``."""
    in_a_row = [0]

    def served() -> bool:
        in_a_row[0] = in_a_row[0] + 1 if served_sha256(port, context) == sha256 else 0
        return in_a_row[0] >= handshakes

    wait_until(served, timeout=30, description=f"new handshakes to get {sha256[:12]}")


@pytest.mark.parametrize("workers", [1, 2], ids=["one process", "two workers"])
def test_rotation_under_load_loses_no_request_and_no_claim(
    pki: Pki, tmp_path: Path, workers: int
) -> None:
    files = Rotation(pki, tmp_path)
    context = pki.context()
    with running_server(*files.args(), "--workers", str(workers), verify=context) as server:
        claims_before = claims_of(server, context, TOKEN_1)
        with (
            KeptConnection(server.port, context) as early,  # made before the rotation
            Load(server.port, context, TOKEN_1) as load,
        ):
            load.keeps_going()
            # 1. A new certificate and a second token; SIGHUP.
            second = pki.issue("second")
            files.install(second)
            replace_file(files.tokens, f"{TOKEN_1}\n{TOKEN_2}\n".encode())
            server.send_signal(signal.SIGHUP)
            wait_for_certificate(server.port, context, second.sha256(), handshakes=10)
            wait_until(
                lambda: status_with(server, context, TOKEN_2) == 200,
                timeout=30,
                description="the second token to be accepted",
            )
            load.keeps_going()
            # 2. The clients move to the second token; the first is removed; SIGHUP.
            load.token = TOKEN_2
            load.keeps_going()
            replace_file(files.tokens, f"{TOKEN_2}\n".encode())
            server.send_signal(signal.SIGHUP)
            wait_until(
                lambda: all(status_with(server, context, TOKEN_1) == 401 for _ in range(10)),
                timeout=30,
                description="the first token to be refused",
            )
            load.keeps_going()
            early.ask()  # after the rotation
        assert load.failures == [], load.failures[:5]
        assert load.connections > 10  # handshakes all along
        assert len(set(load.ids)) == len(load.ids)
        # The connection made before went on, one socket, on the first certificate.
        assert early.errors == []
        assert set(early.statuses) == {200}
        assert len(early.statuses) >= 2
        assert len(early.sockets) == 1
        assert early.certificates == {files.first.sha256()}
        assert claims_of(server, context, TOKEN_2) == claims_before
        log = server.stderr_text()
        assert "credentials re-read" in log, log
        assert "Traceback" not in log, log


def test_a_file_that_fails_to_load_keeps_the_old_credentials(pki: Pki, tmp_path: Path) -> None:
    files = Rotation(pki, tmp_path)
    served = pki.issue("kept")
    files.install(served)
    context = pki.context()
    with running_server(*files.args(), verify=context) as server:
        replace_file(files.key, pki.client.key.read_bytes())  # the key of another certificate
        replace_file(files.tokens, b"\n")  # no token
        server.send_signal(signal.SIGHUP)
        wait_until(
            lambda: (
                "credentials not re-read" in server.stderr_text()
                and "--tls-key" in server.stderr_text()
                and "--token-file" in server.stderr_text()
            ),
            timeout=30,
            description="both failures to be logged",
        )
        assert served_sha256(server.port, context) == served.sha256()
        assert status_with(server, context, TOKEN_1) == 200
        with server.client() as http:
            samples = parse_metrics(http.get("/metrics").text)
        for credentials in ("tls", "tokens"):
            failed = metric(
                samples, "idmint_credential_reloads_total", credentials=credentials, result="failed"
            )
            assert failed == 1, credentials


def test_a_storm_of_sighups_loses_no_reload(pki: Pki, tmp_path: Path) -> None:
    """However many arrive, the files as they are after the last one are in effect."""
    files = Rotation(pki, tmp_path)
    context = pki.context()
    with running_server(*files.args(), "--workers", "2", verify=context) as server:
        for _ in range(200):
            server.send_signal(signal.SIGHUP)
        replace_file(files.tokens, f"{TOKEN_2}\n".encode())
        last = pki.issue("last")
        files.install(last)
        server.send_signal(signal.SIGHUP)
        wait_for_certificate(server.port, context, last.sha256(), handshakes=10)
        wait_until(
            lambda: all(status_with(server, context, TOKEN_1) == 401 for _ in range(10)),
            timeout=30,
            description="the first token to be refused by every worker",
        )
        assert status_with(server, context, TOKEN_2) == 200
        assert server.returncode is None
        assert "Traceback" not in server.stderr_text()


def worker_pids(server: IdmintServer, context: ssl.SSLContext, token: str) -> dict[int, int]:
    with httpx.Client(
        verify=context, trust_env=False, headers={"Authorization": f"Bearer {token}"}
    ) as http:
        workers = http.get(f"{server.url}/v1/claims").json()["workers"]
    return {row["worker"]: row["pid"] for row in workers if row["answering"]}


def test_a_worker_replaced_after_a_rotation_loads_the_files_as_they_are(
    pki: Pki, tmp_path: Path
) -> None:
    files = Rotation(pki, tmp_path)
    context = pki.context()
    with running_server(*files.args(), "--workers", "2", verify=context) as server:
        before = worker_pids(server, context, TOKEN_1)
        assert len(before) == 2
        second = pki.issue("rotated")
        files.install(second)
        replace_file(files.tokens, f"{TOKEN_2}\n".encode())
        server.send_signal(signal.SIGHUP)
        wait_for_certificate(server.port, context, second.sha256(), handshakes=10)
        os.kill(before[0], signal.SIGKILL)

        def replaced() -> bool:
            try:
                return worker_pids(server, context, TOKEN_2).get(0) not in (None, before[0])
            except httpx.TransportError:  # a connection the dead worker's socket had queued
                return False

        wait_until(replaced, timeout=60, description="worker 0 to be replaced")
        # Every new connection, to either worker, gets the rotated files.
        seen: set[int] = set()
        for _ in range(40):
            assert served_sha256(server.port, context) == second.sha256()
            with httpx.Client(verify=context, trust_env=False) as http:
                seen.add(http.get(f"{server.url}/readyz").json()["worker"])
            assert status_with(server, context, TOKEN_1) == 401
        assert seen == {0, 1}


# -- clients ----------------------------------------------------------------------------------


def fetch(
    *args: str, timeout: float = 60, environment: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``idmint fetch`` with none of our variables but ``environment``'s."""
    return subprocess.run(
        [sys.executable, "-m", "idmint", "fetch", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("IDMINT_")},
            **(environment or {}),
        },
    )


def test_fetch_over_mutual_tls(pki: Pki, tmp_path: Path) -> None:
    tokens = _written(pki, "fetch.tokens", TOKEN_1 + "\n")
    with running_server(
        *tls_args(pki.server, client_ca=pki.ca_file),
        "--token-file",
        str(tokens),
        verify=pki.context(pki.client),
    ) as server:
        common = ["--server", server.url, "--count", "3", "--token-file", str(tokens)]
        client = ["--tls-cert", str(pki.client.cert), "--tls-key", str(pki.client.key)]
        done = fetch(*common, "--tls-ca", str(pki.ca_file), *client)
        assert done.returncode == 0, done.stderr
        assert len(done.stdout.splitlines()) == 3
        # A server certificate the client cannot verify: 77 at once, naming the server.
        refused = fetch(*common, *client, "--timeout", "60")
        assert refused.returncode == 77, refused.stderr
        line = assert_one_error_line(refused.stderr)
        assert f"{server.url}: TLS: the server's certificate cannot be verified" in line
        assert "--tls-ca" in line
        # No client certificate: the server ends the handshake; the client says why.
        unknown = fetch(*common, "--tls-ca", str(pki.ca_file), "--timeout", "1")
        assert unknown.returncode == 69, unknown.stderr
        line = assert_one_error_line(unknown.stderr)
        assert "client certificate" in line
        assert "--tls-cert" in line
        # Files that cannot be used: one line naming the flag, status 2.
        missing = fetch(*common, "--tls-ca", str(tmp_path / "none.pem"))
        assert missing.returncode == 2, missing.stderr
        assert assert_one_error_line(missing.stderr).startswith("idmint: error: --tls-ca: ")


def test_fetch_takes_its_tls_files_from_the_environment(pki: Pki, tmp_path: Path) -> None:
    with running_server(
        *tls_args(pki.server, client_ca=pki.ca_file), verify=pki.context(pki.client)
    ) as server:
        common = ["--server", server.url, "--count", "2"]
        client = {
            "IDMINT_FETCH_TLS_CA": str(pki.ca_file),
            "IDMINT_FETCH_TLS_CERT": str(pki.client.cert),
            "IDMINT_FETCH_TLS_KEY": str(pki.client.key),
        }
        # The server's own variables beside them, as in a health check run in the
        # server's container: fetch presents the client's certificate, not these.
        beside = {"IDMINT_TLS_CERT": str(pki.server.cert), "IDMINT_TLS_KEY": str(pki.server.key)}
        done = fetch(*common, environment={**client, **beside})
        assert done.returncode == 0, done.stderr
        assert len(done.stdout.splitlines()) == 2
        # Without the client's certificate the server ends the connection.
        ca_only = {"IDMINT_FETCH_TLS_CA": client["IDMINT_FETCH_TLS_CA"]}
        refused = fetch(*common, "--timeout", "1", environment={**ca_only, **beside})
        assert refused.returncode == 69, refused.stderr
        assert "--tls-cert" in assert_one_error_line(refused.stderr)
        # A flag wins over its variable; a variable's bad file is named by the variable.
        missing = str(tmp_path / "none.pem")
        wrong = fetch(*common, environment={**client, "IDMINT_FETCH_TLS_CA": missing})
        assert wrong.returncode == 2, wrong.stderr
        assert assert_one_error_line(wrong.stderr).startswith(
            "idmint: error: IDMINT_FETCH_TLS_CA: "
        )
        overridden = fetch(
            *common,
            "--tls-ca",
            str(pki.ca_file),
            environment={**client, "IDMINT_FETCH_TLS_CA": missing},
        )
        assert overridden.returncode == 0, overridden.stderr


def test_the_clients_over_tls_and_a_token_file_read_again_when_refused(
    pki: Pki, tmp_path: Path
) -> None:
    files = Rotation(pki, tmp_path)
    client_tokens = _written(pki, "client.tokens", TOKEN_1 + "\n")
    context = pki.context()
    with running_server(*files.args(), verify=context) as server:
        token_file, ca = str(client_tokens), str(pki.ca_file)
        with IdClient([server.url], token_file=token_file, tls_ca=ca, min_batch=5) as ids:
            before = ids.get_many(5)
            # The server moves to the second token; so does the client's file.
            replace_file(files.tokens, f"{TOKEN_2}\n".encode())
            server.send_signal(signal.SIGHUP)
            wait_until(
                lambda: status_with(server, context, TOKEN_1) == 401,
                timeout=30,
                description="the first token to be refused",
            )
            replace_file(client_tokens, f"{TOKEN_2}\n".encode())
            after = ids.get_many(50)  # refused once, read the file again, served
        assert len(set(before + after)) == 55

        async def draw() -> int:
            async with AsyncIdClient([server.url], token_file=token_file, tls_ca=ca) as ids:
                return len(set(await ids.get_many(20)))

        assert asyncio.run(draw()) == 20
        with (
            IdClient([server.url], token=TOKEN_2, timeout=60) as ids,
            pytest.raises(ServerRefused) as refused,
        ):
            ids.get()  # the system's CAs do not know trustme's
        assert f"{server.url}: TLS: the server's certificate cannot be verified" in str(
            refused.value
        )


def test_a_tls_server_registers_as_https_in_discovery(pki: Pki, zk: ZooKeeperEnsemble) -> None:
    discovery = f"zk://{zk.hosts}/tls-{uuid.uuid4().hex[:8]}"
    with (
        running_server(
            *tls_args(pki.server), "--discovery", discovery, verify=pki.context()
        ) as server,
        IdClient(discovery=discovery, tls_ca=str(pki.ca_file)) as ids,
    ):
        wait_until(
            lambda: ids.servers == [server.url],
            timeout=30,
            description=f"the client to find {server.url}",
        )
        assert server.url.startswith("https://")
        assert len(ids.get_many(10)) == 10
