"""What every coordinator driver shares: claims, their deadlines, renewal and fencing.

A *claim* is the right to use one identity (a uid64 generator ID within a
cluster) for as long as the coordinator says so. The danger this module exists
for: a process that was paused (SIGSTOP, a stalled VM, a long GC) or cut off
can wake up believing it still holds its claim while the coordinator has
already handed it to a successor. Session events arrive too late to prevent
that, so a claim fences itself:

* **Deadline.** Every successful round trip to the coordinator moves a local
  deadline on the monotonic clock to *the time the request was sent* + the
  session timeout or lease TTL - a safety margin. The server cannot have
  expired the claim before that. Generators check the deadline before every
  ID (the hot path folds it into the run's ``until_ns``) and issue nothing past
  it until the coordinator has been heard from again.
* **Ceiling** (high-water mark). Each renewal records in the coordinator the
  highest timestamp the holder may use until its next renewal, and only then
  lets the generator use it. A new holder of the same identity starts strictly
  after the recorded ceiling: whatever a paused predecessor does when it
  wakes, its timestamps are at or below the ceiling and the successor's are
  above it. This also covers a restart onto a clock that runs behind and
  clock skew between hosts.
* **Hold-off.** A released or lost identity is not claimed again until its
  ceiling plus the TTL plus a clock-skew allowance has passed, when any other
  identity is free.

Claim states (the kazoo model):

``CLAIMING``   no identity yet, or claiming a new one. Nothing is issued.
``ACTIVE``     the identity is ours up to ``deadline``; IDs may be issued with
               timestamps in (floor, ceiling].
``SUSPENDED``  the connection dropped. The identity may still be ours (the
               session can come back), but nothing can be trusted, so nothing
               is issued. Resumes only when a round trip shows the same
               session still owns the claim.
``LOST``       the session or lease is gone: the identity may be someone
               else's now. A new claim (perhaps another identity) is made
               before anything is issued.
``RELEASED``   closed by us. Nothing is issued again.
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import json
import logging
import math
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from idmint.clock import SYSTEM_CLOCK, Clock
from idmint.coordinate.options import ClaimOptions, UrlOptions
from idmint.coordinate.spaces import GENERATOR, SPACES, Space
from idmint.coordinate.url import CoordinatorUrl
from idmint.errors import (
    ClaimLost,
    ConfigurationError,
    CoordinationError,
    CoordinatorUnavailable,
    PoolExhausted,
)
from idmint.waiting import noticed_if_slow

__all__ = [
    "SPACES",
    "Claim",
    "ClaimInfo",
    "ClaimOptions",
    "ClaimSource",
    "ClaimState",
    "Coordinator",
    "DriverClaim",
    "Grant",
    "HighWaterMark",
    "Holder",
    "PoolView",
    "holder_description",
    "holder_of",
    "pool_view",
]

log = logging.getLogger("idmint.coordinate")


class ClaimState(str, enum.Enum):
    CLAIMING = "claiming"
    ACTIVE = "active"
    SUSPENDED = "suspended"
    LOST = "lost"
    RELEASED = "released"


@dataclass(frozen=True)
class Grant:
    """What a generator may do right now with a claimed identity."""

    epoch: int
    """Bumped whenever the identity changes (each successful claim)."""
    identity: Mapping[str, int]
    """The identity's fields, e.g. ``{"generator": 17, "cluster": 0}``."""
    floor_ms: int
    """Timestamps must be greater than this: the predecessor's high-water mark."""
    ceiling_ms: int
    """Timestamps must be at most this until the next renewal."""
    deadline_mono_ns: int
    """Nothing may be issued once the monotonic clock passes this."""


HISTORY_KEPT = 16
"""How many earlier holders of an identity its mark remembers (besides the current one)."""
HISTORY_KEPT_MS = 30 * 86_400_000
"""How long after its last renewal an earlier holder stays in the history (30 days)."""


@dataclass(frozen=True)
class Holder:
    """Who held an identity, and when: what ``idmint whois`` answers.

    The current holder's record is rewritten with every mark it writes (its
    ``last_ms`` and ``ceiling_ms`` move with its renewals, and its release), so
    the history costs no write of its own; a new holder copies its predecessor's
    record and theirs into its own marks, pruned to :data:`HISTORY_KEPT` and
    :data:`HISTORY_KEPT_MS`.
    """

    host: str
    pid: int
    started: int
    """When the holding process started (ms since 1970-01-01 UTC; 0: unknown)."""
    first_ms: int
    """When the claim was made (ms since 1970-01-01 UTC)."""
    last_ms: int
    """Its last renewal, or its release (ms since 1970-01-01 UTC)."""
    pod: str | None = None
    """The Kubernetes pod it ran in, where the environment names one (``POD_NAME``)."""
    floor_ms: int = -1
    """The timestamps of the IDs it may have minted are above this (its predecessor's
    ceiling) ..."""
    ceiling_ms: int = -1
    """... and at most this (the last ceiling it recorded)."""

    def covers(self, timestamp_ms: int) -> bool:
        """Whether an ID minted at ``timestamp_ms`` with its identity can be this holder's:
        above its floor and its claim (its generators start at their clock, which
        starts no earlier than its claim) and at most its ceiling."""
        return max(self.floor_ms, self.first_ms - 1) < timestamp_ms <= self.ceiling_ms

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> Holder | None:
        """A record as a mark stores it; None if it is not one (anyone may write a store)."""
        if not isinstance(data, Mapping):
            return None
        try:
            pod = data.get("pod")
            return cls(
                host=str(data["host"]),
                pid=int(data["pid"]),
                started=int(data.get("started", 0)),
                first_ms=int(data["first_ms"]),
                last_ms=int(data["last_ms"]),
                pod=None if pod is None else str(pod),
                floor_ms=int(data.get("floor_ms", -1)),
                ceiling_ms=int(data.get("ceiling_ms", -1)),
            )
        except (KeyError, ValueError, TypeError, OverflowError):
            return None


def holders_from_json(data: object) -> tuple[Holder, ...]:
    """The readable records of a stored list of holders (none if it is not a list)."""
    if not isinstance(data, list):
        return ()
    return tuple(found for item in data if (found := Holder.from_json(item)) is not None)


def holders_text(holders: Sequence[Holder]) -> str:
    """Holders as a store with a column for them keeps them (JSON)."""
    return json.dumps([held.to_json() for held in holders])


def holders_of_text(text: str | bytes | None) -> tuple[Holder, ...]:
    """Holders from :func:`holders_text`'s JSON (none if there is none or it is unreadable)."""
    if not text:
        return ()
    try:
        return holders_from_json(json.loads(text))
    except ValueError:
        return ()


@dataclass(frozen=True)
class HighWaterMark:
    """What a holder records about an identity, kept after the claim ends."""

    ceiling_ms: int
    renewed_ms: int = 0
    released_ms: int | None = None
    holder: str = ""
    holders: tuple[Holder, ...] = ()
    """Who held the identity, newest first: the holder that wrote the mark, then the
    ones before it (see :class:`Holder`)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HighWaterMark:
        return cls(
            ceiling_ms=int(data.get("ceiling_ms", -1)),
            renewed_ms=int(data.get("renewed_ms", 0)),
            released_ms=(None if data.get("released_ms") is None else int(data["released_ms"])),
            holder=str(data.get("holder", "")),
            holders=holders_from_json(data.get("holders")),
        )

    def holder_at(self, timestamp_ms: int) -> Holder | None:
        """The holder whose claim covers ``timestamp_ms``, if the mark remembers one."""
        return next((found for found in self.holders if found.covers(timestamp_ms)), None)

    @classmethod
    def from_bytes(cls, data: bytes) -> HighWaterMark:
        """A mark as a coordinator stores it (JSON).

        An unreadable one means someone used the identity and we cannot tell
        how far: the most cautious ceiling there is.
        """
        try:
            return cls.from_json(json.loads(data))
        except (ValueError, TypeError, AttributeError):
            return cls(ceiling_ms=2**62)

    def holdoff_until_ms(self, ttl_ms: int, skew_ms: int) -> int:
        """When the identity may be claimed again without waiting."""
        end = self.ceiling_ms
        if self.released_ms is not None:
            end = max(end, self.released_ms + ttl_ms)
        return end + skew_ms


@dataclass(frozen=True)
class ClaimInfo:
    """One row of ``idmint claims list``."""

    cluster: int
    generator: int
    holder: str
    since_ms: int | None
    high_water_mark_ms: int | None
    state: str = "held"
    space: str = GENERATOR.name
    """Which kind of identity: the name of its space (:mod:`idmint.coordinate.spaces`)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "space": self.space,
            "cluster": self.cluster,
            "generator": self.generator,
            "holder": self.holder,
            "since_ms": self.since_ms,
            "high_water_mark_ms": self.high_water_mark_ms,
            "state": self.state,
        }


def _process_started_ms() -> int:
    """When this process started (ms since 1970-01-01 UTC), from ``/proc``; 0 if unknown."""
    try:
        with open("/proc/self/stat") as stat:
            text = stat.read()
        with open("/proc/stat") as system:
            boot_s = next(float(line.split()[1]) for line in system if line.startswith("btime "))
    except (OSError, StopIteration, ValueError, IndexError):
        return 0
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    start_ticks = int(text[text.rfind(")") + 2 :].split()[19])
    return round((boot_s + start_ticks / os.sysconf("SC_CLK_TCK")) * 1000)


_started: tuple[int, int] | None = None
"""(pid, start ms) of this process, read once per process (a fork child reads its own)."""


def process_started_ms() -> int:
    """When this process started (ms since 1970-01-01 UTC; 0: unknown)."""
    global _started
    pid = os.getpid()
    if _started is None or _started[0] != pid:
        _started = (pid, _process_started_ms())
    return _started[1]


POD_NAME_VARIABLE = "POD_NAME"
"""The variable that names the Kubernetes pod (from the downward API's ``metadata.name``)."""


def pod_name() -> str | None:
    """The Kubernetes pod this process runs in: :data:`POD_NAME_VARIABLE`, else
    ``HOSTNAME`` inside Kubernetes (a pod's host name is its name); None outside."""
    named = os.environ.get(POD_NAME_VARIABLE)
    if named:
        return named
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return os.environ.get("HOSTNAME") or socket.gethostname()
    return None


@dataclass(frozen=True)
class PoolView:
    """What a claimant saw of its pool at its last look: its size and how much is free."""

    space: str
    cluster: int
    size: int
    """How many identities the pool holds (the URL's ``generators=`` within the space)."""
    free: int
    """How many of them no claim held."""
    seen_ms: int
    """When it looked (ms since 1970-01-01 UTC)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def pool_view(
    held: Iterable[tuple[int, int]], space: Space, cluster: int, pool: range, now_ms: int
) -> PoolView:
    """The view of ``pool`` (of ``space``, in ``cluster``) given the ``(cluster, number)``
    of the identities held in the space (:meth:`Coordinator.held`)."""
    taken = {number for in_cluster, number in held if in_cluster == cluster and number in pool}
    return PoolView(space.name, cluster, len(pool), len(pool) - len(taken), now_ms)


POOL_LOOK_EVERY_S = 60.0
"""How often a claim looks at its pool again while it holds its identity (besides
each claim), so that its view follows the fleet."""


def holder_description() -> str:
    """``host:pid``: who holds a claim, for people reading ``claims list``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def holder_of(data: bytes) -> tuple[str, int | None]:
    """Who holds a claim and since when (ms), from the claim's data.

    idmint writes JSON ``{"holder", "since_ms", "token"}``; java-uniqueid
    writes nothing.
    """
    if not data:
        return "unknown (no data: java-uniqueid?)", None
    try:
        record = json.loads(data)
        since = record.get("since_ms")
        return str(record.get("holder", "unknown")), since if isinstance(since, int) else None
    except (ValueError, AttributeError):
        return "unknown", None


class Fenceable(Protocol):
    """A generator as a claim sees it."""

    def _fence(self) -> None: ...

    def _highest_tick(self) -> int: ...


class Claim:
    """A claimed identity with its deadline, ceiling and renewal thread.

    Drivers subclass it and implement ``_acquire``, ``_renew`` and ``_release``;
    this class runs the state machine. Thread-safe.
    """

    ttl_s: float
    renew_every_s: float

    def __init__(
        self,
        *,
        options: ClaimOptions,
        ttl_s: float,
        clock: Clock | None = None,
        description: str,
    ) -> None:
        self.options = options
        self.ttl_s = ttl_s
        self.clock: Clock = clock or SYSTEM_CLOCK
        self.description = description
        margin = options.margin_s if options.margin_s is not None else max(0.2, ttl_s / 10)
        if margin >= ttl_s / 2:
            raise ConfigurationError(
                f"margin {margin:g} s must be less than half the TTL/session timeout {ttl_s:g} s"
            )
        self.margin_s = margin
        # Renew three times per TTL, so one lost round trip costs nothing.
        self.renew_every_s = (ttl_s - margin) / 3
        self._cond = threading.Condition()
        self._state = ClaimState.CLAIMING
        self._grant: Grant | None = None
        self._epoch = 0
        self._problem = "the claim has not been made yet"
        # Strong references: the final high-water mark must cover every tick any
        # generator of this claim used, so none may vanish unaccounted for.
        self._generators: set[Any] = set()
        self._detached_highest = -1
        self._held_off_since: dict[tuple[Any, HighWaterMark], float] = {}
        # Seconds until the soonest hold-off seen by _held_off ends: a driver
        # that waits for a free identity need not look again before then.
        self.soonest_holdoff_end_s = math.inf
        self._wake = threading.Event()
        # Set by close(): waits in drivers (a claimant looking for a free ID,
        # a retry) end at once instead of holding close() up.
        self._closed = threading.Event()
        self._waiting: set[threading.Event] = set()
        self._closing = False
        self._thread: threading.Thread | None = None
        # The claim belongs to the process that made it. A child of fork()
        # inherits the object, its sockets and its lock files, but none of it
        # is the child's to renew or release (see _forsake).
        self._owner_pid = os.getpid()
        self.renewals = 0
        self.renewal_failures = 0
        self.losses = 0
        """Times the claim was found gone (session expired, lease revoked) while held."""
        # Why the last renewal or claim attempt failed (None after a success):
        # what a generator that gives up is told to check.
        self._failure: Exception | None = None
        self._recorded_with_claim: tuple[int, int] | None = None
        """(ceiling, sent_mono) when the driver recorded the first ceiling in its claim."""
        self._settling: tuple[int, int] | None = None
        """(floor_ms, until_mono_ns) while a claim waits out a predecessor it cannot
        rule out (see :meth:`_settle_past_floor`); None once settled."""
        self._predecessor: HighWaterMark | None = None
        """The mark the identity held had when this claim took it (see :meth:`_took`)."""
        self._taken_ms = 0
        """When this claim took the identity it holds (ms since 1970-01-01 UTC)."""
        self.pool_seen: PoolView | None = None
        """What the claim saw of its pool at its last look (None: not looked yet, or the
        driver cannot say): the server's ``idmint_pool_*`` gauges."""
        self._pool_looked_mono = 0.0
        self._noticing = False
        """Whether a :meth:`wait` under way says it waits, if it lasts (one says so)."""

    # -- what generators use ------------------------------------------------------
    @property
    def state(self) -> ClaimState:
        return self._state

    @property
    def problem(self) -> str:
        """Why the claim is not ACTIVE (or what last went wrong), for people."""
        return self._problem

    @property
    def last_grant(self) -> Grant | None:
        """The newest grant, usable or not (``grant()`` says whether it is usable)."""
        return self._grant

    @property
    def identity(self) -> Mapping[str, int] | None:
        grant = self._grant
        return grant.identity if grant else None

    def grant(self) -> Grant | None:
        """The current grant if IDs may be issued now, else ``None``."""
        grant = self._grant
        if (
            grant is None
            or self._state is not ClaimState.ACTIVE
            or self.clock.monotonic_ns() >= grant.deadline_mono_ns
        ):
            return None
        if self._settling is not None and self._still_settling():
            return None
        return grant

    def wait(self, timeout_s: float | None = None, *, min_ceiling_ms: int | None = None) -> Grant:
        """Block until IDs may be issued (with a ceiling of at least ``min_ceiling_ms``).

        Raises ``ClaimLost`` or ``CoordinatorUnavailable`` after ``timeout_s``
        (default: the ``wait_timeout`` option), saying what to check.
        """
        timeout = self.options.wait_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        with self._cond:
            grant = self.grant()
            if grant is not None and (min_ceiling_ms is None or grant.ceiling_ms >= min_ceiling_ms):
                return grant
            # Generators that wait together (a server's requests) wait for one thing:
            # the first of them says so.
            noticing = not self._noticing
            self._noticing = True
        try:
            with (
                noticed_if_slow(lambda: self._waiting_for_grant(timeout))
                if noticing
                else contextlib.nullcontext()
            ):
                return self._wait_for_grant(timeout, deadline, min_ceiling_ms)
        finally:
            if noticing:
                self._noticing = False

    def _waiting_for_grant(self, timeout: float) -> tuple[str, float]:
        """What :meth:`wait` waits for, and for how long at most (its notice): a claim
        settling, for what is left of that; else ``timeout``."""
        settle_s = self._settle_left_s()
        if settle_s > 0 and self._state is ClaimState.ACTIVE:
            return (
                f"the {self.description} ({self._identity_text()}) to settle: the store "
                "cannot prove who held it last, and a holder it forgot may mint until then",
                math.ceil(settle_s),
            )
        return f"a usable claim ({self.description}: {self._problem})", timeout

    def _wait_for_grant(self, timeout: float, deadline: float, min_ceiling_ms: int | None) -> Grant:
        with self._cond:
            while True:
                grant = self.grant()
                if grant is not None and (
                    min_ceiling_ms is None or grant.ceiling_ms >= min_ceiling_ms
                ):
                    return grant
                if self._state is ClaimState.RELEASED:
                    raise ClaimLost(f"{self.description}: the claim was released (closed)")
                poll_s = 0.05
                if self._grant is not None and self._state is ClaimState.ACTIVE:
                    settle_s = self._settle_left_s()
                    if settle_s > 0 and self.clock.monotonic_ns() < self._grant.deadline_mono_ns:
                        # Settling is no outage: its wait does not count against the timeout.
                        deadline = max(deadline, time.monotonic() + settle_s + 0.05)
                        poll_s = min(poll_s, settle_s)
                    else:
                        # Deadline or ceiling reached without a renewal: ask for one now.
                        self._wake.set()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise self._timeout_error(timeout)
                self._cond.wait(min(remaining, poll_s))

    def attach(self, generator: Fenceable) -> None:
        """Register a generator to be fenced the moment the claim is in doubt."""
        self._generators.add(generator)

    def detach(self, generator: Fenceable) -> None:
        """Forget a generator, remembering the newest tick it used."""
        if generator in self._generators:
            self._detached_highest = max(self._detached_highest, generator._highest_tick())
            self._generators.discard(generator)

    def _timeout_error(self, waited_s: float) -> CoordinationError:
        state = self._state
        message = (
            f"{self.description}: no usable claim after waiting {waited_s:g} s "
            f"(state {state.value}: {self._problem})"
        )
        if state is ClaimState.SUSPENDED or isinstance(self._failure, CoordinatorUnavailable):
            return CoordinatorUnavailable(
                message + "; check that the coordinator is running and reachable from this host"
            )
        return ClaimLost(
            message + "; check the coordinator's health and whether the pool has a free ID"
        )

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> Claim:
        """Make the first claim (blocking) and start renewing it."""
        try:
            self._claim_and_record()
        except BaseException:
            # Give back whatever was taken (a session, a lease, a half-made claim).
            with self._cond:
                self._set_state(ClaimState.RELEASED, "the claim could not be made")
            with contextlib.suppress(Exception):
                self._release(None)
            raise
        self._thread = threading.Thread(
            target=self._renewal_loop, name=f"idmint-claim {self.description}", daemon=True
        )
        self._thread.start()
        _OPEN_CLAIMS.add(self)
        return self

    def close(self) -> None:
        """Stop issuing, record the final high-water mark, release the identity.

        In a child of ``fork()`` this only lets go of the child's copy (see
        :meth:`_forsake`): the parent still holds the identity and goes on using it.
        """
        if os.getpid() != self._owner_pid:
            self._forsake()
            return
        with self._cond:
            if self._state is ClaimState.RELEASED:
                return
            was_held = self._grant is not None and self._state is ClaimState.ACTIVE
            self._closing = True
            self._set_state(ClaimState.RELEASED, "closed by its owner")
        self._wake.set()
        self._closed.set()
        for event in list(self._waiting):
            event.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.ttl_s)
        highest = self._highest_tick_used()
        grant = self._grant
        final = max(highest, grant.floor_ms) if grant else highest
        try:
            self._release(final if was_held else None)
        except Exception as error:  # release is best effort; expiry cleans up
            log.warning("%s: releasing the claim failed (%s); it will expire", self, error)
        _OPEN_CLAIMS.discard(self)

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _forsake(self) -> None:
        """In a child of ``fork()``: drop the parent's claim without touching it.

        Runs in the child only, right after the fork (and from ``close()`` if it
        is called there). The renewal thread did not survive the fork and the
        locks it may have held are copies, so fresh ones replace them; nothing
        is sent to the coordinator and nothing is written: the high-water mark,
        the session, the lease and the lock file are the parent's. The child's
        generators are fenced and refuse from now on.
        """
        self._cond = threading.Condition()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._closing = True
        self._thread = None
        with self._cond:
            self._set_state(
                ClaimState.RELEASED,
                f"the claim belongs to process {self._owner_pid}, which forked this one",
            )
        self._generators.clear()
        self._owner_pid = os.getpid()
        with contextlib.suppress(Exception):
            self._forget()

    def _sleep(self, seconds: float) -> bool:
        """Wait ``seconds`` unless the claim is closed first; True if it was."""
        return self._closed.wait(max(0.0, seconds))

    def _wait_event(self, event: threading.Event, seconds: float) -> bool:
        """Wait for ``event`` up to ``seconds``, or until the claim is closed.

        True if ``event`` is set. ``close()`` sets every event being waited on,
        so a claimant waiting for a free ID lets go at once.
        """
        self._waiting.add(event)
        try:
            if self._closed.is_set():
                return event.is_set()
            return event.wait(max(0.0, seconds))
        finally:
            self._waiting.discard(event)

    # -- the state machine --------------------------------------------------------------
    def _set_state(self, state: ClaimState, problem: str = "") -> None:
        """Change state (caller holds ``_cond``); fence generators unless ACTIVE."""
        self._state = state
        self._problem = problem
        if state is not ClaimState.ACTIVE:
            for generator in list(self._generators):
                generator._fence()
        self._cond.notify_all()

    def _suspend(self, reason: str) -> None:
        """The connection is in doubt: stop issuing now (safe from any thread)."""
        with self._cond:
            suspended = self._state is ClaimState.ACTIVE
            if suspended:
                self._set_state(ClaimState.SUSPENDED, reason)
        self._wake.set()
        if suspended:
            log.warning("%s: %s suspended: %s", self.description, self._identity_text(), reason)

    def _lose(self, reason: str) -> None:
        """The claim is gone: stop issuing and claim again (safe from any thread)."""
        with self._cond:
            lost = self._state in (ClaimState.ACTIVE, ClaimState.SUSPENDED)
            if lost:
                self._set_state(ClaimState.LOST, reason)
                self.losses += 1
        self._wake.set()
        if lost:
            log.warning(
                "%s: %s lost: %s; claiming again", self.description, self._identity_text(), reason
            )

    def _identity_text(self, identity: Mapping[str, int] | None = None) -> str:
        """``generator 3 cluster 0``: the identity as log lines name it."""
        fields = identity if identity is not None else self.identity
        if not fields:
            return "no identity"
        return " ".join(f"{name} {value}" for name, value in fields.items())

    def _update_identity(self, identity: Mapping[str, int]) -> None:
        """Switch the grant to a changed identity (elastic64's width), fencing generators.

        Generators pick the new identity up at their next locked step, on a
        tick later than any they used before.
        """
        with self._cond:
            grant = self._grant
            if grant is None:
                return
            self._epoch += 1
            self._grant = replace(grant, epoch=self._epoch, identity=dict(identity))
            for generator in list(self._generators):
                generator._fence()
            self._cond.notify_all()

    def _highest_tick_used(self) -> int:
        """The newest tick any generator of this claim has used (-1 if none)."""
        ticks: list[int] = [g._highest_tick() for g in list(self._generators)]
        return max([self._detached_highest, *ticks])

    def _held_off(self, key: Any, mark: HighWaterMark | None, now_ms: int) -> bool:
        """Whether a free identity must not be claimed yet because of its hold-off.

        The hold-off ends when this host's clock passes the mark's ceiling +
        TTL + skew, or once TTL + skew have really elapsed since we first saw
        the identity held off, whichever comes first. The second bound keeps a
        host whose clock runs behind from waiting as long as its clock is off;
        it may then claim, and its generator refuses or waits on the
        high-water mark, which is what protects the predecessor's IDs.
        """
        if mark is None:
            return False
        ttl_ms = round(self.ttl_s * 1000)
        by_clock_s = (mark.holdoff_until_ms(ttl_ms, self.options.skew_ms) - now_ms) / 1000
        if by_clock_s <= 0:
            return False
        # The real-time bound runs from when we first saw *this* mark: a mark
        # written since (another holder came and went) starts it afresh, or a
        # claimant that once waited on the identity would skip the wait after
        # every later release.
        seen_key = (key, mark)
        first_seen = self._held_off_since.get(seen_key)
        if first_seen is None:
            for stale in [k for k in self._held_off_since if k[0] == key]:
                del self._held_off_since[stale]
            first_seen = self._held_off_since[seen_key] = time.monotonic()
        by_real_time_s = (ttl_ms + self.options.skew_ms) / 1000 - (time.monotonic() - first_seen)
        if by_real_time_s <= 0:
            return False
        self.soonest_holdoff_end_s = min(self.soonest_holdoff_end_s, by_clock_s, by_real_time_s)
        return True

    def _next_look_s(self, deadline: float, *, every_s: float) -> float:
        """How long a claimant finding no free identity may wait before looking again.

        At most ``every_s`` (an identity may be released at any moment), and no
        later than the soonest hold-off :meth:`_held_off` saw ends, or ``deadline``.
        """
        next_look = min(every_s, self.soonest_holdoff_end_s + 0.01)
        return max(0.0, min(next_look, deadline - time.monotonic()))

    def _pool_exhausted(self, clusters: str, where: str) -> PoolExhausted:
        """The error for a claim that found no free identity before its claim_timeout."""
        pool = self.options.pool
        return PoolExhausted(
            f"all {len(pool)} generator IDs of pool {pool.start}-{pool.stop - 1} ({clusters}) "
            f"at {where} are held or held off; waited {self.options.claim_timeout_s:g} s. "
            "Widen generators=LO-HI, or see who holds them with `idmint claims list`"
        )

    def _took(self, mark: HighWaterMark | None) -> None:
        """A driver's call as it takes an identity (before it writes the first mark): the
        mark the identity had then, whose history this claim's marks carry on."""
        self._predecessor = mark
        self._taken_ms = self.clock.time_ns() // 1_000_000

    def _mark(self, ceiling_ms: int, *, released: bool = False) -> HighWaterMark:
        """The high-water mark this holder records: ``ceiling_ms``, renewed now (and
        released now, for the final one), with who holds the identity and who held it."""
        now_ms = self.clock.time_ns() // 1_000_000
        before = self._predecessor
        current = Holder(
            host=socket.gethostname(),
            pid=os.getpid(),
            started=process_started_ms(),
            first_ms=self._taken_ms or now_ms,
            last_ms=now_ms,
            pod=pod_name(),
            floor_ms=before.ceiling_ms if before is not None else -1,
            ceiling_ms=ceiling_ms,
        )
        earlier = [
            held
            for held in (before.holders if before is not None else ())
            if held.last_ms >= now_ms - HISTORY_KEPT_MS
        ]
        return HighWaterMark(
            ceiling_ms=ceiling_ms,
            renewed_ms=now_ms,
            released_ms=now_ms if released else None,
            holder=holder_description(),
            holders=(current, *earlier[:HISTORY_KEPT]),
        )

    def _maintain(self) -> None:
        """Driver work done in the renewal thread after each renewal (default: none)."""

    def _resume_soon(self) -> None:
        """The connection is back: renew now to learn whether the claim survived."""
        self._wake.set()

    def _claim_and_record(self) -> None:
        """Acquire an identity, record its first ceiling, become ACTIVE."""
        with self._cond:
            if self._state is not ClaimState.RELEASED:
                self._set_state(ClaimState.CLAIMING, "claiming an identity")
        self._recorded_with_claim = None
        self._settling = None
        identity, floor_ms = self._acquire()
        recorded, self._recorded_with_claim = self._recorded_with_claim, None
        with self._cond:
            previous = self._grant
            self._epoch += 1
            # Until the first renewal lands, nothing may be issued: deadline 0.
            self._grant = Grant(self._epoch, identity, floor_ms, floor_ms, 0)
            grant = self._grant
        if recorded is not None:
            self._renewed(grant, *recorded)
        elif not self._renew_once():
            raise ClaimLost(f"{self.description}: the new claim vanished before it could be used")
        if previous is None:
            log.info("%s: claimed %s", self.description, self._identity_text(identity))
        else:
            log.warning(
                "%s: re-claimed as %s (was %s)",
                self.description,
                self._identity_text(identity),
                self._identity_text(previous.identity),
            )

    def _first_ceiling(self, floor_ms: int) -> int:
        """The ceiling a driver records with the claim itself, in the same round trip.

        A driver that does so sets ``_recorded_with_claim`` to this ceiling and
        the monotonic time before it sent the request (or, where the claim
        does not keep it alive, before the last request that did), and the
        claim becomes usable without a separate renewal.
        """
        return max(self.clock.time_ns() // 1_000_000 + round(self.ttl_s * 1000), floor_ms)

    def _settle_past_floor(self, floor_ms: int, *, longest_ttl_s: float | None = None) -> None:
        """Grant nothing until this host's clock passes ``floor_ms`` (a driver's call
        in ``_acquire``, for the floor it returns).

        For a store that can forget (a restart without persistence, a failover to
        a replica that missed the latest writes): when it cannot prove who held
        an identity last, the driver floors the claim a TTL + the skew past the
        moment the store's memory may begin, and the claim waits that out, by
        when any holder the store forgot has fenced itself. The real-time bound
        (that TTL + skew since the claim) keeps a host whose clock runs behind
        from waiting as long as its clock is off; its generator then waits for
        (or refuses on) the floor, as on a high-water mark. ``longest_ttl_s``:
        the longest lease a forgotten holder may have had (default: this claim's).
        """
        ttl_s = self.ttl_s if longest_ttl_s is None else longest_ttl_s
        until_mono = self.clock.monotonic_ns() + round((ttl_s + self.options.skew_ms / 1000) * 1e9)
        self._settling = (floor_ms, until_mono)

    def _still_settling(self) -> bool:
        """Whether the claim still waits out its floor (clears the wait once it ended)."""
        if self._settle_left_s() > 0:
            return True
        self._settling = None
        return False

    def _settle_left_s(self) -> float:
        """Seconds until the claim has settled (0 when it has, or never had to)."""
        settling = self._settling
        if settling is None:
            return 0.0
        floor_ms, until_mono = settling
        by_clock_s = (floor_ms + 1 - self.clock.time_ns() / 1_000_000) / 1000
        by_real_time_s = (until_mono - self.clock.monotonic_ns()) / 1e9
        return max(0.0, min(by_clock_s, by_real_time_s))

    def _renew_once(self) -> bool:
        """One round trip recording a new ceiling. False if the claim is gone."""
        sent_mono = self.clock.monotonic_ns()
        sent_wall_ms = self.clock.time_ns() // 1_000_000
        grant = self._grant
        assert grant is not None
        ceiling = max(sent_wall_ms + round(self.ttl_s * 1000), grant.ceiling_ms)
        owned = self._renew(ceiling)
        if not owned:
            return False
        self._renewed(grant, ceiling, sent_mono)
        return True

    def _renewed(self, grant: Grant, ceiling: int, sent_mono: int) -> None:
        """The coordinator recorded ``ceiling`` for ``grant``'s claim in a request sent
        at ``sent_mono``: move the grant's ceiling and deadline."""
        deadline = sent_mono + round((self.ttl_s - self.margin_s) * 1e9)
        with self._cond:
            current = self._grant
            if (
                self._state is ClaimState.RELEASED
                or current is None
                or current.epoch != grant.epoch
            ):
                return
            self._grant = replace(current, ceiling_ms=ceiling, deadline_mono_ns=deadline)
            self.renewals += 1
            resumed = self._state is ClaimState.SUSPENDED
            if self._state is not ClaimState.ACTIVE:
                self._set_state(ClaimState.ACTIVE)
            else:
                self._cond.notify_all()
        if resumed:
            log.info("%s: %s resumed", self.description, self._identity_text())

    def _renewal_loop(self) -> None:
        # The pool as this claim found it: read here, not on the claim's way to its first ID.
        self._look_at_pool_now()
        retry_soon = False
        while not self._closing:
            if not retry_soon:
                self._wake.wait(self.renew_every_s)
            self._wake.clear()
            retry_soon = False
            if self._closing:
                return
            state = self._state
            try:
                # CLAIMING here means a new claim after a loss failed: try again.
                if state in (ClaimState.LOST, ClaimState.CLAIMING):
                    self._reclaim()
                    self._look_at_pool_now()
                elif state in (ClaimState.ACTIVE, ClaimState.SUSPENDED):
                    if self._renew_once():
                        self._failure = None
                        self._maintain()
                        if time.monotonic() - self._pool_looked_mono >= POOL_LOOK_EVERY_S:
                            self._look_at_pool_now()
                    else:
                        self._lose("the coordinator no longer has our claim")
                        self._wake.set()
            except CoordinationError as error:
                self.renewal_failures += 1
                self._failure = error
                self._problem = str(error)
                log.info(
                    "%s: %s renewal failed: %s", self.description, self._identity_text(), error
                )
                self._backoff()
                retry_soon = True
            except Exception as error:
                # A bug (ours or a driver's): say so loudly, and keep the thread
                # alive, since the deadline fences the generators meanwhile.
                self.renewal_failures += 1
                self._failure = error
                self._problem = f"renewal failed unexpectedly: {type(error).__name__}: {error}"
                log.exception(
                    "%s: %s renewal failed unexpectedly", self.description, self._identity_text()
                )
                self._backoff()
                retry_soon = True

    def _backoff(self) -> None:
        # Retry soon, but not in a tight loop against a dead server.
        self._wake.wait(min(self.renew_every_s, 0.25))

    def _reclaim(self) -> None:
        # The loss itself was logged when it was seen; a retry after a failed attempt
        # would only repeat it.
        log.debug("%s: claiming an identity again (%s)", self.description, self._problem)
        self._claim_and_record()

    def _look_at_pool_now(self) -> None:
        """Refresh :attr:`pool_seen`, best effort: a view is no reason to fail a claim."""
        self._pool_looked_mono = time.monotonic()
        try:
            self.pool_seen = self._look_at_pool()
        except Exception as error:
            log.debug("%s: could not look at the pool: %s", self.description, error)

    # -- driver hooks ----------------------------------------------------------------
    def _look_at_pool(self) -> PoolView | None:
        """The pool as it stands now (None: this claim cannot say)."""
        return None

    def _acquire(self) -> tuple[Mapping[str, int], int]:
        """Claim a free identity; return it and its floor (predecessor's ceiling)."""
        raise NotImplementedError

    def _renew(self, ceiling_ms: int) -> bool:
        """Record ``ceiling_ms`` and confirm ownership in one round trip.

        Return False if the claim is no longer ours; raise on transport
        trouble (the deadline then runs out by itself).
        """
        raise NotImplementedError

    def _release(self, final_ceiling_ms: int | None) -> None:
        """Record the final high-water mark (if known) and give the identity up."""
        raise NotImplementedError

    def _forget(self) -> None:
        """In a fork child: drop references to the parent's connections, sending nothing.

        Closing a copied socket or file descriptor is allowed (the parent's copy
        stays open); anything that talks to the coordinator or unlocks is not.
        """

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.description} {self._state.value}>"


class ClaimSource(Protocol):
    """What a driver's claim reads of the coordinator that makes it."""

    ttl_s: float
    description: str
    """Where the claims are made, for messages: ``etcd://host:2379/idmint``."""


SourceT = TypeVar("SourceT", bound=ClaimSource)
OptionsT = TypeVar("OptionsT", bound=UrlOptions)


class DriverClaim(Claim, Generic[SourceT]):
    """The skeleton every driver's claim shares: a claim from a coordinator's pool.

    Made by :meth:`Coordinator._new_claim` as ``claim_type(coordinator, options,
    clock, space, identity)``; a driver sets its own state in :meth:`_begin` and
    reads its coordinator as ``self.coordinator``. Its :meth:`_acquire` looks at the pool until a
    look finds an identity to take (:meth:`_look`, the driver's), waiting
    between looks for the pool to change (:meth:`_wait_for_change`) at most
    ``look_every_s``, and gives up after ``claim_timeout`` with
    :meth:`_nothing_free`. A driver that claims otherwise (ZooKeeper's node
    groups) overrides :meth:`_acquire` itself.
    """

    look_every_s: float = 0.25
    """Longest wait between two looks at a pool in which nothing was free."""

    def __init__(
        self,
        coordinator: SourceT,
        options: ClaimOptions,
        clock: Clock | None,
        space: Space = GENERATOR,
        identity: Mapping[str, int] | None = None,
    ) -> None:
        what = "identity" if identity is not None else f"{space} ID claim"
        super().__init__(
            options=options,
            ttl_s=coordinator.ttl_s,
            clock=clock,
            description=f"{what} at {coordinator.description}",
        )
        self.coordinator = coordinator
        self.space = space
        self.where = coordinator.description
        self._fixed = dict(identity) if identity is not None else None
        """The configured identity to hold (None: a free one from the pool)."""
        self._begin()

    def _begin(self) -> None:
        """Set the driver's own state of a new claim (default: none)."""

    @property
    def cluster(self) -> int:
        """The cluster claimed in: the URL's, in a space with clusters; else 0."""
        return (self.options.cluster or 0) if self.space.clustered else 0

    def _identity(self, number: int, cluster: int) -> dict[str, int]:
        """Identity ``number`` of the pool (in ``cluster``), as the claim grants it."""
        return self.space.identity(number, cluster)

    def _acquire(self) -> tuple[Mapping[str, int], int]:
        patience_s = self._patience_s()
        deadline = time.monotonic() + patience_s
        with noticed_if_slow(lambda: self._waiting_for(patience_s), patience_s):
            while True:
                self.soonest_holdoff_end_s = math.inf
                found = self._look(deadline)
                if found is not None:
                    return found
                if time.monotonic() >= deadline:
                    raise self._nothing_free()
                if self._wait_for_change(self._next_look_s(deadline, every_s=self.look_every_s)):
                    raise ClaimLost(f"{self.description}: closed while claiming")

    def _waiting_for(self, patience_s: float) -> tuple[str, float] | None:
        """What a claimant still looking for an identity after a while waits for, and
        for how long at most (its notice; None: say nothing)."""
        left_s = patience_s
        if self._fixed is not None:
            return (
                f"{self._identity_text(self._fixed)} at {self.where} to come free (held, or "
                "its last holder's high-water mark not yet passed)",
                left_s,
            )
        pool = self.options.pool
        return (
            f"a free {self.space} ID at {self.where} (every one of pool "
            f"{pool.start}-{pool.stop - 1} is held or held off)",
            left_s,
        )

    def _patience_s(self) -> float:
        """How long a claimant looks for a free identity: ``claim_timeout``."""
        return self.options.claim_timeout_s

    def _look(self, deadline: float) -> tuple[Mapping[str, int], int] | None:
        """One look at the pool: take a free identity that is not held off, and return
        it with its floor (None: nothing could be taken; look again)."""
        raise NotImplementedError

    def _wait_for_change(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the pool to change; True if the claim was closed."""
        return self._sleep(seconds)

    def _nothing_free(self) -> Exception:
        """The error for a claimant that found nothing free within its patience."""
        return self._pool_exhausted(f"cluster {self.cluster}", self.where)

    def _look_at_pool(self) -> PoolView | None:
        """The pool of the identity held, from :meth:`_held_now` (one read after each claim,
        in the renewal thread, and one a :data:`POOL_LOOK_EVERY_S`)."""
        identity = self.identity
        held = None if identity is None or self._fixed is not None else self._held_now()
        if identity is None or held is None:
            return None
        cluster, _ = self.space.numbered(identity)
        pool = range(self.options.pool.start, min(self.options.pool.stop, self.space.size))
        return pool_view(held, self.space, cluster, pool, self.clock.time_ns() // 1_000_000)

    def _held_now(self) -> set[tuple[int, int]] | None:
        """The identities of the claim's space held now (:meth:`Coordinator.held`: every
        driver lists its claims, so every driver reports its pool); None: cannot say."""
        source = self.coordinator
        return source.held(self.space) if isinstance(source, Coordinator) else None

    def _release(self, final_ceiling_ms: int | None) -> None:
        """Record the final high-water mark where the claim still can, then let go."""
        try:
            write = self._final_mark_writer()
            if write is not None:
                self._record_final_mark(final_ceiling_ms, write)
        finally:
            self._let_go()

    def _final_mark_writer(self) -> Callable[[HighWaterMark], object] | None:
        """What writes the final mark now (None: the claim holds nothing to write it to)."""
        return None

    def _let_go(self) -> None:
        """Give the identity up: close the session, revoke the lease, unlock."""

    def _record_final_mark(
        self, final_ceiling_ms: int | None, write: Callable[[HighWaterMark], object]
    ) -> None:
        """Write the final high-water mark with ``write``, best effort: if it fails, the
        ceiling last recorded stays, which is only more cautious."""
        if final_ceiling_ms is None:
            return
        try:
            write(self._mark(final_ceiling_ms, released=True))
        except CoordinationError as error:
            log.info("%s: could not record the final high-water mark: %s", self, error)


class Coordinator:
    """A connection to a coordination service, made by :func:`idmint.coordinate.connect`.

    A driver subclasses it, takes its URL in ``__init__`` (checking every option
    it is given), and implements :meth:`claim`, :meth:`list_claims` and
    :meth:`close`; its claims subclass :class:`Claim`. docs/architecture.md
    says how to register one.
    """

    url: str
    """The URL, password hidden: for messages."""
    description: str
    """Where its claims are made (the URL without its options), for messages."""
    ttl_s: float
    """The session timeout or lease TTL its claims fence with."""
    options: ClaimOptions
    """The claim options its URL gives (:class:`~idmint.coordinate.options.ClaimOptions`;
    a driver's own, which add to them, where it claims from a pool)."""
    options_type: ClassVar[type[UrlOptions]] = ClaimOptions
    """The options its URLs take, declared (:mod:`idmint.coordinate.options`): its
    ``__init__`` reads them with :meth:`_take_url`, and its docstring's table, the
    docs' and ``--coordinator``'s help are made from them."""

    listed: ClassVar[bool] = True
    """Whether the driver is shown to people among the installed ones (False: a
    driver for tests, usable by its scheme all the same)."""

    def __init__(self, url: CoordinatorUrl) -> None:
        raise NotImplementedError

    def _options_for(self, pool: range | None) -> ClaimOptions:
        """The URL's claim options, with the pool narrowed to what the scheme can hold."""
        options = self.options
        if pool is None:
            return options
        narrowed = range(max(pool.start, options.pool.start), min(pool.stop, options.pool.stop))
        if not narrowed:
            raise ConfigurationError(
                f"{self.url}: generators={options.pool.start}-{options.pool.stop - 1} "
                f"leaves nothing this scheme can use ({pool.start}-{pool.stop - 1})"
            )
        return replace(options, pool=narrowed)

    def claim(
        self,
        *,
        clock: Clock | None = None,
        pool: range | None = None,
        space: Space | str | None = None,
        identity: Mapping[str, int] | None = None,
    ) -> Claim:
        """Claim an identity (blocking); the claim renews itself until closed.

        ``space`` says what kind (:mod:`idmint.coordinate.spaces`, or its name): each
        space is a pool of its own; by default the driver's ``default_space``.
        ``pool`` narrows the IDs to what the scheme can hold. ``identity`` asks for
        exactly that one (a configured identity), where the driver holds configured
        ones.
        """
        space = self.default_space if space is None else Space.of(space)
        if identity is None:
            identity = self.identity_in(space)
        if space not in self.spaces:
            raise ConfigurationError(
                f"{self.url} claims no '{space}' identities; it claims "
                + ", ".join(map(str, self.spaces))
            )
        if identity is not None and not self.holds_configured_identities:
            raise ConfigurationError(
                f"{self.url} claims a free ID; a configured identity is static://"
            )
        claim = self._new_claim(self._options_for(pool), clock, space, identity)
        claim.start()
        return claim

    holds_configured_identities: bool = False
    """Whether :meth:`claim` takes an ``identity`` (a configured one) to hold."""

    default_space: Space = GENERATOR
    """The space :meth:`claim` claims in when none is named."""

    spaces: tuple[Space, ...] = SPACES
    """The spaces it claims in."""

    identity_block: int | None = None
    """With a configured identity: how many consecutive IDs from it this process may
    use (a StatefulSet pod's block); None: no limit."""

    @classmethod
    def pool_within(cls, url: CoordinatorUrl, name: str) -> CoordinatorUrl | None:
        """A URL of a pool of its own called ``name`` inside ``url``'s (a root under its
        root, a table beside its table): where :mod:`idmint.testing` runs its checks,
        touching nothing else. None (the default): this driver's URL names one pool."""
        return None

    def configured_identity(self) -> dict[str, int] | None:
        """The identity fields the URL configures (``static://``), or None for a
        driver that claims a free identity from a pool."""
        return None

    claim_type: type[DriverClaim[Any]]
    """The driver's claim, made by :meth:`_new_claim` (unless the driver overrides that)."""

    def _new_claim(
        self,
        options: ClaimOptions,
        clock: Clock | None,
        space: Space,
        identity: Mapping[str, int] | None,
    ) -> Claim:
        """The driver's claim for ``space`` (not started: :meth:`claim` starts it)."""
        source, claim_type = self._claimed_by(space)
        return claim_type(source, options, clock, space, identity)

    def _claimed_by(self, space: Space) -> tuple[ClaimSource, type[DriverClaim[Any]]]:
        """What makes the claims of ``space``: the source they read, and their class
        (default: this coordinator and :attr:`claim_type`)."""
        return self, self.claim_type

    def identity_in(self, space: Space) -> dict[str, int] | None:
        """The identity a claim of ``space`` holds when none is asked for: the URL's
        configured one (``static://``); None (the default): a free one."""
        return None

    def _take_url(
        self, url: CoordinatorUrl, options_type: type[OptionsT], *, needs_hosts: bool = False
    ) -> OptionsT:
        """Read ``url``'s options as ``options_type`` (the driver's :attr:`options_type`)
        declares them, check its hosts, and keep what every driver keeps of it: ``url``
        (password hidden) and the claim options. Returns the options read."""
        options = options_type.from_url(url)
        if needs_hosts and not url.hosts:
            raise ConfigurationError(f"{url.redacted()}: give at least one host:port")
        self.url = url.redacted()
        self.options = options if isinstance(options, ClaimOptions) else ClaimOptions()
        return options

    def _one_server(
        self, url: CoordinatorUrl, default_port: int, *, refusal: str
    ) -> tuple[str, int]:
        """The ``(host, port)`` of the one server ``url`` names: 127.0.0.1 where it names
        none, ``default_port`` where it gives no port. A driver that speaks to one server
        refuses more with ``ConfigurationError`` saying ``refusal``."""
        if len(url.hosts) > 1:
            raise ConfigurationError(f"{self.url}: {refusal}")
        host, port = url.hosts[0] if url.hosts else ("127.0.0.1", 0)
        return host, port or default_port

    def list_claims(self) -> Sequence[ClaimInfo]:
        raise NotImplementedError

    def held(self, space: Space) -> set[tuple[int, int]]:
        """The ``(cluster, number)`` of every identity of ``space`` a claim holds now: what a
        claim's pool view counts. By default from :meth:`list_claims`; a driver whose
        listing reads more than the keys (the holders, the marks) answers it cheaper."""
        return {
            (row.cluster, row.generator) for row in self.list_claims() if row.space == space.name
        }

    def read_mark(self, space: Space, identity: Mapping[str, int]) -> HighWaterMark | None:
        """The high-water mark the store holds for ``identity`` of ``space`` (None: none),
        with who held the identity (:attr:`HighWaterMark.holders`): what ``idmint whois``
        reads. A driver that keeps no marks (``static://``) raises ``ConfigurationError``."""
        raise ConfigurationError(f"{self.url} keeps no record of who held an identity")

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Coordinator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_OPEN_CLAIMS: weakref.WeakSet[Claim] = weakref.WeakSet()
"""The claims this process made and has not closed."""


@atexit.register
def _release_open_claims() -> None:
    """Release whatever this process still claims when the interpreter exits."""
    for claim in list(_OPEN_CLAIMS):
        with contextlib.suppress(Exception):  # exiting anyway; expiry cleans up
            claim.close()


def _forsake_inherited_claims() -> None:
    """In a fork child: the parent's claims are not ours to renew, record or release."""
    inherited = list(_OPEN_CLAIMS)
    _OPEN_CLAIMS.clear()
    for claim in inherited:
        claim._forsake()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forsake_inherited_claims)


def release_all_claims() -> None:
    """Release every claim this process holds (also done at interpreter exit)."""
    _release_open_claims()
