"""Identities claimed on this host. The default coordinator.

URL grammar::

    local://[/DIR][?option=value&...]          e.g. local://  local:///srv/idmint?generators=0-63

``local://`` alone is this host's pool (:mod:`idmint.coordinate.hostpool`):
one per host, shared by every process whatever its user or environment, its
holds kept by the kernel and its high-water marks under ``/var/lib/idmint``.
``local:///DIR``, or ``$IDMINT_LOCAL_DIR`` when the URL names no directory, is
a pool of the operator's own: lock files in ``DIR``, shared by exactly the
processes that see that directory (a volume several containers mount, say).
``DIR`` must be absolute: a pool must not depend on the working directory.

===================  =========  ==================================================
option               default    meaning
===================  =========  ==================================================
``ttl``              ``1``      s; how far ahead of the clock each renewal lets
                                generators mint (a crashed holder's successor
                                waits at most this long for its clock)
``generators``       all        ``LO-HI``: the IDs this process may claim
``cluster``          ``0``      the uid64 cluster ID
``claim_timeout``    ``30``     s to wait for a free ID before ``PoolExhausted``
``wait_timeout``     ``10``     s a generator waits for its claim before raising
``margin``           ``0.2``    s taken off the deadline
``skew``             ``1``      s added to the hold-off of a released or crashed ID
``connect_timeout``  ``10``     accepted for symmetry; there is nothing to connect to
===================  =========  ==================================================

Keys: ``space`` is ``generator`` (uid64; key ``<cluster>-<generator>``),
``node`` (elastic64; key ``node mod 256``, so IDs of any two holders differ in
their low eight bits whatever widths they use) or ``short60`` (key: the node).

A directory pool's layout::

    DIR/<space>/.created       JSON {"created_ms"}: when the directory was made
    DIR/<space>/<key>.lock     held with flock(LOCK_EX) while a process holds <key>
    DIR/<space>/<key>.mark     the high-water mark (JSON), replaced atomically

**Why it is safe.** A hold (a bound abstract socket, or an flock on a lock
file) lasts as long as the process and goes when it dies, however it dies:
no hold outlives its holder. A child of ``fork()`` shares its parent's hold;
it closes its copy at once (which does not let go) and never writes the mark.
A claimant starts after the highest mark recorded for its ID, and never in the
millisecond it claimed in: a holder that ended a moment ago minted nothing
later than that on this host's clock. Each renewal writes the mark first and
then checks the hold: in a directory pool a lock file that was deleted (a tmp
cleaner, a removed directory) is a lost claim, and a successor that locks a
new file reads the mark we wrote before we could use it; a directory made less
than a TTL ago floors every claim at its creation + the TTL, so a holder whose
files vanished under it has stopped before the new holder starts.

**What it does not cover.** Processes on other hosts, and containers with
their own network namespace (their abstract sockets are their own) or their
own filesystem: claim through ``zk://`` or ``etcd://``, give each container a
static identity, or share a directory pool on a volume of one host.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Protocol

from idmint.coordinate.base import (
    SPACES,
    ClaimInfo,
    Coordinator,
    DriverClaim,
    HighWaterMark,
)
from idmint.coordinate.hostpool import HostPool, mark_and_record, write_atomically
from idmint.coordinate.url import COMMON_OPTIONS, CoordinatorUrl
from idmint.errors import (
    ConfigurationError,
    CoordinatorUnavailable,
    IdentityInUse,
)

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "DEFAULT_TTL_S",
    "LocalClaim",
    "LocalCoordinator",
    "configured_directory",
    "lock_key",
]

DEFAULT_TTL_S = 1.0
OPTIONS = (*COMMON_OPTIONS, "ttl")
DIRECTORY_VARIABLE = "IDMINT_LOCAL_DIR"
NODE_KEY_BITS = 8  # elastic64's narrowest width: holders differ in these bits
# A static identity found locked is tried again for this long: `claims list`
# probes each lock for a moment, which must not make a starting process refuse.
FIXED_RETRY_S = 0.25
# A mark this far ahead of the clock is no clock's doing (a reboot, NTP): it
# was written to hold the ID back, or the clock is badly wrong. Either way the
# ID is skipped, and named if nothing else is free.
IMPLAUSIBLE_AHEAD_MS = 24 * 3600 * 1000


def configured_directory(url_path: str = "") -> Path | None:
    """The directory pool named by a ``local://`` URL or ``$IDMINT_LOCAL_DIR``.

    None means this host's pool. A relative directory is refused: two processes
    in different working directories would be two pools.
    """
    named = url_path or os.environ.get(DIRECTORY_VARIABLE, "")
    if not named:
        return None
    if not os.path.isabs(named):
        source = "local://" if url_path else DIRECTORY_VARIABLE
        raise ConfigurationError(
            f"{source} directory {named!r} is relative: a pool must not depend on the "
            "working directory; give an absolute path"
        )
    return Path(named)


def lock_key(space: str, identity: Mapping[str, int]) -> str:
    """The name of ``identity`` in ``space``'s pool (a lock file's, without suffix)."""
    if space == "generator":
        return f"{identity.get('cluster', 0)}-{identity['generator']}"
    if space == "node":
        return str(identity["node"] % (1 << NODE_KEY_BITS))
    return str(identity["node"])


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

    def write_mark(self, space: str, key: str, data: bytes) -> Path: ...


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

    # -- Claim hooks ------------------------------------------------------------------
    def _acquire(self) -> tuple[Mapping[str, int], int]:
        self._let_go()
        self._young_floor_ms = -1
        if isinstance(self._pool, DirectoryPool):
            self._young_floor_ms = self._pool.young_floor_ms(
                self.space, self.clock.time_ns() // 1_000_000, round(self.ttl_s * 1000)
            )
        return super()._acquire()

    def _patience_s(self) -> float:
        return FIXED_RETRY_S if self._fixed is not None else self.options.claim_timeout_s

    def _look(self, deadline: float) -> tuple[Mapping[str, int], int] | None:
        pool = self._pool
        self._implausible = []
        now_ms = self.clock.time_ns() // 1_000_000
        for identity in self._candidates(self.cluster):
            key = lock_key(self.space, identity)
            hold = pool.hold(self.space, key)
            if hold is None:
                continue
            try:
                mark, _ = pool.read_mark(self.space, key)
            except BaseException:
                hold.close()
                raise
            if self._fixed is None and mark is not None:
                if mark.ceiling_ms > now_ms + IMPLAUSIBLE_AHEAD_MS:
                    self._implausible.append((key, mark))
                    hold.close()
                    continue
                if self._held_off((self.space, key), mark, now_ms):
                    hold.close()
                    continue
            self._hold, self._key = hold, key
            self._since_ms = now_ms
            # Whoever held the ID before us is gone, so on this host's clock
            # it minted nothing after this millisecond: start after it.
            floor = max(mark.ceiling_ms if mark is not None else -1, now_ms, self._young_floor_ms)
            return identity, floor
        return None

    def _candidates(self, cluster: int) -> Iterator[dict[str, int]]:
        if self._fixed is not None:
            yield self._fixed
            return
        for number in self.options.pool:
            yield self._identity(number, cluster)

    def _nothing_free(self) -> Exception:
        if self._fixed is not None:
            key = lock_key(self.space, self._fixed)
            _, record = self._pool.read_mark(self.space, key)
            holder = record.get("holder", "another process")
            shown = ", ".join(f"{name} {value}" for name, value in self._fixed.items())
            return IdentityInUse(
                f"{shown} is already in use on this host by {holder} ({self._pool.description}, "
                f"{self.space} {key}); two processes with one identity would mint the same "
                "IDs. Give each process its own, or leave the identity out to claim a free one"
            )
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
        self._pool.write_mark(self.space, self._key, json.dumps(record).encode())

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

    def __init__(self, url: CoordinatorUrl, *, default: bool = False) -> None:
        if fcntl is None:  # pragma: no cover - not POSIX
            raise ConfigurationError("local:// needs POSIX file locks (fcntl), not on this OS")
        self._take_url(url, OPTIONS)
        if url.hosts:
            raise ConfigurationError(
                f"local:// takes a directory, not a host ({url.hosts_text()}); write "
                "local:///absolute/dir (three slashes) or local:// for this host's pool"
            )
        self.directory = configured_directory(url.path)
        self.pool: Pool = HostPool() if self.directory is None else DirectoryPool(self.directory)
        self.description = self.pool.description
        self.ttl_s = url.number("ttl", DEFAULT_TTL_S, minimum=0.5)
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

    @property
    def description(self) -> str:
        return f"local://{self.directory}"

    def young_floor_ms(self, space: str, now_ms: int, ttl_ms: int) -> int:
        """Make the space's directory if needed; a floor while it is less than a TTL old.

        A young directory may have replaced one deleted under a live holder,
        which stops within a TTL: claims start after that.
        """
        self._prepare(self.directory)
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

    def hold(self, space: str, key: str) -> LockFile | None:
        path = self.directory / space / f"{key}.lock"
        fd = _try_lock(path)
        if fd is None:
            return None
        # While a claim is held its directory is share-locked, which tmpfiles
        # cleaners honour.
        return LockFile(fd, path, _share_lock_directory(path.parent))

    def held(self) -> Iterator[tuple[str, str]]:
        for space in SPACES:
            path = self.directory / space
            if not path.is_dir():
                continue
            for lock in path.glob("*.lock"):
                fd = _try_lock(lock)
                if fd is not None:  # free: nobody holds it
                    os.close(fd)
                    continue
                yield space, lock.name[: -len(".lock")]

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

    def write_mark(self, space: str, key: str, data: bytes) -> Path:
        path = self.directory / space / f"{key}.mark"
        write_atomically(path, data)
        return path


class LockFile:
    """A lock file held with flock, and the share lock on its directory."""

    def __init__(self, fd: int, path: Path, directory_fd: int) -> None:
        self._fd: int | None = fd
        self._directory_fd: int | None = directory_fd
        self.path = path

    def intact(self) -> bool:
        """Whether the file we lock is still the one at its path (not deleted, replaced)."""
        return self._fd is not None and _same_file(self._fd, self.path)

    def close(self) -> None:
        for fd in (self._fd, self._directory_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = self._directory_fd = None


def _try_lock(path: Path) -> int | None:
    """A descriptor holding ``path``'s exclusive lock, or None if someone holds it."""
    assert fcntl is not None
    for _ in range(3):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as error:
            raise CoordinatorUnavailable(
                f"cannot open the lock file {path}: {error.strerror or error}"
            ) from error
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            raise CoordinatorUnavailable(
                f"cannot lock {path}: {error.strerror or error}"
            ) from error
        # Between open() and flock() the file may have been deleted (and a new
        # one made): a lock on a file no longer at the path protects nothing.
        if _same_file(fd, path):
            return fd
        os.close(fd)
    return None


def _same_file(fd: int, path: Path) -> bool:
    try:
        linked = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    held = os.fstat(fd)
    return (linked.st_dev, linked.st_ino) == (held.st_dev, held.st_ino)


def _share_lock_directory(directory: Path) -> int:
    """Hold a shared lock on ``directory``: tmpfiles cleaners skip locked directories."""
    assert fcntl is not None
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    with contextlib.suppress(OSError):  # only a courtesy to cleaners
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    return fd


def _numeric_key(held: tuple[str, str]) -> tuple[str, tuple[int, ...]]:
    space, key = held
    return space, tuple(int(part) if part.isdigit() else -1 for part in key.split("-"))


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
