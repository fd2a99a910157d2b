"""Free-threaded CPython: every ID through the lock when ``next()`` is not atomic.

The hot path takes IDs with ``next()`` on a run iterator shared by all threads,
without a lock. The GIL makes that call atomic; free-threaded CPython does not,
so there two threads could take the same value. Generators then take the
locked path for every ID, chosen once per class (``locked_path``), also when
``IDMINT_LOCKED`` is set or a subclass asks for it. These tests run both paths
under 16 threads for every scheme, check that the locked path really takes the
lock for each ID, and check how the choice is made. The lock-free path runs on
both generator cores (tests/cores.py); the locked path is the pure core's.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from tests.cli_process import run_python_json
from tests.threads import in_threads

from idmint.generate import (
    Elastic64Generator,
    ManualClock,
    MuidGenerator,
    Short60Generator,
    TickGenerator,
    Uid64Generator,
    Uid64V1Generator,
    core,
)
from idmint.generate.core import LOCKED_PATH_FORCED

THREADS = 16
PER_THREAD = 1_000

SCHEMES: dict[str, tuple[type[TickGenerator[Any]], Callable[..., TickGenerator[Any]]]] = {
    "uid64": (Uid64Generator, lambda cls, **kw: cls(5, 1, **kw)),
    "uid64-v1": (Uid64V1Generator, lambda cls, **kw: cls(6, **kw)),
    "elastic64": (Elastic64Generator, lambda cls, **kw: cls(9, 8, max_ahead_ms=2, **kw)),
    "short60": (Short60Generator, lambda cls, **kw: cls(7, **kw)),
    "muid": (MuidGenerator, lambda cls, **kw: cls(**kw)),
}


def _subclass(base: type[TickGenerator[Any]], *, locked: bool) -> type[TickGenerator[Any]]:
    """``base`` with ``locked_path`` set in a subclass, the documented way to force it."""
    name = f"{'Locked' if locked else 'LockFree'}{base.__name__}"
    return type(name, (base,), {"__slots__": (), "locked_path": locked})


def _make(scheme: str, locked: bool, **options: Any) -> TickGenerator[Any]:
    base, build = SCHEMES[scheme]
    return build(_subclass(base, locked=locked), **options)


class CountingLock:
    """A lock that counts how often it was taken."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.taken = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self._lock.acquire(blocking, timeout)
        if got:
            self.taken += 1
        return got

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()


@pytest.mark.usefixtures("core")
@pytest.mark.parametrize("locked", [False, True], ids=["lock-free", "locked"])
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_sixteen_threads_on_one_generator_never_share_an_id(scheme: str, locked: bool) -> None:
    """16 threads x 1,000 IDs from one generator, through generate() and
    generate_nowait(): all distinct, on the path a class chose (lock-free only
    where the GIL makes it safe) and on the forced locked path."""
    generator = _make(scheme, locked)
    assert type(generator).locked_path is (locked or LOCKED_PATH_FORCED)

    def work(mine: list[int], slot: int) -> None:
        for _ in range(PER_THREAD):
            value = generator.generate_nowait() if slot % 2 else None
            if value is None:
                value = generator.generate()
            mine.append(value.int)

    values = in_threads(THREADS, work)
    assert len(values) == THREADS * PER_THREAD
    assert len(set(values)) == len(values)
    if type(generator).locked_path:
        assert generator.issued == len(values)  # no value is ever dropped in a race


class InterleavedRunIterator:
    """A run iterator whose ``next()`` is not atomic, as on free-threaded CPython.

    It reads its position, pauses (letting any other thread in), then moves on:
    two threads inside it at once get the same value.
    """

    def __init__(self, values: range) -> None:
        self._values = values
        self._position = 0

    def __iter__(self) -> InterleavedRunIterator:
        return self

    def __next__(self) -> int:
        position = self._position
        if position >= len(self._values):
            raise StopIteration
        time.sleep(0.0001)
        self._position = position + 1
        return self._values[position]

    def __length_hint__(self) -> int:
        return max(0, len(self._values) - self._position)


@pytest.mark.parametrize("scheme", ["uid64", "short60", "elastic64"])
def test_the_locked_path_needs_no_atomic_next(scheme: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With run iterators whose next() interleaves (what losing the GIL does),
    8 threads on the forced locked path still never share an ID."""
    monkeypatch.setattr(core, "iter", InterleavedRunIterator, raising=False)
    generator = _make(scheme, True)
    threads_count, per_thread = 8, 150

    def work(mine: list[int], slot: int) -> None:
        mine.extend(generator.generate().int for _ in range(per_thread))

    values = in_threads(threads_count, work)
    assert isinstance(generator._run.values, InterleavedRunIterator)  # the fault was in place
    assert len(values) == threads_count * per_thread
    assert len(set(values)) == len(values)


@pytest.mark.usefixtures("core")
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_the_locked_path_takes_the_lock_for_every_id(scheme: str) -> None:
    """Forced locked: each generate()/generate_nowait() takes the lock. Lock-free:
    about once per tick (muid's tick holds one ID, so it always takes it)."""
    count = 500
    locked = _make(scheme, True, clock=ManualClock())
    locked._lock = CountingLock()  # type: ignore[assignment]
    for index in range(count):
        if index % 2:
            locked.generate()
        else:
            locked.generate_nowait()
    assert locked._lock.taken >= count  # type: ignore[attr-defined]
    if LOCKED_PATH_FORCED or scheme == "muid":
        return
    lock_free = _make(scheme, False, clock=ManualClock())
    lock_free._lock = CountingLock()  # type: ignore[assignment]
    for _ in range(count):
        lock_free.generate()
    ticks = -(-count // lock_free.ids_per_tick)
    assert lock_free._lock.taken <= 2 * ticks + 2  # type: ignore[attr-defined]


def test_a_subclass_cannot_turn_a_forced_locked_path_off() -> None:
    """``locked_path = False`` in a subclass only keeps the default; it never
    unlocks a path the GIL's absence or IDMINT_LOCKED forced."""
    for base, _ in SCHEMES.values():
        assert _subclass(base, locked=False).locked_path is LOCKED_PATH_FORCED
        assert _subclass(base, locked=True).locked_path is True


_PROBE = """
import json, sys
{prelude}
from idmint.generate import ManualClock, TickGenerator
from idmint.generate import Elastic64Generator, MuidGenerator, Short60Generator
from idmint.generate import Uid64Generator, Uid64V1Generator
from idmint.generate import core
from idmint.generate.core import LOCKED_PATH_FORCED
classes = [Elastic64Generator, MuidGenerator, Short60Generator, Uid64Generator,
           Uid64V1Generator]

class CountingLock:
    def __init__(self):
        import threading
        self._lock, self.taken = threading.Lock(), 0
    def acquire(self, blocking=True, timeout=-1):
        self.taken += 1
        return self._lock.acquire(blocking, timeout)
    def release(self):
        self._lock.release()
    __enter__ = acquire
    def __exit__(self, *exc_info):
        self.release()

generator = Uid64Generator(1, clock=ManualClock())
generator._lock = CountingLock()
for _ in range(64):
    generator.generate()
print(json.dumps({{
    "forced": LOCKED_PATH_FORCED,
    "core": core.CORE,
    "classes": [cls.locked_path for cls in classes],
    "locks_for_64_ids": generator._lock.taken,
}}))
"""


def _probe(env_value: str | None, *, prelude: str = "") -> dict[str, Any]:
    env = {key: value for key, value in os.environ.items() if key != "IDMINT_LOCKED"}
    if env_value is not None:
        env["IDMINT_LOCKED"] = env_value
    return run_python_json(_PROBE.format(prelude=prelude), env)


_GIL_DISABLED = not getattr(sys, "_is_gil_enabled", lambda: True)()


@pytest.mark.parametrize(
    ("env_value", "locked"),
    [(None, False), ("0", False), ("off", False), ("1", True), ("yes", True), ("tru", True)],
    ids=["unset", "0", "off", "1", "yes", "a-typo"],
)
def test_idmint_locked_in_the_environment_forces_the_locked_path(
    env_value: str | None, locked: bool
) -> None:
    """IDMINT_LOCKED, read at import, puts every generator class on the locked
    path; only unset, 0, false, no or off leave the lock-free one (a typo costs
    speed, never safety)."""
    expected = locked or _GIL_DISABLED
    shown = _probe(env_value)
    assert shown["forced"] is expected
    assert shown["core"] == ("python" if expected else core.CORE)  # the locked path: pure
    assert shown["classes"] == [expected] * 5
    if expected:
        assert shown["locks_for_64_ids"] >= 64
    else:
        assert shown["locks_for_64_ids"] <= 2


def test_without_the_gil_every_class_takes_the_locked_path() -> None:
    """What a free-threaded interpreter reports (the GIL disabled) selects the
    locked path for every generator class, IDMINT_LOCKED unset."""
    shown = _probe(None, prelude="sys._is_gil_enabled = lambda: False")
    assert shown["forced"] is True
    assert shown["core"] == "python"
    assert shown["classes"] == [True] * 5
    assert shown["locks_for_64_ids"] >= 64
