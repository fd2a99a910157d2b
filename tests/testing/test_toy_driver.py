"""A new driver is one file, its tests and its entry point: nothing else needs an edit.

:mod:`tests.testing.toy_lease_store` is a store of leases written on
:mod:`idmint.coordinate.leases` as a new database's driver would be, registered
by a package of its own. It passes the contract kit, its options are read,
checked and shown from the declaration it takes, and the CLI offers its scheme.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from idmint import ConfigurationError, new_generator
from idmint.coordinate import connect
from idmint.testing import CHECKS, run

ROOT = Path(__file__).resolve().parents[2]


def test_a_lease_store_in_one_file_passes_the_contract(toy_site: Path) -> None:
    report = run("toylease://kit?ttl=2")

    lines = [outcome.line() for outcome in report.outcomes]
    assert report.ok, lines
    skipped = {o.check.name for o in report.outcomes if o.status == "skipped"}
    # Configured identities are static://'s; its URL names no server to be unreachable.
    assert skipped == {
        "a_configured_identity_is_held_once",
        "a_configured_identity_is_refused_while_its_mark_is_renewed",
        "an_unreachable_coordinator_is_unavailable_quickly",
    }, lines
    assert report.count("passed") == len(CHECKS) - len(skipped)


def test_its_options_are_the_declaration_it_takes(toy_site: Path) -> None:
    with pytest.raises(ConfigurationError) as refused:
        connect("toylease://x?bogus=1")
    assert str(refused.value) == (
        "toylease:// does not take option(s) bogus; it takes claim_timeout, cluster, "
        "connect_timeout, generators, margin, max_ttl, skew, timeout, ttl, wait_timeout"
    )
    with pytest.raises(ConfigurationError, match="ttl=3 is longer than max_ttl=2"):
        connect("toylease://x?ttl=3&max_ttl=2")
    with new_generator("short60", coordinator="toylease://options?ttl=1&max_ttl=1") as made:
        assert made.claim is not None
        assert made.claim.ttl_s == 1.0
        assert 0 <= made.node < 512


def test_the_cli_offers_its_scheme(toy_site: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "idmint", "generate", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(toy_site), str(ROOT)]),
            "COLUMNS": "200",
        },
    )
    assert "toylease://" in result.stdout
    assert "zk://" in result.stdout  # beside the built-in ones
