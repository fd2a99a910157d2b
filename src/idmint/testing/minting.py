"""Minting in a thread while a claim is watched: what the fencing checks measure with.

* :class:`Minter` mints from a generator in a thread, recording when each ID was
  asked for and returned, and every error.
* :class:`RenewalWatch` samples a claim's renewal counter, so a check can assert
  that no ID was issued past the deadline the renewals allowed.
* :func:`wait_for` waits for a condition with a deadline: nothing here sleeps in
  place of synchronisation.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from idmint.coordinate.base import Claim
from idmint.schemes import Uid64

__all__ = ["MintError", "Minter", "RenewalWatch", "minting", "wait_for", "wait_for_new_claim"]


def wait_for(
    predicate: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    check: Callable[[], None] | None = None,
    interval: float = 0.01,
) -> None:
    """Return once ``predicate()`` holds; ``TimeoutError`` naming ``what`` after ``timeout``.

    ``check`` runs before each look: it raises when waiting longer is pointless.
    """
    deadline = time.monotonic() + timeout
    while True:
        if check is not None:
            check()
        if predicate():
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)  # a poll of an in-process condition, not a stand-in for one


def wait_for_new_claim(claim: Claim, after_epoch: int, *, timeout: float) -> None:
    """Wait until ``claim`` has made a claim newer than ``after_epoch``."""

    def renewed() -> bool:
        grant = claim.last_grant
        return grant is not None and grant.epoch > after_epoch

    try:
        wait_for(renewed, timeout=timeout, what="a new claim")
    except TimeoutError as error:
        raise TimeoutError(f"{error}; the claim is {claim.state.value}: {claim.problem}") from None


@dataclass
class MintError:
    called_at: float
    raised_at: float
    error: BaseException


@dataclass
class Minter:
    """Calls ``generator.generate()`` in a thread until stopped, recording everything.

    For the i-th ID: ``values[i]`` (its int), ``asked[i]`` and ``returned[i]`` (the
    monotonic time before the call and after it returned). The generator decided to
    issue it somewhere between the two. Errors are recorded with the time of the call
    and of the raise, and minting carries on.
    """

    generator: Any
    values: list[int] = field(default_factory=list)
    asked: list[float] = field(default_factory=list)
    returned: list[float] = field(default_factory=list)
    errors: list[MintError] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Minter:
        self._thread = threading.Thread(target=self._run, name="minter", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        generate = self.generator.generate
        clock = time.monotonic
        values, asked, returned = self.values, self.asked, self.returned
        while not self._stop.is_set():
            before = clock()
            try:
                value = generate()
            except Exception as error:
                self.errors.append(MintError(before, clock(), error))
                continue
            after = clock()
            values.append(int(value))
            asked.append(before)
            returned.append(after)

    @property
    def count(self) -> int:
        return len(self.values)

    def wait_for_count(self, count: int, *, timeout: float, what: str = "") -> None:
        self._wait(lambda: len(self.values) >= count, timeout, what or f"{count} IDs minted")

    def wait_for_errors(self, count: int, *, timeout: float, what: str = "") -> None:
        self._wait(
            lambda: len(self.errors) >= count, timeout, what or f"{count} errors from generate()"
        )

    def _wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        try:
            wait_for(predicate, timeout=timeout, what=what, check=self._check_alive)
        except TimeoutError as timeout_error:
            raise TimeoutError(f"{timeout_error}; {self.describe()}") from None

    def describe(self) -> str:
        """The minting so far and the claim's state, for failure messages."""
        claim = getattr(self.generator, "claim", None)
        state = f"claim {claim.state.value} ({claim.problem})" if claim is not None else ""
        last = f"; last error: {self.errors[-1].error}" if self.errors else ""
        return f"{len(self.values)} IDs, {len(self.errors)} errors, {state}{last}"

    def _check_alive(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            raise AssertionError("the minting thread is not running")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            assert not self._thread.is_alive(), "the minting thread did not stop"

    def issued_between(self, start: float, end: float) -> list[int]:
        """Indexes of the IDs the generator certainly decided on within [start, end]."""
        return [i for i, t in enumerate(self.asked) if t >= start and self.returned[i] <= end]

    def __enter__(self) -> Minter:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class RenewalWatch:
    """Samples ``claim.renewals`` in a thread to bound the claim's deadline from above.

    A renewal observed first at ``o`` and not yet at the sample before, ``p``, landed
    in ``(p, o]``. The deadline it gives is at most its landing + TTL - margin, so at
    any time ``t`` the claim's deadline is at most ``max(o_k for p_k < t) + TTL -
    margin``: :meth:`check_deadline` asserts every ID was asked for before that bound.
    """

    def __init__(self, claim: Claim, *, interval: float = 0.002) -> None:
        self.claim = claim
        self.interval = interval
        started = time.monotonic()
        # Renewals before the watch began all landed before `started`.
        self.landed: list[tuple[float, float, int]] = [(-1.0, started, claim.renewals)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="renewal-watch", daemon=True)

    def _run(self) -> None:
        previous = time.monotonic()
        seen = self.landed[-1][2]
        while not self._stop.wait(self.interval):
            renewals = self.claim.renewals
            observed = time.monotonic()
            if renewals != seen:
                self.landed.append((previous, observed, renewals))
                seen = renewals
            previous = observed

    def renewals_after(self, moment: float) -> int:
        """How many renewals certainly landed after ``moment``."""
        before = [count for previous, _, count in self.landed if previous < moment]
        return self.landed[-1][2] - before[-1]

    def check_deadline(self, minter: Minter) -> None:
        """Assert no ID was issued past the deadline the observed renewals allowed."""
        allowance = self.claim.ttl_s - self.claim.margin_s
        landed = self.landed
        position = 0
        bound = -1.0
        for index, (asked, returned) in enumerate(zip(minter.asked, minter.returned, strict=True)):
            while position < len(landed) and landed[position][0] < returned:
                bound = max(bound, landed[position][1] + allowance)
                position += 1
            assert asked < bound, (
                f"ID #{index} ({Uid64(minter.values[index])}) was asked for at {asked:.3f}, "
                f"after the deadline {bound:.3f} the renewals before it allowed"
            )

    def __enter__(self) -> RenewalWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@contextlib.contextmanager
def minting(generator: Any) -> Iterator[tuple[Minter, RenewalWatch]]:
    """Mint from ``generator`` in a thread while watching its claim's renewals."""
    with RenewalWatch(generator.claim) as watch, Minter(generator) as minter:
        yield minter, watch
