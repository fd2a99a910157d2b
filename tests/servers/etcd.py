"""etcd servers for integration tests.

:class:`EtcdCluster` runs one or more ``etcd`` members (Debian's ``etcd-server``,
etcd 3.4) on 127.0.0.1 free ports::

    cluster = EtcdCluster(3, tmp_path, tls=True, auth=True)
    cluster.start()
    client = cluster.client(1, credentials=cluster.user_credentials)  # etcd3gw
    client.put("/idmint/x", "1")
    with cluster.member_stopped(0):
        ...  # two of three members serve
    cluster.stop()

With ``tls=True`` the harness creates a throw-away certificate authority (``trustme``)
and serves HTTPS on the client ports (peers talk plain HTTP on 127.0.0.1); clients must
trust :attr:`EtcdCluster.ca_path`. ``client_cert_auth=True`` also requires a client
certificate (etcd does as soon as it is given ``--trusted-ca-file``). With ``auth=True``
it creates the ``root`` user and an ``idmint`` user allowed to read and write keys under
:attr:`EtcdCluster.auth_prefix`, then enables authentication.

About etcd3gw 2.7 (the client idmint uses), as read in its source and checked against
these servers:

* it talks to a single ``host:port``: no list of endpoints, no fail-over;
* its ``ca_cert``/``cert_cert``/``cert_key`` arguments set ``verify``/``cert`` on the
  ``requests.Session`` it creates, and are ignored when a ``session`` is passed;
  ``$REQUESTS_CA_BUNDLE`` or ``$CURL_CA_BUNDLE``, when set, override ``ca_cert``
  (requests applies them per request), so verification then fails against a private CA
  unless the session has ``trust_env = False``;
* it knows nothing of etcd users: authenticating means getting a token from
  ``POST /v3/auth/authenticate`` and passing a ``requests.Session`` that sends it in
  the ``Authorization`` header. :meth:`EtcdCluster.requests_session` and
  :meth:`EtcdCluster.client` do all of this.
"""

from __future__ import annotations

import base64
import json
import secrets
import ssl
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import Cluster, Member, ServerError, ServerProcess
from .ports import LOOPBACK, free_port

if TYPE_CHECKING:
    import etcd3gw
    import requests

__all__ = ["EtcdCluster", "EtcdCredentials", "TLSFiles", "prefix_range_end"]


@dataclass(frozen=True)
class EtcdCredentials:
    """An etcd user name and password."""

    user: str
    password: str


@dataclass(frozen=True)
class TLSFiles:
    """PEM files of a test certificate authority and the certificates it issued."""

    ca_path: Path
    server_cert_path: Path
    server_key_path: Path
    client_cert_path: Path
    client_key_path: Path

    @classmethod
    def create(cls, directory: Path, *, client_common_name: str) -> TLSFiles:
        """Create a CA, a server certificate for 127.0.0.1 and a client certificate.

        Both leaf certificates are valid for client and server authentication.
        """
        import trustme

        directory.mkdir(parents=True, exist_ok=True)
        files = cls(
            ca_path=directory / "ca.pem",
            server_cert_path=directory / "server.pem",
            server_key_path=directory / "server-key.pem",
            client_cert_path=directory / "client.pem",
            client_key_path=directory / "client-key.pem",
        )
        ca = trustme.CA(organization_name="idmint tests")
        server = ca.issue_cert(LOOPBACK, "localhost", common_name="etcd")
        client = ca.issue_cert(client_common_name, common_name=client_common_name)
        ca.cert_pem.write_to_path(str(files.ca_path))
        server.private_key_pem.write_to_path(str(files.server_key_path))
        client.private_key_pem.write_to_path(str(files.client_key_path))
        for leaf, path in ((server, files.server_cert_path), (client, files.client_cert_path)):
            path.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
        for key_path in (files.server_key_path, files.client_key_path):
            key_path.chmod(0o600)
        return files


def prefix_range_end(prefix: bytes) -> bytes:
    """Return the etcd ``range_end`` that selects every key starting with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b"\x00"  # every key
    return stripped[:-1] + bytes([stripped[-1] + 1])


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass
class _Member(Member):
    name: str


class EtcdCluster(Cluster[_Member]):
    """One or more etcd members on 127.0.0.1.

    Members are numbered from 0 (named ``m0``, ``m1``...). The cluster is not started by
    the constructor: call :meth:`start`.
    """

    def __init__(
        self,
        size: int,
        tmpdir: Path | str,
        *,
        tls: bool = False,
        auth: bool = False,
        client_cert_auth: bool = False,
        auth_prefix: str = "/idmint",
        heartbeat_interval_ms: int | None = None,
        election_timeout_ms: int | None = None,
        etcd: str = "etcd",
        client_ports: Sequence[int] | None = None,
    ) -> None:
        """Describe a cluster; nothing is started until :meth:`start`.

        :param size: number of members.
        :param tmpdir: directory for data, certificates and logs (``m<i>/``, ``tls/``).
        :param tls: serve HTTPS on the client ports (see :attr:`ca_path`).
        :param auth: create users (:attr:`root_credentials`, :attr:`user_credentials`)
            and enable authentication.
        :param client_cert_auth: with ``tls``, also require a client certificate signed
            by the CA (:attr:`client_cert_path`, :attr:`client_key_path`). Its common
            name is not an etcd user, so it authenticates no user by itself.
        :param auth_prefix: keys the ``idmint`` user may read and write (a prefix).
        :param heartbeat_interval_ms: raft heartbeat interval; default 100 ms, or 10 ms
            for a single member (which elects itself one election timeout after boot,
            and has nobody to lose leadership to).
        :param election_timeout_ms: raft election timeout; default 1000 ms, or 100 ms
            for a single member.
        :param etcd: the ``etcd`` executable.
        :param client_ports: the members' client ports (default: free ports), e.g.
            etcd's usual 2379 for ``scripts/coordinators``.
        """
        if client_cert_auth and not tls:
            raise ValueError("client_cert_auth needs tls=True")
        super().__init__(size, tmpdir, client_ports)
        self.tls = tls
        self.auth = auth
        self.client_cert_auth = client_cert_auth
        self.auth_prefix = auth_prefix
        self._etcd = etcd
        single = size == 1
        heartbeat = heartbeat_interval_ms or (10 if single else 100)
        election = election_timeout_ms or (100 if single else 1000)
        self._timing = ["--heartbeat-interval", str(heartbeat), "--election-timeout", str(election)]
        self._token = f"idmint-{secrets.token_hex(6)}"
        self._tls_files: TLSFiles | None = None
        self._ssl_context: ssl.SSLContext | None = None
        self._url_opener: urllib.request.OpenerDirector | None = None
        self.root_credentials: EtcdCredentials | None = None
        """The ``root`` user (every permission), when ``auth=True``."""
        self.user_credentials: EtcdCredentials | None = None
        """The ``idmint`` user (read/write under :attr:`auth_prefix`), when ``auth=True``."""
        if auth:
            self.root_credentials = EtcdCredentials("root", secrets.token_urlsafe(16))
            self.user_credentials = EtcdCredentials("idmint", secrets.token_urlsafe(16))
        self._auth_enabled = False
        self._members = [
            _Member(
                name=f"m{index}",
                client_port=client_ports[index] if client_ports else free_port(),
                peer_port=free_port(),
                directory=self.tmpdir / f"m{index}",
                process=ServerProcess(
                    f"etcd-m{index}", [], log_path=self.tmpdir / f"m{index}" / "etcd.log"
                ),
            )
            for index in range(size)
        ]

    def __repr__(self) -> str:
        return f"<EtcdCluster size={self.size} urls={self.client_urls!r}>"

    # -- addresses and credentials -----------------------------------------------

    @property
    def scheme(self) -> str:
        """``https`` with TLS, else ``http``."""
        return "https" if self.tls else "http"

    @property
    def endpoints(self) -> list[str]:
        """``127.0.0.1:port`` of every member's client port."""
        return [f"{LOOPBACK}:{member.client_port}" for member in self._members]

    @property
    def client_urls(self) -> list[str]:
        """Client URL of every member (``http(s)://127.0.0.1:port``)."""
        return [f"{self.scheme}://{endpoint}" for endpoint in self.endpoints]

    @property
    def tls_files(self) -> TLSFiles:
        """The certificate files (created on first use).

        :raises ServerError: if the cluster does not use TLS.
        """
        if not self.tls:
            raise ServerError("this etcd cluster does not use TLS")
        if self._tls_files is None:
            self._tls_files = TLSFiles.create(
                self.tmpdir / "tls", client_common_name="idmint-test-client"
            )
        return self._tls_files

    @property
    def ca_path(self) -> Path | None:
        """PEM of the CA that signed the server certificate (``None`` without TLS)."""
        return self.tls_files.ca_path if self.tls else None

    @property
    def client_cert_path(self) -> Path | None:
        """PEM client certificate signed by the CA (``None`` without TLS)."""
        return self.tls_files.client_cert_path if self.tls else None

    @property
    def client_key_path(self) -> Path | None:
        """PEM private key of :attr:`client_cert_path` (``None`` without TLS)."""
        return self.tls_files.client_key_path if self.tls else None

    # -- lifecycle -----------------------------------------------------------------

    kind = "etcd"

    def start(self, timeout: float | None = None) -> None:
        """Start every member, wait until all are healthy, then set up authentication."""
        for index in range(self.size):
            if not self._members[index].process.running:
                self._launch(index, existing=self._members[index].data_dir.exists())
        self.wait_ready(timeout)
        if self.auth and not self._auth_enabled:
            self._enable_auth()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every member (``SIGTERM``, then ``SIGKILL`` after ``timeout``).

        Members are stopped one after the other: signalled together, a leader tries to
        hand leadership over to followers that are shutting down, which takes seconds.
        A graceful stop of the leader (:meth:`stop_member`) hands leadership over to
        another member first.
        """
        for member in self._members:
            member.process.stop(timeout)

    def _relaunch(self, index: int) -> None:
        """Start member ``index`` on its data (``--initial-cluster-state existing``)."""
        self._launch(index, existing=True)

    # -- readiness -----------------------------------------------------------------

    def serves(self, index: int) -> bool:
        """Whether member ``index`` answers ``GET /health`` with ``"health": "true"``."""
        try:
            answer = self._request(index, "GET", "/health", timeout=2.0)
        except (OSError, ValueError, ServerError):  # ServerError: 503 {"health":"false"}
            return False
        return answer.get("health") == "true"

    def leader(self) -> int | None:
        """Index of the leader according to the running members, if they know one."""
        token = self.authenticate(self.root_credentials) if self.root_credentials else None
        indexes: dict[str, int] = {}
        leader_id: str | None = None
        for index in range(self.size):
            if not self.is_running(index):
                continue
            try:
                status = self._request(index, "POST", "/v3/maintenance/status", {}, token=token)
            except (OSError, ValueError, ServerError):
                continue
            indexes[str(status["header"]["member_id"])] = index
            leader_id = str(status.get("leader", "0"))
        return indexes.get(leader_id) if leader_id is not None else None

    # -- clients -------------------------------------------------------------------

    def authenticate(self, credentials: EtcdCredentials, index: int | None = None) -> str:
        """Return an authentication token for ``credentials`` from member ``index``.

        Tokens are etcd's "simple" tokens: kept in the members' memory, so a restarted
        member no longer knows the tokens issued before, and dropped after
        ``--auth-token-ttl`` (300 s) without use.
        """
        if index is None:  # any running member
            index = next((i for i in range(self.size) if self.is_running(i)), 0)
        answer = self._request(
            index,
            "POST",
            "/v3/auth/authenticate",
            {"name": credentials.user, "password": credentials.password},
        )
        token: str = answer["token"]
        return token

    def requests_session(
        self, credentials: EtcdCredentials | None = None, index: int | None = None
    ) -> requests.Session:
        """Return a ``requests.Session`` for this cluster's client API.

        It verifies the server with :attr:`ca_path` (with TLS), presents the client
        certificate (with ``client_cert_auth``) and sends a token for ``credentials``
        (when given), obtained from member ``index`` (default: any running member). It
        ignores the environment (``trust_env = False``): no proxies, no
        ``$REQUESTS_CA_BUNDLE``.
        """
        import requests

        session = requests.Session()
        # Without this, $REQUESTS_CA_BUNDLE / $CURL_CA_BUNDLE override session.verify
        # (requests applies them per request), and $HTTP(S)_PROXY could catch 127.0.0.1.
        session.trust_env = False
        if self.tls:
            files = self.tls_files
            session.verify = str(files.ca_path)
            if self.client_cert_auth:
                session.cert = (str(files.client_cert_path), str(files.client_key_path))
        if credentials is not None:
            session.headers["Authorization"] = self.authenticate(credentials, index)
        return session

    def client(
        self,
        index: int = 0,
        *,
        credentials: EtcdCredentials | None = None,
        timeout: float = 10.0,
    ) -> etcd3gw.Etcd3Client:
        """Return an etcd3gw client of member ``index``, with TLS and credentials set up."""
        import etcd3gw

        return etcd3gw.Etcd3Client(
            host=LOOPBACK,
            port=self._members[index].client_port,
            protocol=self.scheme,
            timeout=timeout,
            session=self.requests_session(credentials, index),
        )

    # -- internals -----------------------------------------------------------------

    def _initial_cluster(self) -> str:
        return ",".join(
            f"{member.name}=http://{LOOPBACK}:{member.peer_port}" for member in self._members
        )

    def _launch(self, index: int, *, existing: bool) -> None:
        member = self._members[index]
        member.directory.mkdir(parents=True, exist_ok=True)
        client_url = f"{self.scheme}://{LOOPBACK}:{member.client_port}"
        peer_url = f"http://{LOOPBACK}:{member.peer_port}"
        argv = [
            self._etcd,
            "--name",
            member.name,
            "--data-dir",
            str(member.data_dir),
            "--listen-client-urls",
            client_url,
            "--advertise-client-urls",
            client_url,
            "--listen-peer-urls",
            peer_url,
            "--initial-advertise-peer-urls",
            peer_url,
            "--initial-cluster",
            self._initial_cluster(),
            "--initial-cluster-state",
            "existing" if existing else "new",
            "--initial-cluster-token",
            self._token,
            *self._timing,
            "--logger",
            "zap",
            "--log-level",
            "warn",
            "--log-outputs",
            "stderr",
        ]
        if self.tls:
            files = self.tls_files
            argv += ["--cert-file", str(files.server_cert_path)]
            argv += ["--key-file", str(files.server_key_path)]
            if self.client_cert_auth:
                # etcd requires a client certificate as soon as it has a trusted CA.
                argv += ["--trusted-ca-file", str(files.ca_path), "--client-cert-auth"]
        member.process.argv = argv
        member.process.cwd = member.directory
        member.process.start()

    def _opener(self) -> urllib.request.OpenerDirector:
        """A URL opener that ignores ``$http_proxy`` & co and trusts the test CA."""
        if self._url_opener is None:
            handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
            context = self._ssl()
            if context is not None:
                handlers.append(urllib.request.HTTPSHandler(context=context))
            self._url_opener = urllib.request.build_opener(*handlers)
        return self._url_opener

    def _ssl(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        if self._ssl_context is None:
            files = self.tls_files
            context = ssl.create_default_context(cafile=str(files.ca_path))
            if self.client_cert_auth:
                context.load_cert_chain(str(files.client_cert_path), str(files.client_key_path))
            self._ssl_context = context
        return self._ssl_context

    def _request(
        self,
        index: int,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        token: str | None = None,
        timeout: float = 10.0,
    ) -> dict[str, Any]:
        """Send a JSON request to member ``index`` and return the decoded answer.

        :raises ServerError: on an HTTP error status (with etcd's message).
        :raises OSError: if the member cannot be reached.
        """
        url = f"{self.scheme}://{LOOPBACK}:{self._members[index].client_port}{path}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if token is not None:
            request.add_header("Authorization", token)
        try:
            with self._opener().open(request, timeout=timeout) as reply:
                answer: dict[str, Any] = json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise ServerError(f"etcd {method} {path}: HTTP {exc.code}: {detail}") from exc
        return answer

    def _enable_auth(self) -> None:
        """Create the users and the role, then enable authentication (member 0)."""
        root, user = self.root_credentials, self.user_credentials
        assert root is not None
        assert user is not None
        role = "idmint-readwrite"
        prefix = self.auth_prefix.encode()
        for path, body in (
            ("/v3/auth/user/add", {"name": root.user, "password": root.password}),
            ("/v3/auth/user/grant", {"user": root.user, "role": "root"}),
            ("/v3/auth/role/add", {"name": role}),
            (
                "/v3/auth/role/grant",
                {
                    "name": role,
                    "perm": {
                        "permType": "READWRITE",
                        "key": _b64(prefix),
                        "range_end": _b64(prefix_range_end(prefix)),
                    },
                },
            ),
            ("/v3/auth/user/add", {"name": user.user, "password": user.password}),
            ("/v3/auth/user/grant", {"user": user.user, "role": role}),
            ("/v3/auth/enable", {}),
        ):
            self._request(0, "POST", path, body)
        self._auth_enabled = True
