"""Claims as leases in a database that may forget: what the SQL and Redis drivers share.

A claim is a lease row (PostgreSQL) or hash field (Redis) carrying the holder's
random token and an expiry by the store's clock; the holder renews it three
times per TTL with one request that compares its token in the same atomic step
as it writes the new ceiling, and fences itself by its own monotonic clock
before the lease can lapse (:mod:`idmint.coordinate.base`). What sets these
stores apart from ZooKeeper and etcd is that they can forget, or remember
something older than what they acknowledged: Redis without persistence loses
every key on a restart, an operator may flush or drop the pool, a failover to
an asynchronous replica (Redis or PostgreSQL) loses the latest writes, and a
restore of the claims data into the running store (``RESTORE ... REPLACE``,
``pg_restore --data-only``) writes back an older state: perhaps without a claim,
or the renewals of a holder that goes on minting.

So a claimant trusts only what the store can prove it has not forgotten:

* **The pool's incarnation**: ``<store>/<epoch>``. The store's part is an
  identifier of the server process's life (Redis's ``run_id``, PostgreSQL's
  postmaster start time), which a restart or a failover changes; the epoch is
  the pool's own, in its record, and a new one begins whenever the pool's
  memory is in doubt: the record is missing (a new pool, or one the store
  forgot), was written in another incarnation of the store, or the store finds
  that its data were written back by something other than idmint's own
  requests (a restore). Every high-water mark is stamped, by the store in the
  request that writes it, with the incarnation of the pool it was written in.
* **A witness of every write** that a restore cannot write back: on PostgreSQL
  the row's own version (``xmin``, which any writer but the statement that
  recorded it in the row changes); on Redis a generation that every take,
  renewal and release advances, kept in the pool's hash and, as the key's
  expiry, outside it (``RESTORE`` and writing fields back leave the two
  apart). A claim remembers the generation its last write saw, and a store
  whose generation went back since (an older state written back whole) ends
  the epoch at that holder's next renewal.
* **A mark stamped with the current incarnation** is proven: nothing written
  after it was lost, so the claimant's floor is its ceiling (a released mark
  is a clean release; a lapsed one is held off as on every coordinator).
* **Otherwise** (no mark, or one stamped with another incarnation), a holder
  the store has forgotten may still be minting until its deadline: the floor
  is ``max(mark, record.since + max_ttl + skew)`` and the claim *settles*,
  granting nothing until its clock passes that floor (or that long has really
  elapsed), by when any such holder has fenced itself, and every timestamp it
  used lies below.

``max_ttl`` is the pool's, not any claimant's lease: the longest TTL any
claimant may use (the URL's ``max_ttl``, 10 s by default), which every claimant
is given alike, so that the bound is known without the store's memory. A
``ttl`` longer than it is refused when the URL is read; it is recorded in the
pool's record, and a claimant given a smaller one than the record's is refused
while the store remembers it.

A new epoch's record is written with ``since`` = now, so a brand-new pool
settles its first claims too: a new pool and a forgotten one look the same.

A lost reply to a claim is recognised by the token: the claim is sent again
with the same token, and the store answers that it is already ours.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Generic, Protocol, TypeVar, cast

from idmint.coordinate.base import (
    ClaimInfo,
    ClaimSource,
    Coordinator,
    DriverClaim,
    HighWaterMark,
    holder_description,
    holders_of_text,
    holders_text,
)
from idmint.coordinate.options import ClaimOptions, option, seconds, ttl
from idmint.coordinate.peers import FirstFailure
from idmint.coordinate.spaces import SPACES, Space
from idmint.coordinate.url import CoordinatorUrl
from idmint.errors import (
    ConfigurationError,
    CoordinationError,
    CoordinatorRefused,
    CoordinatorUnavailable,
)
from idmint.waiting import NOTICE_AFTER_S, noticed_if_slow

__all__ = [
    "ANSWER_SLACK_S",
    "DEFAULT_TTL_S",
    "STEP_BACK_SLACK_MS",
    "Free",
    "Lease",
    "LeaseClaim",
    "LeaseCoordinator",
    "LeaseOptions",
    "LeaseStore",
    "Look",
    "PoolRecord",
    "SharedClients",
    "SqlConnection",
    "SqlLeaseCoordinator",
    "Take",
    "columns_of_mark",
    "creating_if_missing",
    "first_line",
    "forsake_connection",
    "in_pool_order",
    "mark_of_columns",
    "reach_within",
]

log = logging.getLogger("idmint.coordinate")

STEP_BACK_SLACK_MS = 1000
"""A lease whose expiry lies more than its TTL + this ahead of the store's clock
is taken as lapsed: the store's clock stepped back since it was renewed, and a
live holder renews it again within a third of its TTL."""

DEFAULT_TTL_S = 10.0
"""A lease's TTL, and the pool's ``max_ttl``, where the URL gives none."""


@dataclass(frozen=True)
class LeaseOptions(ClaimOptions):
    """The options every lease store takes (a driver's own add to them)."""

    ttl_s: float = ttl(DEFAULT_TTL_S, seconds(minimum=1))
    max_ttl_s: float = option(
        "max_ttl",
        DEFAULT_TTL_S,
        "s; the longest `ttl` any claimant of the pool may use, the same for all: what a "
        "claimant the store cannot vouch for waits out (see `idmint.coordinate.leases`)",
        seconds(minimum=1),
    )
    timeout_s: float = option(
        "timeout",
        2.0,
        "s a request may take before it counts as failed",
        seconds(minimum=0.1),
    )

    def check(self, url: CoordinatorUrl) -> None:
        """A ``ttl`` longer than ``max_ttl`` is refused."""
        if self.ttl_s > self.max_ttl_s:
            raise ConfigurationError(
                f"{url.redacted()}: ttl={self.ttl_s:g} is longer than max_ttl="
                f"{self.max_ttl_s:g}, the longest lease the pool allows; give every claimant "
                f"of the pool max_ttl={self.ttl_s:g} (or more), the same for all"
            )


ResultT = TypeVar("ResultT")


def first_line(error: BaseException) -> str:
    """A store's error for a message: its first line, at most 300 characters."""
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:300]


def reach_within(
    seconds: float,
    attempt: Callable[[float], ResultT],
    translate: Callable[[Exception], Exception],
    *,
    store: str,
    description: str,
    settings: str,
    hosts: Sequence[tuple[str, int]],
    tls: bool = False,
) -> ResultT:
    """``attempt(seconds_left)`` until it succeeds, for at most ``seconds``: a
    coordinator's first contact with its store, which may still be starting.

    An outage (``translate`` makes it a :class:`CoordinatorUnavailable`) is
    tried again every 0.1 s, unless a service of another kind answers at
    ``hosts`` (:func:`~idmint.coordinate.peers.wrong_service`, asked once, with
    ``tls`` if the store speaks only after a TLS handshake); a
    refusal or any other error is raised at once, translated. After
    ``seconds``, one :class:`CoordinatorUnavailable` says what to check:
    ``settings`` names the URL's parts that decide where it connects.
    """
    deadline = time.monotonic() + seconds
    first_failure = FirstFailure(hosts, store, tls=tls)
    with noticed_if_slow(f"{store} at {description}", seconds):
        while True:
            try:
                return attempt(deadline - time.monotonic())
            except Exception as error:
                translated = translate(error)
                if translated is error:
                    raise
                if not isinstance(translated, CoordinatorUnavailable) or isinstance(
                    translated, CoordinatorRefused
                ):
                    raise translated from error
                first_failure.seen(error)
                if time.monotonic() + 0.1 >= deadline:
                    raise CoordinatorUnavailable(
                        f"could not reach {store} at {description} within {seconds:g} s "
                        f"({translated}); check that it is running and the URL's {settings} "
                        "are right, or wait longer with connect_timeout=SECONDS"
                    ) from error
            time.sleep(0.1)  # in the constructor: there is no claim to close yet


ClaimRow = tuple[str, int, int, str | None, int, int | None]
"""A claim as a SQL driver's table holds it: space, cluster, id, holder, since
(ms) and ceiling (ms)."""


def in_pool_order(rows: Iterable[ClaimRow]) -> list[ClaimInfo]:
    """The claims of ``rows``, by space (as :data:`SPACES` lists them), cluster and
    identity."""
    order = {space.name: index for index, space in enumerate(SPACES)}
    claims = (
        ClaimInfo(
            cluster=cluster,
            generator=number,
            holder=holder or "unknown",
            since_ms=since,
            high_water_mark_ms=ceiling,
            space=space,
        )
        for space, cluster, number, holder, since, ceiling in rows
    )
    return sorted(
        claims, key=lambda row: (order.get(row.space, len(order)), row.cluster, row.generator)
    )


def columns_of_mark(mark: HighWaterMark) -> dict[str, Any]:
    """The SQL drivers' columns of ``mark``, by name: what :func:`mark_of_columns`
    reads back."""
    return {
        "ceiling_ms": mark.ceiling_ms,
        "renewed_ms": mark.renewed_ms,
        "released_ms": mark.released_ms,
        "mark_holder": mark.holder,
        "mark_holders": holders_text(mark.holders),
    }


def mark_of_columns(
    ceiling: int | None,
    renewed: int | None,
    released: int | None,
    holder: str | None,
    holders: str | None,
) -> HighWaterMark | None:
    """A mark from a SQL driver's columns (``ceiling_ms``, ``renewed_ms``,
    ``released_ms``, ``mark_holder``, ``mark_holders``); None where no mark was
    written."""
    if ceiling is None:
        return None
    return HighWaterMark(ceiling, renewed or 0, released, holder or "", holders_of_text(holders))


_FORSAKEN: list[Any] = []
"""Connections inherited through fork(): kept, so that nothing closes them early."""


def forsake_connection(connection: Any, descriptor: Callable[[], int]) -> None:
    """In a child of ``fork()``: let go of the parent's ``connection`` without a word.

    Closing it (or its being garbage collected) would send the client's goodbye
    on the socket the parent shares, which ends the parent's session: the child's
    copy of the socket (``descriptor()``) is replaced by /dev/null, and the
    connection kept for as long as the process lives.
    """
    with contextlib.suppress(Exception):
        number = descriptor()
        null = os.open(os.devnull, os.O_RDWR)
        try:
            os.dup2(null, number)
        finally:
            os.close(null)
    _FORSAKEN.append(connection)


ANSWER_SLACK_S = 1.0
"""How much longer than the URL's ``timeout`` a SQL driver waits for the server's
answer (the server ends a statement that runs longer itself, naming why)."""


class SqlConnection(ABC):
    """One connection to a SQL server, shared by a process's coordinators
    (:class:`SharedClients`) and made again after it breaks; a request at a
    time, each with the URL's time limit, its errors translated.

    A driver says how to connect, whether a connection is still open, which
    socket it sends on, and how its client's errors read
    (:meth:`_translate`, :meth:`_broken`); the locking, the reconnecting and
    the letting go are here.
    """

    kind: ClassVar[str]
    """The kind of store, for messages (:mod:`idmint.coordinate.peers`)."""
    url_settings: ClassVar[str]
    """The URL's parts that decide where it connects, for messages."""

    def __init__(
        self, description: str, timeout_s: float, hosts: Sequence[tuple[str, int]]
    ) -> None:
        self.description = description
        self.timeout_s = timeout_s
        self.hosts = hosts
        self._lock = threading.Lock()
        self._connection: Any = None
        """The client's connection; None until made, and after it broke."""

    @abstractmethod
    def _connect(self, timeout_s: float) -> Any:
        """A new connection, made within ``timeout_s``."""

    @abstractmethod
    def _is_open(self, connection: Any) -> bool: ...

    @abstractmethod
    def _descriptor(self, connection: Any) -> int:
        """The file descriptor of ``connection``'s socket."""

    @abstractmethod
    def _errors(self) -> type[BaseException]:
        """The client library's error class (imported when first needed)."""

    @abstractmethod
    def _translate(self, error: BaseException, doing: str) -> CoordinationError:
        """``error`` as the idmint error a caller can act on."""

    @abstractmethod
    def _broken(self, error: BaseException) -> bool:
        """Whether the connection cannot be trusted after ``error`` (it is made again)."""

    def _cause(self, error: BaseException) -> BaseException:
        """The error that ended a request, which ``error`` may hide."""
        return error

    def _first_contact(self, error: BaseException) -> Exception:
        """What connecting found: by default as :meth:`_translate` says."""
        return self._translate(error, f"connecting to {self.description}")

    def _open(self, timeout_s: float) -> Any:
        """The connection, made first if there is none (with the lock held)."""
        if self._connection is None or not self._is_open(self._connection):
            self._connection = self._connect(timeout_s)
        return self._connection

    def _request(self, doing: str, send: Callable[[Any], ResultT]) -> ResultT:
        """``send(connection)``, connecting first if needed, its errors translated;
        a connection the error leaves broken is dropped."""
        with self._lock:
            try:
                return send(self._open(self.timeout_s))
            except self._errors() as error:
                cause = self._cause(error)
                translated = self._translate(cause, f"{doing} at {self.description}")
                if self._broken(cause):
                    self._drop()
                raise translated from cause

    def connect_within(self, seconds: float) -> None:
        """Connect now, trying again until ``seconds`` have passed (refusals at once)."""
        errors = self._errors()

        def attempt(seconds_left: float) -> None:
            with self._lock:
                self._open(max(0.5, min(seconds_left, self.timeout_s)))

        def translate(error: Exception) -> Exception:
            return self._first_contact(error) if isinstance(error, errors) else error

        reach_within(
            seconds,
            attempt,
            translate,
            store=self.kind,
            description=self.description,
            settings=self.url_settings,
            hosts=self.hosts,
        )

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.close()

    def close(self) -> None:
        with self._lock:
            self._drop()

    def forsake(self) -> None:
        """In a child of ``fork()``: let go of the parent's connection without a
        word (:func:`forsake_connection`)."""
        connection, self._connection = self._connection, None
        self._lock = threading.Lock()
        if connection is not None:
            forsake_connection(connection, lambda: self._descriptor(connection))


PROBES = 8
"""Free IDs a claimant asks for at once, from a random place in the pool."""

_LOOKS_AT_ONCE = 3
"""Looks a claimant takes one after the other before it waits for the pool to change."""


@dataclass(frozen=True)
class PoolRecord:
    """What a pool says about its own memory: since when, in which incarnation, it holds."""

    store_incarnation: str
    """The store's incarnation the record was written in."""
    epoch: str
    """The pool's own part of its incarnation: a new one whenever its memory is in doubt."""
    since_ms: int
    """When the epoch began (a claimant's clock): nothing before it is proven."""
    max_ttl_ms: int
    """The longest lease a claimant of the pool may hold (the claimants' ``max_ttl``)."""

    @property
    def incarnation(self) -> str:
        """The pool's incarnation, which marks written in it are stamped with."""
        return f"{self.store_incarnation}/{self.epoch}"

    @classmethod
    def begin(cls, store_incarnation: str, since_ms: int, max_ttl_ms: int) -> PoolRecord:
        """A new epoch of the pool's memory, beginning at ``since_ms``."""
        return cls(store_incarnation, uuid.uuid4().hex[:16], since_ms, max_ttl_ms)

    @classmethod
    def read(
        cls, incarnation: str | None, since_ms: int | None, max_ttl_ms: int | None
    ) -> PoolRecord | None:
        """The record as a store keeps it, or None if there is none (or it cannot be
        read: as if forgotten)."""
        store, slash, epoch = (incarnation or "").rpartition("/")
        if not (store and slash and epoch) or since_ms is None or max_ttl_ms is None:
            return None
        return cls(store, epoch, int(since_ms), int(max_ttl_ms))

    def to_json(self) -> str:
        return json.dumps(
            {
                "incarnation": self.incarnation,
                "since_ms": self.since_ms,
                "max_ttl_ms": self.max_ttl_ms,
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes | None) -> PoolRecord | None:
        """The record from its JSON (Redis), or None if there is none or it cannot be read."""
        if not text:
            return None
        try:
            data = json.loads(text)
            return cls.read(str(data["incarnation"]), data["since_ms"], data["max_ttl_ms"])
        except (ValueError, TypeError, KeyError):
            return None


@dataclass(frozen=True)
class Free:
    """An identity the store showed free (no lease, or a lapsed one), with its mark."""

    cluster: int
    number: int
    mark: HighWaterMark | None
    mark_incarnation: str | None
    """The pool incarnation the mark was stamped with; None where the store cannot
    vouch for it (written back by something other than idmint's requests)."""
    version: Any
    """The mark as stored, to compare when taking the identity (store-specific)."""


@dataclass(frozen=True)
class Lease:
    """A lease a claimant holds: an identity of a space's pool, and the claimant's token."""

    space: Space
    cluster: int
    number: int
    token: str
    """The claimant's random token, which the lease carries while it is theirs."""


@dataclass(frozen=True)
class Look:
    """One look at a pool: the store's incarnation, the pool's record, free identities."""

    incarnation: str
    """The store's incarnation now."""
    record: PoolRecord | None
    """The pool's record; None if there is none, or the store found its data written
    back by something other than idmint's requests (a new epoch must begin)."""
    record_version: Any
    """The record as stored, to compare when writing a new one (store-specific)."""
    free: Sequence[Free]


@dataclass(frozen=True)
class Take:
    """Everything one attempt to take an identity writes, kept for a retry."""

    free: Free
    token: str
    holder: str
    since_ms: int
    ttl_ms: int
    mark: HighWaterMark
    """The first high-water mark."""
    incarnation: str
    """The store's incarnation the claimant saw, checked by the take."""
    stamp: str
    """The pool's incarnation, which the mark is stamped with."""
    record: PoolRecord | None
    """A record to write (None: the pool's record is current and stays)."""
    record_version: Any


class LeaseStore(Protocol):
    """The requests a store answers, each one atomic on the store.

    A write (take, renewal, release) returns the pool's *generation* after it,
    which the claimant sends with its next write; a store that keeps one
    (Redis) begins a new epoch when it finds its generation went back since
    (see the module docs); one that does not returns 0 and ignores it.
    """

    description: str

    def look(
        self, space: Space, cluster: int, pool: range, *, start: int, want: int | None
    ) -> Look:
        """Up to ``want`` free identities of ``pool`` (all if None), from ``start`` on."""
        ...

    def take(self, space: Space, attempt: Take) -> int | None:
        """Take ``attempt.free`` if it is still free (or already ours by the token),
        its mark and the store's incarnation unchanged; write the lease, the mark
        and the record. The pool's generation, or None if it is not ours."""
        ...

    def renew(self, lease: Lease, ttl_ms: int, mark: HighWaterMark, generation: int) -> int | None:
        """Extend ``lease`` by ``ttl_ms`` and write ``mark`` if it still carries our
        token: the pool's generation, or None if the lease is not ours."""
        ...

    def release(self, lease: Lease, mark: HighWaterMark | None, generation: int) -> None:
        """End ``lease`` (if it still carries our token), writing ``mark`` if given."""
        ...

    def read_mark(self, space: Space, cluster: int, number: int) -> HighWaterMark | None:
        """The mark last written for identity ``number`` (of ``cluster``) of ``space``,
        whole, its ``holders`` included (None if none was): one read, no lease touched.
        What ``idmint whois`` and the contract kit read. Every mark :meth:`take`,
        :meth:`renew` and :meth:`release` write must come back from it, and from
        :meth:`look`'s ``Free.mark``, with its ``holders``."""
        ...


class LeaseSource(ClaimSource, Protocol):
    """A coordinator whose claims are leases in a store (PostgreSQL, Redis)."""

    store: LeaseStore
    max_ttl_s: float
    """The pool's longest lease (:attr:`LeaseOptions.max_ttl_s`)."""


class LeaseClaim(DriverClaim[LeaseSource]):
    """One identity held as a lease in a store that may forget (see the module docs)."""

    def _begin(self) -> None:
        # A renewal is a write to a database the application shares: one per holder
        # per TTL/3 at most, and still two before the deadline, so one lost costs nothing.
        self.renew_every_s = min(self.ttl_s / 3, (self.ttl_s - self.margin_s) / 2)
        self.store = self.coordinator.store
        self.max_ttl_ms = round(self.coordinator.max_ttl_s * 1000)
        self.lease: Lease | None = None
        """The lease held; None while none is."""
        self._token = ""
        self._generation = 0
        """The pool's generation after our last write (see :class:`LeaseStore`)."""
        self._unanswered: tuple[float, CoordinatorUnavailable] | None = None
        """Since when (monotonic) looks at the pool have gone unanswered, and why."""
        self._asked: float | None = None
        """When (monotonic) the look under way was sent; None between looks."""
        self.proven = True
        """Whether the last claim's floor came from a mark the store proved current."""

    @property
    def ttl_ms(self) -> int:
        return round(self.ttl_s * 1000)

    def _acquire(self) -> tuple[Mapping[str, int], int]:
        # A token per claim: a retried take is recognised as ours, a later
        # claim is not mistaken for this one.
        self._token = uuid.uuid4().hex
        self.lease = None
        self._unanswered = None
        return super()._acquire()

    def _look(self, deadline: float) -> tuple[Mapping[str, int], int] | None:
        pool = self.options.pool
        start = random.choice(pool)
        want: int | None = PROBES
        for _ in range(_LOOKS_AT_ONCE):
            asked = self._asked = time.monotonic()
            try:
                look = self.store.look(self.space, self.cluster, pool, start=start, want=want)
            except CoordinatorRefused:
                raise
            except CoordinatorUnavailable as error:
                self._went_unanswered(error, asked)
                return None
            finally:
                self._asked = None
            self._unanswered = None
            taken, raced = self._take_one_of(look)
            if taken is not None:
                return taken
            if not raced and (want is None or len(look.free) < PROBES):
                break  # every free identity is held off: wait for one
            # Those few were held off (look at every free one), or another
            # claimant took ours or wrote the pool's record first (look again).
            want = None
        return None

    def _went_unanswered(self, error: CoordinatorUnavailable, asked: float) -> None:
        """A look the store did not answer (down, a statement timed out, a table
        locked), asked at ``asked`` (monotonic): looked at again until
        ``connect_timeout`` has passed since the first look it left unanswered."""
        since = self._unanswered[0] if self._unanswered is not None else asked
        self._unanswered = (since, error)
        if time.monotonic() - since >= self.options.connect_timeout_s:
            raise self._unanswered_error() from error

    def _waiting_for(self, patience_s: float) -> tuple[str, float] | None:
        asked = self._asked
        if self._unanswered is None and (
            asked is None or time.monotonic() - asked < NOTICE_AFTER_S / 2
        ):
            return super()._waiting_for(patience_s)
        # Unanswered looks are given up on after connect_timeout.
        return f"{self.where} to answer", min(self.options.connect_timeout_s, patience_s)

    def _unanswered_error(self) -> CoordinatorUnavailable:
        assert self._unanswered is not None
        since, error = self._unanswered
        return CoordinatorUnavailable(
            f"{error}; no answer for {time.monotonic() - since:.0f} s: wait longer with "
            "connect_timeout=SECONDS"
        )

    def _nothing_free(self) -> Exception:
        if self._unanswered is not None:
            return self._unanswered_error()
        return super()._nothing_free()

    def _take_one_of(self, look: Look) -> tuple[tuple[Mapping[str, int], int] | None, bool]:
        """Take the first usable identity of ``look``.

        Returns its identity and floor (or None), and whether another claimant
        beat us to one (a look again may find another).
        """
        now_ms = self.clock.time_ns() // 1_000_000
        record, record_update = self._record_after(look, now_ms)
        raced = False
        for free in look.free:
            if self._held_off((free.cluster, free.number), free.mark, now_ms):
                continue
            # A new epoch's record proves no mark: none was stamped with it.
            proven = free.mark is not None and free.mark_incarnation == record.incarnation
            if proven:
                assert free.mark is not None
                floor = free.mark.ceiling_ms
            else:
                forgotten_until = record.since_ms + self.max_ttl_ms + self.options.skew_ms
                floor = max(free.mark.ceiling_ms if free.mark else -1, forgotten_until)
            ceiling = self._first_ceiling(floor)
            self._took(free.mark)
            attempt = Take(
                free=free,
                token=self._token,
                holder=holder_description(),
                since_ms=now_ms,
                ttl_ms=self.ttl_ms,
                mark=self._mark(ceiling),
                incarnation=look.incarnation,
                stamp=record.incarnation,
                record=record_update,
                record_version=look.record_version,
            )
            sent_mono = self.clock.monotonic_ns()
            generation = self._send_take(attempt)
            if generation is None:
                raced = True
                if record_update is not None:
                    break  # another claimant may have written the record first
                continue
            self.lease = Lease(self.space, free.cluster, free.number, self._token)
            self._generation = generation
            self.proven = proven
            # The lease's expiry was set by the store after we sent the take.
            self._recorded_with_claim = (ceiling, sent_mono)
            if not proven and floor >= now_ms:
                self._settle_past_floor(floor, longest_ttl_s=self.max_ttl_ms / 1000)
                log.info(
                    "%s: the store cannot prove who held %s last; nothing is issued "
                    "before %d (the pool's memory begins at %d; max_ttl %g s)",
                    self.description,
                    self._identity_text(self._identity(free.number, free.cluster)),
                    floor,
                    record.since_ms,
                    self.max_ttl_ms / 1000,
                )
            return (self._identity(free.number, free.cluster), floor), False
        return None, raced

    def _record_after(self, look: Look, now_ms: int) -> tuple[PoolRecord, PoolRecord | None]:
        """The pool's record once our take lands, and what to write (None: nothing).

        Raises :class:`ConfigurationError` if the pool allows longer leases than
        this claimant's ``max_ttl``: after a forget it would wait too little.
        """
        record = look.record
        if record is None or record.store_incarnation != look.incarnation:
            # A new pool, or the pool's memory begins now: anything before is unproven.
            fresh = PoolRecord.begin(look.incarnation, now_ms, self.max_ttl_ms)
            return fresh, fresh
        if record.max_ttl_ms > self.max_ttl_ms:
            raise ConfigurationError(
                f"{self.description}: the pool's claimants allow leases of up to "
                f"max_ttl={record.max_ttl_ms / 1000:g} s, this one max_ttl="
                f"{self.max_ttl_ms / 1000:g} s; give every claimant of the pool the same "
                "max_ttl (at least the longest ttl any of them uses)"
            )
        if record.max_ttl_ms < self.max_ttl_ms:
            longer = replace(record, max_ttl_ms=self.max_ttl_ms)
            return longer, longer
        return record, None

    def _send_take(self, attempt: Take) -> int | None:
        """Send the take, again with the same token if the reply is lost."""
        retry_until = time.monotonic() + self.options.claim_timeout_s
        while True:
            try:
                return self.store.take(self.space, attempt)
            except CoordinatorUnavailable:
                # The take may have landed before the connection broke: the same
                # take again finds it ours (by the token), or takes it, or not.
                if time.monotonic() >= retry_until or self._sleep(0.1):
                    raise

    def _renew(self, ceiling_ms: int) -> bool:
        if self.lease is None:
            return False
        mark = self._mark(ceiling_ms)
        generation = self.store.renew(self.lease, self.ttl_ms, mark, self._generation)
        if generation is None:
            return False
        self._generation = generation
        return True

    def _release(self, final_ceiling_ms: int | None) -> None:
        lease, self.lease = self.lease, None
        if lease is not None:
            mark = None if final_ceiling_ms is None else self._mark(final_ceiling_ms, released=True)
            self.store.release(lease, mark, self._generation)

    def _reclaim(self) -> None:
        lease, self.lease = self.lease, None
        if lease is not None:
            # Most likely gone already; if not, it lapses by itself.
            with contextlib.suppress(CoordinationError):
                self.store.release(lease, None, self._generation)
        super()._reclaim()

    def _forget(self) -> None:
        # The lease is the parent's: nothing of it may be touched from here.
        self.lease = None


ClientT = TypeVar("ClientT")


class SharedClients(Generic[ClientT]):
    """One client per store and process, shared by every coordinator made for it.

    A fleet's claims are rows or fields of one store: a connection per claim
    would cost the server a connection per claim (a PostgreSQL backend each).
    Coordinators take a client by key and give it back; the last one closes it.
    A child of ``fork()`` gets none of its parent's: they are dropped with
    ``forsake`` (which must send nothing on them), and the child makes its own.
    """

    def __init__(self, forsake: Callable[[ClientT], None]) -> None:
        self._forsake = forsake
        self._lock = threading.Lock()
        self._clients: dict[Any, tuple[ClientT, int]] = {}
        self._pid = os.getpid()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._after_fork)

    def take(self, key: Any, make: Callable[[], ClientT]) -> ClientT:
        """The shared client for ``key``, made by ``make`` if there is none yet."""
        with self._lock:
            found = self._clients.get(key)
            if found is not None:
                self._clients[key] = (found[0], found[1] + 1)
                return found[0]
        client = make()  # outside the lock: connecting may take a while
        with self._lock:
            found = self._clients.get(key)
            if found is None:
                self._clients[key] = (client, 1)
                return client
            self._clients[key] = (found[0], found[1] + 1)
        self._close_quietly(client)  # another thread made one meanwhile
        return found[0]

    def give_back(self, key: Any, close: Callable[[ClientT], None]) -> None:
        """Give back a client taken with ``key``; the last user closes it."""
        with self._lock:
            found = self._clients.get(key)
            if found is None:
                return
            client, users = found
            if users > 1:
                self._clients[key] = (client, users - 1)
                return
            del self._clients[key]
        close(client)

    def clients(self) -> Iterator[ClientT]:
        with self._lock:
            return iter([client for client, _ in self._clients.values()])

    def _close_quietly(self, client: ClientT) -> None:
        close = getattr(client, "close", None)
        if callable(close):
            with contextlib.suppress(Exception):
                close()

    def _after_fork(self) -> None:
        inherited = [client for client, _ in self._clients.values()]
        self._lock = threading.Lock()
        self._clients = {}
        self._pid = os.getpid()
        for client in inherited:
            with contextlib.suppress(Exception):
                self._forsake(client)


class LeaseCoordinator(Coordinator):
    """What a coordinator on a :class:`LeaseStore` shares: its claims are
    :class:`LeaseClaim`, its marks are read through the store (``idmint whois``)."""

    claim_type = LeaseClaim
    store: LeaseStore
    max_ttl_s: float

    def read_mark(self, space: Space, identity: Mapping[str, int]) -> HighWaterMark | None:
        return self.store.read_mark(space, *space.numbered(identity))


def creating_if_missing(
    run: Callable[[], ResultT],
    missing: Callable[[BaseException | None], bool],
    create: Callable[[], None],
    by_hand: str,
) -> ResultT:
    """``run()``, or if what it needs is missing (``missing`` says so of the
    driver's error), ``create()`` it and ``run()`` again. A user who may not
    create it is told how it is made ``by_hand``."""
    try:
        return run()
    except CoordinationError as error:
        if not missing(error.__cause__):
            raise
    try:
        create()
    except CoordinatorRefused as refused:
        raise CoordinatorRefused(f"{refused}. {by_hand}") from refused.__cause__
    return run()


_CONNECTIONS: SharedClients[SqlConnection] = SharedClients(SqlConnection.forsake)
"""The process's SQL connections, by coordinator class and server, user and database."""

ConnectionT = TypeVar("ConnectionT", bound=SqlConnection)


class SqlLeaseStore(LeaseStore, Protocol):
    """A SQL driver's store, which lists the claims in one query."""

    def list_claims(self) -> list[ClaimInfo]: ...


class SqlLeaseCoordinator(LeaseCoordinator):
    """What the SQL drivers' coordinators share: their store speaks through the
    process's :class:`SqlConnection` to its server, user and database, taken when
    the coordinator is made and given back when it is closed."""

    store: SqlLeaseStore
    _connection_key: tuple[type[SqlLeaseCoordinator], str] | None = None

    def _take_connection(
        self, key: str, make: Callable[[], ConnectionT], seconds: float
    ) -> ConnectionT:
        """The process's connection for ``key`` (made by ``make`` if there is none
        yet), connected within ``seconds``."""
        self._connection_key = (type(self), key)
        # A class's coordinators make connections of one class: what is shared
        # under its key is what ``make`` makes.
        connection = cast("ConnectionT", _CONNECTIONS.take(self._connection_key, make))
        try:
            connection.connect_within(seconds)
        except BaseException:
            self.close()
            raise
        return connection

    def list_claims(self) -> list[ClaimInfo]:
        return self.store.list_claims()

    def close(self) -> None:
        key, self._connection_key = self._connection_key, None
        if key is not None:
            _CONNECTIONS.give_back(key, SqlConnection.close)
