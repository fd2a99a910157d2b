"""The claims contract as a kit: checks any coordinator driver can be run through.

Every rule a coordinator must keep (distinct identities, pool limits, release,
high-water marks, fencing through an expiry or an outage, clear errors) is a
:class:`Check` in :data:`CHECKS`, run against a coordinator URL. Each check
claims in a pool of its own inside the URL's (a root under its root, a table
beside its table: :meth:`~idmint.coordinate.Coordinator.pool_within`),
releases everything it claimed, and removes the pool where the driver's test
adapter can (:mod:`idmint.testing.hooks`). A check that needs to reach into the
store (expire a session, stop the server, read a mark) runs only where the
adapter can, and is otherwise skipped, saying so.

From a shell (exit status 0 when no check failed, 1 when one did, 2 for a bad
URL or usage)::

    python -m idmint.testing zk://127.0.0.1:2181/idmint?session_timeout=2

From Python::

    >>> from idmint.testing import run
    >>> report = run("memory://kit-doctest?ttl=2")       # doctest: +SKIP
    >>> report.summary()                                  # doctest: +SKIP
    '17 passed, 3 skipped'

In a pytest suite, one test per check::

    from idmint.testing import contract_tests

    test_my_driver = contract_tests("consul://127.0.0.1:8500/idmint?ttl=2")
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from idmint.coordinate.url import CoordinatorUrl
from idmint.testing.checks import CHECKS
from idmint.testing.hooks import HOOKS, Hooks, hooks_for
from idmint.testing.kit import (
    Check,
    Outcome,
    Report,
    Skipped,
    Trial,
    check,
    run_check,
    run_checks,
)

__all__ = [
    "CHECKS",
    "HOOKS",
    "Check",
    "Hooks",
    "Outcome",
    "Report",
    "Skipped",
    "Trial",
    "check",
    "contract_tests",
    "hooks_for",
    "run",
    "run_check",
    "run_checks",
]

UrlSource = str | CoordinatorUrl | Callable[[Any], str | CoordinatorUrl]
HooksSource = Hooks | Callable[[Any], Hooks] | None


def run(
    url: str | CoordinatorUrl,
    hooks: Hooks | None = None,
    checks: Sequence[Check] = CHECKS,
    *,
    progress: Callable[[Outcome], None] | None = None,
) -> Report:
    """Run every check (or ``checks``) against ``url``; ``hooks``: the driver's test
    adapter (default: the one registered for the URL's scheme, if any)."""
    return run_checks(checks, url, hooks, progress=progress)


def contract_tests(
    url: UrlSource, *, hooks: HooksSource = None, checks: Sequence[Check] = CHECKS
) -> Callable[..., None]:
    """A pytest test function, parametrized with one case per check, for ``url``.

    Assign it to a name starting with ``test`` in a test module. ``url`` (and
    ``hooks``) may be a function of pytest's ``request``, for a server a
    fixture starts: ``lambda request: request.getfixturevalue("consul_url")``.
    A skipped check is a skipped test, with its reason; a failed one fails
    with what broke.
    """
    import pytest

    def test_contract(contract_check: Check, request: Any) -> None:
        target = url(request) if callable(url) else url
        adapter = hooks(request) if callable(hooks) else hooks
        outcome = run_check(contract_check, target, adapter)
        if outcome.status == "skipped":
            pytest.skip(outcome.detail)
        if outcome.status == "failed":
            pytest.fail(f"{outcome.detail}\n{outcome.trace}", pytrace=False)

    parametrized: Callable[..., None] = pytest.mark.parametrize(
        "contract_check", checks, ids=[found.name for found in checks]
    )(test_contract)
    return parametrized
