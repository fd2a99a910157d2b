"""Free TCP ports on 127.0.0.1 for test servers.

A port is handed out at most once per interpreter and is reserved for the life of the
interpreter, so a server that is stopped and restarted keeps its port and nothing else
in the test session is given it meanwhile.

Ports are drawn at random below the kernel's ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``): the kernel never picks those as the
source port of an outgoing connection, so a client cannot squat the port of a server
that is briefly stopped. Each port is also locked with ``flock`` on a file in
``$TMPDIR/idmint-test-ports``, which keeps concurrent test sessions and pytest-xdist
workers from picking the same port; the locks (and their files) go away with the process
that holds them. Without a writable lock directory the ports are only checked to be free;
without room below the ephemeral range, the kernel picks them (binding port 0).

Well-known ports of real servers (ZooKeeper 2181, etcd 2379/2380, ...) are below
:data:`LOWEST_PORT` and therefore never handed out.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import os
import random
import socket
import tempfile
import threading
from pathlib import Path

__all__ = ["LOOPBACK", "LOWEST_PORT", "PortAllocator", "free_port", "free_ports"]

LOOPBACK = "127.0.0.1"
"""The address every test server listens on."""

LOWEST_PORT = 10000
"""Lowest port the allocator hands out."""

_MAX_ATTEMPTS = 500


def ephemeral_port_range() -> tuple[int, int]:
    """Return the kernel's range of ephemeral (outgoing) ports, inclusive."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def _can_bind(port: int) -> bool:
    """Whether ``port`` can be bound on the loopback address right now.

    ``SO_REUSEADDR`` is deliberately not set, so ports with connections lingering in
    ``TIME_WAIT`` are avoided too.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


class PortAllocator:
    """Hands out distinct free ports on 127.0.0.1 and keeps them reserved."""

    def __init__(self, low: int, high: int, lock_dir: Path | None) -> None:
        """Allocate from ``[low, high)``; lock ports with files in ``lock_dir``.

        :param low: lowest candidate port.
        :param high: first port above the candidates.
        :param lock_dir: directory for the per-port lock files, or ``None`` to skip
            cross-process locking.
        """
        self.low = low
        self.high = high
        self.lock_dir = lock_dir
        self._given: set[int] = set()
        self._lock_fds: dict[int, int] = {}
        self._lock = threading.Lock()
        self._random = random.Random()

    @classmethod
    def default(cls) -> PortAllocator:
        """Build the allocator described in the module documentation."""
        low = LOWEST_PORT
        high = ephemeral_port_range()[0]
        shared = Path(tempfile.gettempdir()) / "idmint-test-ports"
        lock_dir: Path | None = shared
        try:
            shared.mkdir(exist_ok=True)
            if shared.stat().st_uid == os.getuid():
                shared.chmod(0o1777)  # shared by every user's test sessions
            if not os.access(shared, os.W_OK):
                lock_dir = None
        except OSError:
            lock_dir = None
        if high - low < 1000:  # no room below the ephemeral range: let the kernel pick
            low = high = 0
        return cls(low, high, lock_dir)

    def allocate(self) -> int:
        """Return a free port that this allocator has never returned before."""
        with self._lock:
            if self.high > self.low:
                for _ in range(_MAX_ATTEMPTS):
                    port = self._random.randrange(self.low, self.high)
                    if port in self._given or not self._reserve(port):
                        continue
                    if _can_bind(port):
                        self._given.add(port)
                        return port
                    self._release(port)
            for _ in range(_MAX_ATTEMPTS):
                port = self._kernel_port()
                if port not in self._given and self._reserve(port):
                    self._given.add(port)
                    return port
        raise RuntimeError("could not find a free TCP port on 127.0.0.1")

    def allocate_many(self, count: int) -> list[int]:
        """Return ``count`` distinct free ports."""
        return [self.allocate() for _ in range(count)]

    @staticmethod
    def _kernel_port() -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOOPBACK, 0))
            port: int = sock.getsockname()[1]
            return port

    def _lock_path(self, port: int) -> Path:
        assert self.lock_dir is not None
        return self.lock_dir / f"{port}.lock"

    def _reserve(self, port: int) -> bool:
        """Take the cross-process lock of ``port``; false if someone else holds it."""
        if port in self._lock_fds or self.lock_dir is None:
            return True
        path = self._lock_path(port)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # The holder deletes the file before unlocking it: if that happened between
            # our open() and flock(), we locked a deleted file and own nothing.
            if os.fstat(fd).st_ino != os.stat(path).st_ino:
                os.close(fd)
                return False
        except OSError as exc:
            os.close(fd)
            if isinstance(exc, FileNotFoundError) or exc.errno in (
                errno.EWOULDBLOCK,
                errno.EAGAIN,
                errno.EACCES,
            ):
                return False
            raise
        self._lock_fds[port] = fd
        return True

    def _release(self, port: int) -> None:
        """Drop the cross-process lock of ``port``, deleting its file first."""
        fd = self._lock_fds.pop(port, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                self._lock_path(port).unlink()
            os.close(fd)

    def close(self) -> None:
        """Release the cross-process locks and delete their files (done at exit).

        Ports handed out stay remembered: they are still never handed out again.
        """
        with self._lock:
            for port in list(self._lock_fds):
                self._release(port)


_default: PortAllocator | None = None
_default_lock = threading.Lock()


def _allocator() -> PortAllocator:
    global _default
    with _default_lock:
        if _default is None:
            _default = PortAllocator.default()
            atexit.register(_default.close)
        return _default


def free_port() -> int:
    """Return a free port on 127.0.0.1, never the same twice in this interpreter."""
    return _allocator().allocate()


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct free ports on 127.0.0.1."""
    return _allocator().allocate_many(count)
