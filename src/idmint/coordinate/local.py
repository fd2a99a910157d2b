"""Identities claimed on this host: one lock file per ID. The default coordinator.

URL grammar::

    local://[/DIR][?option=value&...]          e.g. local://  local:///srv/idmint?generators=0-63

``local://`` alone uses the default directory: ``$IDMINT_LOCAL_DIR`` when set,
else ``$XDG_RUNTIME_DIR/idmint``, else ``<temp dir>/idmint-<uid>``. The default
directory must belong to the user and be private (mode 0700); it is created so.

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

Layout::

    DIR/<space>/.created       JSON {"created_ms"}: when the directory was made
    DIR/<space>/<key>.lock     held with flock(LOCK_EX) while a process holds <key>
    DIR/<space>/<key>.mark     the high-water mark (JSON), replaced atomically

``space`` is ``generator`` (uid64; key ``<cluster>-<generator>``), ``node``
(elastic64; key ``node mod 256``, so IDs of any two holders differ in their
low eight bits whatever widths they use) or ``short60`` (key: the node).

**Why it is safe.** The kernel holds the lock for as long as the process lives
and drops it when the process dies, however it dies: nothing is left to clean
up and no lock can outlive its holder. The lock is on an open file description,
so a child of ``fork()`` shares it; the child closes its copy at once (which
does not unlock) and never writes the mark. Each renewal writes the mark first
and then checks that the lock file is still the one at its path: a lock file
that was deleted (a tmp cleaner, a removed runtime directory) is a lost claim,
and a successor that locks a new file reads the mark we wrote before we could
use it. A successor starts after the mark's ceiling, and a directory made less
than a TTL ago floors every claim at its creation + the TTL, so a holder whose
files vanished under it has stopped before the new holder starts. While a claim
is held the directory itself is share-locked, which tmpfiles cleaners honour.

**What it does not cover.** Processes that see different directories: other
hosts, containers with their own filesystem, systemd services with
``PrivateTmp``, other users. Give them one directory they share
(``IDMINT_LOCAL_DIR`` or ``local:///shared/dir``), or claim through ``zk://``
or ``etcd://``, or configure distinct static identities.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import secrets
import stat
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from idmint.clock import Clock
from idmint.coordinate.base import (
    SPACES,
    Claim,
    ClaimInfo,
    ClaimOptions,
    Coordinator,
    HighWaterMark,
    holder_description,
)
from idmint.coordinate.url import COMMON_OPTIONS, CoordinatorUrl
from idmint.errors import (
    ClaimLost,
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
    "default_directory",
    "lock_key",
]

DEFAULT_TTL_S = 1.0
OPTIONS = (*COMMON_OPTIONS, "ttl")
DIRECTORY_VARIABLE = "IDMINT_LOCAL_DIR"
NODE_KEY_BITS = 8  # elastic64's narrowest width: holders differ in these bits
# A static identity found locked is tried again for this long: `claims list`
# probes each lock for a moment, which must not make a starting process refuse.
FIXED_RETRY_S = 0.25


def default_directory() -> Path:
    """Where ``local://`` keeps its lock files unless told otherwise."""
    configured = os.environ.get(DIRECTORY_VARIABLE)
    if configured:
        return Path(configured)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "idmint"
    return Path(tempfile.gettempdir()) / f"idmint-{os.geteuid()}"


def lock_key(space: str, identity: Mapping[str, int]) -> str:
    """The lock file name (without suffix) for ``identity`` in ``space``."""
    if space == "generator":
        return f"{identity.get('cluster', 0)}-{identity['generator']}"
    if space == "node":
        return str(identity["node"] % (1 << NODE_KEY_BITS))
    return str(identity["node"])


def _identity_of(space: str, number: int, cluster: int) -> dict[str, int]:
    if space == "generator":
        return {"generator": number, "cluster": cluster}
    return {"node": number}


class LocalCoordinator(Coordinator):
    """A directory of lock files on this host, used as a pool of identities."""

    def __init__(self, url: CoordinatorUrl, *, default: bool = False) -> None:
        if fcntl is None:  # pragma: no cover - not POSIX
            raise ConfigurationError("local:// needs POSIX file locks (fcntl), not on this OS")
        url.check_known(OPTIONS)
        if url.hosts:
            raise ConfigurationError(
                f"local:// takes a directory, not a host ({url.hosts_text()}); write "
                "local:///absolute/dir (three slashes) or local:// for the default directory"
            )
        self.url = url.redacted()
        self.private = not url.path and DIRECTORY_VARIABLE not in os.environ
        self.directory = Path(url.path) if url.path else default_directory()
        self.ttl_s = url.number("ttl", DEFAULT_TTL_S, minimum=0.5)
        self._options_template = ClaimOptions.from_url(url)
        self.default = default

    @property
    def description(self) -> str:
        return f"local://{self.directory}"

    # -- the directory ---------------------------------------------------------------
    def space_directory(self, space: str, now_ms: int) -> tuple[Path, int]:
        """DIR/space, made if needed, and when it was made (ms since the epoch).

        ``now_ms`` is the claimant's clock, written as the creation time when
        the directory is made here.
        """
        self._prepare(self.directory, top=True)
        path = self.directory / space
        created = self._prepare(path, top=False)
        marker = path / ".created"
        if created:
            created_ms = now_ms
            _write_atomically(marker, json.dumps({"created_ms": created_ms}).encode())
            return path, created_ms
        try:
            created_ms = int(json.loads(marker.read_bytes())["created_ms"])
        except (OSError, ValueError, KeyError, TypeError):
            # Made a moment ago by someone still writing the marker, or the
            # marker was lost: assume the youngest possible directory.
            created_ms = now_ms
        return path, created_ms

    def _prepare(self, path: Path, *, top: bool) -> bool:
        """Make ``path`` if it is missing (True if we made it); check it if not."""
        mode = 0o700 if self.private else 0o777
        try:
            os.mkdir(path, mode)
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
        if self.private and top and (info.st_uid != os.geteuid() or info.st_mode & 0o077):
            # Another user could pre-create a shared default directory to
            # hold our IDs hostage or read our marks; refuse rather than share.
            raise ConfigurationError(
                f"the lock directory {path} must belong to this user (uid {os.geteuid()}) and "
                f"be private (mode 0700); it is uid {info.st_uid}, mode "
                f"{stat.S_IMODE(info.st_mode):o}. Remove it, or set {DIRECTORY_VARIABLE}"
            )
        return made

    # -- the Coordinator interface ---------------------------------------------------
    holds_configured_identities = True

    def _new_claim(
        self,
        options: ClaimOptions,
        clock: Clock | None,
        space: str,
        identity: Mapping[str, int] | None,
    ) -> LocalClaim:
        """A free identity of ``space`` from the pool, or exactly ``identity``: then
        if another process holds it, :class:`~idmint.errors.IdentityInUse` says which."""
        return LocalClaim(self, options, clock, space, identity)

    def list_claims(self) -> list[ClaimInfo]:
        rows: list[ClaimInfo] = []
        if not self.directory.is_dir():
            return rows
        for space in SPACES:
            path = self.directory / space
            if not path.is_dir():
                continue
            for lock in sorted(path.glob("*.lock"), key=_numeric_name):
                key = lock.name[: -len(".lock")]
                fd = _try_lock(lock)
                if fd is not None:  # free: nobody holds it
                    os.close(fd)
                    continue
                cluster, _, number = key.rpartition("-")
                mark, record = _read_mark(path / f"{key}.mark")
                rows.append(
                    ClaimInfo(
                        cluster=int(cluster or 0),
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


class LocalClaim(Claim):
    """One identity held by an flock on its lock file."""

    def __init__(
        self,
        coordinator: LocalCoordinator,
        options: ClaimOptions,
        clock: Clock | None,
        space: str,
        identity: Mapping[str, int] | None,
    ) -> None:
        what = "identity" if identity is not None else f"{space} ID claim"
        super().__init__(
            options=options,
            ttl_s=coordinator.ttl_s,
            clock=clock,
            description=f"{what} at {coordinator.description}",
        )
        self._coordinator = coordinator
        self.space = space
        self._fixed = dict(identity) if identity is not None else None
        self._fd: int | None = None
        self._directory_fd: int | None = None
        self._lock_path: Path | None = None
        self._mark_path: Path | None = None
        self._since_ms = 0

    # -- Claim hooks ------------------------------------------------------------------
    def _acquire(self) -> tuple[Mapping[str, int], int]:
        self._let_go()
        directory, created_ms = self._coordinator.space_directory(
            self.space, self.clock.time_ns() // 1_000_000
        )
        self._directory_fd = _share_lock_directory(directory)
        ttl_ms = round(self.ttl_s * 1000)
        fixed = self._fixed
        cluster = self.options.cluster or 0
        patience = FIXED_RETRY_S if fixed is not None else self.options.claim_timeout_s
        deadline = time.monotonic() + patience
        while True:
            self.soonest_holdoff_end_s = math.inf
            now_ms = self.clock.time_ns() // 1_000_000
            for identity in self._candidates(cluster):
                key = lock_key(self.space, identity)
                lock_path = directory / f"{key}.lock"
                fd = _try_lock(lock_path)
                if fd is None:
                    continue
                mark_path = directory / f"{key}.mark"
                mark, _ = _read_mark(mark_path)
                if fixed is None and self._held_off((self.space, key), mark, now_ms):
                    os.close(fd)
                    continue
                self._fd, self._lock_path, self._mark_path = fd, lock_path, mark_path
                self._since_ms = now_ms
                floor = mark.ceiling_ms if mark is not None else -1
                if created_ms + ttl_ms > now_ms:
                    # A young directory may have replaced one deleted under a
                    # live holder, which stops within a TTL: start after that.
                    floor = max(floor, created_ms + ttl_ms)
                return identity, floor
            if time.monotonic() >= deadline:
                raise self._nothing_free(directory, cluster)
            if self._sleep(self._next_look_s(deadline, every_s=0.05)):
                raise ClaimLost(f"{self.description}: closed while claiming")

    def _candidates(self, cluster: int) -> Iterator[dict[str, int]]:
        if self._fixed is not None:
            yield self._fixed
            return
        for number in self.options.pool:
            yield _identity_of(self.space, number, cluster)

    def _nothing_free(self, directory: Path, cluster: int) -> Exception:
        if self._fixed is not None:
            key = lock_key(self.space, self._fixed)
            _, record = _read_mark(directory / f"{key}.mark")
            holder = record.get("holder", "another process")
            shown = ", ".join(f"{name} {value}" for name, value in self._fixed.items())
            return IdentityInUse(
                f"{shown} is already in use on this host by {holder} (lock file "
                f"{directory / (key + '.lock')}); two processes with one identity would "
                "mint the same IDs. Give each process its own, or leave the identity out "
                "to claim a free one"
            )
        return self._pool_exhausted(f"cluster {cluster}", self._coordinator.description)

    def _renew(self, ceiling_ms: int) -> bool:
        if self._fd is None or self._mark_path is None or self._lock_path is None:
            return False
        now_ms = self.clock.time_ns() // 1_000_000
        self._write_mark(
            HighWaterMark(ceiling_ms=ceiling_ms, renewed_ms=now_ms, holder=holder_description())
        )
        # Checked after the write: a successor that locked a new file at our
        # path read a mark at least this high, so what we mint up to it is
        # clear of what the successor mints.
        return _same_file(self._fd, self._lock_path)

    def _write_mark(self, mark: HighWaterMark) -> None:
        assert self._mark_path is not None
        record = {**mark.to_json(), "since_ms": self._since_ms, "pid": os.getpid()}
        try:
            _write_atomically(self._mark_path, json.dumps(record).encode())
        except OSError as error:
            raise CoordinatorUnavailable(
                f"{self.description}: cannot write {self._mark_path}: {error.strerror or error}"
            ) from error

    def _release(self, final_ceiling_ms: int | None) -> None:
        try:
            if (
                final_ceiling_ms is not None
                and self._fd is not None
                and self._lock_path is not None
                and _same_file(self._fd, self._lock_path)
            ):
                now_ms = self.clock.time_ns() // 1_000_000
                self._write_mark(
                    HighWaterMark(
                        ceiling_ms=final_ceiling_ms,
                        renewed_ms=now_ms,
                        released_ms=now_ms,
                        holder=holder_description(),
                    )
                )
        finally:
            self._let_go()

    def _forget(self) -> None:
        # Closing our copies does not unlock: the parent's descriptors share
        # the same open file description, and the lock lives there.
        self._let_go()

    def _reclaim(self) -> None:
        self._let_go()
        super()._reclaim()

    def _let_go(self) -> None:
        for fd in (self._fd, self._directory_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = self._directory_fd = None


# -- files ----------------------------------------------------------------------------


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


def _read_mark(path: Path) -> tuple[HighWaterMark | None, dict[str, object]]:
    """The high-water mark at ``path`` (None if there is none) and its whole record."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, {}
    except OSError as error:
        raise CoordinatorUnavailable(
            f"cannot read the high-water mark {path}: {error.strerror or error}"
        ) from error
    try:
        record = dict(json.loads(data))
    except (ValueError, TypeError):
        record = {}
    return HighWaterMark.from_bytes(data), record


def _write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: readers see the old or the new file, never a part."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    try:
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _numeric_name(path: Path) -> tuple[int, ...]:
    stem = path.name[: -len(".lock")]
    return tuple(int(part) if part.isdigit() else -1 for part in stem.split("-"))


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
