"""Identities claimed from a pool kept in this process's memory: for tests and drills.

URL grammar::

    memory://NAME[?option=value&...]

Every coordinator with the same ``NAME`` in one process shares one pool, as
clients of one ZooKeeper ensemble share its tree; nothing leaves the process.
It runs the same claim machinery as the real drivers (deadline, high-water
mark, hold-off, renewal), so the contract tests run on it in milliseconds, and
it can be made to fail on demand like a real server:

* :meth:`MemoryCoordinator.expire` ends a claim's session on the "server", as
  ZooKeeper does when a session times out (the claim learns it at its next
  renewal, as with etcd);
* :meth:`MemoryCoordinator.outage` makes the server unreachable until the
  block ends (:meth:`~MemoryCoordinator.stop_serving` and
  :meth:`~MemoryCoordinator.serve_again`, for an outage that spans more);
  sessions not heard from for longer than their TTL by then are expired, as a
  real server expires them;
* :meth:`MemoryCoordinator.mark` reads an identity's high-water mark.

The options (:class:`MemoryOptions`; this table is made from its declaration):

{options}

Pass a :class:`~idmint.clock.ManualClock` as the claim's clock to
drive time by hand: deadlines and high-water marks then follow it.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from idmint.coordinate.base import (
    Claim,
    ClaimInfo,
    Coordinator,
    DriverClaim,
    HighWaterMark,
    holder_description,
)
from idmint.coordinate.options import ClaimOptions, seconds, ttl, with_options_table
from idmint.coordinate.spaces import Space
from idmint.coordinate.url import CoordinatorUrl
from idmint.errors import ConfigurationError, CoordinatorUnavailable

__all__ = ["MemoryClaim", "MemoryCoordinator", "MemoryOptions"]

DEFAULT_TTL_S = 2.0


@dataclass(frozen=True)
class MemoryOptions(ClaimOptions):
    """The options of a ``memory://`` URL."""

    ttl_s: float = ttl(DEFAULT_TTL_S, seconds(minimum=0.5))


__doc__ = with_options_table(__doc__, MemoryOptions)

Key = tuple[str, int, int]
"""(space's name, cluster, ID)."""


@dataclass
class _Session:
    ttl_s: float
    heard_at: float = field(default_factory=time.monotonic)
    alive: bool = True


@dataclass
class _Pool:
    """What a coordination server would keep: who holds what, and the marks."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    changed: threading.Condition = field(init=False)
    holders: dict[Key, tuple[int, str, int]] = field(default_factory=dict)
    """key -> (session, holder, since_ms)."""
    marks: dict[Key, tuple[HighWaterMark, int]] = field(default_factory=dict)
    """key -> (mark, version)."""
    sessions: dict[int, _Session] = field(default_factory=dict)
    reachable: bool = True

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)

    def request(self, session: int | None = None) -> None:
        """Check the server can be reached (caller holds ``lock``); expire lapsed sessions."""
        if not self.reachable:
            raise CoordinatorUnavailable("memory:// server unreachable (an outage drill)")
        now = time.monotonic()
        for number, state in self.sessions.items():
            if state.alive and now - state.heard_at > state.ttl_s:
                self._end(number)
        if session is not None and self.sessions[session].alive:
            self.sessions[session].heard_at = now

    def _end(self, session: int) -> None:
        self.sessions[session].alive = False
        for key in [k for k, held in self.holders.items() if held[0] == session]:
            del self.holders[key]
        self.changed.notify_all()


_POOLS: dict[str, _Pool] = {}
_POOLS_LOCK = threading.Lock()
_SESSIONS = itertools.count(1)


class MemoryClaim(DriverClaim["MemoryCoordinator"]):
    """One identity held through a session of a memory:// pool."""

    look_every_s = 0.05

    def _begin(self) -> None:
        self._pool = self.coordinator.pool
        self._session: int | None = None
        self._key: Key | None = None
        self._version = 0
        self._claiming: int | None = None
        """The session a claim in progress holds (it ends if the claim fails)."""

    def _acquire(self) -> tuple[Mapping[str, int], int]:
        pool = self._pool
        with pool.lock:
            pool.request()
            session = self._claiming = next(_SESSIONS)
            pool.sessions[session] = _Session(self.ttl_s)
        try:
            return super()._acquire()
        except BaseException:
            with pool.lock:
                pool._end(session)
            raise

    def _look(self, deadline: float) -> tuple[Mapping[str, int], int] | None:
        pool = self._pool
        with pool.lock:
            pool.request()
            now_ms = self.clock.time_ns() // 1_000_000
            for number in self.options.pool:
                key = (self.space.name, self.cluster, number)
                if key in pool.holders:
                    continue
                mark, version = pool.marks.get(key, (None, 0))
                if self._held_off(key, mark, now_ms):
                    continue
                assert self._claiming is not None
                pool.holders[key] = (self._claiming, holder_description(), now_ms)
                self._session, self._key, self._version = self._claiming, key, version
                self._took(mark)
                return self._identity(number, self.cluster), mark.ceiling_ms if mark else -1
        return None

    def _wait_for_change(self, seconds: float) -> bool:
        with self._pool.lock:
            self._pool.changed.wait(seconds)
        return self._closed.is_set()

    def _renew(self, ceiling_ms: int) -> bool:
        pool = self._pool
        with pool.lock:
            if self._session is None or self._key is None:
                return False
            pool.request(self._session)
            held = pool.holders.get(self._key)
            current = pool.marks.get(self._key, (None, 0))[1]
            if held is None or held[0] != self._session or current != self._version:
                return False
            self._version = current + 1
            pool.marks[self._key] = (self._mark(ceiling_ms), self._version)
            return True

    def _release(self, final_ceiling_ms: int | None) -> None:
        pool = self._pool
        with pool.lock:
            session, key = self._session, self._key
            self._session = self._key = None
            if session is None:
                return
            pool.request()
            held = pool.holders.get(key) if key is not None else None
            if key is not None and held is not None and held[0] == session:

                def write(mark: HighWaterMark) -> None:
                    pool.marks[key] = (mark, pool.marks.get(key, (None, 0))[1] + 1)

                self._record_final_mark(final_ceiling_ms, write)
            pool._end(session)

    def _reclaim(self) -> None:
        with self._pool.lock:
            if self._session is not None and self._pool.sessions[self._session].alive:
                self._pool._end(self._session)
        self._session = self._key = None
        super()._reclaim()

    def _forget(self) -> None:
        self._session = self._key = None


class MemoryCoordinator(Coordinator):
    """A named pool in this process's memory (see the module docs)."""

    claim_type = MemoryClaim
    options_type = MemoryOptions
    listed = False
    """For tests and drills: not shown among the drivers (``--coordinator``'s help)."""

    def __init__(self, url: CoordinatorUrl) -> None:
        options = self._take_url(url, MemoryOptions)
        if len(url.hosts) != 1 or url.path:
            raise ConfigurationError(
                f"memory:// takes a pool name and nothing else: memory://NAME, got {url.text!r}"
            )
        self.name = url.hosts[0][0]
        self.description = f"memory://{self.name}"
        self.ttl_s = options.ttl_s
        with _POOLS_LOCK:
            self.pool = _POOLS.setdefault(self.name, _Pool())

    @classmethod
    def pool_within(cls, url: CoordinatorUrl, name: str) -> CoordinatorUrl:
        return url.replace(hosts=[(f"{url.hosts[0][0]}-{name}" if url.hosts else name, 0)])

    def list_claims(self) -> list[ClaimInfo]:
        pool = self.pool
        with pool.lock:
            pool.request()
            rows = [
                ClaimInfo(
                    cluster=cluster,
                    generator=number,
                    holder=holder,
                    since_ms=since_ms,
                    high_water_mark_ms=(
                        pool.marks[(space, cluster, number)][0].ceiling_ms
                        if (space, cluster, number) in pool.marks
                        else None
                    ),
                    space=space,
                )
                for (space, cluster, number), (_, holder, since_ms) in pool.holders.items()
            ]
        return sorted(rows, key=lambda row: (row.space, row.cluster, row.generator))

    def close(self) -> None:
        """Nothing to close: the pool lives as long as the process."""

    # -- drills ------------------------------------------------------------------------
    def expire(self, claim: Claim) -> None:
        """End ``claim``'s session on the server, as a timed-out ZooKeeper session ends."""
        if not isinstance(claim, MemoryClaim) or claim._session is None:
            raise ConfigurationError(f"{claim!r} is not a live memory:// claim")
        with self.pool.lock:
            self.pool._end(claim._session)

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        """The server cannot be reached until the block ends."""
        self.stop_serving()
        try:
            yield
        finally:
            self.serve_again()

    def stop_serving(self) -> None:
        """The server cannot be reached from now on (until :meth:`serve_again`)."""
        with self.pool.lock:
            self.pool.reachable = False

    def serve_again(self) -> None:
        with self.pool.lock:
            self.pool.reachable = True
            self.pool.changed.notify_all()

    def read_mark(self, space: Space, identity: Mapping[str, int]) -> HighWaterMark | None:
        with self.pool.lock:
            self.pool.request()
            found = self.pool.marks.get((space.name, *space.numbered(identity)))
        return None if found is None else found[0]

    def discard(self) -> None:
        """Forget the pool (its marks too): the next coordinator of its name starts afresh."""
        with _POOLS_LOCK:
            if _POOLS.get(self.name) is self.pool:
                del _POOLS[self.name]
