"""Clocks: what generators read the time from, and claims their deadlines.

A generator reads the wall clock for the time it puts into IDs and the
monotonic clock for deadlines that must not move when the wall clock is
stepped. Both come from one injectable object so tests can drive time by hand,
including stepping the wall clock backwards.
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
# A wait sleeps at most this long at a time, then looks at the wall clock again:
# a clock stepped back meanwhile is noticed within a slice, not after the step.
_SLICE_NS = 50_000_000
# How far the wall clock may fall behind the monotonic clock during a wait before
# it counts as a step back (NTP slewing moves it by 0.05 % at most).
_STEP_SLACK_NS = 1_000_000


@runtime_checkable
class Clock(Protocol):
    """What a generator needs from a clock."""

    def time_ns(self) -> int:
        """Wall-clock time in nanoseconds since the Unix epoch (may step backwards)."""
        ...

    def monotonic_ns(self) -> int:
        """A clock that never goes backwards, for deadlines."""
        ...

    def sleep_until_ns(self, wall_ns: int, longest_ns: int | None = None) -> None:
        """Return once ``time_ns() >= wall_ns``, as soon after as practical.

        Return early if the wall clock steps back meanwhile, or once
        ``longest_ns`` have passed on the monotonic clock: the caller looks at
        the clock again and decides (a generator counts a step, then waits
        within its tolerance or refuses).
        """
        ...

    async def asleep_until_ns(self, wall_ns: int, longest_ns: int | None = None) -> None:
        """Like :meth:`sleep_until_ns`, yielding to the event loop instead of blocking it."""
        ...


class SystemClock:
    """The process's real clocks."""

    # Plain builtins as attributes, so a generator's call costs no Python frame.
    time_ns = staticmethod(time.time_ns)
    monotonic_ns = staticmethod(time.monotonic_ns)

    def sleep_until_ns(self, wall_ns: int, longest_ns: int | None = None) -> None:
        for seconds in _slices(wall_ns, longest_ns):
            time.sleep(seconds)  # 0 releases the GIL so other threads run while we spin

    async def asleep_until_ns(self, wall_ns: int, longest_ns: int | None = None) -> None:
        import asyncio  # only async callers pay for importing it

        for seconds in _slices(wall_ns, longest_ns):
            await asyncio.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK = SystemClock()


def _slices(wall_ns: int, longest_ns: int | None) -> Iterator[float]:
    """The sleeps (in s; 0 to spin) that wait for the real wall clock to reach ``wall_ns``.

    They stop early when the wall clock falls behind the monotonic clock (it
    was stepped back) or once ``longest_ns`` have passed: the caller looks again.
    """
    now = time.time_ns()
    started = time.monotonic_ns()
    # Where the wall clock should read at each monotonic instant, were it not stepped.
    offset = now - started
    give_up = started + (longest_ns if longest_ns is not None else wall_ns - now)
    while now < wall_ns:
        mono = time.monotonic_ns()
        if now < mono + offset - _STEP_SLACK_NS or (longest_ns is not None and mono > give_up):
            return
        remaining = wall_ns - now
        yield min(remaining - _SPIN_NS, _SLICE_NS) / 1e9 if remaining > _SPIN_NS else 0.0
        now = time.time_ns()


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

    def sleep_until_ns(self, wall_ns: int, longest_ns: int | None = None) -> None:
        with self._lock:
            gap = wall_ns - self._wall_ns
            if longest_ns is not None:
                gap = min(gap, longest_ns)
            if gap > 0:
                self.sleeps.append(gap)
                self._wall_ns += gap
                self._mono_ns += gap

    async def asleep_until_ns(self, wall_ns: int, longest_ns: int | None = None) -> None:
        import asyncio

        self.sleep_until_ns(wall_ns, longest_ns)
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

    def sleep_until_ns(self, wall_ns: int, longest_ns: int | None = None) -> None:
        SYSTEM_CLOCK.sleep_until_ns(wall_ns - self.offset_ns, longest_ns)

    async def asleep_until_ns(self, wall_ns: int, longest_ns: int | None = None) -> None:
        await SYSTEM_CLOCK.asleep_until_ns(wall_ns - self.offset_ns, longest_ns)

    def __repr__(self) -> str:
        return f"OffsetClock({self.offset_ns / 1e6:+g} ms)"
