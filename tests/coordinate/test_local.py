"""The host-local coordinator (``local://``): lock files, marks, and where they live.

The contract every claiming driver keeps (pool, release, claims list, bad URLs)
is checked for ``local://`` with the others in tests/integration/test_claims_*.
These are the rules only a directory of lock files has: a crashed holder's lock
goes with it, a deleted directory is a lost claim, a young directory holds
claims back, and the default directory is private to its user.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tests.cli_process import assert_one_error_line, run_idmint
from tests.integration.claims_helpers import Minter, settled_local_directory, wait_for

from idmint import ConfigurationError, IdentityInUse, Uid64, new_generator
from idmint.coordinate import ClaimState, connect
from idmint.coordinate.hostpool import HostLocation
from idmint.coordinate.local import DEFAULT_TTL_S


def _url(directory: Path, **options: object) -> str:
    query = "&".join(f"{name}={value}" for name, value in options.items())
    return f"local://{directory}" + (f"?{query}" if query else "")


@pytest.fixture
def directory() -> Path:
    return settled_local_directory()


# -- a holder that dies -------------------------------------------------------------------

_HOLDER = textwrap.dedent(
    """
    import sys
    from idmint import new_generator
    generator = new_generator("uid64", coordinator=sys.argv[1])
    print(generator.generator, flush=True)
    while True:
        print(int(generator.generate()), flush=True)
    """
)


class Holder:
    """A Python process that claims through ``url`` and prints IDs until killed."""

    def __init__(self, url: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.generator = int(self.process.stdout.readline())
        # Minting, not just claimed, before anyone kills it.
        self.first = int(self.process.stdout.readline())

    def kill(self) -> list[int]:
        """SIGKILL it; every ID it printed."""
        self.process.send_signal(signal.SIGKILL)
        out, _ = self.process.communicate(timeout=30)
        return [self.first, *(int(line) for line in out.split())]


def test_a_killed_holders_id_comes_back_only_after_the_hold_off(directory: Path) -> None:
    """SIGKILL releases the lock at once, but its ID is held off and its mark floors.

    With another ID free, the next claimant takes that one; a claimant that must
    have the killed holder's ID waits until the mark's ceiling + skew (or TTL +
    skew of real time) and then mints strictly above the ceiling.
    """
    only_zero = _url(directory, generators="0-0", skew=1)
    holder = Holder(only_zero)
    assert holder.generator == 0
    killed_ms = time.time_ns() // 1_000_000
    minted = holder.kill()
    assert minted, "the holder minted nothing"
    mark = json.loads((directory / "generator" / "0-0.mark").read_text())
    assert mark["released_ms"] is None, "a killed holder released nothing"
    assert mark["ceiling_ms"] >= max(Uid64(v).timestamp_ms for v in minted)

    # A claimant whose skew allowance is a minute holds the ID off however slowly
    # this machine gets here.
    with new_generator("uid64", coordinator=_url(directory, generators="0-1", skew=60)) as other:
        assert other.generator == 1, "a free ID is taken before a held-off one"

    with new_generator("uid64", coordinator=only_zero) as successor:
        claimed_ms = time.time_ns() // 1_000_000
        after = successor.batch(2_000).ints()
    assert successor.generator == 0
    # The hold-off: until ceiling + skew by the clock, or TTL + skew of real time.
    assert claimed_ms >= min(mark["ceiling_ms"] + 1_000, killed_ms + 1_000)
    assert min(Uid64(v).timestamp_ms for v in after) > mark["ceiling_ms"]
    assert not set(after) & set(minted)


def test_a_deleted_directory_is_a_lost_claim_and_the_new_one_waits(directory: Path) -> None:
    """Lock files deleted under a live holder: it stops, and a newcomer starts after it.

    Both mint generator 0 at full speed at once. Without the checks they would
    share milliseconds: the holder until it noticed, the newcomer from a fresh
    directory with no marks.
    """
    url = _url(directory, generators="0-0", claim_timeout=1, wait_timeout=1)
    holder = new_generator("uid64", coordinator=url)
    ours = Minter(holder).start()
    theirs: Minter | None = None
    try:
        ours.wait_for_count(20_000, timeout=30)
        # The holder may be writing its mark into the directory while it goes: delete
        # what it writes meanwhile, too.
        while directory.exists():
            shutil.rmtree(directory, ignore_errors=True)
        newcomer = new_generator("uid64", coordinator=url)
        assert newcomer.generator == 0
        theirs = Minter(newcomer).start()
        claim = holder.claim
        assert claim is not None
        wait_for(
            lambda: claim.state is not ClaimState.ACTIVE,
            timeout=DEFAULT_TTL_S * 5,
            what="the holder to notice its lock file is gone",
        )
        theirs.wait_for_count(20_000, timeout=30)
    finally:
        ours.stop()
        if theirs is not None:
            theirs.stop()
            theirs.generator.close()
        holder.close()
    assert theirs is not None
    shared = set(ours.values) & set(theirs.values)
    assert not shared, f"the holder and the newcomer both minted {len(shared)} IDs"


def test_a_young_directory_holds_claims_back_for_a_ttl(tmp_path: Path) -> None:
    """A directory made a moment ago may have replaced one deleted under a holder."""
    url = _url(tmp_path / "fresh", ttl=0.5)
    with new_generator("uid64", coordinator=url) as generator:
        first = generator.generate()
    created = json.loads((tmp_path / "fresh" / "generator" / ".created").read_text())
    assert first.timestamp_ms > created["created_ms"] + 500


# -- static identities on one host -----------------------------------------------------------


def test_static_identity_is_refused_while_another_process_holds_it(directory: Path) -> None:
    holder = Holder("static://?generator=9&cluster=2")
    try:
        with pytest.raises(IdentityInUse, match=rf"generator 9, cluster 2 .*:{holder.process.pid}"):
            new_generator("uid64", generator=9, cluster=2)
        with pytest.raises(IdentityInUse):
            new_generator("uid64", coordinator="static://?generator=9&cluster=2")
        # Another identity, or the same in another cluster, is fine.
        new_generator("uid64", generator=9, cluster=3).close()
    finally:
        holder.kill()
    # Once the holder is gone the identity is free, above what it minted.
    with new_generator("uid64", generator=9, cluster=2) as after:
        assert after.generate().generator == 9


def test_elastic64_node_ids_that_share_low_bits_exclude_each_other() -> None:
    """Two static nodes equal modulo 256 could mint one ID at widths 8 and 9."""
    with new_generator("elastic64", node=5, node_bits=8) as narrow:
        narrow.generate()
        with pytest.raises(IdentityInUse, match="node 261"):
            new_generator("elastic64", node=261, node_bits=9)
        new_generator("elastic64", node=6, node_bits=9).close()


def test_short60_nodes_are_claimed_and_distinct() -> None:
    generators = [new_generator("short60") for _ in range(4)]
    try:
        nodes = [g.node for g in generators]
        assert len(set(nodes)) == 4
        values = [v for g in generators for v in g.batch(2_000).ints()]
        assert len(set(values)) == len(values)
        assert {v & 511 for v in generators[0].batch(10).ints()} == {nodes[0]}
    finally:
        for generator in generators:
            generator.close()


# -- which pool -------------------------------------------------------------------------------


@pytest.fixture
def no_configured_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IDMINT_LOCAL_DIR", raising=False)


@pytest.mark.usefixtures("no_configured_directory")
def test_no_directory_means_this_hosts_pool_whatever_the_environment(
    host_pool: HostLocation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TMPDIR, XDG_RUNTIME_DIR and the working directory no longer choose the pool."""
    tmp_path = tmp_path / "elsewhere"
    tmp_path.mkdir()
    with new_generator("uid64") as first:
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
        monkeypatch.setenv("TMPDIR", str(tmp_path))
        monkeypatch.chdir(tmp_path)
        with new_generator("uid64") as second:
            assert first.generator != second.generator
            claim = second.claim
            assert claim is not None
            assert "this host's pool" in claim.description
    assert list(tmp_path.iterdir()) == []


def test_a_relative_pool_directory_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes in two working directories would be two pools."""
    monkeypatch.setenv("IDMINT_LOCAL_DIR", "pool")
    with pytest.raises(ConfigurationError, match="relative"):
        new_generator("uid64")
    result = run_idmint("generate", "--count", "1")
    assert result.returncode == 2
    assert "relative" in assert_one_error_line(result.stderr)
    assert result.stdout == ""


@pytest.mark.parametrize(
    "url",
    [
        "local://somehost/dir",
        "local:///tmp/x?bogus=1",
        "local:///tmp/x?ttl=0.1",
        "local:///tmp/x?generators=9-3",
    ],
)
def test_bad_local_urls_are_configuration_errors(url: str) -> None:
    with pytest.raises(ConfigurationError):
        new_generator("uid64", coordinator=url)


@pytest.mark.parametrize("url", ["local:///", "local:////", "local:///."])
def test_the_root_directory_is_no_pool(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``local:///`` once meant a pool of lock files under ``/``, silently."""
    with pytest.raises(ConfigurationError, match="is the root directory"):
        new_generator("uid64", coordinator=url)
    result = run_idmint("generate", "--coordinator", url)
    assert result.returncode == 2
    assert "is the root directory" in assert_one_error_line(result.stderr)
    monkeypatch.setenv("IDMINT_LOCAL_DIR", "/")
    with pytest.raises(ConfigurationError, match="IDMINT_LOCAL_DIR directory '/' is the root"):
        new_generator("uid64")


def test_a_lock_file_closed_under_its_holder_is_a_lost_claim(directory: Path) -> None:
    """A descriptor closed or replaced under the holder: found at its next renewal."""
    path = directory / "generator" / "0-0.lock"
    with new_generator("uid64", coordinator=_url(directory, generators="0-1")) as generator:
        generator.generate()
        claim = generator.claim
        assert claim is not None
        (fd,) = [int(n) for n in os.listdir("/proc/self/fd") if _link(n) == str(path)]
        replacement = os.open(path, os.O_RDONLY)  # the same file, not locked
        os.dup2(replacement, fd)
        os.close(replacement)
        try:
            wait_for(lambda: claim.losses == 1, timeout=5, what="the holder to notice")
            wait_for(lambda: claim.state is ClaimState.ACTIVE, timeout=5, what="a new claim")
            assert generator.generate().generator == 1
        finally:
            os.close(fd)


def _link(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def test_an_unusable_directory_is_a_configuration_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigurationError, match="lock directory"):
        new_generator("uid64", coordinator=f"local://{blocker}/sub")


def test_claims_list_shows_every_space(directory: Path) -> None:
    url = _url(directory)
    with (
        new_generator("uid64", coordinator=url) as uid,
        new_generator("short60", coordinator=url) as short,
        new_generator("elastic64", coordinator=url) as elastic,
    ):
        rows = {(row.space, row.generator) for row in connect(url).list_claims()}
        assert rows == {
            ("generator", uid.generator),
            ("short60", short.node),
            ("node", elastic.node),
        }
    assert connect(url).list_claims() == []
