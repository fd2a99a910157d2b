"""This host's pool: the default of ``local://``, one per host whoever asks.

Every process on a host shares it, whatever its user, its environment
(``TMPDIR``, ``XDG_RUNTIME_DIR``, the working directory), a private ``/tmp`` or
``/var/tmp`` (systemd's ``PrivateTmp=``), a pid namespace, a network namespace
of its own, or a mount namespace, as long as it shares the host's network,
its ``/var/lib/idmint`` or its ``/dev/shm``. Three *places* make that so:

=====================  ==============================================  =====================
place                  a hold there is                                 shared by processes
                                                                       that see
=====================  ==============================================  =====================
the network            the abstract UNIX socket ``@idmint/<space>/<key>``  one network namespace
``/var/lib/idmint``    an ``flock`` on ``holds/<space>/<key>.lock``     the host's disk there
``/dev/shm``           an ``flock`` on ``idmint-holds/<space>/<key>.lock``  one ``/dev/shm``
=====================  ==============================================  =====================

**A claim holds its key in every place it can, and takes it only when all are
free**, so two processes exclude each other when they share any one of the
three. A socket name is bound by one socket at a time and an ``flock`` held by
one open file; the kernel releases both when the last descriptor closes,
however the process ends, so no hold outlives its holder and nothing is left to
clean up. A child of ``fork()`` shares its parent's descriptors: closing its
copies lets nothing go. Programs started with ``exec`` inherit none of them.

**High-water marks live where the holds are**: each writer keeps them in a
directory of its own, named by its uid, in each place it holds in
(``/var/lib/idmint/<uid>``, where a reboot keeps them, and
``/dev/shm/idmint-<uid>``), so whoever shares a hold place with a holder reads
its marks there. A reader takes the highest of every writer's, so a mark can
only be raised by others, never lowered or removed: a hostile user can hold an
identity back (a mark far ahead, which a claimant skips) but cannot make anyone
reuse a timestamp. The copy in ``/dev/shm`` says whether a copy went to
``/var/lib/idmint`` too, and which one (its path, device and mount namespace):
a claimant that finds such a copy renewed in the last day whose
``/var/lib/idmint`` copy it cannot see refuses, naming both (two views of
``/var/lib`` on one host: after a restart with the clock behind, either could
repeat the other's IDs).

**Who may write where.** ``/var/lib/idmint`` belongs to root and is sticky and
world-writable (mode 1777, as ``/tmp``): every user makes a directory of its own
there, and none can remove another's. The first process that runs as root makes
it; ``deploy/idmint.service`` makes it before the service starts. The lock-file
directories (``holds``, ``idmint-holds`` and their ``<space>`` directories) are
sticky and writable by all, made by whoever comes first. Whoever made a lock
file, or its directory, can delete it: the holder finds its lock file gone at
its next renewal (each renewal writes the marks first and then checks the hold)
and stops, and a successor reads the marks it wrote. Anything in the pool that
is not what idmint makes (a symlink, a FIFO, a directory that others could
empty, a file we may not read) is an error naming it.

Where ``/var/lib/idmint`` is missing and cannot be made (not root, or a
read-only ``/var/lib``), a process holds and marks in ``/dev/shm`` alone and says
so once (:class:`VolatileMarks`): those marks are lost at a reboot. Where it
exists but this process cannot write it (read-only, or mode 755 for a process
that is not root), the claim is refused: the processes that hold there would
not see this one's holds.

Every writer also leaves ``/var/lib/idmint/<uid>/.host``: the boot, pid
namespace and mount namespace it wrote from. The container image's entrypoint
reads it to prove that the ``/var/lib/idmint`` it was given is the host's
(``deploy/container-entrypoint``).

Layout::

    /var/lib/idmint/               root, 1777
        holds/<space>/<key>.lock   flock'd while a process holds <key>; 1777 directories
        <uid>/                     the writer's own, 0755
            .host                  "<boot id> <pid namespace> <mount namespace>"
            <space>/<key>.mark     JSON {"ceiling_ms", "renewed_ms", "released_ms",
                                   "holder", "since_ms", "pid"}, replaced atomically
    /dev/shm/idmint-holds/<space>/<key>.lock
    /dev/shm/idmint-<uid>/<space>/<key>.mark
                                   the same, with {"persistent": true, "marks", "device",
                                   "mnt"} when a copy went to /var/lib/idmint
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import socket
import stat
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from idmint.coordinate.base import HighWaterMark
from idmint.coordinate.spaces import SPACES
from idmint.errors import ConfigurationError, CoordinatorUnavailable, VolatileMarks

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

FLOCK = fcntl is not None
"""Whether this OS has the file locks that hold identities (POSIX)."""

__all__ = [
    "FLOCK",
    "HOST",
    "HOST_MARKER",
    "HostHold",
    "HostLocation",
    "HostPool",
    "LockFile",
    "Place",
    "is_locked",
    "leave_host_marker",
    "mark_and_record",
    "share_lock_directory",
    "try_lock",
    "write_atomically",
]

MARK_LIMIT_BYTES = 65536
"""A mark is a small JSON object (with its history of holders, a few kB); anything
longer is not one of ours."""
HOLDS = "holds"
"""The lock files' directory in ``/var/lib/idmint``."""
VOLATILE_PREFIX = "idmint-"
"""``/dev/shm``'s entries of this pool: ``idmint-<uid>`` (marks), ``idmint-holds``."""
VOLATILE_HOLDS = f"{VOLATILE_PREFIX}{HOLDS}"
HOST_MARKER = ".host"
"""In a writer's ``/var/lib/idmint`` directory: the boot and namespaces it wrote from."""
SPLIT_RECENT_MS = 24 * 3600 * 1000
"""How long a holder that kept its marks in a ``/var/lib/idmint`` a claimant cannot see
makes that claimant refuse. Its ``/dev/shm`` copy floors the claim whatever its age;
a clock that steps back further than a day is no clock's doing."""
_WRITABLE_FIX = (
    "give this process write access to it (systemd: ReadWritePaths=/var/lib/idmint; a "
    "container: mount the host's /var/lib/idmint read-write; as root: chmod 1777 "
    "/var/lib/idmint)"
)


@dataclass(frozen=True)
class HostLocation:
    """Where this host's pool lives: fixed on a real host, private to a test."""

    namespace: str = "idmint"
    """The abstract socket names' prefix."""
    persistent: Path = Path("/var/lib/idmint")
    volatile: Path = Path("/dev/shm")
    """Its ``idmint-<uid>`` and ``idmint-holds`` entries: holds and marks that a reboot
    empties."""


HOST = HostLocation()
"""The one host pool. Nothing in the environment changes it: two processes that
could see different places would be two pools, and mint the same IDs."""


@dataclass(frozen=True)
class Place:
    """``/var/lib/idmint`` or ``/dev/shm`` as this process holds and marks in it."""

    persistent: bool
    marks: Path
    """This writer's own mark directory there."""
    holds: Path
    """The lock files every process of the place shares."""


_warned = False
_warned_lock = threading.Lock()


class HostHold:
    """An identity held in every place this process holds in, until closed."""

    def __init__(self, sock: socket.socket, name: str, locks: list[LockFile]) -> None:
        self._socket = sock
        self._address = b"\0" + name.encode()
        self._inode = os.fstat(sock.fileno()).st_ino
        self._locks = locks
        self.name = name

    def intact(self) -> bool:
        """Whether every hold is still ours: our bound socket and our locked files at
        their paths (a descriptor closed or replaced under us is a hold lost)."""
        return self._socket_is_ours() and all(lock.intact() for lock in self._locks)

    def _socket_is_ours(self) -> bool:
        fd = self._socket.fileno()
        if fd == -1:
            return False
        try:
            info = os.fstat(fd)
            bound = self._socket.getsockname()
        except OSError:
            return False
        return stat.S_ISSOCK(info.st_mode) and info.st_ino == self._inode and bound == self._address

    def close(self) -> None:
        if self._socket_is_ours():
            self._socket.close()
        else:
            # Its descriptor is closed or someone else's now: closing it would close theirs.
            self._socket.detach()
        for lock in self._locks:
            lock.close()


class HostPool:
    """Holds and marks of this host's pool (see the module docstring)."""

    def __init__(self, location: HostLocation | None = None) -> None:
        if not sys.platform.startswith("linux") or fcntl is None:
            raise ConfigurationError(
                "this host's pool (local:// with no directory) needs Linux's abstract "
                "sockets; give the pool a directory every process shares: "
                "IDMINT_LOCAL_DIR=/absolute/dir or local:///absolute/dir"
            )
        self.location = location or HOST
        self._places: tuple[Place, ...] | None = None
        self._view: dict[str, str] = {}
        """Which ``/var/lib/idmint`` this process marks in, for others' messages."""
        self._spaces_made: set[tuple[Path, str]] = set()
        self._lock = threading.Lock()

    @property
    def description(self) -> str:
        return "local:// (this host's pool)"

    def name(self, space: str, key: str) -> str:
        """The abstract socket name that holds ``key`` of ``space``."""
        return f"{self.location.namespace}/{space}/{key}"

    # -- places ----------------------------------------------------------------------------
    def places(self) -> tuple[Place, ...]:
        """Where this process holds and marks: ``/var/lib/idmint`` first, then ``/dev/shm``."""
        with self._lock:
            if self._places is None:
                self._places = self._choose_places()
            return self._places

    def _choose_places(self) -> tuple[Place, ...]:
        uid = os.geteuid()
        persistent = self.location.persistent
        places: list[Place] = []
        missing = ""
        if uid == 0 and not os.path.lexists(persistent):
            try:
                _make_directory(persistent, 0o1777)
            except FileExistsError:
                pass
            except OSError as error:
                missing = f"cannot make it: {error.strerror or error}"
        if os.path.lexists(persistent):
            _check_shared_directory(persistent)
            own = persistent / str(uid)
            try:
                _prepare_own_directory(own, uid)
                _prepare_holds_directory(persistent / HOLDS)
            except _Unwritable as error:
                raise ConfigurationError(
                    f"this process cannot hold identities in {persistent}, where the other "
                    f"processes of this host hold theirs ({error}): they would not see its "
                    f"holds; {_WRITABLE_FIX}"
                ) from None
            places.append(Place(True, own, persistent / HOLDS))
            self._view = _view_of(own)
            leave_host_marker(own / HOST_MARKER)
        elif not missing:
            missing = "it does not exist"
        volatile = self.location.volatile
        own = volatile / f"{VOLATILE_PREFIX}{uid}"
        try:
            _prepare_own_directory(own, uid)
            _prepare_holds_directory(volatile / VOLATILE_HOLDS)
        except _Unwritable as error:
            # /dev/shm shares holds with processes that do not see this host's
            # /var/lib/idmint; without it, that one serves.
            if not places:
                raise CoordinatorUnavailable(
                    f"nowhere to hold identities and keep high-water marks: {persistent}: "
                    f"{missing}; {error}"
                ) from None
        else:
            places.append(Place(False, own, volatile / VOLATILE_HOLDS))
        if not places[0].persistent:
            _warn_volatile(
                f"high-water marks are kept in {own}, which a reboot empties, because "
                f"{persistent} cannot be used ({missing}): after a reboot with the clock "
                f"behind, this host could repeat IDs. {_persistent_fix(persistent, uid)}"
            )
        return tuple(places)

    def _holds(self, place: Place, space: str) -> Path:
        """The lock files of ``space`` in ``place``, their directory made if need be."""
        directory = place.holds / space
        with self._lock:
            made = (place.holds, space) in self._spaces_made
        if not made:
            try:
                _prepare_holds_directory(directory)
            except _Unwritable as error:
                raise CoordinatorUnavailable(str(error)) from None
            with self._lock:
                self._spaces_made.add((place.holds, space))
        return directory

    # -- holds -----------------------------------------------------------------------------
    def hold(self, space: str, key: str) -> HostHold | None:
        """Hold ``key`` of ``space`` in every place, or None if anyone holds it in one.

        A key held in ``/dev/shm`` by a process that does not hold it in our
        ``/var/lib/idmint`` may be held by one with another view of ``/var/lib``:
        refused (:meth:`check_views`) if its marks say so.
        """
        name = self.name(space, key)
        # Sockets are not inherited across exec (PEP 446), nor are the lock files
        # (O_CLOEXEC): a program this one starts never keeps a hold alive after us.
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(b"\0" + name.encode())
        except OSError as error:
            sock.close()
            if error.errno == errno.EADDRINUSE:
                return None
            raise CoordinatorUnavailable(
                f"cannot hold @{name} (an abstract UNIX socket): {error.strerror or error}; "
                "a sandbox that forbids AF_UNIX sockets forbids this host's pool"
            ) from error
        locks: list[LockFile] = []
        try:
            for place in self.places():
                lock = try_lock(self._holds(place, space) / f"{key}.lock")
                if lock is None:
                    if not place.persistent:
                        self.check_views(space, key)
                    break
                locks.append(lock)
            else:
                return HostHold(sock, name, locks)
        except BaseException:
            _close_all(sock, locks)
            raise
        _close_all(sock, locks)
        return None

    def held(self) -> Iterator[tuple[str, str]]:
        """(space, key) of every identity held now: in this network, or in a place we share."""
        seen: set[tuple[str, str]] = set()
        for found in self._bound_names():
            if found not in seen:
                seen.add(found)
                yield found
        for holds in (self.location.persistent / HOLDS, self.location.volatile / VOLATILE_HOLDS):
            for space in (known.name for known in SPACES):
                try:
                    entries = list(os.scandir(holds / space))
                except FileNotFoundError:
                    continue
                except OSError as error:
                    raise CoordinatorUnavailable(
                        f"cannot list {holds / space}: {error.strerror or error}"
                    ) from error
                for entry in entries:
                    key = entry.name.removesuffix(".lock")
                    if (
                        key == entry.name
                        or (space, key) in seen
                        or not entry.is_file(follow_symlinks=False)
                    ):
                        continue
                    if is_locked(Path(entry.path)):
                        seen.add((space, key))
                        yield space, key

    def _bound_names(self) -> Iterator[tuple[str, str]]:
        prefix = f"@{self.location.namespace}/"
        try:
            with open("/proc/net/unix", encoding="ascii", errors="replace") as table:
                lines = table.read().splitlines()[1:]
        except OSError as error:
            raise CoordinatorUnavailable(
                f"cannot list this host's holds (/proc/net/unix): {error.strerror or error}"
            ) from error
        for line in lines:
            fields = line.split()
            # Num RefCount Protocol Flags Type St Inode Path: only bound sockets have a path.
            if len(fields) < 8 or not fields[7].startswith(prefix):
                continue
            space, _, key = fields[7][len(prefix) :].partition("/")
            if key:
                yield space, key

    # -- marks -----------------------------------------------------------------------------
    def read_mark(self, space: str, key: str) -> tuple[HighWaterMark | None, dict[str, object]]:
        """The highest mark any writer recorded for ``key`` (None if none did).

        Marks from several writers combine into one that is at least as
        cautious as each: the highest ceiling and the latest release; the
        record (holder, since) is the most recently renewed one's.
        """
        marks: list[tuple[HighWaterMark, dict[str, object]]] = []
        for directory in self._mark_directories():
            found = _read_mark_file(directory / space / f"{key}.mark")
            if found is not None:
                marks.append(found)
        if not marks:
            return None, {}
        releases = [mark.released_ms for mark, _ in marks]
        newest_mark, record = max(marks, key=lambda found: found[0].renewed_ms)
        combined = HighWaterMark(
            ceiling_ms=max(mark.ceiling_ms for mark, _ in marks),
            renewed_ms=newest_mark.renewed_ms,
            released_ms=None if None in releases else max(r for r in releases if r is not None),
            holder=newest_mark.holder,
            holders=newest_mark.holders,
        )
        return combined, record

    def write_mark(self, space: str, key: str, record: Mapping[str, object]) -> None:
        """Record a mark in this writer's own directory of each place, ``/var/lib``'s first.

        The ``/dev/shm`` copy says where the ``/var/lib/idmint`` copy went, for
        :meth:`check_views`; written second, it is never newer than that copy.
        """
        places = self.places()
        persistent = places[0] if places[0].persistent else None
        for place in places:
            data = dict(record)
            if not place.persistent:
                data["persistent"] = persistent is not None
                if persistent is not None:
                    data.update(self._view)
            directory = place.marks / space
            try:
                os.mkdir(directory, 0o755)
            except FileExistsError:
                pass
            except OSError as error:
                raise CoordinatorUnavailable(
                    f"cannot make {directory} for high-water marks: {error.strerror or error}"
                ) from error
            write_atomically(directory / f"{key}.mark", json.dumps(data).encode())

    def check_views(self, space: str, key: str) -> None:
        """Refuse if a holder of ``key`` in the last day kept its marks in a
        ``/var/lib/idmint`` this process does not see (:data:`SPLIT_RECENT_MS`)."""
        now_ms = time.time_ns() // 1_000_000
        for directory in _subdirectories(self.location.volatile, VOLATILE_PREFIX):
            uid = directory.name[len(VOLATILE_PREFIX) :]
            if not uid.isdigit():
                continue
            shown = directory / space / f"{key}.mark"
            found = _read_mark_file(shown)
            if found is None:
                continue
            mark, record = found
            if record.get("persistent") is not True:
                continue
            if max(mark.ceiling_ms, mark.renewed_ms) < now_ms - SPLIT_RECENT_MS:
                continue
            copy_path = self.location.persistent / uid / space / f"{key}.mark"
            copy = _read_mark_file(copy_path)
            if copy is not None and copy[0].renewed_ms >= mark.renewed_ms:
                continue
            raise ConfigurationError(
                f"{space} {key} was held by {mark.holder or 'a process'} (renewed "
                f"{_ago(now_ms, mark.renewed_ms)}), which keeps its high-water marks in "
                f"{record.get('marks')} (device {record.get('device')}, mount namespace "
                f"{record.get('mnt')}); {_seen_here(copy_path.parent.parent, copy is not None)}: "
                "processes of one host that do not share /var/lib/idmint can repeat each "
                "other's IDs after a restart with the clock behind. Give every process of "
                f"this host the same /var/lib/idmint (and remove {shown} once that process "
                "is gone for good)"
            )

    def _mark_directories(self) -> list[Path]:
        """Every writer's mark directory, in both places."""
        found: list[Path] = []
        persistent = self.location.persistent
        if os.path.lexists(persistent):
            _check_shared_directory(persistent)
            found.extend(p for p in _subdirectories(persistent, "") if p.name.isdigit())
        found.extend(
            p
            for p in _subdirectories(self.location.volatile, VOLATILE_PREFIX)
            if p.name[len(VOLATILE_PREFIX) :].isdigit()
        )
        return found


# -- lock files (shared with the directory pools of local.py) ----------------------------------


class LockFile:
    """A lock file held with ``flock``."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        info = os.fstat(fd)
        self._identity = (info.st_dev, info.st_ino)
        self.path = path

    def intact(self) -> bool:
        """Whether our descriptor still holds the lock of the file at our path (not
        deleted or replaced there, not closed or replaced under us)."""
        fd = self._fd
        return fd is not None and self._is_ours(fd) and _same_file(fd, self.path)

    def _is_ours(self, fd: int) -> bool:
        """Whether ``fd`` is still the open file we locked: that file, and locked (a
        descriptor of it opened since has no lock)."""
        try:
            info = os.fstat(fd)
        except OSError:
            return False
        return (info.st_dev, info.st_ino) == self._identity and _holds_flock(fd)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        # A descriptor closed under us may be someone else's now: leave it alone.
        if fd is not None and self._is_ours(fd):
            with contextlib.suppress(OSError):
                os.close(fd)


def try_lock(path: Path) -> LockFile | None:
    """``path`` locked (made if missing), or None if someone holds it."""
    assert fcntl is not None
    for _ in range(3):
        fd = _open_lock_file(path)
        assert fd is not None  # made if missing
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
            return LockFile(fd, path)
        os.close(fd)
    return None


def _open_lock_file(path: Path, *, make: bool = True) -> int | None:
    """A descriptor of the lock file at ``path``, made if missing (else None).

    Anyone may have made it: opened read-only (``flock`` needs no more),
    without following a link or blocking on a FIFO, and refused if it is not a
    file. An existing file is opened without ``O_CREAT``, which
    ``fs.protected_regular`` refuses on another user's file in a sticky directory.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for _ in range(10):
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            if not make:
                return None
            try:
                fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                continue
            except OSError as error:
                raise CoordinatorUnavailable(
                    f"cannot make the lock file {path}: {error.strerror or error}"
                ) from error
        except OSError as error:
            raise CoordinatorUnavailable(
                f"cannot open the lock file {path}: {error.strerror or error}; if it is not "
                "an idmint lock file, remove it"
            ) from error
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
        os.close(fd)
        raise CoordinatorUnavailable(
            f"{path} is not a file, so it cannot be a lock file; remove it"
        )
    raise CoordinatorUnavailable(f"the lock file {path} keeps vanishing as it is made")


def is_locked(path: Path) -> bool:
    """Whether someone holds the lock file at ``path`` (probed with a share lock, which
    no other probe conflicts with)."""
    assert fcntl is not None
    fd = _open_lock_file(path, make=False)
    if fd is None:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise CoordinatorUnavailable(f"cannot probe {path}: {error.strerror or error}") from error
    finally:
        os.close(fd)
    return False


def _same_file(fd: int, path: Path) -> bool:
    try:
        linked = os.stat(path, follow_symlinks=False)
        held = os.fstat(fd)
    except OSError:
        return False
    return (linked.st_dev, linked.st_ino) == (held.st_dev, held.st_ino)


def _holds_flock(fd: int) -> bool:
    """Whether the open file behind ``fd`` holds an exclusive ``flock`` (the kernel lists
    an open file's locks in ``/proc/self/fdinfo``)."""
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as info:
            lines = info.read().splitlines()
    except OSError:
        # No /proc here: the file's identity, checked by the caller, is all there is.
        return True
    return any(
        line.startswith(b"lock:") and b" FLOCK " in line and b" WRITE " in line for line in lines
    )


def share_lock_directory(directory: Path) -> tuple[int, tuple[int, int]]:
    """Hold a shared lock on ``directory`` (tmpfiles cleaners skip locked directories):
    its descriptor, and which directory that is."""
    assert fcntl is not None
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    with contextlib.suppress(OSError):  # only a courtesy to cleaners
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    held = os.fstat(fd)
    return fd, (held.st_dev, held.st_ino)


def _close_all(sock: socket.socket, locks: list[LockFile]) -> None:
    sock.close()
    for lock in locks:
        lock.close()


# -- directories --------------------------------------------------------------------------------


class _Unwritable(Exception):
    """A directory this process cannot write (so it cannot hold or mark there)."""


def _make_directory(path: Path, mode: int) -> None:
    """Make ``path`` with ``mode`` whatever the umask, as one step others cannot see
    half done (made under another name, then renamed into place). Raises
    ``FileExistsError`` if something is there already."""
    exists = FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path))
    if os.path.lexists(path):
        raise exists
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    os.mkdir(temporary, 0o700)
    try:
        os.chmod(temporary, mode)
        # rename() replaces an empty directory of our own made meanwhile, as good as
        # this one, and fails on anyone else's (the sticky bit) or on one in use.
        os.rename(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.rmdir(temporary)
        if os.path.lexists(path):
            raise exists from None
        raise


def _check_shared_directory(path: Path) -> None:
    """Refuse a ``persistent`` directory that others could use to lower marks."""
    try:
        info = os.lstat(path)
    except OSError as error:
        raise CoordinatorUnavailable(f"cannot use {path}: {error.strerror or error}") from error
    writable_by_others = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != 0
        or (writable_by_others and not info.st_mode & stat.S_ISVTX)
    ):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a directory"
        raise ConfigurationError(
            f"{path} holds this host's high-water marks and cannot be trusted: it is {kind}, "
            f"owned by uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}; it must be a "
            f"directory owned by root, and sticky if others may write it. As root: "
            f"rm -rf {path} && install -d -m 1777 {path}"
        )


def _made_or_found(path: Path, make: Callable[[Path], None]) -> os.stat_result:
    """What is at ``path``, made by ``make`` if nothing was (``_Unwritable`` if it cannot
    be made or looked at)."""
    try:
        make(path)
    except FileExistsError:
        pass
    except OSError as error:
        raise _Unwritable(f"cannot make {path}: {error.strerror or error}") from None
    try:
        return os.lstat(path)
    except OSError as error:
        raise _Unwritable(f"cannot use {path}: {error.strerror or error}") from None


def _prepare_holds_directory(path: Path) -> None:
    """Make ``path`` (sticky, writable by all: every process makes lock files there) if it
    is missing; refuse it if it is anything else."""
    info = _made_or_found(path, lambda made: _make_directory(made, 0o1777))
    if not stat.S_ISDIR(info.st_mode) or stat.S_IMODE(info.st_mode) & 0o1777 != 0o1777:
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a directory"
        raise ConfigurationError(
            f"{path} holds this host's lock files, which every user's processes make: it must "
            f"be a directory writable by all and sticky (mode 1777), but it is {kind}, owned "
            f"by uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}. Remove it (as root, "
            "or as its owner)"
        )
    if not os.access(path, os.W_OK | os.X_OK):
        raise _Unwritable(f"{path} is read-only here")


def _prepare_own_directory(path: Path, uid: int) -> None:
    """Make ``path`` (0755, ours) if it is missing; refuse it if someone else could write it."""

    def make(made: Path) -> None:
        os.mkdir(made, 0o755)
        os.chmod(made, 0o755)  # whatever the umask: others read our marks

    info = _made_or_found(path, make)
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != uid
        or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    ):
        raise ConfigurationError(
            f"{path} should hold this user's high-water marks (uid {uid}), but it is owned by "
            f"uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}"
            f"{'' if stat.S_ISDIR(info.st_mode) else ', not a directory'}: someone else made "
            "it. Remove it (as root, or as its owner)"
        )
    if not os.access(path, os.W_OK):
        raise _Unwritable(f"{path} is read-only here")


def _subdirectories(parent: Path, prefix: str) -> list[Path]:
    """The real directories in ``parent`` whose names start with ``prefix``."""
    try:
        entries = list(os.scandir(parent))
    except FileNotFoundError:
        return []
    except OSError as error:
        raise CoordinatorUnavailable(
            f"cannot read {parent} for high-water marks: {error.strerror or error}"
        ) from error
    # A symlink or a file is nothing a writer of ours made: it can hold no mark.
    return [
        Path(entry.path)
        for entry in entries
        if entry.name.startswith(prefix) and entry.is_dir(follow_symlinks=False)
    ]


def _persistent_fix(persistent: Path, uid: int) -> str:
    """What makes ``persistent`` usable for marks that outlive a reboot, here."""
    existing = persistent.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        read_only = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        return (
            f"{existing} is read-only here: give this process the host's {persistent}, "
            f"writable (made once as root where it is writable: install -d -m 1777 "
            f"{persistent}; then systemd's ReadWritePaths={persistent}, or a container "
            "volume)"
        )
    if uid != 0:
        return f"Make it once as root: install -d -m 1777 {persistent}"
    return f"Make it: install -d -m 1777 {persistent}"


def _view_of(directory: Path) -> dict[str, str]:
    """Which ``directory`` this is, for a message: its path, device, mount namespace."""
    try:
        device = os.stat(directory).st_dev
        shown = f"{os.major(device)}:{os.minor(device)}"
    except OSError:
        shown = "unknown"
    try:
        namespace = os.readlink("/proc/self/ns/mnt")
    except OSError:
        namespace = "unknown"
    return {"marks": str(directory), "device": shown, "mnt": namespace}


def _seen_here(directory: Path, has_older: bool) -> str:
    """How this process sees the writer's ``directory``, for a message."""
    if not os.path.isdir(directory):
        return f"this process has no {directory}"
    view = _view_of(directory)
    return (
        f"this process's {directory} is on device {view['device']} (mount namespace "
        f"{view['mnt']}) and {'has older ones' if has_older else 'lacks them'}"
    )


def _ago(now_ms: int, then_ms: int) -> str:
    seconds = (now_ms - then_ms) / 1000
    if seconds < 0:
        return f"{-seconds:.0f} s ahead of this clock"
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


# -- files --------------------------------------------------------------------------------------


def _read_mark_file(path: Path) -> tuple[HighWaterMark, dict[str, object]] | None:
    """The mark at ``path``, or None if there is none.

    Written by anyone: opened without following links or blocking on a FIFO,
    and read only as far as a mark can be long. Anything else at the path is
    an error, as is a file we may not read: it could be a mark.
    """
    data = _read_small_file(path, "high-water mark")
    if data is None:
        return None
    if len(data) > MARK_LIMIT_BYTES:
        data = b""  # not ours: read as the most cautious mark there is
    return mark_and_record(data)


def _read_small_file(path: Path, what: str) -> bytes | None:
    """Up to ``MARK_LIMIT_BYTES + 1`` bytes of the file at ``path`` (None if there is none)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise CoordinatorUnavailable(
            f"cannot read the {what} {path}: {error.strerror or error}; if it is not "
            f"an idmint {what}, remove it"
        ) from error
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CoordinatorUnavailable(
                f"{path} is not a file, so it cannot be a {what}; remove it"
            )
        return os.read(fd, MARK_LIMIT_BYTES + 1)
    finally:
        os.close(fd)


def mark_and_record(data: bytes) -> tuple[HighWaterMark, dict[str, object]]:
    """A stored mark and its whole record (holder, since, pid)."""
    try:
        record = dict(json.loads(data))
    except (ValueError, TypeError):
        record = {}
    return HighWaterMark.from_bytes(data), record


def host_marker() -> bytes | None:
    """``<boot id> <pid namespace> <mount namespace>``: where and when this process runs
    (None where ``/proc`` cannot say)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
        pid_namespace = os.readlink("/proc/self/ns/pid")
        mount_namespace = os.readlink("/proc/self/ns/mnt")
    except OSError:
        return None
    return f"{boot} {pid_namespace} {mount_namespace}\n".encode()


def leave_host_marker(path: Path) -> None:
    """Leave :func:`host_marker` at ``path``, where it differs (best effort: it only lets a
    container's entrypoint prove that a directory it was given is the host's)."""
    marker = host_marker()
    if marker is None:
        return
    with contextlib.suppress(CoordinatorUnavailable):
        if _read_small_file(path, "marker") != marker:
            write_atomically(path, marker)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``, durably: readers see the old or the new file.

    The data reaches the disk before the name points at it, so a crash or a
    power cut leaves the old mark or the new one, never an empty file. The
    temporary file goes whatever fails (a full disk must not fill with them).
    """
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise CoordinatorUnavailable(f"cannot write {path}: {error.strerror or error}") from error
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise CoordinatorUnavailable(f"cannot write {path}: {error.strerror or error}") from error


def _warn_volatile(message: str) -> None:
    global _warned
    with _warned_lock:
        if _warned:
            return
        _warned = True
    warnings.warn(message, VolatileMarks, stacklevel=2)
