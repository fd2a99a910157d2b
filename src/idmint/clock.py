"""Clocks: what generators read the time from, and claims their deadlines.

A generator reads the wall clock for the time it puts into IDs and the
monotonic clock for deadlines that must not move when the wall clock is
stepped. Both come from one injectable object so tests can drive time by hand,
including stepping the wall clock backwards.

A wait for a wall-clock time sleeps in short slices and compares the wall
clock with the monotonic clock after each, so a step back during the wait
hands control back to the caller at once rather than stretching the wait by
the size of the step. (A signal handler runs during a wait as during any
sleep; a caller whose handler only sets a flag sees it when the wait ends,
which a step back no longer postpones.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

__all__ = ["SYSTEM_CLOCK", "Clock", "ManualClock", "OffsetClock", "SystemClock"]

# time.sleep() on Linux wakes up to ~60 us late (timer slack plus scheduling);
# sleeping until this far before the target and spinning the rest means the
# next millisecond is caught within a few microseconds, not a tenth of it.
_SPIN_NS = 200_000
# The longest single sleep of a wait. A wall-clock target can recede while we
# sleep (the clock steps back); between slices the wait looks again, so a step
# is noticed at most this late.
_SLICE_NS = 5_000_000
# How far the wall clock may fall behind the monotonic clock during one wait
# before the wait calls it a step back. Slewing moves both clocks alike, and
# the order of the readings below only ever hides drift, so this is margin,
# not a tolerance for noise.
_STEP_SLACK_NS = 100_000


@runtime_checkable
class Clock(Protocol):
    """What a generator needs from a clock."""

    def time_ns(self) -> int:
        """Wall-clock time in nanoseconds since the Unix epoch (may step backwards)."""
        ...

    def monotonic_ns(self) -> int:
        """A clock that never goes backwards, for deadlines."""
        ...

    def sleep_until_ns(self, wall_ns: int, since_ns: int | None = None) -> None:
        """Return once ``time_ns() >= wall_ns``, as soon after as practical.

        Return early, without reaching ``wall_ns``, as soon as the wall clock
        is seen stepping back: before ``since_ns`` (the reading the caller
        decided to wait on), or falling behind the monotonic clock during the
        wait. The caller looks at the clock again and decides what the step
        means; a wait never stretches by the size of a step.
        """
        ...

    async def asleep_until_ns(self, wall_ns: int, since_ns: int | None = None) -> None:
        """Like :meth:`sleep_until_ns`, yielding to the event loop instead of blocking it."""
        ...


def _remaining_ns(clock: Clock, wall_ns: int, since_ns: int | None) -> Iterator[int]:
    """How far ``wall_ns`` still is, before each pause of a wait on ``clock``.

    Ends when the wall clock reaches ``wall_ns``, or early when it steps back
    (see :meth:`Clock.sleep_until_ns`). The drivers below only choose how to
    pause, so the blocking and the async wait see steps alike.
    """
    time_ns = clock.time_ns
    monotonic_ns = clock.monotonic_ns
    wall = time_ns()
    if since_ns is not None and wall < since_ns:
        return  # stepped back between the caller's decision and now
    # Wall read before monotonic here and after it in the loop: a pause between
    # two readings then only makes the wall clock look further ahead, so it
    # can hide a step of that size but never invent one.
    start_wall = wall
    start_mono = monotonic_ns()
    while wall < wall_ns:
        yield wall_ns - wall
        mono = monotonic_ns()
        wall = time_ns()
        if (mono - start_mono) - (wall - start_wall) > _STEP_SLACK_NS:
            return


def _sleep_until(clock: Clock, wall_ns: int, since_ns: int | None) -> None:
    for remaining in _remaining_ns(clock, wall_ns, since_ns):
        if remaining > _SPIN_NS:
            time.sleep(min(remaining - _SPIN_NS, _SLICE_NS) / 1e9)
        else:
            time.sleep(0)  # releases the GIL so other threads run while we spin


async def _asleep_until(clock: Clock, wall_ns: int, since_ns: int | None) -> None:
    import asyncio  # only async callers pay for importing it

    for remaining in _remaining_ns(clock, wall_ns, since_ns):
        await asyncio.sleep(min(remaining, _SLICE_NS) / 1e9 if remaining > _SPIN_NS else 0)


class SystemClock:
    """The process's real clocks."""

    # Plain builtins as attributes, so a generator's call costs no Python frame.
    time_ns = staticmethod(time.time_ns)
    monotonic_ns = staticmethod(time.monotonic_ns)

    def sleep_until_ns(self, wall_ns: int, since_ns: int | None = None) -> None:
        _sleep_until(self, wall_ns, since_ns)

    async def asleep_until_ns(self, wall_ns: int, since_ns: int | None = None) -> None:
        await _asleep_until(self, wall_ns, since_ns)

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """A clock that moves only when told to, for tests and simulations.

    Sleeping advances it to the wake-up time at once, so code under test runs
    at full speed. ``step_back`` moves only the wall clock, as an NTP step or a
    VM restore would; the monotonic clock never goes back.
    """

    def __init__(self, start_ns: int = 1_700_000_000_000_000_000) -> None:
        self._lock = threading.Lock()
        self._wall_ns = start_ns
        self._mono_ns = 0
        self.sleeps: list[int] = []
        """Every wait asked of the clock, in ns, in order (for assertions)."""

    def time_ns(self) -> int:
        return self._wall_ns

    def monotonic_ns(self) -> int:
        return self._mono_ns

    def advance_ns(self, ns: int) -> None:
        if ns < 0:
            raise ValueError("advance_ns() moves forward; use step_back_ns()")
        with self._lock:
            self._wall_ns += ns
            self._mono_ns += ns

    def advance_ms(self, ms: float) -> None:
        self.advance_ns(round(ms * 1_000_000))

    def step_back_ns(self, ns: int) -> None:
        with self._lock:
            self._wall_ns -= ns

    def step_back_ms(self, ms: float) -> None:
        self.step_back_ns(round(ms * 1_000_000))

    def sleep_until_ns(self, wall_ns: int, since_ns: int | None = None) -> None:
        with self._lock:
            if since_ns is not None and self._wall_ns < since_ns:
                return  # stepped back since the caller decided to wait: it looks again
            gap = wall_ns - self._wall_ns
            if gap > 0:
                self.sleeps.append(gap)
                self._wall_ns += gap
                self._mono_ns += gap

    async def asleep_until_ns(self, wall_ns: int, since_ns: int | None = None) -> None:
        import asyncio

        self.sleep_until_ns(wall_ns, since_ns)
        await asyncio.sleep(0)

    def __repr__(self) -> str:
        return f"ManualClock(time_ns={self._wall_ns})"


class OffsetClock:
    """The system clock shifted by a fixed amount: a host whose clock is off.

    For tests and drills: ``OffsetClock(-2000)`` behaves like a machine whose
    wall clock runs two seconds behind. The monotonic clock is not shifted.
    """

    def __init__(self, offset_ms: float) -> None:
        self.offset_ns = round(offset_ms * 1_000_000)

    def time_ns(self) -> int:
        return time.time_ns() + self.offset_ns

    monotonic_ns = staticmethod(time.monotonic_ns)

    def sleep_until_ns(self, wall_ns: int, since_ns: int | None = None) -> None:
        # Waits on this clock's own readings, so a changed offset is a step too.
        _sleep_until(self, wall_ns, since_ns)

    async def asleep_until_ns(self, wall_ns: int, since_ns: int | None = None) -> None:
        await _asleep_until(self, wall_ns, since_ns)

    def __repr__(self) -> str:
        return f"OffsetClock({self.offset_ns / 1e6:+g} ms)"
