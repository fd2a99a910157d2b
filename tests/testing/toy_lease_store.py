"""A driver in one file on :mod:`idmint.coordinate.leases`: what a new lease store writes.

``toylease://NAME?option=value``: a pool kept in this process's memory, each
request atomic under one lock, as a database's statement is. Everything a
store of leases must do is here and nothing else: the five requests of
:class:`~idmint.coordinate.leases.LeaseStore` (look, take, renew, release,
read_mark), a :class:`~idmint.coordinate.leases.LeaseCoordinator` whose options
are :class:`~idmint.coordinate.leases.LeaseOptions` as they are, and a test
adapter. The claim (its floor, settling after a forget, fencing, renewing) is
:class:`~idmint.coordinate.leases.LeaseClaim`'s, the spaces
:mod:`idmint.coordinate.spaces`'. Registered by a package of its own
(:data:`REGISTERED`), it passes the contract kit (``test_toy_driver.py``).
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from idmint.coordinate import ClaimInfo, CoordinatorUrl, HighWaterMark, leases
from idmint.coordinate.spaces import SPACES, Space
from idmint.errors import ConfigurationError, CoordinatorUnavailable
from idmint.testing.adapters import LeaseHooks

Key = tuple[str, int, int]
"""(space's name, cluster, ID)."""


@dataclass
class _Held:
    token: str
    holder: str
    since_ms: int
    expires_ms: int


@dataclass
class _Pool:
    """The store: leases, marks stamped with the pool's incarnation, records."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    incarnation: str = field(default_factory=lambda: uuid.uuid4().hex)
    leases: dict[Key, _Held] = field(default_factory=dict)
    marks: dict[Key, tuple[HighWaterMark, str | None, int]] = field(default_factory=dict)
    """key -> (mark, the pool incarnation it was stamped with, its version)."""
    records: dict[str, leases.PoolRecord] = field(default_factory=dict)
    reachable: bool = True

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        """One request, atomic; an outage while the server is stopped."""
        with self.lock:
            if not self.reachable:
                raise CoordinatorUnavailable("toylease:// server stopped (an outage drill)")
            yield


_POOLS: dict[str, _Pool] = {}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class ToyLeaseStore:
    """The four requests, each under the pool's lock."""

    def __init__(self, pool: _Pool, description: str) -> None:
        self.pool = pool
        self.description = description

    def look(
        self, space: Space, cluster: int, pool: range, *, start: int, want: int | None
    ) -> leases.Look:
        with self.pool.request():
            now = _now_ms()
            at = start - pool.start
            free = []
            for number in [*pool[at:], *pool[:at]]:
                key = (space.name, cluster, number)
                lease = self.pool.leases.get(key)
                if lease is not None and lease.expires_ms >= now:
                    continue
                mark, stamp, version = self.pool.marks.get(key, (None, None, 0))
                free.append(leases.Free(cluster, number, mark, stamp, version))
                if want is not None and len(free) == want:
                    break
            record = self.pool.records.get(space.name)
            return leases.Look(self.pool.incarnation, record, record, free)

    def take(self, space: Space, attempt: leases.Take) -> int | None:
        free = attempt.free
        key = (space.name, free.cluster, free.number)
        with self.pool.request():
            lease = self.pool.leases.get(key)
            if lease is not None and lease.token == attempt.token:
                return 0  # a retry of ours that landed
            if (
                (lease is not None and lease.expires_ms >= _now_ms())
                or self.pool.marks.get(key, (None, None, 0))[2] != free.version
                or self.pool.incarnation != attempt.incarnation
                or self.pool.records.get(space.name) != attempt.record_version
            ):
                return None
            if attempt.record is not None:
                self.pool.records[space.name] = attempt.record
            self.pool.leases[key] = _Held(
                attempt.token, attempt.holder, attempt.since_ms, _now_ms() + attempt.ttl_ms
            )
            self.pool.marks[key] = (attempt.mark, attempt.stamp, free.version + 1)
            return 0

    def renew(
        self, lease: leases.Lease, ttl_ms: int, mark: HighWaterMark, generation: int
    ) -> int | None:
        key = (lease.space.name, lease.cluster, lease.number)
        with self.pool.request():
            held = self.pool.leases.get(key)
            if held is None or held.token != lease.token or held.expires_ms < _now_ms():
                return None
            held.expires_ms = _now_ms() + ttl_ms
            self._mark(lease.space, key, mark)
            return 0

    def release(self, lease: leases.Lease, mark: HighWaterMark | None, generation: int) -> None:
        key = (lease.space.name, lease.cluster, lease.number)
        with self.pool.request():
            held = self.pool.leases.get(key)
            if held is None or held.token != lease.token:
                return
            del self.pool.leases[key]
            if mark is not None:
                self._mark(lease.space, key, mark)

    def read_mark(self, space: Space, cluster: int, number: int) -> HighWaterMark | None:
        with self.pool.request():
            found = self.pool.marks.get((space.name, cluster, number))
        return None if found is None else found[0]

    def _mark(self, space: Space, key: Key, mark: HighWaterMark) -> None:
        """Write ``mark``, stamped with the pool's incarnation (caller holds the lock)."""
        record = self.pool.records.get(space.name)
        version = self.pool.marks.get(key, (None, None, 0))[2]
        self.pool.marks[key] = (mark, record.incarnation if record else None, version + 1)


class ToyLeaseCoordinator(leases.LeaseCoordinator):
    """``toylease://NAME``: a pool of leases in this process."""

    store: ToyLeaseStore
    options_type = leases.LeaseOptions

    def __init__(self, url: CoordinatorUrl) -> None:
        options = self._take_url(url, leases.LeaseOptions)
        if len(url.hosts) != 1 or url.path:
            raise ConfigurationError(
                f"toylease:// takes a pool's name: toylease://NAME, got {url.text!r}"
            )
        self.name = url.hosts[0][0]
        self.description = f"toylease://{self.name}"
        self.ttl_s, self.max_ttl_s = options.ttl_s, options.max_ttl_s
        self.store = ToyLeaseStore(_POOLS.setdefault(self.name, _Pool()), self.description)

    @classmethod
    def pool_within(cls, url: CoordinatorUrl, name: str) -> CoordinatorUrl:
        return url.replace(hosts=[(f"{url.hosts[0][0]}-{name}", 0)])

    def list_claims(self) -> list[ClaimInfo]:
        pool = self.store.pool
        with pool.request():
            now = _now_ms()
            return [
                ClaimInfo(
                    cluster=cluster,
                    generator=number,
                    holder=lease.holder,
                    since_ms=lease.since_ms,
                    high_water_mark_ms=pool.marks[key][0].ceiling_ms if key in pool.marks else None,
                    space=space,
                )
                for key, lease in sorted(pool.leases.items())
                if lease.expires_ms >= now
                for space, cluster, number in [key]
            ]

    def close(self) -> None:
        """Nothing to close: the pool lives as long as the process."""


class ToyLeaseHooks(LeaseHooks):
    """The toy store's test adapter: it reaches into the pool itself."""

    hosts_are_servers = False

    def forget(self, url: CoordinatorUrl) -> None:
        pool = _POOLS[url.hosts[0][0]]
        with pool.lock:
            pool.leases.clear()
            pool.marks.clear()
            pool.records.clear()

    def settle(self, url: CoordinatorUrl) -> None:
        pool = _POOLS.setdefault(url.hosts[0][0], _Pool())
        with pool.lock:
            for space in SPACES:
                pool.records.setdefault(space.name, leases.PoolRecord.begin(pool.incarnation, 0, 0))

    def stop_server(self, url: CoordinatorUrl) -> None:
        _POOLS[url.hosts[0][0]].reachable = False

    def start_server(self, url: CoordinatorUrl) -> None:
        _POOLS[url.hosts[0][0]].reachable = True

    def remove_pool(self, url: CoordinatorUrl) -> None:
        _POOLS.pop(url.hosts[0][0], None)


PACKAGE = "toy-idmint-lease-store"
REGISTERED = """\
[idmint.coordinators]
toylease = tests.testing.toy_lease_store:ToyLeaseCoordinator

[idmint.contract_hooks]
toylease = tests.testing.toy_lease_store:ToyLeaseHooks
"""
"""The toy store's registrations: all it takes beside this file."""
