"""This host's pool (``local://`` with no directory): holds and marks, in one process.

Each test gets a pool of its own (the ``host_pool`` fixture: its own socket
names, its own mark directories); the mechanism is the real one. What whole
processes under other users, environments and namespaces do with the real
locations is in tests/faults/test_host_pool_processes.py.
"""

from __future__ import annotations

import json
import os
import socket
import time
import warnings
from pathlib import Path

import pytest

from idmint import ConfigurationError, IdentityInUse, PoolExhausted, new_generator
from idmint.coordinate import connect
from idmint.coordinate.hostpool import HostLocation
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
    path.write_bytes(b"{" + b" " * 10_000 + b"}")
    with new_generator("uid64", coordinator="local://?generators=0-1") as generator:
        assert generator.generator == 1


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_something_else_at_a_marks_path_is_an_error_not_a_hang(
    host_pool: HostLocation, kind: str
) -> None:
    _make_persistent(host_pool)
    directory = host_pool.persistent / str(NOBODY) / "generator"
    directory.mkdir(parents=True)
    path = directory / "0-0.mark"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
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
