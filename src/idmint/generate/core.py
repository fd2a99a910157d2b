"""The generator core every scheme shares: ticks, sequence, waiting, fork safety.

An ID is unique because its *identity* (generator ID, node ID or medallion) is
held by one generator at a time and that generator never hands out the same
(tick, sequence) pair twice. The core owns the second half:

* A **tick** is the scheme's time unit (ms, or us for muid). Each tick has
  ``limit`` sequence numbers. ``_tick`` is the newest tick handed out and
  ``_seq`` the next free sequence number in it.
* A new tick is taken only when the clock reaches it, so (tick, seq) pairs are
  strictly increasing and never reused, whatever the wall clock does.
  Schemes may *borrow* up to ``max_ahead`` ticks past the clock (elastic64)
  instead of waiting.
* If the clock is behind the newest tick (stepped back), the core waits for it
  when the gap is within ``max_clock_wait_ms`` and raises
  :class:`~idmint.errors.ClockMovedBackwards` otherwise.
* Waiting happens outside the lock: other threads are never blocked behind a
  sleeping one, and the async methods wait on the event loop.

Hot path: ``generate()`` takes the lock, reads the clock, and if it is still in
the current tick and the tick has sequence numbers left, composes the ID from a
per-tick base value. Everything else (a new tick, waiting, errors) happens in
``_allocate_locked``, once per tick at most.

Fork safety: a generator's identity belongs to the process that created it.
After ``os.fork()`` the child would otherwise carry on from the same state and
mint the parent's IDs, so every live generator is told, in the child, to either
take a new identity (muid: a fresh medallion; short60: fresh randomness) or
refuse with :class:`~idmint.errors.GeneratorForked`.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import repeat
from operator import lshift, xor
from random import getrandbits
from typing import Any, ClassVar, Generic, TypeVar, cast

from idmint.errors import ClockMovedBackwards, ConfigurationError, GeneratorError
from idmint.generate.clock import SYSTEM_CLOCK, Clock
from idmint.schemes._base import IdValue

__all__ = ["TickGenerator", "fork_generation"]

IdT = TypeVar("IdT", bound=IdValue)

_new = object.__new__
# The slot's own setter, callable from C-level map() without a Python frame.
_set_int = cast(Any, IdValue.__dict__["_int"]).__set__

DEFAULT_MAX_CLOCK_WAIT_MS = 10.0
"""How far back the wall clock may step before generators refuse instead of
waiting. NTP normally slews; a step of more than this is a broken clock, and
waiting it out would stall callers for as long."""


class _ForkWatch:
    """Tells every live generator when the process has forked."""

    def __init__(self) -> None:
        self.generation = 0
        self.generators: weakref.WeakSet[TickGenerator[Any]] = weakref.WeakSet()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        self.generation += 1
        for generator in list(self.generators):
            generator._after_fork_in_child()


_FORK_WATCH = _ForkWatch()


def fork_generation() -> int:
    """How many forks separate this process from the one that imported idmint."""
    return _FORK_WATCH.generation


class TickGenerator(Generic[IdT]):
    """Base of the scheme generators. Thread-safe; not for direct use."""

    id_type: ClassVar[type[IdValue]]
    tick_ns: ClassVar[int] = 1_000_000  # one tick is one millisecond unless a scheme says

    def __init__(
        self,
        *,
        limit: int,
        seq_shift: int,
        clock: Clock | None = None,
        max_clock_wait_ms: float = DEFAULT_MAX_CLOCK_WAIT_MS,
        max_ahead_ticks: int = 0,
        random_bits: int = 0,
    ) -> None:
        if max_clock_wait_ms < 0:
            raise ConfigurationError(f"max_clock_wait_ms must be >= 0, got {max_clock_wait_ms!r}")
        if max_ahead_ticks < 0:
            raise ConfigurationError(f"max_ahead must be >= 0, got {max_ahead_ticks!r}")
        self._clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        self._now_ns: Callable[[], int] = self._clock.time_ns
        self._lock = threading.Lock()
        self._limit = limit
        self._seq_shift = seq_shift
        self._random_bits = random_bits
        self._max_clock_wait_ns = round(max_clock_wait_ms * 1_000_000)
        self._max_ahead = max_ahead_ticks
        self._wrap: Callable[[int], IdT] | None = None
        # No tick yet: the first call starts one. _tick is the floor below
        # which no tick may be used (-1 for a fresh static identity).
        self._tick = -1
        self._seq = limit
        self._tick_base = 0
        self._fast_until_ns = 0
        self._blocked: Callable[[], Exception] | None = None
        # issued = _banked + (_seq - _counted_from); kept off the hot path.
        self._banked = 0
        self._counted_from = limit
        self.clock_waits = 0
        """Times a caller had to wait for the clock (sequence used up or clock behind)."""
        self.clock_steps_back = 0
        """Times the clock was seen behind the newest tick handed out."""
        _FORK_WATCH.generators.add(self)

    # -- scheme hooks -------------------------------------------------------
    def _base_for_tick(self, tick: int) -> int:
        """The ID's bits for ``tick`` with sequence (and random bits) zero."""
        raise NotImplementedError

    def _after_fork_in_child(self) -> None:
        """Default: the identity belongs to the parent; refuse in the child."""
        self._lock = threading.Lock()
        parent = os.getppid()
        description = self._describe_identity()

        def forked() -> Exception:
            from idmint.errors import GeneratorForked

            return GeneratorForked(
                f"this {self.id_type.scheme} generator ({description}) was created before "
                f"os.fork() and its identity belongs to the parent process {parent}; "
                "create a new generator in the child with an identity of its own"
            )

        self._blocked = forked
        self._fast_until_ns = 0

    def _describe_identity(self) -> str:
        return "static identity"

    # -- the hot path ---------------------------------------------------------
    def generate(self) -> IdT:
        """Issue one ID. Thread-safe; waits (briefly) when the tick is used up."""
        lock = self._lock
        lock.acquire()
        if self._now_ns() < self._fast_until_ns:
            seq = self._seq
            if seq < self._limit:
                self._seq = seq + 1
                value = self._tick_base ^ (seq << self._seq_shift)
                wrap = self._wrap  # read under the lock: it changes with the layout
                lock.release()
                if self._random_bits:
                    value |= getrandbits(self._random_bits)
                if wrap is not None:
                    return wrap(value)
                obj = cast(IdT, _new(self.id_type))
                obj._int = value
                return obj
        lock.release()
        return self.batch(1)[0]

    def batch(self, count: int) -> list[IdT]:
        """Issue ``count`` IDs, in order. Cheaper per ID than ``generate()``."""
        self._check_count(count)
        out: list[IdT] = []
        while True:
            wait_until_ns = self._fill(out, count)
            if wait_until_ns is None:
                return out
            self.clock_waits += 1
            self._clock.sleep_until_ns(wait_until_ns)

    async def agenerate(self) -> IdT:
        """Issue one ID without ever blocking the event loop."""
        return (await self.abatch(1))[0]

    async def abatch(self, count: int) -> list[IdT]:
        """Issue ``count`` IDs; waits for the clock on the event loop."""
        self._check_count(count)
        out: list[IdT] = []
        while True:
            wait_until_ns = self._fill(out, count)
            if wait_until_ns is None:
                return out
            self.clock_waits += 1
            await self._clock.asleep_until_ns(wait_until_ns)

    def __iter__(self) -> Iterator[IdT]:
        while True:
            yield self.generate()

    # -- allocation -------------------------------------------------------------
    @staticmethod
    def _check_count(count: int) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ConfigurationError(f"count must be a non-negative integer, got {count!r}")

    def _fill(self, out: list[IdT], count: int) -> int | None:
        """Append IDs to ``out`` until it holds ``count``, or return when to retry."""
        while len(out) < count:
            with self._lock:
                grant = self._allocate_locked(count - len(out))
                # The layout can change between grants (elastic64 width);
                # capture the one this grant was made under.
                shift, wrap = self._seq_shift, self._wrap
            if isinstance(grant, int):
                return grant
            base, first, taken = grant
            values: Iterable[int] = map(
                xor, repeat(base, taken), map(lshift, range(first, first + taken), repeat(shift))
            )
            if self._random_bits:
                values = [value | getrandbits(self._random_bits) for value in values]
            self._materialise(out, values, taken, wrap)
        return None

    def _materialise(
        self,
        out: list[IdT],
        values: Iterable[int],
        taken: int,
        wrap: Callable[[int], IdT] | None,
    ) -> None:
        if wrap is not None:
            out.extend(map(wrap, values))
            return
        objects = cast(list[IdT], list(map(_new, repeat(self.id_type, taken))))
        deque(map(_set_int, objects, values), maxlen=0)
        out.extend(objects)

    def _allocate_locked(self, want: int) -> tuple[int, int, int] | int:
        """Reserve up to ``want`` sequence numbers of one tick.

        Returns ``(tick_base, first_seq, count)``, or the wall-clock time in ns
        to wait for before asking again. Caller holds ``self._lock``.
        """
        if self._blocked is not None:
            raise self._blocked()
        tick_ns = self.tick_ns
        now_ns = self._now_ns()
        now = now_ns // tick_ns
        tick = self._tick
        if now > tick:
            self._start_tick(now)
        else:
            # The clock is at or behind the newest tick. Behind by more than
            # we may borrow means it stepped back.
            lag_ns = (tick - self._max_ahead) * tick_ns - now_ns
            if lag_ns > 0:
                self.clock_steps_back += 1
                if lag_ns > self._max_clock_wait_ns:
                    raise ClockMovedBackwards(lag_ns / 1e6, self._max_clock_wait_ns / 1e6)
            if self._seq >= self._limit:
                following = tick + 1
                if following - now <= self._max_ahead:
                    self._start_tick(following)
                else:
                    return (following - self._max_ahead) * tick_ns
        seq = self._seq
        taken = min(want, self._limit - seq)
        self._seq = seq + taken
        return self._tick_base, seq, taken

    def _start_tick(self, tick: int) -> None:
        self._tick_base = self._base_for_tick(tick)
        self._banked += self._seq - self._counted_from
        self._counted_from = 0
        self._tick = tick
        self._seq = 0
        self._fast_until_ns = (tick + 1) * self.tick_ns

    def _forget_tick(self) -> None:
        """Make the next ID start a new tick later than every tick used so far."""
        self._banked += self._seq - self._counted_from
        self._seq = self._counted_from = self._limit
        self._fast_until_ns = 0

    @property
    def ids_per_tick(self) -> int:
        """How many IDs one tick (ms; us for muid) holds: the scheme's rate cap."""
        return self._limit

    @property
    def issued(self) -> int:
        """How many IDs this generator has issued."""
        return self._banked + self._seq - self._counted_from


def check_identity_field(name: str, value: object, low: int, high: int) -> int:
    """Validate a generator option; ``ConfigurationError`` names what was expected."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{name} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise ConfigurationError(f"{name} {value} is out of range; expected {low}..{high}")
    return value


def check_tick_range(scheme: str, tick: int, low: int, high: int, unit: str = "ms") -> None:
    if not low <= tick <= high:
        raise GeneratorError(
            f"the clock reads {tick} {unit} since the Unix epoch, outside what {scheme} "
            f"IDs can hold ({low}..{high}); check the system clock"
        )
