"""One pool per host, whoever runs idmint and however: whole processes on a simulated host.

Before, this host's pool was a directory chosen from the process's user and
environment (``$XDG_RUNTIME_DIR/idmint`` or ``<tmp>/idmint-<uid>``), so two
processes that differed only in their user, ``TMPDIR``, ``XDG_RUNTIME_DIR`` or
a private ``/tmp`` each had a pool of their own and both claimed generator 0:
tens of thousands of duplicates per pair. Its high-water marks lived in
``/tmp``, which a reboot empties, so a restart with the clock behind re-issued
what was issued before it. The shipped systemd unit (private /tmp, another
user) and the container entry point (which let ``local://`` through) did both.

Each test boots a host of its own (tests/faults/simulated_host.py): its own
abstract sockets, fresh volatile directories, a ``/var/lib`` kept across
reboots. Runs as root (setpriv, namespaces, mounts).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from tests.faults.simulated_host import DEPLOY, Outcome, Run, SimulatedHost, as_unit
from tests.faults.wallclock import build_shim

from idmint import Uid64

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and setpriv")

NOBODY = 65534


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("host-shim")
    directory.chmod(0o755)  # loaded by processes of other users too
    return build_shim(directory)


@pytest.fixture
def host(tmp_path: Path, shim: Path) -> SimulatedHost:
    return SimulatedHost(tmp_path / "host", shim=shim)


def _generate(count: int, *options: str) -> list[str]:
    return ["generate", "--count", str(count), *options]


def _assert_all_succeeded(outcomes: dict[str, Outcome]) -> None:
    failed = {name: o.stderr for name, o in outcomes.items() if o.returncode != 0}
    assert not failed, f"processes failed: {failed}"


def _duplicates(*groups: list[str]) -> list[str]:
    counts = Counter(value for group in groups for value in group)
    return [value for value, seen in counts.items() if seen > 1]


def _generator_of(outcome: Outcome) -> int:
    generators = {Uid64(line).generator for line in outcome.lines}
    assert len(generators) == 1, generators
    return generators.pop()


def test_seven_processes_of_all_kinds_share_one_pool(host: SimulatedHost) -> None:
    """Users, TMPDIR, XDG_RUNTIME_DIR (set, missing), a private /tmp, a pid namespace."""
    count = 200_000
    runs = [
        Run("root", _generate(count)),
        Run("tmpdir", _generate(count), env={"TMPDIR": "/var/tmp"}),
        Run("runtime-dir", _generate(count), env={"XDG_RUNTIME_DIR": "/mnt"}),
        Run("missing-runtime-dir", _generate(count), env={"XDG_RUNTIME_DIR": "/run/user/4242"}),
        Run("nobody", _generate(count), user=NOBODY),
        Run("private-tmp", _generate(count), private_tmp=True),
        Run("pid-namespace", _generate(count), pid_namespace=True),
    ]
    (outcomes,) = host.boot(runs)
    _assert_all_succeeded(outcomes)
    assert all(len(o.lines) == count for o in outcomes.values())
    twice = _duplicates(*(o.lines for o in outcomes.values()))
    assert not twice, f"{len(twice)} IDs minted by two processes"
    generators = [_generator_of(o) for o in outcomes.values()]
    assert len(set(generators)) == len(runs), generators


def test_the_contract_kit_passes_on_this_hosts_pool(host: SimulatedHost) -> None:
    """``python -m idmint.testing local://`` (then ``static://``) where the pool is the
    host's real one: its abstract sockets, its /var/lib/idmint and /dev/shm. The
    checks share the pool (there is one per host), each on IDs of its own; those
    needing a session to expire or a server to stop do not apply to holds that last
    as long as their process."""
    kit_run = Run("kit", ["local://"], module="idmint.testing")
    static_run = Run("static", ["static://?generator=1500"], module="idmint.testing")
    (outcomes, configured) = host.boot([kit_run], [static_run])
    kit = outcomes["kit"]
    assert kit.returncode == 0, kit.stdout + kit.stderr
    lines = kit.stdout.splitlines()
    assert lines[0] == "checking local:// with LocalHooks", lines[0]
    skipped = [line.split()[1].rstrip(":") for line in lines if line.startswith("skipped")]
    assert skipped == [
        "a_configured_identity_is_held_once",
        "a_configured_identity_is_refused_while_its_mark_is_renewed",
        "an_unreachable_coordinator_is_unavailable_quickly",
        "an_expired_claim_comes_back_above_its_mark",
        "an_expired_claim_moves_to_a_free_id",
        "a_store_that_forgets_holds_claimants_back_for_the_longest_lease",
        "a_short_outage_fences_then_resumes",
        "a_long_outage_fences_then_resumes",
        "an_outage_that_loses_the_session_fences_then_claims_again",
    ]
    assert lines[-1] == f"14 passed, 9 skipped (not run here: {', '.join(skipped)})", kit.stdout
    assert kit.stderr == ""
    # It claimed in the host's pool: the marks it left are the host's.
    assert list((host.var_lib / "idmint" / "0" / "generator").glob("0-*.mark"))
    # A configured identity is held there too, and refused beside a mark another renews.
    static = configured["static"]
    assert static.returncode == 0, static.stdout + static.stderr
    assert "passed  a_configured_identity_is_refused_while_its_mark_is_renewed" in static.stdout
    assert static.stdout.splitlines()[-1].startswith("4 passed, 19 skipped (not run here: "), (
        static.stdout
    )


@pytest.mark.parametrize(
    "identity",
    [("--coordinator", "local://?generators=5-5"), ("--generator", "5")],
    ids=["claimed", "static"],
)
def test_a_reboot_with_the_clock_behind_repeats_no_id(
    host: SimulatedHost, identity: tuple[str, ...]
) -> None:
    """The marks outlive the reboot: the same ID, 3 s behind, starts after them."""
    (before,) = host.boot([Run("before", _generate(400_000, *identity))])
    (after,) = host.boot([Run("after", _generate(100_000, *identity), clock_offset_ms=-3_000)])
    _assert_all_succeeded({**before, **after})
    assert _generator_of(before["before"]) == _generator_of(after["after"]) == 5
    twice = _duplicates(before["before"].lines, after["after"].lines)
    assert not twice, f"{len(twice)} IDs issued before the reboot were issued again"
    assert (host.var_lib / "idmint" / "0" / "generator" / "0-5.mark").is_file()


def test_a_user_who_cannot_keep_marks_for_a_reboot_is_told_once(host: SimulatedHost) -> None:
    """Before any root process made /var/lib/idmint: volatile marks and one line saying so."""
    (outcomes,) = host.boot([Run("nobody", _generate(3), user=NOBODY)])
    _assert_all_succeeded(outcomes)
    lines = outcomes["nobody"].stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("idmint: warning: high-water marks are kept in /dev/shm/idmint-")
    assert "install -d -m 1777 /var/lib/idmint" in lines[0]


def test_a_hostile_user_can_exhaust_the_pool_but_not_make_others_repeat_ids(
    host: SimulatedHost,
) -> None:
    """nobody holds every ID but two: of three root processes two mint on those, with
    no ID twice, and the third says the pool is exhausted."""
    squat = (
        "import socket, time\n"
        "held = [socket.socket(socket.AF_UNIX) for _ in range(2, 2048)]\n"
        "for n, s in enumerate(held, start=2):\n"
        "    s.bind(f'\\0idmint/generator/0-{n}'.encode())\n"
        "print('holding', flush=True)\n"
        "time.sleep(600)\n"
    )
    as_nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
    claim = ("--coordinator", "local://?claim_timeout=1")
    runs = [
        Run("a", _generate(300_000, *claim), beside=[[*as_nobody, sys.executable, "-c", squat]]),
        Run("b", _generate(300_000, *claim)),
        Run("c", _generate(300_000, *claim)),
    ]
    (outcomes,) = host.boot(runs)
    minted = {name: o for name, o in outcomes.items() if o.returncode == 0}
    refused = {name: o for name, o in outcomes.items() if o.returncode != 0}
    assert len(minted) == 2, {name: o.stderr for name, o in outcomes.items()}
    assert {_generator_of(o) for o in minted.values()} == {0, 1}
    assert not _duplicates(*(o.lines for o in minted.values()))
    (loser,) = refused.values()
    assert loser.returncode == 1
    assert loser.stdout == ""
    assert loser.stderr.count("\n") == 1
    assert "are held or held off" in loser.stderr


def test_a_lock_file_another_user_made_unreadable_is_an_error_naming_it(
    host: SimulatedHost,
) -> None:
    """Anyone may make a lock file first, and its maker may take its permissions away:
    others cannot take that identity then, and say why, naming the file."""
    planted = "/var/lib/idmint/holds/generator/0-0.lock"
    holds = ["/var/lib/idmint", "/var/lib/idmint/holds", "/var/lib/idmint/holds/generator"]
    plant = [
        ["install", "-d", "-m", "1777", *holds],
        ["install", "-m", "000", "-o", str(NOBODY), "/dev/null", planted],
    ]
    claimant = Run(
        "claimant",
        _generate(3, "--coordinator", "local://?generators=0-0"),
        user=61_234,
        before=plant,
    )
    (outcomes,) = host.boot([claimant])
    outcome = outcomes["claimant"]
    assert outcome.returncode == 69, outcome.stderr
    assert outcome.stdout == ""
    assert outcome.stderr.count("\n") == 1
    assert f"cannot open the lock file {planted}: Permission denied" in outcome.stderr


_FORKING_HOLDER = """
import os, subprocess, sys
from idmint import new_generator

generator = new_generator("uid64", coordinator="local://?generators=0-0")
generator.generate()
child = os.fork()
if child == 0:
    if sys.argv[1] == "close":
        generator.close()
    sys.exit(0)  # a normal exit: the child's atexit hooks run
os.waitpid(child, 0)
print(open("/var/lib/idmint/0/generator/0-0.mark").read())
second = subprocess.run(
    [sys.executable, "-m", "idmint", "generate", "--count", "1",
     "--coordinator", "local://?generators=0-0&claim_timeout=0.5"],
    capture_output=True, text=True,
)
print(second.returncode, second.stderr.strip())
print(generator.generate())
"""


@pytest.mark.parametrize("leave", ["exit", "close"])
def test_a_forked_child_that_exits_leaves_its_parents_hold(host: SimulatedHost, leave: str) -> None:
    """The child shares the parent's socket: its exit (or close) must not free the ID."""
    (outcomes,) = host.boot([Run("parent", [leave], code=_FORKING_HOLDER)])
    _assert_all_succeeded(outcomes)
    mark, refused, minted = outcomes["parent"].stdout.splitlines()
    assert json.loads(mark)["released_ms"] is None, "the child released the parent's mark"
    assert refused.startswith("1 "), "a second process must not get the parent's ID"
    assert "held or held off" in refused
    assert Uid64(minted).generator == 0


# -- the shipped deployment -------------------------------------------------------------------


def test_the_systemd_unit_shares_the_hosts_pool_and_restarts_above_its_marks(
    host: SimulatedHost,
) -> None:
    """The unit (another user, private /tmp, /var/tmp and /dev, a read-only system) beside
    a plain process took the same generator ID; each restart started from nothing.

    ``idmint generate`` stands in for the unit's ``idmint serve``: the sandbox is
    what decides which pool a process sees.
    """
    count = 200_000
    unit = as_unit("unit", _generate(count), uid=61_234)
    (together,) = host.boot([unit, Run("plain", _generate(count))])
    _assert_all_succeeded(together)
    assert not together["unit"].stderr, "the unit keeps its marks for reboots: no warning"
    ours = _generator_of(together["unit"])
    assert ours != _generator_of(together["plain"])
    assert not _duplicates(together["unit"].lines, together["plain"].lines)

    restart = as_unit(
        "restart",
        _generate(count, "--coordinator", f"local://?generators={ours}-{ours}"),
        uid=61_234,
    )
    restart.clock_offset_ms = -2_000
    (after,) = host.boot([restart])
    _assert_all_succeeded(after)
    assert _generator_of(after["restart"]) == ours
    assert not _duplicates(together["unit"].lines, after["restart"].lines)


def _entrypoint(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """deploy/container-entrypoint with a stand-in ``idmint`` that prints what it was given.

    The container's /var/lib is its own (a tmpfs): this machine's /var/lib/idmint may
    carry markers the host's idmint processes left, which would prove that pool.
    """
    stub = Path("/mnt/stub")
    script = (
        "mount -t tmpfs tmpfs /var/lib && "
        f"mount -t tmpfs tmpfs /mnt && mkdir {stub} && "
        f"printf '#!/bin/sh\\necho idmint \"$@\"\\n' > {stub}/idmint && chmod +x {stub}/idmint"
    )
    script += f' && PATH={stub}:$PATH exec sh {DEPLOY / "container-entrypoint"} "$@"'
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-ec", script, "sh", *args],
        env={"PATH": os.environ["PATH"], **(env or {})},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "env"),
    [
        ((), {}),
        ((), {"IDMINT_COORDINATOR": "local://"}),
        (("--coordinator", "local://"), {}),
        (("--coordinator=local://?generators=0-9",), {}),
        (("--coordinator", "local:///srv/pool"), {}),
        ((), {"IDMINT_COORDINATOR": "local://", "IDMINT_LOCAL_DIR": "/srv/pool"}),
    ],
    ids=["nothing", "variable", "flag", "flag-equals", "directory", "local-dir"],
)
def test_the_container_refuses_a_pool_in_its_own_filesystem(
    args: tuple[str, ...], env: dict[str, str]
) -> None:
    """Pools proven to be the host's: tests/faults/test_host_pool_namespaces.py."""
    result = _entrypoint(*args, env=env)
    assert result.returncode == 2, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("idmint: error: "), lines


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (("--coordinator", "zk://zk:2181/idmint"), {}),
        ((), {"IDMINT_COORDINATOR": "static://?generator=3"}),
    ],
    ids=["zk", "static"],
)
def test_the_container_starts_with_a_coordinator(
    args: tuple[str, ...], env: dict[str, str]
) -> None:
    result = _entrypoint(*args, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == " ".join(["idmint", "serve", *args]) + "\n"


def test_a_full_disk_is_one_line_and_leaves_no_temporary_files(host: SimulatedHost) -> None:
    """Each failed mark write used to leave its temporary file behind (90 in 6 s)."""
    fill = "dd if=/dev/zero of=/var/lib/idmint/filler bs=4096 2>/dev/null || true"
    full = Run(
        "full",
        _generate(3),
        before=[
            ["mkdir", "/var/lib/idmint"],
            ["mount", "-t", "tmpfs", "-o", "size=64k,mode=1777", "tmpfs", "/var/lib/idmint"],
            ["mkdir", "-p", "-m", "0755", "/var/lib/idmint/0/generator"],
            ["sh", "-c", fill],
        ],
        after=[["find", "/var/lib/idmint/0", "-type", "f"]],
    )
    (outcomes,) = host.boot([full])
    outcome = outcomes["full"]
    assert outcome.returncode == 69, outcome.stderr
    assert outcome.stderr.count("\n") == 1
    assert "No space left on device" in outcome.stderr
    assert outcome.after == "", "temporary files left behind"
