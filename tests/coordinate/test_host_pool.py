"""This host's pool (``local://`` with no directory): holds and marks, in one process.

Each test gets a pool of its own (the ``host_pool`` fixture: its own socket
names, its own mark directories); the mechanism is the real one. What whole
processes under other users, environments and namespaces do with the real
locations is in tests/faults/test_host_pool_processes.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
import subprocess
import time
import warnings
from pathlib import Path

import pytest
from tests.integration.claims_helpers import wait_for

from idmint import ConfigurationError, IdentityInUse, PoolExhausted, new_generator
from idmint.coordinate import ClaimState, connect
from idmint.coordinate.hostpool import MARK_LIMIT_BYTES, HostLocation
from idmint.errors import CoordinatorUnavailable, VolatileMarks

NOBODY = 65534


def _mark(location: HostLocation, writer: str, key: str, ceiling_ms: int, **fields: object) -> Path:
    """A mark as the writer ``writer`` (a directory name) would leave it."""
    parent = location.persistent if not writer.startswith("idmint-") else location.volatile
    directory = parent / writer / "generator"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{key}.mark"
    record = {"ceiling_ms": ceiling_ms, "renewed_ms": ceiling_ms - 1000, "holder": "h:1"}
    path.write_text(json.dumps({**record, **fields}))
    return path


def _plant(path: Path, kind: str) -> Path:
    """Something that is not a file at ``path``: a FIFO, a symlink or a directory."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    return path


def _make_persistent(location: HostLocation) -> None:
    location.persistent.mkdir()
    location.persistent.chmod(0o1777)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_claims_hold_abstract_sockets_and_mark_under_the_writers_uid(
    host_pool: HostLocation,
) -> None:
    with new_generator("uid64") as first, new_generator("uid64") as second:
        assert first.generator != second.generator
        first.generate()
        names = Path("/proc/net/unix").read_text()
        for generator in (first, second):
            assert f"@{host_pool.namespace}/generator/0-{generator.generator}" in names
    info = os.stat(host_pool.persistent)
    assert (info.st_uid, oct(info.st_mode & 0o7777)) == (0, "0o1777"), "made sticky, by root"
    own = host_pool.persistent / str(os.geteuid())
    assert oct(os.stat(own).st_mode & 0o777) == "0o755", "others read our marks"
    mark = json.loads((own / "generator" / f"0-{first.generator}.mark").read_text())
    assert mark["released_ms"] is not None
    assert f"@{host_pool.namespace}/" not in Path("/proc/net/unix").read_text(), "released on close"


def test_a_claim_starts_after_the_highest_mark_of_any_writer(host_pool: HostLocation) -> None:
    """Another user's mark above ours still floors the claim: marks only ever rise."""
    _make_persistent(host_pool)
    now = _now_ms()
    _mark(host_pool, str(os.geteuid()), "0-0", now - 60_000, released_ms=now - 60_000)
    theirs = _mark(host_pool, str(NOBODY), "0-0", now + 700, released_ms=now - 300)
    os.chown(theirs.parent.parent, NOBODY, NOBODY)
    _mark(host_pool, "idmint-1234", "0-0", now + 400)
    with new_generator("uid64", coordinator="local://?generators=0-0") as generator:
        assert generator.generate().timestamp_ms > now + 700


def test_a_volatile_mark_floors_a_claim_too(host_pool: HostLocation) -> None:
    now = _now_ms()
    _mark(host_pool, f"idmint-{NOBODY}", "0-0", now + 500)
    with new_generator("uid64", coordinator="local://?generators=0-0") as generator:
        assert generator.generate().timestamp_ms > now + 500


def test_a_claim_never_starts_in_the_millisecond_it_was_made(host_pool: HostLocation) -> None:
    """A holder that just ended may have minted in this millisecond; there is no mark yet."""
    before = _now_ms()
    with new_generator("uid64") as generator:
        assert generator.generate().timestamp_ms > before


def test_an_id_held_by_any_socket_is_skipped(host_pool: HostLocation) -> None:
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    squatter.bind(f"\0{host_pool.namespace}/generator/0-0".encode())
    try:
        with new_generator("uid64", coordinator="local://?generators=0-1") as generator:
            assert generator.generator == 1
        with pytest.raises(IdentityInUse, match="generator 0"):
            new_generator("uid64", generator=0)
    finally:
        squatter.close()
    with new_generator("uid64", generator=0) as generator:
        assert generator.generator == 0


def test_a_mark_far_ahead_of_the_clock_is_skipped_and_named(host_pool: HostLocation) -> None:
    """A hostile user can hold an ID back with a mark; the claim takes another or says why."""
    _make_persistent(host_pool)
    poison = _mark(host_pool, str(NOBODY), "0-0", _now_ms() + 3 * 86_400_000)
    os.chown(poison.parent.parent, NOBODY, NOBODY)
    with new_generator("uid64", coordinator="local://?generators=0-1") as generator:
        assert generator.generator == 1
    with pytest.raises(PoolExhausted, match="a day ahead of this host's clock"):
        new_generator("uid64", coordinator="local://?generators=0-0&claim_timeout=0.2")


def test_a_mark_too_long_to_be_ours_counts_as_far_ahead(host_pool: HostLocation) -> None:
    _make_persistent(host_pool)
    path = _mark(host_pool, str(NOBODY), "0-0", 0)
    path.write_bytes(b"{" + b" " * MARK_LIMIT_BYTES + b"}")
    with new_generator("uid64", coordinator="local://?generators=0-1") as generator:
        assert generator.generator == 1


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_something_else_at_a_marks_path_is_an_error_not_a_hang(
    host_pool: HostLocation, kind: str
) -> None:
    _make_persistent(host_pool)
    directory = host_pool.persistent / str(NOBODY) / "generator"
    directory.mkdir(parents=True)
    path = _plant(directory / "0-0.mark", kind)
    with pytest.raises(CoordinatorUnavailable, match=str(path)):
        new_generator("uid64", coordinator="local://?generators=0-0")


@pytest.mark.parametrize(
    ("owner", "mode", "what"),
    [
        (NOBODY, 0o1777, "owned by uid 65534"),
        (0, 0o777, "mode 777"),
        (0, "symlink", "not a directory"),
    ],
)
def test_a_marks_directory_others_could_empty_is_refused(
    host_pool: HostLocation, owner: int, mode: int | str, what: str
) -> None:
    """Whoever could remove or rename other writers' directories could lower marks."""
    if mode == "symlink":
        elsewhere = host_pool.persistent.with_name("elsewhere")
        elsewhere.mkdir()
        host_pool.persistent.symlink_to(elsewhere)
    else:
        assert isinstance(mode, int)
        host_pool.persistent.mkdir()
        host_pool.persistent.chmod(mode)
        os.chown(host_pool.persistent, owner, owner)
    with pytest.raises(ConfigurationError, match=what):
        new_generator("uid64")


def test_our_mark_directory_made_by_someone_else_is_refused(host_pool: HostLocation) -> None:
    _make_persistent(host_pool)
    planted = host_pool.persistent / str(os.geteuid())
    planted.mkdir()
    os.chown(planted, NOBODY, NOBODY)
    with pytest.raises(ConfigurationError, match="someone else made it"):
        new_generator("uid64")


def test_where_marks_cannot_be_kept_for_a_reboot_they_go_to_volatile_with_one_warning(
    host_pool: HostLocation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setattr(
        "idmint.coordinate.hostpool.HOST",
        HostLocation(host_pool.namespace, blocker / "idmint", host_pool.volatile),
    )
    monkeypatch.setattr("idmint.coordinate.hostpool._warned", False)
    used = set()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            with new_generator("uid64") as generator:
                used.add(generator.generate().generator)
    assert [type(w.message) for w in caught] == [VolatileMarks], "one warning per process"
    assert "install -d -m 1777" in str(caught[0].message)
    volatile = host_pool.volatile / f"idmint-{os.geteuid()}" / "generator"
    assert {p.name for p in volatile.iterdir()} == {f"0-{g}.mark" for g in used}


def test_claims_list_shows_holds_with_their_holders(host_pool: HostLocation) -> None:
    with (
        new_generator("uid64") as uid,
        new_generator("short60") as short,
        new_generator("elastic64") as elastic,
    ):
        coordinator = connect("local://")
        rows = {(row.space, row.generator): row for row in coordinator.list_claims()}
        assert set(rows) == {
            ("generator", uid.generator),
            ("short60", short.node),
            ("node", elastic.node),
        }
        assert all(row.holder.endswith(f":{os.getpid()}") for row in rows.values())
    assert connect("local://").list_claims() == []


# -- holds: lock files beside the socket ----------------------------------------------------


def _descriptors() -> dict[int, str]:
    """This process's open descriptors and what each is."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            found[int(name)] = os.readlink(f"/proc/self/fd/{name}")
    return found


def _descriptor_of(target: str) -> int:
    (fd,) = [fd for fd, link in _descriptors().items() if link == target]
    return fd


def _socket_of(location: HostLocation, key: str) -> str:
    """``socket:[inode]`` of the socket that holds ``key``."""
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[7] == f"@{location.namespace}/generator/{key}":
            return f"socket:[{fields[6]}]"
    raise AssertionError(f"nothing holds {key}")


def _lock_file(location: HostLocation, place: str, key: str) -> Path:
    holds = (
        location.persistent / "holds"
        if place == "persistent"
        else location.volatile / "idmint-holds"
    )
    return holds / "generator" / f"{key}.lock"


def test_a_claim_holds_its_key_with_a_socket_and_a_lock_file_in_each_place(
    host_pool: HostLocation,
) -> None:
    with new_generator("uid64", coordinator="local://?generators=0-0") as generator:
        generator.generate()
        open_files = set(_descriptors().values())
        assert _socket_of(host_pool, "0-0") in open_files
        for place in ("persistent", "volatile"):
            path = _lock_file(host_pool, place, "0-0")
            assert str(path) in open_files
            assert oct(path.parent.stat().st_mode & 0o7777) == "0o1777", "every user makes locks"
            # A mark in each place, so that whoever shares one of them sees it.
        persistent = host_pool.persistent / "0" / "generator" / "0-0.mark"
        volatile = host_pool.volatile / "idmint-0" / "generator" / "0-0.mark"
        assert json.loads(volatile.read_text())["persistent"] is True
        assert json.loads(volatile.read_text())["marks"] == str(persistent.parent.parent)
        assert "persistent" not in json.loads(persistent.read_text())


@pytest.mark.parametrize("place", ["persistent", "volatile"])
def test_an_id_locked_in_either_place_is_held(host_pool: HostLocation, place: str) -> None:
    """A holder in another network namespace shows only as a locked file."""
    with new_generator("uid64", coordinator="local://?generators=0-0") as generator:
        generator.generate()  # makes the lock files' directories
    path = _lock_file(host_pool, place, "0-1")
    holder = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        with new_generator("uid64", coordinator="local://?generators=1-2") as generator:
            assert generator.generator == 2
        assert ("generator", 1) in {
            (r.space, r.generator) for r in connect("local://").list_claims()
        }
        with pytest.raises(IdentityInUse, match="generator 1"):
            new_generator("uid64", generator=1)
    finally:
        os.close(holder)


@pytest.mark.parametrize("what", ["socket", "persistent", "volatile", "reopened"])
def test_a_hold_closed_under_its_holder_is_a_lost_claim(host_pool: HostLocation, what: str) -> None:
    """Another thread's os.close(), a library that closes descriptors: the holder finds
    its socket or lock file gone from under it at its next renewal, and claims again.
    The descriptor's number, someone else's by then, is left alone."""
    with new_generator("uid64", coordinator="local://?generators=0-1") as generator:
        generator.generate()
        claim = generator.claim
        assert claim is not None
        if what == "socket":
            fd = _descriptor_of(_socket_of(host_pool, "0-0"))
            replacement = os.open("/dev/null", os.O_RDONLY)
        else:
            path = _lock_file(host_pool, "volatile" if what == "volatile" else "persistent", "0-0")
            fd = _descriptor_of(str(path))
            # "reopened": the same file at the same number, but not locked by it.
            replacement = os.open(path if what == "reopened" else "/dev/null", os.O_RDONLY)
        os.dup2(replacement, fd)  # closes ours: the number is someone else's now
        os.close(replacement)
        theirs = os.fstat(fd)
        try:
            wait_for(lambda: claim.losses == 1, timeout=5, what="the holder to notice")
            wait_for(lambda: claim.state is ClaimState.ACTIVE, timeout=5, what="a new claim")
            assert generator.generate().generator == 1, "0 is held off: its mark is live"
            still = os.fstat(fd)
            assert (still.st_dev, still.st_ino) == (theirs.st_dev, theirs.st_ino), "closed"
        finally:
            os.close(fd)


@pytest.mark.parametrize("place", ["persistent", "volatile"])
def test_a_lock_file_made_by_another_user_serves_and_its_deletion_is_a_lost_claim(
    host_pool: HostLocation, place: str
) -> None:
    """Anyone may make a lock file first, and whoever made it may delete it: the holder
    stops at its next renewal and claims again."""
    with new_generator("uid64", coordinator="local://?generators=0-0"):
        pass  # makes the directories
    path = _lock_file(host_pool, place, "0-1")
    path.touch(mode=0o600)
    os.chown(path, NOBODY, NOBODY)
    with new_generator("uid64", coordinator="local://?generators=1-2") as generator:
        assert generator.generate().generator == 1
        claim = generator.claim
        assert claim is not None
        path.unlink()
        wait_for(lambda: claim.losses == 1, timeout=5, what="the holder to notice")
        wait_for(lambda: claim.state is ClaimState.ACTIVE, timeout=5, what="a new claim")
        assert generator.generate().generator == 2


@pytest.mark.parametrize("place", ["persistent", "volatile"])
@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_something_else_at_a_lock_files_path_is_an_error_not_a_hang(
    host_pool: HostLocation, kind: str, place: str
) -> None:
    with new_generator("uid64", coordinator="local://?generators=1-1"):
        pass  # makes the directories
    path = _plant(_lock_file(host_pool, place, "0-0"), kind)
    with pytest.raises(CoordinatorUnavailable, match=re.escape(str(path))):
        new_generator("uid64", coordinator="local://?generators=0-0")


@pytest.mark.parametrize("mode", [0o777, 0o755, "symlink"])
def test_a_lock_directory_that_is_not_sticky_and_open_to_all_is_refused(
    host_pool: HostLocation, mode: int | str
) -> None:
    """Not sticky: anyone could delete others' lock files; closed: others could not make theirs."""
    _make_persistent(host_pool)
    holds = host_pool.persistent / "holds"
    if mode == "symlink":
        elsewhere = host_pool.persistent / "elsewhere"
        elsewhere.mkdir()
        elsewhere.chmod(0o1777)
        holds.symlink_to(elsewhere)
    else:
        assert isinstance(mode, int)
        holds.mkdir()
        holds.chmod(mode)
    with pytest.raises(ConfigurationError, match=f"{re.escape(str(holds))} holds this host's lock"):
        new_generator("uid64")


def test_holds_are_not_inherited_by_a_program_the_holder_starts(host_pool: HostLocation) -> None:
    with new_generator("uid64", coordinator="local://?generators=0-0") as generator:
        generator.generate()
        ours = {link for link in _descriptors().values() if "socket:" in link or ".lock" in link}
        child = subprocess.Popen(["sleep", "30"], close_fds=False)
        try:
            theirs = {
                os.readlink(f"/proc/{child.pid}/fd/{fd}")
                for fd in os.listdir(f"/proc/{child.pid}/fd")
            }
        finally:
            child.kill()
            child.wait()
    assert ours
    assert not ours & theirs, "a program started by the holder keeps a hold"


# -- two views of /var/lib on one host ------------------------------------------------------


def _volatile_copy(
    location: HostLocation, writer: int, key: str, *, renewed_ms: int, **fields: object
) -> Path:
    """The /dev/shm copy of a mark whose writer also kept one in its /var/lib/idmint."""
    directory = location.volatile / f"idmint-{writer}" / "generator"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{key}.mark"
    record = {
        "ceiling_ms": renewed_ms + 1000,
        "renewed_ms": renewed_ms,
        "released_ms": None,
        "holder": "elsewhere:77",
        "persistent": True,
        "marks": f"/var/lib/idmint/{writer}",
        "device": "0:99",
        "mnt": "mnt:[4026532777]",
    }
    path.write_text(json.dumps({**record, **fields}))
    return path


def test_a_recent_holder_whose_var_lib_is_not_ours_makes_a_claim_refuse(
    host_pool: HostLocation,
) -> None:
    """It kept its marks in a /var/lib/idmint this process does not see: after a restart
    with the clock behind, either could repeat the other's IDs. Both are named."""
    shown = _volatile_copy(host_pool, NOBODY, "0-0", renewed_ms=_now_ms() - 5_000)
    with pytest.raises(ConfigurationError) as refused:
        new_generator("uid64", coordinator="local://?generators=0-0")
    message = str(refused.value)
    assert "generator 0-0 was held by elsewhere:77 (renewed 5 s ago)" in message, message
    assert "/var/lib/idmint/65534 (device 0:99, mount namespace mnt:[4026532777])" in message
    assert f"this process has no {host_pool.persistent}/{NOBODY}" in message, message
    assert f"remove {shown} once" in message, message


def test_a_holder_whose_var_lib_copy_we_see_is_no_split(host_pool: HostLocation) -> None:
    renewed = _now_ms() - 5_000
    _volatile_copy(host_pool, NOBODY, "0-0", renewed_ms=renewed)
    _make_persistent(host_pool)
    copy = _mark(host_pool, str(NOBODY), "0-0", renewed + 1000, renewed_ms=renewed)
    os.chown(copy.parent.parent, NOBODY, NOBODY)
    with new_generator("uid64", coordinator="local://?generators=0-0") as generator:
        assert generator.generate().generator == 0


def test_a_day_old_holder_in_another_view_floors_a_claim_without_refusing(
    host_pool: HostLocation,
) -> None:
    long_ago = _now_ms() - 2 * 86_400_000
    _volatile_copy(host_pool, NOBODY, "0-0", renewed_ms=long_ago, ceiling_ms=long_ago + 1000)
    with new_generator("uid64", coordinator="local://?generators=0-0") as generator:
        assert generator.generate().generator == 0


def test_a_live_holder_in_another_view_is_refused(host_pool: HostLocation) -> None:
    """It holds the ID in /dev/shm only (its /var/lib/idmint is not ours): refused, not
    passed over, while it runs."""
    with new_generator("uid64", coordinator="local://?generators=1-1"):
        pass  # makes the directories
    _volatile_copy(host_pool, NOBODY, "0-0", renewed_ms=_now_ms())
    holder = os.open(_lock_file(host_pool, "volatile", "0-0"), os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.raises(ConfigurationError, match="generator 0-0 was held by elsewhere:77"):
            new_generator("uid64", coordinator="local://?generators=0-1")
    finally:
        os.close(holder)
