"""What a generator made by the factory owns, and that closing it gives all of it back.

A claimed generator owns its claim and a share of the coordinator it came from.
The claim must be released first, while the coordinator's connections are still
there: released the other way round, the release opened a connection of its own
that nothing closed (an unclosed socket, issue 35's ResourceWarning on etcd).
"""

from __future__ import annotations

import gc
import warnings

import pytest
from tests.integration.claims_helpers import CLAIMED_BACKENDS, Backend

from idmint.factory import new_generator, new_generators


@pytest.mark.parametrize("backend", CLAIMED_BACKENDS, indirect=True)
def test_closing_a_claimed_generator_leaves_nothing_open(backend: Backend) -> None:
    url = backend.url()
    gc.collect()  # what earlier tests left for the collector is not this test's
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        generators = new_generators("uid64", 2, coordinator=url)
        for generator in generators:
            generator.generate()
            generator.close()
        del generators, generator
        gc.collect()
    assert [str(warning.message) for warning in caught] == []
    assert backend.list_claims(url) == []


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
def test_close_with_runs_what_it_is_given_in_order_on_close(backend: Backend) -> None:
    closed: list[str] = []
    generator = new_generator("uid64", coordinator=backend.url())
    generator.close_with(lambda: closed.append("first"), lambda: closed.append("second"))
    assert closed == []
    generator.close()
    assert closed == ["first", "second"]
    generator.close()  # closed once only
    assert closed == ["first", "second"]
