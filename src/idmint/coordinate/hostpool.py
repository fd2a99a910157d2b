"""This host's pool: the default of ``local://``, one per host whoever asks.

Every process on a host shares it, whatever its user, its environment
(``TMPDIR``, ``XDG_RUNTIME_DIR``, the working directory), a private ``/tmp`` or
``/var/tmp`` (systemd's ``PrivateTmp=``), or a pid namespace. Two mechanisms
make that so, and neither depends on what a process sees of the filesystem:

**Holds are abstract UNIX sockets.** An identity is held by binding the socket
name ``@idmint/<space>/<key>`` in Linux's abstract namespace. The kernel keeps
one such namespace per network namespace, which is per host for everything but
containers with a network of their own. A name is bound by one socket at a
time; the kernel frees it when the last descriptor of the socket closes,
however the process ends, so no hold outlives its holder and nothing is left to
clean up. Any user may bind any free name: no one can unbind another's, so the
worst a hostile local user can do is hold names (exhaust the pool).

**High-water marks live where a reboot keeps them.** Each writer keeps its
marks in a directory of its own, named by its uid, under ``/var/lib/idmint``
(``<uid>/<space>/<key>.mark``). That directory belongs to root, may be
written by every user only if it is sticky (mode 1777, as ``/tmp``), and is
made so by the first process that runs as root; ``deploy/idmint.service`` makes
it before the service starts. A reader takes the highest mark of every
writer's directory, so a mark can only be raised by others, never lowered or
removed: a hostile user can hold an identity back (a mark far ahead, which a
claimant skips) but cannot make anyone reuse a timestamp.

A process that cannot write there (the directory is missing and it is not
root, or a sandbox made it read-only) keeps its marks in
``/dev/shm/idmint-<uid>`` instead and says so once (:class:`VolatileMarks`):
those are lost at a reboot and hidden from sandboxes with a private ``/dev``,
so a clock that comes back behind after a reboot could then meet a mark that
is gone. Readers read both places.

Layout::

    /var/lib/idmint/               root, 1777 (or 0755: only root writes marks there)
    /var/lib/idmint/<uid>/         the writer's own, 0755
        <space>/<key>.mark         JSON {"ceiling_ms", "renewed_ms", "released_ms",
                                   "holder", "since_ms", "pid"}, replaced atomically
    /dev/shm/idmint-<uid>/         the same, where /var/lib/idmint cannot be written
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
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from idmint.coordinate.base import HighWaterMark
from idmint.errors import ConfigurationError, CoordinatorUnavailable, VolatileMarks

__all__ = ["HOST", "HostLocation", "HostPool"]

MARK_LIMIT_BYTES = 4096
"""A mark is a small JSON object; anything longer is not one of ours."""


@dataclass(frozen=True)
class HostLocation:
    """Where this host's pool lives: fixed on a real host, private to a test."""

    namespace: str = "idmint"
    """The abstract socket names' prefix."""
    persistent: Path = Path("/var/lib/idmint")
    volatile: Path = Path("/dev/shm")
    """Its ``idmint-<uid>`` entries hold the marks of writers that cannot write ``persistent``."""


HOST = HostLocation()
"""The one host pool. Nothing in the environment changes it: two processes that
could see different places would be two pools, and mint the same IDs."""

_warned = False
_warned_lock = threading.Lock()


class Hold:
    """An identity held by a bound abstract socket, until closed."""

    def __init__(self, sock: socket.socket, name: str) -> None:
        self._socket = sock
        self.name = name

    def intact(self) -> bool:
        # Nobody can unbind a name they did not bind: the hold lasts while we keep it.
        return self._socket.fileno() != -1

    def close(self) -> None:
        self._socket.close()


class HostPool:
    """Holds and marks of this host's pool (see the module docstring)."""

    def __init__(self, location: HostLocation | None = None) -> None:
        if not sys.platform.startswith("linux"):
            raise ConfigurationError(
                "this host's pool (local:// with no directory) needs Linux's abstract "
                "sockets; give the pool a directory every process shares: "
                "IDMINT_LOCAL_DIR=/absolute/dir or local:///absolute/dir"
            )
        self.location = location or HOST
        self._own: Path | None = None
        self._lock = threading.Lock()

    @property
    def description(self) -> str:
        return "local:// (this host's pool)"

    def name(self, space: str, key: str) -> str:
        """The abstract socket name that holds ``key`` of ``space``."""
        return f"{self.location.namespace}/{space}/{key}"

    # -- holds ---------------------------------------------------------------------------
    def hold(self, space: str, key: str) -> Hold | None:
        """Hold ``key`` of ``space``, or None if another socket holds it."""
        name = self.name(space, key)
        # Sockets are not inherited across exec (PEP 446): a program this one
        # starts never keeps a hold alive after us.
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
        return Hold(sock, name)

    def held(self) -> Iterator[tuple[str, str]]:
        """(space, key) of every identity held on this host now."""
        prefix = f"@{self.location.namespace}/"
        try:
            with open("/proc/net/unix", encoding="ascii", errors="replace") as table:
                lines = table.read().splitlines()[1:]
        except OSError as error:
            raise CoordinatorUnavailable(
                f"cannot list this host's holds (/proc/net/unix): {error.strerror or error}"
            ) from error
        seen: set[tuple[str, str]] = set()
        for line in lines:
            fields = line.split()
            # Num RefCount Protocol Flags Type St Inode Path: only bound sockets have a path.
            if len(fields) < 8 or not fields[7].startswith(prefix):
                continue
            space, _, key = fields[7][len(prefix) :].partition("/")
            if key and (space, key) not in seen:
                seen.add((space, key))
                yield space, key

    # -- marks ---------------------------------------------------------------------------
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
        )
        return combined, record

    def write_mark(self, space: str, key: str, data: bytes) -> Path:
        """Record a mark in this writer's own directory; where it went."""
        directory = self.own_directory() / space
        try:
            os.mkdir(directory, 0o755)
        except FileExistsError:
            pass
        except OSError as error:
            raise CoordinatorUnavailable(
                f"cannot make {directory} for high-water marks: {error.strerror or error}"
            ) from error
        path = directory / f"{key}.mark"
        write_atomically(path, data)
        return path

    def own_directory(self) -> Path:
        """This writer's mark directory: under ``persistent`` if it can, else volatile."""
        with self._lock:
            if self._own is None:
                self._own = self._choose_own_directory()
            return self._own

    def _choose_own_directory(self) -> Path:
        uid = os.geteuid()
        persistent = self.location.persistent
        reason = ""
        if uid == 0 and not os.path.lexists(persistent):
            with contextlib.suppress(FileExistsError):
                try:
                    os.mkdir(persistent, 0o755)
                    # Sticky and world-writable, as /tmp: every user writes a
                    # directory of its own, and none can remove another's.
                    os.chmod(persistent, 0o1777)
                except OSError as error:
                    if error.errno != errno.EEXIST:
                        reason = f"cannot make it: {error.strerror or error}"
        if os.path.lexists(persistent):
            _check_shared_directory(persistent)
            own = persistent / str(uid)
            try:
                _prepare_own_directory(own, uid)
            except _Unwritable as error:
                reason = str(error)
            else:
                return own
        elif not reason:
            reason = "it does not exist (a process running as root makes it)"
        own = self.location.volatile / f"idmint-{uid}"
        try:
            _prepare_own_directory(own, uid)
        except _Unwritable as error:
            raise CoordinatorUnavailable(
                f"nowhere to keep high-water marks: {persistent}: {reason}; {error}"
            ) from None
        _warn_volatile(
            f"high-water marks are kept in {own}, which a reboot empties, because "
            f"{persistent} cannot be written ({reason}): after a reboot with the clock behind, "
            f"this host could repeat IDs. Make it once as root: "
            f"install -d -m 1777 {persistent}"
        )
        return own

    def _mark_directories(self) -> list[Path]:
        """Every writer's mark directory, in both places."""
        found: list[Path] = []
        persistent = self.location.persistent
        if os.path.lexists(persistent):
            _check_shared_directory(persistent)
            found.extend(_subdirectories(persistent, ""))
        found.extend(_subdirectories(self.location.volatile, "idmint-"))
        return found


class _Unwritable(Exception):
    """A mark directory this process cannot write (so it writes elsewhere)."""


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


def _prepare_own_directory(path: Path, uid: int) -> None:
    """Make ``path`` (0755, ours) if it is missing; refuse it if someone else could write it."""
    try:
        os.mkdir(path, 0o755)
        os.chmod(path, 0o755)  # whatever the umask: others read our marks
    except FileExistsError:
        pass
    except OSError as error:
        raise _Unwritable(f"cannot make {path}: {error.strerror or error}") from None
    try:
        info = os.lstat(path)
    except OSError as error:
        raise _Unwritable(f"cannot use {path}: {error.strerror or error}") from None
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


def _read_mark_file(path: Path) -> tuple[HighWaterMark, dict[str, object]] | None:
    """The mark at ``path``, or None if there is none.

    Written by anyone: opened without following links or blocking on a FIFO,
    and read only as far as a mark can be long. Anything else at the path is
    an error, as is a file we may not read: it could be a mark.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise CoordinatorUnavailable(
            f"cannot read the high-water mark {path}: {error.strerror or error}; if it is not "
            "an idmint mark, remove it"
        ) from error
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CoordinatorUnavailable(
                f"{path} is not a file, so it cannot be a high-water mark; remove it"
            )
        data = os.read(fd, MARK_LIMIT_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MARK_LIMIT_BYTES:
        data = b""  # not ours: read as the most cautious mark there is
    return mark_and_record(data)


def mark_and_record(data: bytes) -> tuple[HighWaterMark, dict[str, object]]:
    """A stored mark and its whole record (holder, since, pid)."""
    try:
        record = dict(json.loads(data))
    except (ValueError, TypeError):
        record = {}
    return HighWaterMark.from_bytes(data), record


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
