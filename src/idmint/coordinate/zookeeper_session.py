"""What every ZooKeeper claim shares: its own session, fenced with what the server granted.

A claim of the ZooKeeper driver (a generator ID in java-uniqueid's pool,
:mod:`idmint.coordinate.zookeeper`; an elastic node ID in the groups,
:mod:`idmint.coordinate.zookeeper_groups`) is one ZooKeeper session: its
claim node is ephemeral to it, and closing the session is the release. Each
renewal is a compare-and-set of the identity's high-water mark on the version
the claim last wrote, so a session that expired, or a successor that claimed
the identity since, fails it. Here: the sessions (:class:`ZooKeeperAccess`),
that claim (:class:`ZooKeeperSessionClaim`), and kazoo's errors translated at
the driver's edge (:func:`translated`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from idmint.coordinate import peers
from idmint.coordinate.base import ClaimOptions, DriverClaim, HighWaterMark
from idmint.errors import (
    ConfigurationError,
    CoordinationError,
    CoordinatorRefused,
    CoordinatorUnavailable,
    needs_extra,
)
from idmint.waiting import noticed_if_slow

__all__ = [
    "ZooKeeperAccess",
    "ZooKeeperSessionClaim",
    "kazoo_module",
    "read_mark",
    "session_of",
    "translate_error",
    "translated",
    "write_mark",
]

log = logging.getLogger("idmint.coordinate.zookeeper")


def kazoo_module() -> Any:
    with needs_extra("zookeeper", "kazoo", needed_by="zk://"):
        import kazoo.client
    import kazoo

    return kazoo


class _GrantedTimeouts:
    """The session timeout ZooKeeper granted each session of one client, in ms.

    Read from the handshake replies themselves, as kazoo's connection receives
    them (kazoo keeps the value only in a local variable). The fence must use
    it, not the timeout we asked for, when the server granted less. Should a
    kazoo release change how it makes the handshake, nothing is recorded and
    :meth:`of` refuses to go on: a claim then fails loudly instead of fencing
    with the requested timeout.
    """

    def __init__(self, client: Any) -> None:
        from kazoo.protocol.serialization import Connect

        self.by_session: dict[int, int] = {}
        connection = getattr(client, "_connection", None)
        if connection is None or not hasattr(connection, "_invoke"):
            raise ConfigurationError(_UNSUPPORTED_KAZOO)
        invoke = connection._invoke

        def invoke_and_note(timeout: float, request: Any, xid: int | None = None) -> Any:
            result = invoke(timeout, request, xid)
            if isinstance(result, tuple) and result and isinstance(result[0], Connect):
                reply = result[0]
                if reply.time_out > 0:
                    self.by_session[reply.session_id] = reply.time_out
            return result

        connection._invoke = invoke_and_note

    def of(self, session: int | None) -> int:
        """The granted timeout (ms) of ``session``, which must be connected."""
        granted = self.by_session.get(session) if session is not None else None
        if granted is None:
            raise CoordinationError(_UNSUPPORTED_KAZOO)
        return granted


_UNSUPPORTED_KAZOO = (
    "could not learn the session timeout ZooKeeper granted from this kazoo's "
    "handshake; a claim fenced with the requested timeout could outlive its session. "
    "Install a kazoo release idmint supports (see pyproject.toml)"
)


class ZooKeeperAccess:
    """How the driver reaches an ensemble: its hosts, credentials, sessions and ACLs."""

    hosts: str
    """``host:port,...`` as kazoo takes them."""
    ttl_s: float
    """The session timeout asked for (the server may grant less)."""
    description: str
    """``zk://hosts/root``: where the claims are made, for messages."""
    credentials: str | None
    """``user:password`` for the digest scheme, or None (open nodes)."""
    options: ClaimOptions

    def client(
        self, *, listener: Any = None, owner: str | None = None
    ) -> tuple[Any, _GrantedTimeouts]:
        """A started KazooClient (its own session), and the timeouts its sessions got.

        ``owner``: a claim's own digest credential (see :meth:`owned_acl`),
        added to the session's identities.
        """
        kazoo_module()  # without kazoo: MissingExtra, naming the line that installs it
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import KazooTimeoutError
        from kazoo.retry import KazooRetry

        client = KazooClient(
            hosts=self.hosts,
            timeout=self.ttl_s,
            auth_data=[("digest", c) for c in (self.credentials, owner) if c] or None,
            # Reconnect quickly and for ever: within the session timeout a
            # reconnect keeps the session (and the claim) alive.
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0),
            command_retry=KazooRetry(max_tries=3, delay=0.05, max_delay=0.5),
        )
        granted = _GrantedTimeouts(client)
        if listener is not None:
            client.add_listener(listener)
        timeout = self.options.connect_timeout_s
        try:
            with (
                translated(f"connecting to ZooKeeper at {self.hosts}"),
                noticed_if_slow(f"ZooKeeper at {self.hosts}", timeout) as waited,
            ):
                self._start(client, timeout)
        except KazooTimeoutError as error:  # the client is stopped by _start
            raise CoordinatorUnavailable(
                f"could not reach ZooKeeper at {self.hosts} (waited {waited.seconds:.1f} s); "
                "check that the servers are running and the URL's hosts and ports are right, "
                "or wait longer with connect_timeout=SECONDS"
            ) from error
        return client, granted

    def _start(self, client: Any, timeout: float) -> None:
        """kazoo's ``start(timeout)``, but a service of another kind at the hosts
        (:func:`~idmint.coordinate.peers.wrong_service`, asked once the first attempt
        is a second late) ends it at once: kazoo would try it again until ``timeout``."""
        from kazoo.handlers.threading import KazooTimeoutError

        deadline = time.monotonic() + timeout
        connected = client.start_async()
        if not connected.wait(min(timeout, peers.PROBE_S)) or not client.connected:
            addresses = []
            for host_port in self.hosts.split(","):
                host, _, port = host_port.rpartition(":")
                addresses.append((host.strip("[]"), int(port)))
            wrong = peers.wrong_service(addresses, peers.ZOOKEEPER)
            if wrong is None:
                connected.wait(max(0.0, deadline - time.monotonic()))
        else:
            wrong = None
        if wrong is not None or not client.connected:
            # kazoo's stop() waits for an attempt under way to time out (the session
            # timeout): the caller is told now, the client stops in the background.
            threading.Thread(
                target=_stop_and_close, args=(client,), name="idmint-zk-stop", daemon=True
            ).start()
            raise wrong or KazooTimeoutError("Connection time-out")

    @contextlib.contextmanager
    def short_session(self) -> Iterator[Any]:
        """A client of its own for a few requests, closed after the block."""
        client, _ = self.client()
        try:
            yield client
        finally:
            client.stop()
            client.close()

    def acls(self) -> dict[str, Any]:
        """ACLs for what we create: open without credentials (java-uniqueid's way)."""
        from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

        if self.credentials is None:
            return dict.fromkeys(("tree", "pool", "claim"), OPEN_ACL_UNSAFE)
        user, _, password = self.credentials.partition(":")

        def acl(**perms: bool) -> list[Any]:
            return [make_digest_acl(user, password, **perms)]

        return {
            "tree": acl(all=True),
            # No DELETE for anyone: claim nodes go only when their session does.
            "pool": acl(read=True, create=True),
            "claim": acl(read=True),
        }

    def owned_acl(self, owner: str | None) -> list[Any]:
        """ACL for a node only its claimant may change: the shared user reads it, the
        claim's own random digest identity (``owner``, held only by its session)
        has every right. Open without credentials."""
        from kazoo.security import make_digest_acl

        if self.credentials is None or owner is None:
            return list(self.acls()["claim"])
        owner_user, _, owner_password = owner.partition(":")
        return [*self.acls()["claim"], make_digest_acl(owner_user, owner_password, all=True)]

    def new_owner(self) -> str | None:
        """A fresh digest credential for one claim (None without credentials)."""
        if self.credentials is None:
            return None
        return f"idmint-claim-{uuid.uuid4().hex}:{uuid.uuid4().hex}"


AccessT = TypeVar("AccessT", bound="ZooKeeperAccess")


class ZooKeeperSessionClaim(DriverClaim[AccessT]):
    """An identity held through a ZooKeeper session of its own (see the module docs).

    A subclass claims in :meth:`_acquire` (on :meth:`_connected_client`), and
    sets ``_hwm_path`` and ``_hwm_version`` to the identity's high-water mark
    as it wrote it; renewing and releasing are done here.
    """

    def _begin(self) -> None:
        self._client: Any = None
        self._granted: _GrantedTimeouts | None = None
        self._hwm_path: str | None = None
        self._hwm_version = -1
        self._token = uuid.uuid4().hex
        self._owner = self.coordinator.new_owner()
        self._connected = threading.Event()

    @property
    def client(self) -> Any:
        """The claim's own kazoo client (its session holds the claim's nodes)."""
        return self._client

    @property
    def session_id(self) -> int | None:
        """The claim's session, while it has one."""
        return session_of(self._client) if self._client is not None else None

    @property
    def owned_acl(self) -> list[Any]:
        """ACL for nodes only this claim may change (its claim node, registrations)."""
        return self.coordinator.owned_acl(self._owner)

    # -- connection and its events --------------------------------------------------------
    def _ensure_client(self) -> Any:
        if self._client is None:
            self._client, self._granted = self.coordinator.client(
                listener=self._on_state, owner=self._owner
            )
            self._connected.set()
        return self._client

    def _fence_with_granted_timeout(self, client: Any) -> None:
        """Fence with the session timeout the server granted our session, when it is
        less than we asked for (or than an earlier session got)."""
        assert self._granted is not None
        granted_ms = self._granted.of(session_of(client))
        if granted_ms / 1000 < self.ttl_s:
            log.warning(
                "%s: ZooKeeper granted a %d ms session timeout, less than the %g s asked "
                "for; fencing with what was granted",
                self,
                granted_ms,
                self.ttl_s,
            )
            self.ttl_s = granted_ms / 1000
            self.margin_s = min(self.margin_s, self.ttl_s / 4)
            self.renew_every_s = (self.ttl_s - self.margin_s) / 3

    def _on_state(self, state: str) -> None:
        # Runs in kazoo's connection thread: must not block or call ZooKeeper.
        if state == "SUSPENDED":
            self._connected.clear()
            self._suspend("the connection to ZooKeeper was interrupted")
        elif state == "LOST":
            self._connected.clear()
            self._lose("the ZooKeeper session expired or was closed")
        elif state == "CONNECTED":
            self._connected.set()
            # Same session or a new one? The renewal's compare-and-set tells.
            self._resume_soon()

    def _connected_client(self) -> Any:
        """The client, once connected (after a lost session kazoo reconnects by itself)."""
        client = self._ensure_client()
        timeout = self.options.connect_timeout_s
        with noticed_if_slow(f"ZooKeeper at {self.coordinator.description}", timeout):
            connected = self._connected.wait(timeout)
        if not connected:
            raise CoordinatorUnavailable(
                f"{self.description}: not reconnected to ZooKeeper within {timeout:g} s"
            )
        self._fence_with_granted_timeout(client)
        return client

    # -- Claim hooks --------------------------------------------------------------------------
    def _renew(self, ceiling_ms: int) -> bool:
        kazoo = kazoo_module()
        client = self._client
        assert client is not None
        assert self._hwm_path is not None
        if not self._connected.is_set():
            raise CoordinatorUnavailable("not connected to ZooKeeper")
        self._fence_with_granted_timeout(client)
        try:
            with translated("renewing the claim"):
                self._hwm_version = write_mark(
                    client,
                    self._hwm_path,
                    self._mark(ceiling_ms),
                    self._hwm_version,
                    self.coordinator.acls()["tree"],
                )
        except CoordinationError as error:
            gone = (
                kazoo.exceptions.BadVersionError,  # someone claimed the identity after us
                kazoo.exceptions.NodeExistsError,
                kazoo.exceptions.NoNodeError,
                kazoo.exceptions.SessionExpiredError,
            )
            if isinstance(error.__cause__, gone):
                return False
            raise
        return True

    def _final_mark_writer(self) -> Callable[[HighWaterMark], object] | None:
        client, path, version = self._client, self._hwm_path, self._hwm_version
        if client is None or path is None:
            return None
        acl = self.coordinator.acls()["tree"]

        def write(mark: HighWaterMark) -> None:
            with translated("recording the final high-water mark"):
                write_mark(client, path, mark, version, acl)

        return write

    def _let_go(self) -> None:
        # Closing the session removes the claim node: that is the release.
        client, self._client = self._client, None
        if client is not None:
            client.stop()
            client.close()

    def _forget(self) -> None:
        # The client's threads stayed in the parent and its socket carries the
        # parent's session: stopping it here would close that session. Dropping
        # the reference closes only our copy of the socket.
        self._client = None
        self._connected.clear()

    def _is_ours(self, client: Any, path: str) -> bool:
        """Whether the node at ``path`` is ours: made by our session, with our token."""
        kazoo = kazoo_module()
        try:
            data, stat = client.get(path)
        except kazoo.exceptions.NoNodeError:
            return False
        try:
            token = json.loads(data or b"{}").get("token")
        except ValueError:
            token = None
        return bool(stat.ephemeralOwner == session_of(client) and token == self._token)


def session_of(client: Any) -> int | None:
    return client.client_id[0] if client.client_id else None


def read_mark(client: Any, path: str) -> tuple[HighWaterMark | None, int]:
    """The high-water mark at ``path`` and its version (-1 when absent)."""
    kazoo = kazoo_module()
    try:
        data, stat = client.get(path)
    except kazoo.exceptions.NoNodeError:
        return None, -1
    return HighWaterMark.from_bytes(data), stat.version


def write_mark(client: Any, path: str, mark: HighWaterMark, version: int, acl: Any) -> int:
    """Compare-and-set the mark at ``path`` (create it when ``version`` is -1)."""
    data = json.dumps(mark.to_json()).encode()
    if version < 0:
        client.create(path, data, acl=acl)
        return 0
    stat = client.set(path, data, version=version)
    return int(stat.version)


def _stop_and_close(client: Any) -> None:
    with contextlib.suppress(Exception):
        client.stop()
        client.close()


@contextlib.contextmanager
def translated(doing: str) -> Iterator[None]:
    """Raise kazoo's exceptions in the block as idmint's (:func:`translate_error`)."""
    kazoo = kazoo_module()
    try:
        yield
    except kazoo.exceptions.KazooException as error:
        raise translate_error(error, doing) from error


def translate_error(error: Exception, doing: str) -> CoordinationError:
    """A kazoo exception as the idmint error a caller can act on (by type, never by text).

    Anything not known to mean "refused" or "unreachable" is a
    :class:`CoordinationError` carrying the cause: not a lost claim, which
    would make a claim that is still ours look gone.
    """
    kazoo = kazoo_module()
    exceptions = kazoo.exceptions
    name = type(error).__name__
    if isinstance(
        error,
        (
            exceptions.NoAuthError,
            exceptions.AuthFailedError,
            exceptions.SessionClosedRequireSaslError,
        ),
    ):
        return CoordinatorRefused(
            f"{doing}: ZooKeeper refused us ({name}); check the user:password in the URL "
            "and the ACLs of the root node"
        )
    if isinstance(
        error,
        (
            exceptions.ConnectionLoss,
            exceptions.SessionExpiredError,
            exceptions.OperationTimeoutError,
            exceptions.ConnectionClosedError,
        ),
    ):
        return CoordinatorUnavailable(f"{doing}: lost the connection to ZooKeeper ({name})")
    return CoordinationError(f"{doing}: ZooKeeper said {name}: {error}")
