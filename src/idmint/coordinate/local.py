"""Identities claimed on this host. The default coordinator.

URL grammar::

    local://[/DIR][?option=value&...]          e.g. local://  local:///srv/idmint?generators=0-63

``local://`` alone is this host's pool (:mod:`idmint.coordinate.hostpool`):
one per host, shared by every process whatever its user, environment or
namespaces as long as it shares the host's network, ``/var/lib/idmint`` or
``/dev/shm``; its holds are kept by the kernel and its high-water marks under
``/var/lib/idmint``. ``local:///DIR``, or ``$IDMINT_LOCAL_DIR`` when the URL
names no directory, is a pool of the operator's own: lock files in ``DIR``,
shared by exactly the processes that see that directory. ``DIR`` must be
absolute (a pool must not depend on the working directory) and not ``/``.

The options (:class:`LocalOptions`; this table is made from its declaration):

{options}

An identity's key in its space's pool (:func:`lock_key`): ``<cluster>-<ID>`` in a
space with clusters (uid64's generator IDs), the ID mod the space's size in one
without (elastic64's node ID mod 256, so IDs of any two holders differ in their
low eight bits whatever widths they use; short60's node ID itself).

A directory pool's layout::

    DIR/.host-<uid>            "<boot id> <pid namespace> <mount namespace>" of the
                               last process of that user to use it (the container
                               entrypoint's proof that DIR is the host's)
    DIR/<space>/.created       JSON {"created_ms"}: when the directory was made
    DIR/<space>/<key>.lock     held with flock(LOCK_EX) while a process holds <key>
    DIR/<space>/<key>.mark     the high-water mark (JSON), replaced atomically

**Why it is safe.** A hold (bound abstract sockets and flocks on lock files)
lasts as long as the process and goes when it dies, however it dies: no hold
outlives its holder. A child of ``fork()`` shares its parent's hold; it closes
its copy at once (which does not let go) and never writes the mark. A hold
whose descriptor was closed or replaced under its holder is a lost claim at the
next renewal.
A claimant starts after the highest mark recorded for its ID, and never in the
millisecond it claimed in: a holder that ended a moment ago minted nothing
later than that on this host's clock. Each renewal writes the mark first and
then checks the hold: in a directory pool a lock file that was deleted (a tmp
cleaner, a removed directory) is a lost claim, and a successor that locks a
new file reads the mark we wrote before we could use it; a directory made less
than a TTL ago floors every claim at its creation + the TTL, so a holder whose
files vanished under it has stopped before the new holder starts.

A configured identity (``static://``) whose hold is free but whose mark is
not released and still ahead of the clock may belong to a live holder this
process cannot see: the claim watches it until its ceiling passes, or its
holder's TTL + the skew, and refuses (:class:`~idmint.errors.IdentityInUse`) if
it is renewed meanwhile.

**What it does not cover.** Processes on other hosts, and processes of this
host that share none of its network, ``/var/lib/idmint`` and ``/dev/shm``
(docs/coordination.md lists what one host can still split): claim through
``zk://`` or ``etcd://``, give each a static identity, or share a directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from idmint.coordinate.base import (
    ClaimInfo,
    Coordinator,
    DriverClaim,
    HighWaterMark,
)
from idmint.coordinate.hostpool import (
    FLOCK,
    HOST_MARKER,
    HostPool,
    LockFile,
    is_locked,
    leave_host_marker,
    mark_and_record,
    share_lock_directory,
    try_lock,
    write_atomically,
)
from idmint.coordinate.options import ClaimOptions, seconds, ttl, with_options_table
from idmint.coordinate.spaces import SPACES, Space
from idmint.coordinate.url import CoordinatorUrl
from idmint.errors import (
    ConfigurationError,
    CoordinatorUnavailable,
    IdentityInUse,
)

__all__ = [
    "DEFAULT_TTL_S",
    "LocalClaim",
    "LocalCoordinator",
    "LocalOptions",
    "configured_directory",
    "lock_key",
]

DEFAULT_TTL_S = 1.0
DIRECTORY_VARIABLE = "IDMINT_LOCAL_DIR"
# A static identity found held is tried again for this long: `claims list`
# probes each lock for a moment, which must not make a starting process refuse.
FIXED_RETRY_S = 0.25
# A mark this far ahead of the clock is no clock's doing (a reboot, NTP): it
# was written to hold the ID back, or the clock is badly wrong. Either way the
# ID is skipped, and named if nothing else is free.
IMPLAUSIBLE_AHEAD_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class LocalOptions(ClaimOptions):
    """The options of a ``local://`` URL."""

    ttl_s: float = ttl(DEFAULT_TTL_S, seconds(minimum=0.5))


__doc__ = with_options_table(__doc__, LocalOptions)


def configured_directory(url_path: str = "") -> Path | None:
    """The directory pool named by a ``local://`` URL or ``$IDMINT_LOCAL_DIR``.

    None means this host's pool. A relative directory is refused: two processes
    in different working directories would be two pools.
    """
    named = url_path or os.environ.get(DIRECTORY_VARIABLE, "")
    if not named:
        return None
    source = "local://" if url_path else DIRECTORY_VARIABLE
    if not os.path.isabs(named):
        raise ConfigurationError(
            f"{source} directory {named!r} is relative: a pool must not depend on the "
            "working directory; give an absolute path"
        )
    if not os.path.normpath(named).strip("/"):
        raise ConfigurationError(
            f"{source} directory {named!r} is the root directory: a pool's lock files and "
            "marks need a directory of their own (local:///srv/idmint); local:// alone is "
            "this host's pool"
        )
    return Path(named)


def lock_key(space: Space, identity: Mapping[str, int]) -> str:
    """The name of ``identity`` in ``space``'s pool (a lock file's, without suffix):
    ``<cluster>-<ID>`` where the space has clusters, else the ID mod the space's size
    (an identity wider than the pool, a configured elastic64 node ID, is held by the
    bits in which holders of any width differ)."""
    cluster, number = space.numbered(identity)
    return f"{cluster}-{number}" if space.clustered else str(number % space.size)


class Hold(Protocol):
    """An identity held on this host until closed."""

    def intact(self) -> bool:
        """Whether nobody else can have taken it meanwhile."""
        ...

    def close(self) -> None: ...


class Pool(Protocol):
    """Where holds and marks live: this host's pool or a directory."""

    @property
    def description(self) -> str: ...

    def hold(self, space: str, key: str) -> Hold | None: ...

    def held(self) -> Iterator[tuple[str, str]]: ...

    def read_mark(self, space: str, key: str) -> tuple[HighWaterMark | None, dict[str, object]]: ...

    def write_mark(self, space: str, key: str, record: Mapping[str, object]) -> None: ...

    def check_views(self, space: str, key: str) -> None:
        """Refuse if a recent holder of ``key`` kept its marks where this process cannot
        see them."""
        ...


class LocalClaim(DriverClaim["LocalCoordinator"]):
    """One identity held on this host (an abstract socket or an flock'd file)."""

    look_every_s = 0.05

    def _begin(self) -> None:
        self._pool = self.coordinator.pool
        self._hold: Hold | None = None
        self._key: str | None = None
        self._since_ms = 0
        self._young_floor_ms = -1
        self._implausible: list[tuple[str, HighWaterMark]] = []
        self._busy_since: float | None = None
        """When a configured identity was first found held in this claiming."""
        self._watched: tuple[str, HighWaterMark, float] | None = None
        """A configured identity's live-looking mark, and when it was first seen."""

    # -- Claim hooks ------------------------------------------------------------------
    def _acquire(self) -> tuple[Mapping[str, int], int]:
        self._let_go()
        self._busy_since = self._watched = None
        self._young_floor_ms = -1
        if isinstance(self._pool, DirectoryPool):
            self._young_floor_ms = self._pool.young_floor_ms(
                self.space.name, self.clock.time_ns() // 1_000_000, round(self.ttl_s * 1000)
            )
        return super()._acquire()

    def _look(self, deadline: float) -> tuple[Mapping[str, int], int] | None:
        pool = self._pool
        self._implausible = []
        now_ms = self.clock.time_ns() // 1_000_000
        for identity in self._candidates(self.cluster):
            key = lock_key(self.space, identity)
            hold = pool.hold(self.space.name, key)
            if hold is None:
                self._found_held()
                continue
            try:
                mark, record = pool.read_mark(self.space.name, key)
                pool.check_views(self.space.name, key)
                skip = mark is not None and self._skips(key, mark, record, now_ms)
            except BaseException:
                hold.close()
                raise
            if skip:
                hold.close()
                continue
            self._hold, self._key = hold, key
            self._since_ms = now_ms
            self._took(mark)
            # Whoever held the ID before us is gone, so on this host's clock
            # it minted nothing after this millisecond: start after it.
            floor = max(mark.ceiling_ms if mark is not None else -1, now_ms, self._young_floor_ms)
            return identity, floor
        return None

    def _found_held(self) -> None:
        """A configured identity held by another: refused once that lasts ``FIXED_RETRY_S``."""
        if self._fixed is None:
            return
        now = time.monotonic()
        if self._busy_since is None:
            self._busy_since = now
        elif now - self._busy_since >= FIXED_RETRY_S:
            raise self._nothing_free()

    def _skips(
        self, key: str, mark: HighWaterMark, record: Mapping[str, object], now_ms: int
    ) -> bool:
        """Whether a free hold of ``key`` is not to be taken yet because of its mark."""
        if self._fixed is not None:
            return self._maybe_live(key, mark, record, now_ms)
        if mark.ceiling_ms > now_ms + IMPLAUSIBLE_AHEAD_MS:
            self._implausible.append((key, mark))
            return True
        return self._held_off(key, mark, now_ms)

    def _maybe_live(
        self, key: str, mark: HighWaterMark, record: Mapping[str, object], now_ms: int
    ) -> bool:
        """Whether a configured identity's mark may be a live holder's, one this process
        cannot see (another view of this host): watched until its ceiling passes, or its
        holder's TTL + the skew of real time; renewed meanwhile, the identity is in use.

        Any other claimant takes a free identity instead (the hold-off); a configured
        one has no other, and must not start beside a holder that still mints.
        """
        if mark.released_ms is not None or mark.ceiling_ms > now_ms + IMPLAUSIBLE_AHEAD_MS:
            return False  # gone, or no clock's doing: the floor is the guard
        watched = self._watched
        if watched is None or watched[0] != key:
            watched = self._watched = (key, mark, time.monotonic())
        elif mark.renewed_ms > watched[1].renewed_ms:
            raise self._in_use(
                key,
                record,
                "which renewed its high-water mark while this process watched, although "
                "this process sees none of its holds (a process with another view of this "
                "host?)",
            )
        holder_ttl_ms = max(0, mark.ceiling_ms - mark.renewed_ms)
        watched_ms = (time.monotonic() - watched[2]) * 1000
        return now_ms <= mark.ceiling_ms and watched_ms <= holder_ttl_ms + self.options.skew_ms

    def _candidates(self, cluster: int) -> Iterator[dict[str, int]]:
        if self._fixed is not None:
            yield self._fixed
            return
        for number in self.options.pool:
            yield self._identity(number, cluster)

    def _in_use(self, key: str, record: Mapping[str, object], why: str = "") -> IdentityInUse:
        assert self._fixed is not None
        holder = record.get("holder", "another process")
        shown = ", ".join(f"{name} {value}" for name, value in self._fixed.items())
        return IdentityInUse(
            f"{shown} is already in use on this host by {holder} ({self._pool.description}, "
            f"{self.space} {key}){', ' + why if why else ''}; two processes with one identity "
            "would mint the same IDs. Give each process its own, or leave the identity out to "
            "claim a free one"
        )

    def _nothing_free(self) -> Exception:
        if self._fixed is not None:
            key = lock_key(self.space, self._fixed)
            return self._in_use(key, self._pool.read_mark(self.space.name, key)[1])
        error = super()._nothing_free()
        if self._implausible:
            key, mark = self._implausible[0]
            error.args = (
                f"{error}. {len(self._implausible)} of them have a high-water mark more than a "
                f"day ahead of this host's clock (e.g. {self.space} {key}: {mark.ceiling_ms} ms "
                "since the epoch): check the clock, or who wrote the mark",
            )
        return error

    def _renew(self, ceiling_ms: int) -> bool:
        if self._hold is None or self._key is None:
            return False
        self._write_mark(self._mark(ceiling_ms))
        # Checked after the write: a successor that took over a lock file
        # deleted under us read a mark at least this high, so what we mint up
        # to it is clear of what the successor mints.
        return self._hold.intact()

    def _write_mark(self, mark: HighWaterMark) -> None:
        assert self._key is not None
        record = {**mark.to_json(), "since_ms": self._since_ms, "pid": os.getpid()}
        self._pool.write_mark(self.space.name, self._key, record)

    def _final_mark_writer(self) -> Callable[[HighWaterMark], object] | None:
        return self._write_mark if self._hold is not None and self._hold.intact() else None

    def _forget(self) -> None:
        # Closing our copy does not let go: the parent's descriptor refers to
        # the same socket or open file, and the hold lives there.
        self._let_go()

    def _reclaim(self) -> None:
        self._let_go()
        super()._reclaim()

    def _let_go(self) -> None:
        hold, self._hold = self._hold, None
        if hold is not None:
            with contextlib.suppress(OSError):
                hold.close()


class LocalCoordinator(Coordinator):
    """This host's pool of identities, or a directory of lock files."""

    claim_type = LocalClaim
    options_type = LocalOptions

    def __init__(self, url: CoordinatorUrl, *, default: bool = False) -> None:
        if not FLOCK:  # pragma: no cover - not POSIX
            raise ConfigurationError("local:// needs POSIX file locks (fcntl), not on this OS")
        options = self._take_url(url, LocalOptions)
        if url.hosts:
            raise ConfigurationError(
                f"local:// takes a directory, not a host ({url.hosts_text()}); write "
                "local:///absolute/dir (three slashes) or local:// for this host's pool"
            )
        self.directory = configured_directory(url.path)
        self.pool: Pool = HostPool() if self.directory is None else DirectoryPool(self.directory)
        self.description = self.pool.description
        self.ttl_s = options.ttl_s
        self.default = default

    @classmethod
    def pool_within(cls, url: CoordinatorUrl, name: str) -> CoordinatorUrl | None:
        # This host's pool is one per host: there is no pool of its own within it.
        directory = configured_directory(url.path)
        return None if directory is None else url.replace(path=str(directory / name))

    # -- the Coordinator interface ---------------------------------------------------
    holds_configured_identities = True
    """A claim takes a free identity of its space from the pool, or exactly the one
    given: then if another process holds it, :class:`~idmint.errors.IdentityInUse`
    says which."""

    def read_mark(self, space: Space, identity: Mapping[str, int]) -> HighWaterMark | None:
        return self.pool.read_mark(space.name, lock_key(space, identity))[0]

    def list_claims(self) -> list[ClaimInfo]:
        rows: list[ClaimInfo] = []
        for space, key in sorted(self.pool.held(), key=_numeric_key):
            cluster, _, number = key.rpartition("-")
            if not number.isdigit():
                continue
            mark, record = self.pool.read_mark(space, key)
            rows.append(
                ClaimInfo(
                    cluster=int(cluster) if cluster.isdigit() else 0,
                    generator=int(number),
                    holder=str(record.get("holder", "unknown")),
                    since_ms=_int_or_none(record.get("since_ms")),
                    high_water_mark_ms=mark.ceiling_ms if mark else None,
                    space=space,
                )
            )
        return rows

    def close(self) -> None:
        """Nothing to close: each claim holds its own lock."""


# -- a directory of lock files --------------------------------------------------------


class DirectoryPool:
    """A pool in a directory of the operator's choosing: flock'd lock files and marks."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._marked = False

    @property
    def description(self) -> str:
        return f"local://{self.directory}"

    def young_floor_ms(self, space: str, now_ms: int, ttl_ms: int) -> int:
        """Make the space's directory if needed; a floor while it is less than a TTL old.

        A young directory may have replaced one deleted under a live holder,
        which stops within a TTL: claims start after that.
        """
        self._prepare(self.directory)
        if not self._marked:
            leave_host_marker(self.directory / f"{HOST_MARKER}-{os.geteuid()}")
            self._marked = True
        path = self.directory / space
        marker = path / ".created"
        if self._prepare(path):
            write_atomically(marker, json.dumps({"created_ms": now_ms}).encode())
            created_ms = now_ms
        else:
            try:
                created_ms = int(json.loads(marker.read_bytes())["created_ms"])
            except (OSError, ValueError, KeyError, TypeError):
                # Made a moment ago by someone still writing the marker, or the
                # marker was lost: assume the youngest possible directory.
                created_ms = now_ms
        return created_ms + ttl_ms if created_ms + ttl_ms > now_ms else -1

    @staticmethod
    def _prepare(path: Path) -> bool:
        """Make ``path`` if it is missing (True if we made it); check it if not."""
        try:
            os.mkdir(path, 0o777)
        except FileExistsError:
            made = False
        except OSError as error:
            raise ConfigurationError(
                f"cannot make the lock directory {path}: {error.strerror or error}; "
                f"set {DIRECTORY_VARIABLE} or use local:///dir with a writable directory"
            ) from None
        else:
            made = True
        try:
            info = os.lstat(path)
        except OSError as error:
            raise ConfigurationError(
                f"cannot use the lock directory {path}: {error.strerror or error}"
            ) from None
        if not stat.S_ISDIR(info.st_mode):
            raise ConfigurationError(f"{path} must be a directory for local:// lock files")
        return made

    def hold(self, space: str, key: str) -> DirectoryHold | None:
        path = self.directory / space / f"{key}.lock"
        lock = try_lock(path)
        if lock is None:
            return None
        # While a claim is held its directory is share-locked, which tmpfiles
        # cleaners honour.
        return DirectoryHold(lock, share_lock_directory(path.parent))

    def held(self) -> Iterator[tuple[str, str]]:
        for space in SPACES:
            path = self.directory / space.name
            if not path.is_dir():
                continue
            for lock in path.glob("*.lock"):
                if is_locked(lock):
                    yield space.name, lock.name[: -len(".lock")]

    def read_mark(self, space: str, key: str) -> tuple[HighWaterMark | None, dict[str, object]]:
        path = self.directory / space / f"{key}.mark"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None, {}
        except OSError as error:
            raise CoordinatorUnavailable(
                f"cannot read the high-water mark {path}: {error.strerror or error}"
            ) from error
        return mark_and_record(data)

    def write_mark(self, space: str, key: str, record: Mapping[str, object]) -> None:
        write_atomically(self.directory / space / f"{key}.mark", json.dumps(record).encode())

    def check_views(self, space: str, key: str) -> None:
        """One directory, one view: whoever sees its lock files sees its marks."""


class DirectoryHold:
    """A lock file of a directory pool, and the share lock on its directory."""

    def __init__(self, lock: LockFile, directory: tuple[int, tuple[int, int]]) -> None:
        self._lock = lock
        self._directory: tuple[int, tuple[int, int]] | None = directory

    def intact(self) -> bool:
        return self._lock.intact()

    def close(self) -> None:
        self._lock.close()
        directory, self._directory = self._directory, None
        if directory is not None:
            fd, identity = directory
            # A descriptor closed under us may be someone else's now: leave it alone.
            with contextlib.suppress(OSError):
                held = os.fstat(fd)
                if (held.st_dev, held.st_ino) == identity:
                    os.close(fd)


def _numeric_key(held: tuple[str, str]) -> tuple[str, tuple[int, ...]]:
    space, key = held
    return space, tuple(int(part) if part.isdigit() else -1 for part in key.split("-"))


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
