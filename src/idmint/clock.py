"""Clocks: what generators read the time from, and claims their deadlines.

A generator reads the wall clock for the time it puts into IDs and the
monotonic clock for deadlines that must not move when the wall clock is
stepped. Both come from one injectable object so tests can drive time by hand,
including stepping the wall clock backwards.

A wait for a wall-clock time sleeps once to the moment it is due, in slices
of at most 5 ms, and compares the wall clock with the monotonic clock after
each, so a step back during the wait hands control back to the caller at once
rather than stretching the wait by the size of the step. (A signal handler
runs during a wait as during any sleep; a caller whose handler only sets a
flag sees it when the wait ends, which a step back no longer postpones.)

A generator at its cap waits once per tick, so the wake-up is what waiting
costs: one per millisecond, shared by the tick's IDs, and nothing between.
A blocking wait is one ``time.sleep`` (which ends up to the thread's timer
slack late, 50 us by default on Linux: the tick's IDs are all still there,
only the waiting call returns that much later). An async wait on asyncio's
own loops is a timer of the loop (see _LOOP_TIMER_SPIN_NS); on other loops
on Linux, uvloop above all, whose timers round to the nearest millisecond and
so cannot wait for the rest of a tick, it arms a timerfd the loop watches,
one per loop and shared by every wait on it, due to the microsecond.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import asyncio

__all__ = ["SYSTEM_CLOCK", "Clock", "ManualClock", "OffsetClock", "SystemClock"]

# Below this, a wait spins on the clock instead of sleeping: a wake-up costs
# more CPU than this much spinning and overshoots it several times (timer
# slack), so only waits shorter than any millisecond tick's (muid's
# microsecond ticks, a wait that starts at the boundary) spin.
_SPIN_NS = 20_000
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


def _sleep_until(clock: Clock, wall_ns: int, since_ns: int | None = None) -> None:
    # A clock's sleep_until_ns itself (the clock is its self): a frame less per wait.
    for remaining in _remaining_ns(clock, wall_ns, since_ns):
        if remaining > _SPIN_NS:
            time.sleep(min(remaining, _SLICE_NS) / 1e9)
        # else: look again at once (the GIL is held for at most _SPIN_NS)


async def _asleep_until(clock: Clock, wall_ns: int, since_ns: int | None = None) -> None:
    # A clock's asleep_until_ns itself, like _sleep_until.
    import asyncio  # only async callers pay for importing it

    loop: asyncio.AbstractEventLoop | None = None
    alarm: _LoopAlarm | None = None
    for remaining in _remaining_ns(clock, wall_ns, since_ns):
        if loop is None:
            loop = asyncio.get_running_loop()
            alarm = _alarm_of(loop)
        if alarm is not None and remaining > _SPIN_NS:
            await alarm.wake_at(loop, time.monotonic_ns() + min(remaining, _SLICE_NS))
        elif alarm is None and remaining > _LOOP_TIMER_SPIN_NS:
            await asyncio.sleep(min(remaining, _SLICE_NS) / 1e9)
        else:
            await asyncio.sleep(0)  # other tasks run; then look again


# asyncio's own loops round a timer's wait up to the millisecond (epoll's
# resolution), so their timer for the rest of a tick fires a little into the
# next tick, later and later each tick, until the rest is this short: then
# the wait yields to the loop until the tick is due instead. That stays in
# step at one wake-up per tick, and the loop's other timers in step with it.
_LOOP_TIMER_SPIN_NS = 200_000


_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1


class _Timerfd:
    """libc's timerfd calls (Linux), loaded when an async wait first needs them."""

    def __init__(self) -> None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        self.create = libc.timerfd_create
        self.create.argtypes = [ctypes.c_int, ctypes.c_int]
        self.create.restype = ctypes.c_int
        self.settime = libc.timerfd_settime
        self.settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        self.settime.restype = ctypes.c_int
        self.get_errno = ctypes.get_errno
        self.byref = ctypes.byref

        class ITimerSpec(ctypes.Structure):
            _fields_ = [(name, ctypes.c_long) for name in ("every_s", "every_ns", "at_s", "at_ns")]

        self.spec_type = ITimerSpec


_timerfd: _Timerfd | None = None
_timerfd_missing = not sys.platform.startswith("linux")


def _load_timerfd() -> _Timerfd | None:
    global _timerfd, _timerfd_missing  # loaded once, on first use
    if _timerfd is None and not _timerfd_missing:
        try:
            _timerfd = _Timerfd()
        except (OSError, AttributeError):  # no libc to load, or one without timerfd
            _timerfd_missing = True
    return _timerfd


class _LoopAlarm:
    """Wakes one event loop at monotonic deadlines through a timerfd it watches.

    Every pause on the loop waits on a future here; the timerfd is armed for
    the soonest deadline, so pauses due together (generators waiting for the
    same tick) share one wake-up. The fd belongs to the process that made it
    (see :func:`_alarm_of`).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, timerfd: _Timerfd) -> None:
        fd = timerfd.create(_CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise OSError(timerfd.get_errno(), "timerfd_create failed")
        self.fd = fd
        self.pid = os.getpid()
        self._timerfd = timerfd
        self._spec = timerfd.spec_type()
        self._due: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()  # ties in the heap never compare futures
        self._armed_ns: int | None = None
        # The loop holds this object (as its reader), not the other way round,
        # so the loop can go; the fd goes with it.
        self.close = weakref.finalize(loop, os.close, fd)
        try:
            loop.add_reader(fd, self._fire)
        except BaseException:
            self.close()
            raise

    def wake_at(self, loop: asyncio.AbstractEventLoop, deadline_ns: int) -> asyncio.Future[None]:
        future: asyncio.Future[None] = loop.create_future()
        heapq.heappush(self._due, (deadline_ns, next(self._order), future))
        # The timer stays as it is for a deadline up to _SPIN_NS before the one
        # it is armed for: _fire releases that wait with the others.
        if self._armed_ns is None or deadline_ns < self._armed_ns - _SPIN_NS:
            self._arm(deadline_ns)
        return future

    def _arm(self, deadline_ns: int) -> None:
        spec = self._spec
        spec.at_s, spec.at_ns = divmod(deadline_ns, 1_000_000_000)
        timerfd = self._timerfd
        if timerfd.settime(self.fd, _TFD_TIMER_ABSTIME, timerfd.byref(spec), None) != 0:
            raise OSError(timerfd.get_errno(), "timerfd_settime failed")
        self._armed_ns = deadline_ns

    def _fire(self) -> None:
        # Nothing to read when it was re-armed after it became readable: the
        # heap says what is due either way.
        with contextlib.suppress(BlockingIOError):
            os.read(self.fd, 8)
        self._armed_ns = None
        due = self._due
        # Waits due within _SPIN_NS of the soonest go with it (they spin the
        # rest): generators waiting for one tick work out deadlines a few
        # microseconds apart, and should still share the wake-up.
        now = time.monotonic_ns() + _SPIN_NS
        while due and due[0][0] <= now:
            future = heapq.heappop(due)[2]
            if not future.done():  # done: its pause was cancelled
                future.set_result(None)
        if due:
            try:
                self._arm(due[0][0])
            except OSError as error:  # the waits would never end: they fail instead
                while due:
                    future = heapq.heappop(due)[2]
                    if not future.done():
                        future.set_exception(error)


_ALARMS: weakref.WeakKeyDictionary[Any, _LoopAlarm] = weakref.WeakKeyDictionary()
_ALARMS_LOCK = threading.Lock()


def _alarm_of(loop: asyncio.AbstractEventLoop) -> _LoopAlarm | None:
    """The loop's alarm, made on first use; None where the loop's own timers serve.

    asyncio's own loops (and loops where there is no timerfd) wait on their
    timers (see _LOOP_TIMER_SPIN_NS). Others, uvloop above all, round a
    timer's wait to the nearest millisecond, so the rest of a tick, under
    half of one, would not wait at all: they get an alarm.
    """
    import asyncio

    alarm = _ALARMS.get(loop)
    if alarm is not None:
        # A loop carried through fork() shares its epoll set and our timerfd
        # with the parent's: touching either would take the parent's wake-ups,
        # so such a loop (which asyncio does not support anyway) gets none.
        return alarm if alarm.pid == os.getpid() else None
    if isinstance(loop, asyncio.BaseEventLoop):
        return None
    timerfd = _load_timerfd()
    if timerfd is None:
        return None
    with _ALARMS_LOCK:  # loops in other threads add theirs
        try:
            alarm = _ALARMS[loop] = _LoopAlarm(loop, timerfd)
        except (OSError, NotImplementedError):  # a loop that cannot watch fds
            return None
    return alarm


class SystemClock:
    """The process's real clocks."""

    # Plain builtins as attributes, so a generator's call costs no Python frame.
    time_ns = staticmethod(time.time_ns)
    monotonic_ns = staticmethod(time.monotonic_ns)

    sleep_until_ns = _sleep_until
    asleep_until_ns = _asleep_until

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

    # Waits on this clock's own readings, so a changed offset is a step too.
    sleep_until_ns = _sleep_until
    asleep_until_ns = _asleep_until

    def __repr__(self) -> str:
        return f"OffsetClock({self.offset_ns / 1e6:+g} ms)"
