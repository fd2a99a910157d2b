"""The claims contract (:mod:`idmint.testing`) on every driver of the project, one test per check.

Every check that applies to a driver runs on it, and must pass: a check the
driver's hooks cannot run is not collected (static claims nothing; a
``local://`` hold lasts as long as its process, so it has no session to
expire and no server to stop), so a check that skips where it should run fails.
ZooKeeper runs twice, with java-uniqueid's queue lock (the default) and
without. The outage checks get a TTL long enough for a client to reconnect to a
restarted server before the session it restored times out again.
"""

from __future__ import annotations

import pytest
from tests.integration.claims_helpers import ALL_BACKENDS, DEFAULT_TTL_S, Backend, make_backend

from idmint.coordinate import CoordinatorUrl
from idmint.testing import CHECKS, HOOKS, Check, Hooks, run_check
from idmint.testing.kit import why_not

OUTAGE_TTL_S = 5.0
SCHEMES = {"static": "static", "postgres": "postgresql", "zk-lockfree": "zk"}
CONFIGURED = {"static"}
SERVED = {"zk", "zk-lockfree", "etcd", "postgres", "redis"}
"""Backends whose server the session runs, which Backend.hooks() can stop and start."""


def _applies(name: str, found: Check) -> bool:
    scheme = SCHEMES.get(name, name)
    hooks = (HOOKS.find(scheme) or Hooks)()
    url = CoordinatorUrl.parse(f"{scheme}://127.0.0.1:1/x" if name in SERVED else "memory://x")
    if name in SERVED:
        # The session's servers are stopped and started by Backend.hooks().
        needs = tuple(h for h in found.needs if h not in ("stop_server", "start_server"))
        found = Check(found.name, found.function, found.kind, needs, found.needs_servers)
    elif name in ("local", "static"):
        url = CoordinatorUrl.parse(f"{scheme}://")
    return why_not(found, configured=name in CONFIGURED, hooks=hooks, url=url) is None


RUNS = [(name, found) for name in ALL_BACKENDS for found in CHECKS if _applies(name, found)]
CASES = [pytest.param(name, found, id=f"{name}-{found.name}") for name, found in RUNS]


@pytest.mark.parametrize(("backend_name", "contract_check"), CASES)
def test_the_contract_holds(
    backend_name: str, contract_check: Check, request: pytest.FixtureRequest
) -> None:
    backend: Backend = make_backend(backend_name, request)
    ttl = OUTAGE_TTL_S if "outage" in contract_check.name else DEFAULT_TTL_S
    outcome = run_check(contract_check, backend.kit_url(ttl), backend.hooks())
    assert outcome.status == "passed", f"{outcome.line()}\n{outcome.trace}"
    assert not outcome.detail, f"left behind: {outcome.detail}"


def test_every_check_runs_somewhere_and_every_backend_runs_the_core() -> None:
    assert {found.name for _, found in RUNS} == {found.name for found in CHECKS}
    core = {
        "ids_are_unique_and_carry_the_identity",
        "bad_urls_and_options_are_configuration_errors",
    }
    for name in ALL_BACKENDS:
        assert core <= {found.name for runs_on, found in RUNS if runs_on == name}, name
    # The rules of sessions and servers run wherever the old suites ran them.
    for name in ["memory", "zk", "zk-lockfree", "etcd", "postgres", "redis"]:
        ran = {found.name for runs_on, found in RUNS if runs_on == name}
        assert {"an_expired_claim_moves_to_a_free_id", "a_long_outage_fences_then_resumes"} <= ran
