"""What every coordinator promises through the CLI, whatever it is: static, local, a server.

The contract itself, in-process, is :mod:`idmint.testing`'s, run on every
backend by ``test_claims_kit.py``. Here: ``claims list`` as the CLI shows it,
an unreachable coordinator and a bad URL as one line and an exit status, and
the one option each driver names its own way (the TTL). Each test runs against
the backends of :data:`ALL_BACKENDS` (configured identity included) or
:data:`CLAIMED_BACKENDS` (claimed identities only); see ``claims_helpers``.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Callable

import pytest
from tests.integration.claims_helpers import (
    DEFAULT_TTL_S,
    SHARED_BACKENDS,
    STATIC_CLUSTER,
    STATIC_GENERATOR,
    Backend,
    CliProcess,
    all_backends,
    assert_one_error_line,
    backend_params,
    claimed_backends,
    decode,
    holder_of_this_process,
    now_ms,
    run_idmint,
    server_backends,
)

from idmint import (
    ConfigurationError,
    new_generator,
)

# -- claims list -----------------------------------------------------------------------


def _claims_json(url: str) -> list[dict[str, object]]:
    listed = run_idmint("claims", "list", "--coordinator", url, "--format", "json")
    assert listed.returncode == 0, listed.stderr
    return [json.loads(line) for line in listed.stdout.splitlines()]


@pytest.mark.parametrize("backend", backend_params(["static", *SHARED_BACKENDS]), indirect=True)
def test_cli_claims_list_shows_holder_since_and_high_water_mark(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    url = backend.url()
    if not backend.claims:
        assert _claims_json(url) == [
            {
                "cluster": STATIC_CLUSTER,
                "generator": STATIC_GENERATOR,
                "holder": "static (configured, not claimed)",
                "since_ms": None,
                "high_water_mark_ms": None,
                "state": "static",
                "space": "generator",
            }
        ]
        return

    minting = exit_stack.enter_context(
        CliProcess("generate", "--coordinator", url, "--count", "0", stamp=False)
    )
    minting.wait_for_lines(1_000, timeout=30, what="the CLI to mint its first IDs")
    printed = decode(minting.lines[:1_000])
    generator = printed[0].generator
    newest_printed = max(i.timestamp_ms for i in printed)

    rows = _claims_json(url)
    listed_at = now_ms()

    assert len(rows) == 1, rows
    row = rows[0]
    assert row["generator"] == generator
    assert row["cluster"] == printed[0].cluster
    assert row["holder"] == holder_of_this_process(minting.pid)
    since = row["since_ms"]
    mark = row["high_water_mark_ms"]
    assert isinstance(since, int)
    assert minting.started_ms <= since <= listed_at
    assert isinstance(mark, int)
    # The mark is a ceiling: at or above every timestamp used, at most one TTL ahead.
    assert newest_printed <= mark <= listed_at + round(DEFAULT_TTL_S * 1000)

    minting.send(signal.SIGTERM)
    assert minting.wait(timeout=30) == 128 + signal.SIGTERM, minting.stderr
    assert _claims_json(url) == [], "SIGTERM should release the claim"
    values = [int(i) for i in minting.ids()]
    assert len(set(values)) == len(values)


# -- failures: coordinator, configuration ------------------------------------------------


@server_backends
def test_cli_unreachable_coordinator_prints_one_line(backend: Backend) -> None:
    url = backend.unreachable_url(backend.new_root(), connect_timeout=1)
    started = time.monotonic()
    result = run_idmint("generate", "--coordinator", url, "--count", "5")
    waited = time.monotonic() - started

    assert result.returncode != 0
    assert result.stdout == ""
    assert waited < 6.0
    assert "Traceback" not in result.stderr, result.stderr
    line = assert_one_error_line(result.stderr)
    assert "127.0.0.1" in line


_Bad = Callable[[Backend], str]

BAD_CLAIMED_URLS: dict[str, _Bad] = {
    "unknown option": lambda b: b.url(bogus=1),
    "reversed range": lambda b: b.url(generators="5-2"),
    "not a url": lambda b: b.hosts(),
}
BAD_STATIC_URLS: dict[str, _Bad] = {
    "generator out of range": lambda b: b.url(generator=2048),
    "not a url": lambda b: "static",
}


def _bad_urls(backend: Backend) -> dict[str, str]:
    table = BAD_CLAIMED_URLS if backend.claims else BAD_STATIC_URLS
    return {case: make(backend) for case, make in table.items()}


@claimed_backends
def test_a_ttl_that_is_not_a_number_is_a_configuration_error(backend: Backend) -> None:
    """Each driver names its TTL option its own way (ZooKeeper: session_timeout);
    the contract kit checks the options every driver shares."""
    with pytest.raises(ConfigurationError):
        new_generator("uid64", coordinator=backend.url(ttl="soon"))


@all_backends
def test_cli_bad_url_or_option_exits_2_with_one_line(backend: Backend) -> None:
    urls = _bad_urls(backend)
    for case in ("unknown option", "reversed range", "not a url", "generator out of range"):
        if case not in urls:
            continue
        result = run_idmint("generate", "--coordinator", urls[case], "--count", "3")
        assert result.returncode == 2, (case, result.stderr)
        assert result.stdout == "", case
        assert_one_error_line(result.stderr)
    listed = run_idmint("claims", "list", "--coordinator", urls["not a url"])
    assert listed.returncode == 2
    assert_one_error_line(listed.stderr)
