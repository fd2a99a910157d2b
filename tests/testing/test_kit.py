"""The contract kit itself: what its command says, and that broken drivers fail it.

The kit runs on every driver of the project in ``tests/integration/test_claims_kit.py``
(and on this host's pool in a simulated host, ``tests/faults``). Here: the
command's lines and exit statuses, a driver that hands one ID to two claimants,
a holder that does not fence, and two drivers registered for one scheme. The
broken drivers come as any driver outside idmint does: a package whose metadata
registers them (:mod:`tests.testing.broken_drivers`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.testing.broken_drivers import BROKEN, PACKAGE, install, installed

from idmint import ConfigurationError, new_generator
from idmint.coordinate import connect, drivers
from idmint.testing import CHECKS, run
from idmint.testing.checks import by_name

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^(passed |FAILED |skipped) (\w+)")


def _kit(
    *args: str, site: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``python -m idmint.testing ARGS``, with ``site``'s packages on its path."""
    env = dict(os.environ)
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    return subprocess.run(
        [sys.executable, "-m", "idmint.testing", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def _outcomes(stdout: str) -> dict[str, str]:
    """Check name -> passed / FAILED / skipped, from the command's lines."""
    found = {}
    for line in stdout.splitlines():
        matched = LINE.match(line)
        if matched:
            found[matched.group(2)] = matched.group(1).strip()
    return found


# -- the command -------------------------------------------------------------------------


def test_the_command_passes_memory_and_says_what_it_skipped() -> None:
    result = _kit("memory://kit-command?ttl=2")

    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    outcomes = _outcomes(result.stdout)
    assert set(outcomes) == {found.name for found in CHECKS}, lines
    skipped = [name for name, status in outcomes.items() if status == "skipped"]
    assert skipped == [
        "a_configured_identity_is_held_once",
        "a_configured_identity_is_refused_while_its_mark_is_renewed",
        "an_unreachable_coordinator_is_unavailable_quickly",
        "a_store_that_forgets_holds_claimants_back_for_the_longest_lease",
    ]
    for line in lines:
        if line.startswith("skipped"):
            assert ": " in line, f"a skip must say why: {line}"
    # The closing line names what could not run here.
    passed = len(CHECKS) - len(skipped)
    assert lines[-1] == f"{passed} passed, 4 skipped (not run here: {', '.join(skipped)})"
    assert result.stderr == "", "the claims the checks lose are logged only with --verbose"


def test_the_command_runs_the_checks_named() -> None:
    names = ["close_releases_the_claim", "two_claimants_get_distinct_identities"]
    result = _kit("memory://kit-named", *(f"--check={name}" for name in names))
    assert result.returncode == 0, result.stdout + result.stderr
    assert list(_outcomes(result.stdout)) == names
    assert result.stdout.splitlines()[-1] == "2 passed"


def test_the_command_lists_the_checks() -> None:
    result = _kit("--list")
    assert result.returncode == 0
    assert [line.split(":")[0] for line in result.stdout.splitlines()] == [
        found.name for found in CHECKS
    ]


@pytest.mark.parametrize(
    ("args", "status", "says"),
    [
        (["memory://x?bogus=1"], 2, "does not take option(s) bogus"),
        (["zk://[::1"], 2, "without its partner"),
        (["nosuch://x"], 2, "unknown coordinator scheme 'nosuch'"),
        (["memory://x", "--check", "no_such_check"], 2, "no check called no_such_check"),
        (["zk://127.0.0.1:1/x?connect_timeout=0.5"], 69, "could not reach ZooKeeper"),
    ],
)
def test_a_bad_url_or_an_unreachable_server_is_one_line(
    args: list[str], status: int, says: str
) -> None:
    result = _kit(*args)
    assert result.returncode == status, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("idmint.testing: error: "), lines[0]
    assert says in lines[0]


# -- broken drivers fail it -----------------------------------------------------------------


def test_a_driver_that_gives_one_id_to_two_claimants_fails_with_a_url_alone(
    tmp_path: Path,
) -> None:
    site = install(tmp_path / "site", BROKEN)
    result = _kit("sharedid://anything?ttl=2", site=site)

    assert result.returncode == 1, result.stdout + result.stderr
    outcomes = _outcomes(result.stdout)
    failed = {name for name, status in outcomes.items() if status == "FAILED"}
    assert {
        "two_claimants_get_distinct_identities",
        "generators_option_limits_the_pool",
        "close_releases_the_claim",
        "pool_exhausted_after_claim_timeout",
    } <= failed, result.stdout
    # No test adapter: what needs one is skipped, saying so.
    for line in result.stdout.splitlines():
        if line.startswith("skipped") and "hook" in line:
            assert "no test adapter of this driver has" in line, line
    assert outcomes["an_expired_claim_moves_to_a_free_id"] == "skipped"
    closing = result.stdout.splitlines()[-1]
    assert re.fullmatch(
        rf"\d+ passed, {len(failed)} failed, \d+ skipped \(not run here: [a-z_, ]+\)", closing
    ), closing
    # Each failure on a line of its own, naming the check and what broke.
    failures = [line for line in result.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failures) == len(failed)
    for line in failures:
        assert ": " in line, line


def test_a_holder_that_does_not_fence_fails(registered: Path) -> None:
    fencing = [
        "an_expired_claim_comes_back_above_its_mark",
        "an_expired_claim_moves_to_a_free_id",
        "a_short_outage_fences_then_resumes",
        "an_outage_that_loses_the_session_fences_then_claims_again",
    ]
    report = run(
        "nofence://kit-nofence?ttl=2", checks=by_name(["close_releases_the_claim", *fencing])
    )

    statuses = {outcome.check.name: outcome.status for outcome in report.outcomes}
    assert statuses == {"close_releases_the_claim": "passed", **dict.fromkeys(fencing, "failed")}
    assert not report.ok
    assert report.summary() == f"1 passed, {len(fencing)} failed"


def test_the_same_checks_pass_on_the_driver_it_breaks() -> None:
    """The holder that does not fence is memory:// but for its renewal: there, they pass."""
    names = ["an_expired_claim_moves_to_a_free_id", "a_short_outage_fences_then_resumes"]
    report = run("memory://kit-fenced?ttl=2", checks=by_name(names))
    assert report.ok, [outcome.line() for outcome in report.outcomes]
    assert report.summary() == "2 passed"


# -- the registry: entry points only, and never two for one scheme ---------------------------


def test_a_driver_registered_by_another_package_is_found(registered: Path) -> None:
    assert (
        drivers()["sharedid"]
        == f"tests.testing.broken_drivers:SharedIdCoordinator (from {PACKAGE} 1.0)"
    )
    with connect("sharedid://x") as coordinator:
        assert type(coordinator).__name__ == "SharedIdCoordinator"


def test_two_drivers_for_one_scheme_are_an_error_naming_both(tmp_path: Path) -> None:
    with installed(
        tmp_path / "site",
        "[idmint.coordinators]\nmemory = tests.testing.broken_drivers:SharedIdCoordinator\n",
    ) as site:
        with pytest.raises(ConfigurationError) as refused:
            connect("memory://two")
        with pytest.raises(ConfigurationError):
            new_generator("uid64", coordinator="memory://two")
        # Other schemes are untouched.
        connect("static://?generator=1").close()
    message = str(refused.value)
    assert "idmint.coordinate.memory:MemoryCoordinator (from idmint " in message, message
    assert f"tests.testing.broken_drivers:SharedIdCoordinator (from {PACKAGE} 1.0)" in message
    assert "memory://" in message

    result = subprocess.run(
        [sys.executable, "-m", "idmint", "generate", "--coordinator", "memory://two"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])},
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "uninstall all but one" in result.stderr
