"""What a generator made by the factory owns, and that closing it gives all of it back.

A claimed generator owns its claim and a share of the coordinator it came from.
The claim must be released first, while the coordinator's connections are still
there: released the other way round, the release opened a connection of its own
that nothing closed (an unclosed socket, issue 35's ResourceWarning on etcd).
One dropped without close() is released when Python collects it, as an unclosed
file is, with a ResourceWarning.
"""

from __future__ import annotations

import gc
import os
import warnings
import weakref

import pytest
from tests.integration.claims_helpers import CLAIMED_BACKENDS, Backend, wait_for

from idmint.coordinate import Claim, ClaimState
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


def _released(claim: Claim) -> bool:
    return claim.state is ClaimState.RELEASED


@pytest.mark.parametrize("backend", CLAIMED_BACKENDS, indirect=True)
def test_a_dropped_generator_warns_and_its_claim_is_released_above_what_it_minted(
    backend: Backend,
) -> None:
    """Dropped without close(), the generator is collected, a ResourceWarning names it,
    and its claim is released with the claim's ceiling as the mark: the next holder
    of the pool's only ID starts above every ID it minted. (Once the claim held the
    generator, which was never collected, and its ID, until the process exited.)"""
    url = backend.url(generators="0-0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        generator = new_generator("uid64", coordinator=url)
        claim = generator.claim
        assert claim is not None
        newest = max(value.timestamp_ms for value in generator.batch(500))
        dropped = weakref.ref(generator)
        del generator
        gc.collect()
    assert dropped() is None
    [warning] = [str(w.message) for w in caught if w.category is ResourceWarning]
    assert warning.startswith("unclosed generator Uid64Generator(generator=0, cluster=0"), warning
    assert "dropped without close(), so its claim is released now" in warning
    wait_for(lambda: backend.list_claims(url) == [], timeout=30, what="the claim released")
    assert _released(claim)
    with new_generator("uid64", coordinator=url) as successor:
        assert successor.generator == 0
        assert successor.generate().timestamp_ms > newest


@pytest.mark.parametrize("backend", ["local", "etcd"], indirect=True)
def test_dropping_one_of_several_generators_leaves_the_others_their_coordinator(
    backend: Backend,
) -> None:
    """The generators of one call share a coordinator, closed by the last of them: a
    dropped one releases its claim and its share, not the others'."""
    url = backend.url()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        first, second = new_generators("uid64", 2, coordinator=url)
        gone = first.claim
        assert gone is not None
        del first
        gc.collect()
    wait_for(
        lambda: [row.generator for row in backend.list_claims(url)] == [second.generator],
        timeout=30,
        what="the dropped generator's claim released",
    )
    assert _released(gone)
    assert len(set(second.batch(200).ints())) == 200
    second.close()
    assert backend.list_claims(url) == []


@pytest.mark.parametrize("backend", ["local"], indirect=True)
def test_a_fork_child_dropping_its_copy_leaves_the_parents_claim(backend: Backend) -> None:
    """The child's copy is collected in the child: nothing is released there (the claim
    is the parent's) and nothing is said."""
    url = backend.url()
    with new_generator("uid64", coordinator=url) as generator:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            os.close(read)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ResourceWarning)
                del generator
                gc.collect()
            os.write(write, str(len(caught)).encode())
            os._exit(0)
        os.close(write)
        _, status = os.waitpid(pid, 0)
        with os.fdopen(read) as said:
            assert said.read() == "0"
        assert os.waitstatus_to_exitcode(status) == 0
        assert generator.claim is not None
        assert not _released(generator.claim)
        assert [row.generator for row in backend.list_claims(url)] == [generator.generator]
        generator.generate()
