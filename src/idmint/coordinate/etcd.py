"""Generator IDs claimed through etcd v3, with java-uniqueid's key layout.

URL grammar::

    etcd://[user:password@]host:port[,host:port...][/prefix][?option=value&...]
    etcds://...            the same over TLS

The prefix defaults to ``/idmint``. The driver speaks etcd's JSON gateway
(etcd 3.4 and 3.5) over the standard library's HTTP client, and fails over
between the hosts given: a request that cannot reach one member is retried on
the next. Nothing needs installing.

The options (:class:`EtcdOptions`; this table is made from its declaration):

{options}

With ``user:password`` the client authenticates (``/v3/auth/authenticate``)
and sends the token with every request, authenticating again when a member
no longer knows it.

Keys of the generator space under the prefix (java-uniqueid 4.x's, plus ``hwm``;
every other space has its ``pool`` and ``hwm`` under ``<prefix>/<space>``, cluster
0: :mod:`idmint.coordinate.spaces`)::

    <prefix>/cluster-id               comma-separated cluster IDs ("0", "1, 2")
    <prefix>/pool/<cluster>:<gen>     the claim: bound to the holder's lease,
                                      created only by a transaction requiring
                                      the key to be absent; JSON {"holder",
                                      "since_ms", "token"} (Java writes "")
    <prefix>/hwm/<cluster>:<gen>      persistent high-water mark (JSON)

etcd has no session events, so lease loss is detected by the renewal itself:
each renewal is a keep-alive (its send time moves the deadline) followed by
a transaction that writes the new ceiling only if the pool key is still bound
to our lease and the high-water mark is at the revision we last wrote. A
keep-alive that reports the lease gone, or a failed comparison, means the
claim is lost.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import logging
import random
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from idmint.coordinate import peers
from idmint.coordinate.base import (
    ClaimInfo,
    Coordinator,
    DriverClaim,
    HighWaterMark,
    holder_description,
    holder_of,
)
from idmint.coordinate.options import (
    TLS_ADVICE,
    ClaimOptions,
    TlsOptions,
    option,
    seconds,
    ttl,
    whole_seconds,
    with_options_table,
)
from idmint.coordinate.spaces import GENERATOR, SPACES, Space
from idmint.coordinate.url import CoordinatorUrl
from idmint.errors import (
    ConfigurationError,
    CoordinationError,
    CoordinatorRefused,
    CoordinatorUnavailable,
)
from idmint.waiting import noticed_if_slow

__all__ = ["EtcdClaim", "EtcdCoordinator", "EtcdGateway", "EtcdOptions"]

log = logging.getLogger("idmint.coordinate.etcd")

DEFAULT_PREFIX = "/idmint"
DEFAULT_TTL_S = 10.0


@dataclass(frozen=True)
class EtcdOptions(ClaimOptions, TlsOptions):
    """The options of an ``etcd://`` URL."""

    ttl_s: float = ttl(DEFAULT_TTL_S, whole_seconds(minimum=2))
    timeout_s: float = option(
        "timeout", 2.0, "s per request before trying the next host", seconds(minimum=0.1)
    )


__doc__ = with_options_table(__doc__, EtcdOptions)


def _b64(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode("ascii")


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def _prefix_range(prefix: str) -> dict[str, Any]:
    """The key range of every key that starts with ``prefix``."""
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    return {"key": _b64(prefix), "range_end": _b64(end)}


class _Refusal(Exception):
    """An answer from etcd that is an error: its HTTP status and JSON body."""

    def __init__(self, status: int, reason: str, body: bytes) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.detail_text = body.decode("utf-8", "replace")


class _Member:
    """One etcd member's JSON gateway over keep-alive HTTP/1.1 connections.

    The standard library's http.client, not a general HTTP stack: a claim's
    renewal is two small POSTs, and at thousands of claims per host their
    client CPU is what limits a fleet.
    """

    def __init__(
        self, host: str, port: int, context: ssl.SSLContext | None, timeout_s: float
    ) -> None:
        self.host, self.port = host, port
        self.context = context
        self.timeout_s = timeout_s
        self.endpoint = f"{'https' if context else 'http'}://{host}:{port}"
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _connection(self) -> http.client.HTTPConnection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        if self.context is not None:
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=self.timeout_s, context=self.context
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)

    def post(self, path: str, body: dict[str, Any], token: str | None) -> dict[str, Any]:
        """POST ``body`` as JSON to ``/v3{path}``; the reply's JSON, or :class:`_Refusal`.

        Raises ``OSError`` (``ssl.SSLError`` included) when the member cannot be reached.
        """
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = token
        data = json.dumps(body).encode()
        for attempt in (1, 2):
            connection = self._connection()
            connection.timeout = self.timeout_s
            if connection.sock is not None:
                connection.sock.settimeout(self.timeout_s)
            try:
                connection.request("POST", f"/v3{path}", data, headers)
                response = connection.getresponse()
                payload = response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                connection.close()
                if attempt == 2:
                    raise
                continue  # an idle connection the member had closed: once more, afresh
            except http.client.HTTPException as error:
                # Not HTTP (a store of another kind at the port): unreachable as etcd,
                # which the caller's first failure looks into.
                connection.close()
                raise ConnectionError(f"the answer was not HTTP ({error!r:.80})") from error
            except BaseException:
                connection.close()
                raise
            with self._lock:
                self._idle.append(connection)
            if response.status != 200:
                raise _Refusal(response.status, response.reason, payload)
            reply: dict[str, Any] = json.loads(payload)
            return reply
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


class EtcdGateway:
    """The members of an etcd cluster, tried in turn: failover on connection errors."""

    def __init__(
        self,
        hosts: Sequence[tuple[str, int]],
        context: ssl.SSLContext | None,
        *,
        timeout_s: float,
        username: str | None,
        password: str | None,
    ) -> None:
        self.members = [_Member(host, port, context, timeout_s) for host, port in hosts]
        self.endpoints = [member.endpoint for member in self.members]
        self._current = 0
        self._lock = threading.Lock()
        self.username = username
        self.password = password
        self._token: str | None = None
        self.last_failures = ""
        """What went wrong with each member on the last request none answered."""

    def post(self, what: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST to a reachable member, trying each in turn; errors translated."""
        if self.username is not None and self._token is None:
            self._authenticate()
        failures: list[str] = []
        for attempt in range(len(self.members)):
            index = (self._current + attempt) % len(self.members)
            member = self.members[index]
            try:
                reply = member.post(path, body, self._token)
            except ssl.SSLError as error:
                raise _tls_refused(error, member.endpoint, what) from error
            except OSError as error:
                failures.append(f"{member.endpoint}: {_why(error)}")
                continue
            except _Refusal as error:
                if self.username is None or _grpc_code(error) != _UNAUTHENTICATED:
                    raise _translate(error, what) from error
                # Our token expired or this member does not know it: once more
                # with a new one.
                self._token = None
                self._authenticate()
                try:
                    reply = member.post(path, body, self._token)
                except _Refusal as again:
                    raise _translate(again, what) from again
                except OSError as again:
                    raise CoordinatorUnavailable(
                        f"{what}: {member.endpoint}: {_why(again)}"
                    ) from again
            self._current = index
            return reply
        self.last_failures = "; ".join(failures)
        raise CoordinatorUnavailable(
            f"{what}: no etcd member answered ({self.last_failures}); check that the "
            "cluster is running and the URL's hosts, ports and TLS settings are right"
        )

    def _authenticate(self) -> None:
        with self._lock:
            failures = []
            for member in self.members:
                try:
                    reply = member.post(
                        "/auth/authenticate",
                        {"name": self.username, "password": self.password},
                        None,
                    )
                except ssl.SSLError as error:
                    raise _tls_refused(error, member.endpoint, "authenticating to etcd") from error
                except OSError as error:
                    failures.append(f"{member.endpoint}: {_why(error)}")
                    continue
                except _Refusal as error:
                    raise CoordinatorRefused(
                        f"etcd refused user {self.username!r}: {_message(error)}; "
                        "check the user and password in the URL"
                    ) from error
                self._token = str(reply["token"])
                return
            raise CoordinatorUnavailable(
                f"authenticating to etcd: no member answered ({'; '.join(failures)})"
            )

    @contextlib.contextmanager
    def timeout_at_most(self, seconds: float) -> Iterator[None]:
        """Requests in the block give up after ``seconds`` at most."""
        saved = [member.timeout_s for member in self.members]
        for member in self.members:
            member.timeout_s = min(member.timeout_s, seconds)
        try:
            yield
        finally:
            for member, timeout in zip(self.members, saved, strict=True):
                member.timeout_s = timeout

    # -- the operations the driver needs, in etcd's JSON gateway form --------------------
    def get(self, key: str) -> tuple[bytes, dict[str, Any]] | None:
        reply = self.post(f"reading {key}", "/kv/range", {"key": _b64(key)})
        kvs = reply.get("kvs") or []
        if not kvs:
            return None
        return _unb64(kvs[0].get("value")), kvs[0]

    def get_prefix(
        self, prefix: str, *, keys_only: bool = False
    ) -> list[tuple[str, bytes, dict[str, Any]]]:
        request: dict[str, Any] = _prefix_range(prefix)
        if keys_only:
            request["keys_only"] = True
        reply = self.post(f"listing {prefix}", "/kv/range", request)
        return [
            (_unb64(kv["key"]).decode(), _unb64(kv.get("value")), kv)
            for kv in reply.get("kvs") or []
        ]

    def delete_prefix(self, prefix: str) -> None:
        """Delete every key that starts with ``prefix``."""
        self.post(f"deleting {prefix}", "/kv/deleterange", _prefix_range(prefix))

    def read_pairs(
        self, base: str, pairs: Sequence[tuple[int, int]]
    ) -> dict[tuple[int, int], tuple[bool, HighWaterMark | None, int]]:
        """For each (cluster, ID): claimed?, its mark and the mark's revision; one request."""
        ranges = []
        for cluster, number in pairs:
            ranges.append(
                {
                    "request_range": {
                        "key": _b64(f"{base}/pool/{cluster}:{number}"),
                        "count_only": True,
                    }
                }
            )
            ranges.append({"request_range": {"key": _b64(f"{base}/hwm/{cluster}:{number}")}})
        reply = self.post(f"reading {len(pairs)} IDs under {base}", "/kv/txn", {"success": ranges})
        answers = [answer.get("response_range", {}) for answer in reply.get("responses", [])]
        found: dict[tuple[int, int], tuple[bool, HighWaterMark | None, int]] = {}
        for index, pair in enumerate(pairs):
            claimed = int(answers[2 * index].get("count", 0)) > 0
            kvs = answers[2 * index + 1].get("kvs") or []
            if kvs:
                mark = HighWaterMark.from_bytes(_unb64(kvs[0].get("value")))
                found[pair] = (claimed, mark, int(kvs[0].get("mod_revision", 0)))
            else:
                found[pair] = (claimed, None, 0)
        return found

    def txn(self, what: str, request: dict[str, Any]) -> dict[str, Any]:
        return self.post(what, "/kv/txn", request)

    def grant(self, ttl_s: int) -> int:
        reply = self.post("granting a lease", "/lease/grant", {"TTL": ttl_s, "ID": 0})
        return int(reply["ID"])

    def keepalive(self, lease: int) -> int:
        """The lease's renewed TTL in s, or -1 if it no longer exists."""
        reply = self.post("keeping the lease alive", "/lease/keepalive", {"ID": lease})
        return int(reply.get("result", {}).get("TTL", -1))

    def revoke(self, lease: int) -> None:
        self.post("revoking the lease", "/kv/lease/revoke", {"ID": lease})

    def close(self) -> None:
        for member in self.members:
            member.close()


class EtcdClaim(DriverClaim["EtcdCoordinator"]):
    """One (cluster, generator) pair held by a lease."""

    def _begin(self) -> None:
        self._base = self.coordinator.space_prefix(self.space)
        self._gateway = self.coordinator.gateway
        self._lease: int | None = None
        self._key: str | None = None
        self._hwm_key: str | None = None
        self._hwm_revision = 0  # 0: no mark yet (compare create_revision == 0)
        self._lease_sent_mono = 0  # when the lease was granted or last kept alive
        self._token = uuid.uuid4().hex
        self._claiming: _Claiming | None = None

    @property
    def lease(self) -> int | None:
        """The etcd lease the claim is bound to, while it holds one."""
        return self._lease

    def _acquire(self) -> tuple[Mapping[str, int], int]:
        """Claim a free ID: a look at a few random IDs (the whole pool when they are
        taken), then one transaction."""
        self._lease_sent_mono = self.clock.monotonic_ns()
        lease = self._gateway.grant(int(self.ttl_s))
        try:
            # A space without clusters is one pool (cluster 0).
            clusters = self.coordinator.clusters() if self.space.clustered else [0]
            self._claiming = _Claiming(lease, clusters, self.options.pool)
            return super()._acquire()
        except BaseException:
            if self._lease != lease:
                try:
                    self._gateway.revoke(lease)
                except CoordinationError as error:
                    log.info("%s: could not revoke an unused lease (%s); it expires", self, error)
            raise
        finally:
            self._claiming = None

    def _look(self, deadline: float) -> tuple[Mapping[str, int], int] | None:
        claiming = self._claiming
        assert claiming is not None
        for cluster, number, mark, revision in self._candidates(claiming.pairs, claiming.taken):
            if self._try_claim(claiming.lease, cluster, number, mark, revision):
                self._lease = claiming.lease
                return self._identity(number, cluster), mark.ceiling_ms if mark else -1
            claiming.taken.add((cluster, number))
        return None

    def _wait_for_change(self, seconds: float) -> bool:
        claiming = self._claiming
        assert claiming is not None
        # Keep the lease alive while we wait for an ID to come free: a key may go
        # at any moment, a hold-off ends when it ends.
        self._lease_sent_mono = self.clock.monotonic_ns()
        self._gateway.keepalive(claiming.lease)
        claiming.taken.clear()
        return self._sleep(seconds)

    def _nothing_free(self) -> Exception:
        claiming = self._claiming
        assert claiming is not None
        return self._pool_exhausted(f"clusters {claiming.clusters}", self.where)

    def _candidates(
        self, pairs: list[tuple[int, int]], taken: set[tuple[int, int]]
    ) -> Iterator[tuple[int, int, HighWaterMark | None, int]]:
        """Free, not held-off (cluster, ID) pairs with their marks, most likely first.

        A few IDs picked at random are looked at in one small read (in a pool
        with room, one of them is free); only if they are all taken is the whole
        pool read. Claimants starting anywhere do not fail each other's
        transactions as claimants racing for the lowest free ID would.
        """
        # A few picked at random (retried picks are cheap; listing a pool of
        # thousands to pick four is not).
        probes: list[tuple[int, int]] = []
        for _ in range(_PROBES * 4 if pairs else 0):
            if len(probes) == _PROBES:
                break
            picked = pairs[random.randrange(len(pairs))]
            if picked not in taken and picked not in probes:
                probes.append(picked)
        yield from self._free_among(probes, taken)
        untried = [pair for pair in pairs if pair not in taken]
        listed = {
            pair
            for key, _, _ in self._gateway.get_prefix(f"{self._base}/pool/", keys_only=True)
            if (pair := _pair(key)) is not None
        }
        taken.update(listed)
        rest = [pair for pair in untried if pair not in taken and pair not in probes]
        start = random.randrange(len(rest)) if rest else 0
        yield from self._free_among(rest[start:] + rest[:start], taken)

    def _free_among(
        self, pairs: list[tuple[int, int]], taken: set[tuple[int, int]]
    ) -> Iterator[tuple[int, int, HighWaterMark | None, int]]:
        """Those of ``pairs`` that are free and not held off, with their marks."""
        for start in range(0, len(pairs), _PROBES * 4):
            chunk = pairs[start : start + _PROBES * 4]
            read = self._gateway.read_pairs(self._base, chunk)
            now_ms = self.clock.time_ns() // 1_000_000
            for pair in chunk:
                held, mark, revision = read[pair]
                if held:
                    taken.add(pair)
                elif not self._held_off(pair, mark, now_ms):
                    yield (*pair, mark, revision)

    def _try_claim(
        self, lease: int, cluster: int, generator: int, mark: HighWaterMark | None, revision: int
    ) -> bool:
        """Put the claim key, bound to our lease, and the first ceiling, in one transaction.

        It succeeds only if the key is absent and the mark is still the one we
        read (``revision``; 0 when there was none).
        """
        key = f"{self._base}/pool/{cluster}:{generator}"
        hwm_key = f"{self._base}/hwm/{cluster}:{generator}"
        now_ms = self.clock.time_ns() // 1_000_000
        value = json.dumps(
            {"holder": holder_description(), "since_ms": now_ms, "token": self._token}
        )
        ceiling = self._first_ceiling(mark.ceiling_ms if mark is not None else -1)
        self._took(mark)
        first = self._mark(ceiling)
        request = {
            "compare": [
                {"target": "VERSION", "key": _b64(key), "result": "EQUAL", "version": 0},
                _unchanged(hwm_key, revision),
            ],
            "success": [
                {"request_put": {"key": _b64(key), "value": _b64(value), "lease": lease}},
                {"request_put": {"key": _b64(hwm_key), "value": _b64(json.dumps(first.to_json()))}},
            ],
        }
        try:
            reply = self._gateway.txn(f"claiming {key}", request)
        except CoordinatorUnavailable:
            # The transaction may have landed before the connection broke:
            # it is ours if it carries our token and lease.
            found = self._gateway.get(key)
            if found is None or not self._is_ours(found, lease):
                raise
            reply = {"succeeded": True, "unknown_revision": True}
        if not reply.get("succeeded"):
            return False
        self._key = key
        self._hwm_key = hwm_key
        if reply.get("unknown_revision"):
            self._hwm_revision = self._read_mark(cluster, generator)[1]
        else:
            self._hwm_revision = int(reply.get("header", {}).get("revision", 0))
            # A transaction does not keep the lease alive: the deadline counts
            # from the grant or the last keep-alive.
            self._recorded_with_claim = (ceiling, self._lease_sent_mono)
        return True

    def _is_ours(self, found: tuple[bytes, dict[str, Any]], lease: int) -> bool:
        value, kv = found
        try:
            token = json.loads(value or b"{}").get("token")
        except ValueError:
            return False
        return token == self._token and int(kv.get("lease", 0)) == lease

    def _read_mark(self, cluster: int, generator: int) -> tuple[HighWaterMark | None, int]:
        found = self._gateway.get(f"{self._base}/hwm/{cluster}:{generator}")
        if found is None:
            return None, 0
        return HighWaterMark.from_bytes(found[0]), int(found[1].get("mod_revision", 0))

    def _renew(self, ceiling_ms: int) -> bool:
        assert self._lease is not None
        assert self._key is not None
        assert self._hwm_key is not None
        if self._gateway.keepalive(self._lease) <= 0:
            return False  # the lease expired: etcd has deleted our key
        return self._write_mark(self._mark(ceiling_ms))

    def _write_mark(self, mark: HighWaterMark) -> bool:
        assert self._key is not None
        assert self._hwm_key is not None
        hwm = _b64(self._hwm_key)
        revision_check = _unchanged(self._hwm_key, self._hwm_revision)
        request = {
            "compare": [
                {
                    "target": "LEASE",
                    "key": _b64(self._key),
                    "result": "EQUAL",
                    "lease": self._lease,
                },
                revision_check,
            ],
            "success": [
                {"request_put": {"key": hwm, "value": _b64(json.dumps(mark.to_json()))}},
            ],
        }
        reply = self._gateway.txn("renewing the claim", request)
        if not reply.get("succeeded"):
            return False
        self._hwm_revision = int(reply.get("header", {}).get("revision", 0))
        return True

    def _final_mark_writer(self) -> Callable[[HighWaterMark], object] | None:
        return self._write_mark if self._lease is not None and self._key is not None else None

    def _let_go(self) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            self._gateway.revoke(lease)  # deletes the pool key

    def _reclaim(self) -> None:
        lease = self._lease
        self._lease = None
        if lease is not None:
            with contextlib.suppress(CoordinationError):  # expired already, most likely
                self._gateway.revoke(lease)
        super()._reclaim()

    def _forget(self) -> None:
        # The lease is the parent's: revoking it here would end the parent's claim.
        self._lease = None


class EtcdCoordinator(Coordinator):
    """An etcd cluster used as a pool of generator IDs (see the module docs)."""

    claim_type = EtcdClaim
    options_type = EtcdOptions

    def __init__(self, url: CoordinatorUrl) -> None:
        options = self._take_url(url, EtcdOptions, needs_hosts=True)
        self.prefix = (url.path or DEFAULT_PREFIX).rstrip("/")
        self.ttl_s = options.ttl_s
        self.hosts = tuple((host, port or 2379) for host, port in url.hosts)
        self.gateway = EtcdGateway(
            self.hosts,
            options.context(url, "etcds"),
            timeout_s=options.timeout_s,
            username=url.username,
            password=url.password,
        )
        self.description = f"etcd://{','.join(f'{h}:{p}' for h, p in self.hosts)}{self.prefix}"
        self._cluster_id: bytes | None = None
        self._check_reachable()

    @classmethod
    def pool_within(cls, url: CoordinatorUrl, name: str) -> CoordinatorUrl:
        return url.replace(path=f"{(url.path or DEFAULT_PREFIX).rstrip('/')}/{name}")

    def _check_reachable(self) -> None:
        """Wait up to ``connect_timeout`` for a member to answer, and not much longer."""
        connect_timeout = self.options.connect_timeout_s
        deadline = time.monotonic() + connect_timeout
        first_failure = peers.FirstFailure(self.hosts, peers.ETCD)
        with noticed_if_slow(f"etcd at {self.description}", connect_timeout) as waited:
            while True:
                remaining = deadline - time.monotonic()
                try:
                    # No attempt may run past the deadline by more than a moment.
                    with self.gateway.timeout_at_most(max(0.1, remaining / len(self.hosts))):
                        found = self.gateway.get(f"{self.prefix}/cluster-id")
                except CoordinatorRefused:
                    raise  # credentials or TLS: waiting would not help
                except CoordinatorUnavailable as error:
                    first_failure.seen(error)  # a service of another kind at the port?
                    if time.monotonic() + 0.1 >= deadline:
                        raise CoordinatorUnavailable(
                            f"could not reach etcd at {self.description} (waited "
                            f"{waited.seconds:.1f} s: {self.gateway.last_failures or error}); "
                            "check that the cluster is running and the URL's hosts, ports and "
                            "TLS settings are right, or wait longer with connect_timeout=SECONDS"
                        ) from error
                    time.sleep(0.1)  # in the constructor: there is no claim to close yet
                else:
                    # Kept for the first claim: read a moment ago, and it rarely changes.
                    self._cluster_id = found[0] if found is not None else None
                    return

    def clusters(self) -> list[int]:
        """The cluster IDs to claim in, from ``cluster-id``, creating it ("0") when missing."""
        if self._cluster_id is not None:
            stored, self._cluster_id = self._cluster_id, None
            return self.clusters_in(stored)
        key = f"{self.prefix}/cluster-id"
        found = self.gateway.get(key)
        if found is None:
            default = str(self.options.cluster or 0)
            self.gateway.txn(
                f"creating {key}",
                {
                    "compare": [
                        {"target": "VERSION", "key": _b64(key), "result": "EQUAL", "version": 0}
                    ],
                    "success": [{"request_put": {"key": _b64(key), "value": _b64(default)}}],
                },
            )
            found = self.gateway.get(key)
        return self.clusters_in(found[0] if found else b"0")

    def clusters_in(self, stored: bytes) -> list[int]:
        """The cluster IDs to claim in, given what ``cluster-id`` holds."""
        key = f"{self.prefix}/cluster-id"
        text = stored.decode("utf-8", "replace")
        try:
            clusters = [int(part.strip()) for part in text.split(",") if part.strip()]
        except ValueError:
            raise ConfigurationError(
                f"{key} holds {text!r}; expected comma-separated cluster IDs such as '0' or '1, 2'"
            ) from None
        wanted = self.options.cluster
        if wanted is not None:
            if wanted not in clusters:
                raise ConfigurationError(
                    f"{key} lists clusters {text!r}, not the cluster={wanted} the URL asks for"
                )
            return [wanted]
        return clusters

    def space_prefix(self, space: Space) -> str:
        """Where a space's ``pool`` and ``hwm`` keys live: the prefix itself for the
        space java-uniqueid shares, ``<prefix>/<space>`` for the others."""
        return space.within(self.prefix)

    def read_marks(
        self, space: Space = GENERATOR
    ) -> dict[tuple[int, int], tuple[HighWaterMark, int]]:
        """Every high-water mark of ``space``: (cluster, ID) -> (mark, mod_revision)."""
        marks = {}
        for key, value, kv in self.gateway.get_prefix(f"{self.space_prefix(space)}/hwm/"):
            pair = _pair(key)
            if pair is not None:
                marks[pair] = (HighWaterMark.from_bytes(value), int(kv.get("mod_revision", 0)))
        return marks

    def read_mark(self, space: Space, identity: Mapping[str, int]) -> HighWaterMark | None:
        found = self.read_marks(space).get(space.numbered(identity))
        return None if found is None else found[0]

    def held(self, space: Space) -> set[tuple[int, int]]:
        keys = self.gateway.get_prefix(f"{self.space_prefix(space)}/pool/", keys_only=True)
        return {pair for key, _, _ in keys if (pair := _pair(key)) is not None}

    def list_claims(self) -> list[ClaimInfo]:
        rows: list[ClaimInfo] = []
        for space in SPACES:
            marks = self.read_marks(space)
            found = []
            for key, value, _kv in self.gateway.get_prefix(f"{self.space_prefix(space)}/pool/"):
                pair = _pair(key)
                if pair is None:
                    continue
                holder, since = holder_of(value)
                mark = marks.get(pair)
                found.append(
                    ClaimInfo(
                        cluster=pair[0],
                        generator=pair[1],
                        holder=holder,
                        since_ms=since,
                        high_water_mark_ms=mark[0].ceiling_ms if mark else None,
                        space=space.name,
                    )
                )
            rows += sorted(found, key=lambda row: (row.cluster, row.generator))
        return rows

    def close(self) -> None:
        self.gateway.close()


def _tls_refused(error: ssl.SSLError, endpoint: str, doing: str) -> CoordinatorRefused:
    """A certificate problem is no outage: say so at once instead of retrying."""
    return CoordinatorRefused(
        f"{doing}: the TLS handshake with {endpoint} failed ({_first_line(str(error))}); "
        f"{TLS_ADVICE}"
    )


def _why(error: OSError) -> str:
    """Why a member could not be reached, in a few words."""
    if isinstance(error, TimeoutError):
        return "timed out"
    return error.strerror or type(error).__name__


def _first_line(text: str) -> str:
    reason = text.strip().splitlines()[0] if text.strip() else "no detail"
    return reason[:200]


# gRPC status codes, which etcd's JSON gateway returns in every error body.
_INVALID_ARGUMENT = 3
_PERMISSION_DENIED = 7
_UNAUTHENTICATED = 16


def _grpc_code(error: Exception) -> int | None:
    """The gRPC status code of an etcd error answer, from the gateway's JSON body."""
    try:
        code = json.loads(getattr(error, "detail_text", None) or "")["code"]
    except (ValueError, TypeError, KeyError):
        return None
    return code if isinstance(code, int) else None


def _message(error: Exception) -> str:
    try:
        return str(json.loads(getattr(error, "detail_text", None) or "")["message"])
    except (ValueError, TypeError, KeyError):
        return _first_line(str(getattr(error, "detail_text", None) or error))


_PROBES = 4
"""IDs looked at together before reading the whole pool."""


class _Claiming:
    """A claim in progress: its lease, the pool's (cluster, ID) pairs, those seen taken."""

    def __init__(self, lease: int, clusters: list[int], pool: range) -> None:
        self.lease = lease
        self.clusters = clusters
        self.pairs = [(cluster, number) for cluster in clusters for number in pool]
        self.taken: set[tuple[int, int]] = set()


def _unchanged(key: str, revision: int) -> dict[str, Any]:
    """A transaction comparison: ``key`` was last written at ``revision`` (0: absent)."""
    if revision == 0:
        return {"target": "CREATE", "key": _b64(key), "result": "EQUAL", "create_revision": 0}
    return {"target": "MOD", "key": _b64(key), "result": "EQUAL", "mod_revision": revision}


def _pair(key: str) -> tuple[int, int] | None:
    """(cluster, generator) from a key ending in ``<cluster>:<generator>``."""
    tail = key.rsplit("/", 1)[-1]
    cluster, colon, generator = tail.partition(":")
    if not colon or not cluster.isdigit() or not generator.isdigit():
        return None
    return int(cluster), int(generator)


def _translate(error: Exception, doing: str) -> CoordinationError:
    """An etcd error answer as the idmint error a caller can act on, by its gRPC code.

    With authentication on, etcd answers a request without a user with
    InvalidArgument, one our role may not make with PermissionDenied, and an
    unknown token with Unauthenticated: all mean the configuration must change.
    Anything else is a :class:`CoordinationError` carrying the cause.
    """
    code = _grpc_code(error)
    if code in (_INVALID_ARGUMENT, _PERMISSION_DENIED, _UNAUTHENTICATED):
        return CoordinatorRefused(
            f"{doing}: etcd refused us ({_message(error)}); check the user:password in the "
            "URL and the user's role on the prefix"
        )
    if code is None:
        reason = str(error)
        return CoordinationError(
            f"{doing}: the server answered {reason!r} without an etcd error: is the URL "
            "that of an etcd cluster's client port (etcd 3.4 or newer)?"
        )
    return CoordinationError(f"{doing}: etcd said {_message(error)}")
