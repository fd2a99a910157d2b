"""The generator core every scheme shares: ticks, runs, waiting, fork safety.

An ID is unique because its *identity* (generator ID, node ID or medallion) is
held by one generator at a time and that generator never hands out the same
(tick, sequence) pair twice. The core owns the second half:

* A **tick** is the scheme's time unit (ms, or us for muid); each tick has
  ``ids_per_tick`` sequence numbers. A new tick is opened only when the clock
  reaches it, so ticks only move forward, whatever the wall clock does.
  elastic64 and muid may *borrow* up to ``max_ahead`` ticks past the clock
  instead of waiting.
* The IDs of an open tick form a **run**: a ``range`` of ready-made ID ints
  (the sequence field is the only part that changes). Taking the next ID is
  ``next()`` on the run's iterator. Under the GIL that call is atomic, so the
  hot path needs no lock: each value comes out of the iterator once, and runs
  are never rebuilt for a tick that had one. Runs are retired, never reused.
* The hot path only checks that the clock is still before the run's
  ``until_ns`` (the end of its tick, or sooner when a claim must be renewed).
  Everything else - a new tick, waiting for the clock, errors - happens in
  ``_take_locked`` under the lock, at most once per tick.
* If the clock is behind the newest tick (it stepped back), the generator
  waits when the gap is within ``max_clock_wait_ms`` and raises
  :class:`~idmint.errors.ClockMovedBackwards` otherwise. A step back is seen at
  the next tick boundary; until then the current tick's remaining sequence
  numbers (all unused) may still be issued.
* Waiting happens outside the lock, so no thread waits behind a sleeping one,
  and the async methods wait on the event loop.

Fork safety: a generator's identity belongs to the process that created it.
A child of ``os.fork()`` would otherwise carry on from the parent's state and
mint the parent's IDs, so in the child every live generator either takes a new
identity (muid: a fresh medallion; short60: a fresh tick) or refuses with
:class:`~idmint.errors.GeneratorForked`.

Free-threaded CPython (no GIL) does not make ``next()`` on a shared iterator
atomic, so there every ID goes through the lock: each scheme's class gets a
locked ``generate()``/``generate_nowait()`` when it is created (see
:attr:`TickGenerator.locked_path`), so the choice costs nothing per ID.
``IDMINT_LOCKED=1`` in the environment at import forces it everywhere.

The compiled core (``_speedups.c``, built where a C compiler is) does the
same in C for generators that read the system clock, where the GIL is enabled:
it holds the open tick's run and, once Python has *armed* a run it opened,
opens the ticks after it and waits for the clock at the cap by itself (see
:meth:`TickGenerator._arm`). Whatever needs deciding (a claim, a clock behind,
an error, a fork) comes back to ``_take_locked`` here. :data:`CORE` says which
core generators use; ``IDMINT_PURE=1`` keeps the pure-Python one.
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
import weakref
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice, repeat
from operator import length_hint, or_
from random import getrandbits
from types import ModuleType
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Generic,
    Literal,
    Protocol,
    TypeVar,
    cast,
    overload,
)

from idmint import clock as _clock
from idmint.clock import SYSTEM_CLOCK, Clock, SystemClock
from idmint.errors import ClockMovedBackwards, ConfigurationError, GeneratorError
from idmint.schemes import IdValue

if TYPE_CHECKING:
    import asyncio

    from idmint.generate._speedups import Run as _CompiledRun

__all__ = [
    "CORE",
    "LOCKED_PATH_FORCED",
    "IdBatch",
    "TickGenerator",
    "TickLayout",
    "fork_generation",
]

IdT = TypeVar("IdT", bound=IdValue)
GeneratorT = TypeVar("GeneratorT", bound="TickGenerator[Any]")

_new = object.__new__
_GIL_ENABLED: bool = getattr(sys, "_is_gil_enabled", lambda: True)()


def _set_in_environment(name: str) -> bool:
    # Anything but an explicit "off" counts as on: a typo should cost speed,
    # never safety.
    value = os.environ.get(name, "").strip().lower()
    return value not in {"", "0", "false", "no", "off"}


LOCKED_PATH_FORCED: bool = not _GIL_ENABLED or _set_in_environment("IDMINT_LOCKED")
"""Whether every generator class takes the lock for each ID: the GIL is disabled
(free-threaded CPython, where ``next()`` on a shared iterator is not atomic), or
``IDMINT_LOCKED`` is set (to anything but ``0``/``false``/``no``/``off``).
Decided once, when idmint is imported."""


def _load_compiled_core() -> ModuleType | None:
    """The compiled core, unless it is missing or not to be used here."""
    # Without the GIL every ID takes the lock (the pure core's locked path); the
    # extension is not even imported there, as importing it would enable the GIL.
    if LOCKED_PATH_FORCED or _set_in_environment("IDMINT_PURE"):
        return None
    try:
        # A module of C that imports nothing of idmint (the package is only where it lives).
        import idmint.generate._speedups as compiled
    except ImportError:  # not built here (no compiler), or built for another Python
        return None
    # One set of waiting constants for both cores: clock.py's.
    compiled.configure(
        spin_ns=_clock._SPIN_NS, slice_ns=_clock._SLICE_NS, step_slack_ns=_clock._STEP_SLACK_NS
    )
    return compiled


_speedups = _load_compiled_core()

CORE: Literal["c", "python"] = "c" if _speedups is not None else "python"
"""Which core generators use: ``"c"``, the compiled one, or ``"python"``: it is
not built here, the GIL is disabled, or ``IDMINT_PURE`` or ``IDMINT_LOCKED`` is
set (to anything but ``0``/``false``/``no``/``off``). Decided once, at import.
A generator with a clock of its own (not the system's) uses the pure core
either way (:attr:`TickGenerator.core`)."""

_compiled_clocks: Literal["system", "any", "none"] = "system"
"""Which new generators the compiled core takes: those on the system clock.
Tests change it, to run the same tests on both cores: ``"any"`` puts generators
with a clock of their own on it too (it then reads and waits through the clock's
methods), ``"none"`` puts every generator on the pure core."""

DEFAULT_MAX_CLOCK_WAIT_MS = 10.0
"""How far back the wall clock may step before generators refuse instead of
waiting. NTP normally slews; a step of more than this is a broken clock, and
waiting it out would stall callers for as long."""

COMMON_OPTIONS = frozenset({"clock", "max_clock_wait_ms"})
"""The options every generator takes, whatever its scheme."""


class _ForkWatch:
    """Tells every live generator when the process has forked."""

    def __init__(self) -> None:
        self.generation = 0
        self.generators: weakref.WeakSet[TickGenerator[Any]] = weakref.WeakSet()
        self.compiled_forks = 0
        """The compiled core's count of forks when this process last went through them."""
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        self.generation += 1
        if _speedups is not None:
            self.compiled_forks = _speedups.forks()
        for generator in list(self.generators):
            generator._async_turn = None  # the parent's loop and the turns taken on it
            generator._after_fork_in_child()

    def catch_up(self) -> None:
        """Go through a fork() that bypassed ``os.fork()``'s hooks (a C library's).

        The compiled core counts every fork, in the child, and sends a generator
        whose run was made before one here.
        """
        if _speedups is not None and _speedups.forks() != self.compiled_forks:
            self._after_fork_in_child()


_FORK_WATCH = _ForkWatch()


def fork_generation() -> int:
    """How many forks separate this process from the one that imported idmint."""
    if _speedups is not None:
        _FORK_WATCH.catch_up()  # a fork only the compiled core saw counts too
    return _FORK_WATCH.generation


_WAIT_FOR_CLAIM = -1  # from _take_locked: wait for the claim, not the clock
_NO_CEILING = 1 << 128  # bigger than any tick or time in ns


class Grant(Protocol):
    """What :class:`idmint.coordinate.base.Grant` offers a generator."""

    @property
    def epoch(self) -> int: ...
    @property
    def identity(self) -> Mapping[str, int]: ...
    @property
    def floor_ms(self) -> int: ...
    @property
    def ceiling_ms(self) -> int: ...
    @property
    def deadline_mono_ns(self) -> int: ...


class Claim(Protocol):
    """A claimed identity as a generator uses it (see :class:`idmint.coordinate.base.Claim`)."""

    @property
    def options(self) -> Any: ...
    def grant(self) -> Grant | None: ...
    def wait(
        self, timeout_s: float | None = None, *, min_ceiling_ms: int | None = None
    ) -> Grant: ...
    def attach(self, generator: Any) -> None: ...
    def detach(self, generator: Any) -> None: ...


class _Runlike(Protocol):
    """A run as the locked path uses it: the pure core's or the compiled one's."""

    until_ns: int

    @property
    def size(self) -> int: ...
    @property
    def values(self) -> Iterator[int]: ...
    def take(self, count: int, /) -> Sequence[int]: ...


class _Run:
    """The unissued IDs of one tick (or part of one), ready-made as ints."""

    __slots__ = ("size", "until_ns", "values")

    def __init__(self, values: range, until_ns: int) -> None:
        self.values: Iterator[int] = iter(values)
        self.size = len(values)
        self.until_ns = until_ns

    def take(self, count: int) -> list[int]:
        """Up to ``count`` of its values (the compiled core's runs give a range)."""
        return list(islice(self.values, count))


_NO_RUN_VALUES = range(0)


class _Texts(Protocol):
    """What renders the texts of many IDs (a value type's ``texts_of_ints``)."""

    def __call__(self, ints: Sequence[int], /) -> list[str]: ...


class _CompiledTexts:
    """The compiled core's renderer of a value type's text forms: lowercase hex of a
    fixed number of digits, decimal, or base-64 digits with the last ones moved to the
    front (see :func:`_compiled_texts`)."""

    __slots__ = ("digits", "form")

    HEX, DECIMAL, BASE64_ROTATED = 0, 1, 2

    def __init__(self, form: int, digits: int) -> None:
        self.form = form
        self.digits = digits

    def render(self, ints: Sequence[int], mask: int | None) -> list[str]:
        assert _speedups is not None
        texts: list[str] = _speedups.texts_of(
            ints if type(ints) is range else list(ints), mask, self.form, self.digits
        )
        return texts

    def __call__(self, ints: Sequence[int]) -> list[str]:
        return self.render(ints, None)


def _compiled_texts(id_type: type[IdValue]) -> _CompiledTexts | None:
    """The compiled renderer that makes exactly ``id_type``'s text forms, if one does.

    The value type's ``text_of_int`` and ``texts_of_ints`` are compared with each
    compiled form at both ends of the type's range, at every power of two and one
    below it, and at 64 ints spread over the range; a form is used only where every
    one agrees.
    """
    if _speedups is None:
        return None
    top: int | None = getattr(id_type, "_max_int", None)
    if top is None or top >> 64 or not hasattr(id_type, "_byte_length"):
        return None
    spread = [top * n // 63 for n in range(64)]
    tried = sorted(
        {0, top, *spread, *(1 << k for k in range(top.bit_length()))}
        | {(1 << k) - 1 for k in range(1, top.bit_length() + 1)}
    )
    try:
        expected = [id_type.text_of_int(value) for value in tried]
        if id_type.texts_of_ints(tried) != expected:
            return None
    except (ValueError, ArithmeticError):  # a type that refuses some of them
        return None
    for candidate in (
        _CompiledTexts(_CompiledTexts.HEX, 2 * id_type._byte_length),
        _CompiledTexts(_CompiledTexts.DECIMAL, 0),
        _CompiledTexts(_CompiledTexts.BASE64_ROTATED, 2),
    ):
        try:
            if candidate(tried) == expected:
                return candidate
        except (OverflowError, ValueError):  # wider than the form's digits
            continue
    return None


def _plain_maker(id_type: type[IdValue]) -> Callable[[int], Any]:
    """The maker of ``id_type`` values whose int is the value given."""

    def make(value: int) -> IdValue:
        obj = _new(id_type)
        obj._int = value
        return obj

    return make


@dataclass(frozen=True)
class TickLayout:
    """How a scheme makes the base value of a tick, declared for the compiled core.

    The base is ``identity | time << time_shift``, where ``time`` is the tick
    minus ``low`` (its bits in reverse order when ``reversed``: uid64's spread
    mode); ``low..high`` are the ticks the scheme can hold. With the generator's
    tick length, cap and sequence step this lets the compiled core open ticks
    itself. It is checked against ``_base_for_tick`` before it is used.
    """

    identity: int
    time_shift: int
    low: int
    high: int
    reversed: bool = False


_NOISE_WORDS = 4096
"""Words of random bits read from the OS at once (32 KiB): one ``os.urandom`` call
per 4,096 IDs that need some instead of one each."""
_noise: Iterator[int] = iter(())


def _noise_refill() -> int:
    """The next random word, after reading a fresh buffer of them from the OS."""
    global _noise
    _noise = iter(array("Q", os.urandom(8 * _NOISE_WORDS)))
    return next(_noise)


def _forget_noise() -> None:
    # A child of fork() must not hand out the random bits its parent also will.
    global _noise
    _noise = iter(())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_noise)


@dataclass(frozen=True)
class RunPlacement:
    """How a run value becomes its ID where a scheme packs the two apart (uuid7, whose
    counter the variant bits split), declared for the compiled core and the scheme's
    maker alike.

    The run value's bits from ``split`` up move to ``high_shift``, the bits below
    ``split`` to ``low_shift``; ``fixed`` is set, and the ``noise_bits`` lowest bits
    are fresh from the operating system's CSPRNG for every ID.
    """

    split: int
    high_shift: int
    low_shift: int
    fixed: int
    noise_bits: int

    @property
    def noise_mask(self) -> int:
        return (1 << self.noise_bits) - 1

    def apply(self, run_value: int, noise: int) -> int:
        """The ID of ``run_value`` with ``noise`` as its random bits."""
        low = run_value & ((1 << self.split) - 1)
        placed = (run_value >> self.split) << self.high_shift | low << self.low_shift
        return placed | self.fixed | noise & self.noise_mask

    def maker(self, id_type: type[IdT]) -> Callable[[int], IdT]:
        """The maker of ``id_type`` values from run values (a class's ``_make_from_run``),
        with fresh random bits; it runs for every ID on the pure core."""

        def make(
            run_value: int,
            *,
            new: Callable[[type[IdT]], IdT] = _new,
            value_type: type[IdT] = id_type,
            split: int = self.split,
            high_shift: int = self.high_shift,
            low_mask: int = (1 << self.split) - 1,
            low_shift: int = self.low_shift,
            fixed: int = self.fixed,
            noise_mask: int = self.noise_mask,
        ) -> IdT:
            # apply() written out, its constants as defaults (locals, not attribute
            # reads: a third of its cost).
            try:
                noise = next(_noise)
            except StopIteration:
                noise = _noise_refill()
            obj = new(value_type)
            obj._int = (
                (run_value >> split) << high_shift | (run_value & low_mask) << low_shift | fixed
            ) | noise & noise_mask
            return obj

        return make

    def apply_all(self, run_values: Sequence[int]) -> list[int]:
        """The IDs of ``run_values``, with random bits read for them at once."""
        noise = array("Q", os.urandom(8 * len(run_values)))
        split, high_shift, low_shift = self.split, self.high_shift, self.low_shift
        low_mask, fixed, noise_mask = (1 << split) - 1, self.fixed, self.noise_mask
        # apply() written out: a call per ID would double a batch's cost.
        return [
            (value >> split) << high_shift
            | (value & low_mask) << low_shift
            | fixed
            | bits & noise_mask
            for value, bits in zip(run_values, noise, strict=True)
        ]


class IdBatch(Sequence[IdT]):
    """IDs issued together, in order: a read-only sequence of ID values.

    The IDs are issued (reserved) when the batch is made; they are stored as
    ints and turned into value objects only when read, because building
    thousands of objects nobody looks at is most of the cost of a batch.
    ``ints()`` and ``texts()`` give the bulk forms without building objects.
    """

    __slots__ = ("_ints", "_make", "_mask", "_texts")

    def __init__(
        self,
        ints: Sequence[int],
        make: Callable[[int], IdT],
        mask: int | None = None,
        texts: Callable[[Sequence[int]], list[str]] | None = None,
    ) -> None:
        self._ints = ints
        self._make = make
        self._mask = mask  # strips bits a scheme keeps above the ID (elastic64's width)
        self._texts = texts

    def __len__(self) -> int:
        return len(self._ints)

    @overload
    def __getitem__(self, index: int) -> IdT: ...

    @overload
    def __getitem__(self, index: slice) -> list[IdT]: ...

    def __getitem__(self, index: int | slice) -> IdT | list[IdT]:
        if isinstance(index, slice):
            return list(map(self._make, self._ints[index]))
        return self._make(self._ints[index])

    def __iter__(self) -> Iterator[IdT]:
        return map(self._make, self._ints)

    def ints(self) -> list[int]:
        """The IDs as ints (a new list)."""
        if _speedups is not None and type(self._ints) is range:
            try:
                ints: list[int] = _speedups.ints_of(self._ints, self._mask)
            except OverflowError:  # wider than the compiled core makes: below, in Python
                pass
            else:
                return ints
        if self._mask is not None:
            return [value & self._mask for value in self._ints]
        return list(self._ints)

    def texts(self) -> list[str]:
        """The IDs in their canonical text form (no value objects built)."""
        if self._texts is None:
            return [str(value) for value in self]
        if type(self._texts) is _CompiledTexts:
            return self._texts.render(self._ints, self._mask)
        return self._texts(self.ints())

    def to_list(self) -> list[IdT]:
        return list(self)

    def __add__(self, other: Sequence[IdT]) -> list[IdT]:
        return [*self, *other]

    def __radd__(self, other: Sequence[IdT]) -> list[IdT]:
        return [*other, *self]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IdBatch):
            return self.to_list() == other.to_list()
        if isinstance(other, list):
            return self.to_list() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<IdBatch of {len(self._ints)} IDs>"


class TickGenerator(Generic[IdT]):
    """Base of the scheme generators. Thread-safe; not for direct use."""

    # Slots make the hot path's attribute reads measurably cheaper.
    __slots__ = (
        "__weakref__",
        "_async_turn",
        "_banked",
        "_blocked",
        "_claim",
        "_clock",
        "_closers",
        "_compiled",
        "_epoch",
        "_exhausted_tick",
        "_floor_fresh",
        "_layout",
        "_limit",
        "_lock",
        "_make",
        "_max_ahead",
        "_max_clock_wait_ns",
        "_need_ceiling_ms",
        "_now_ns",
        "_pending",
        "_random_bits",
        "_run",
        "_run_clock",
        "_seq_shift",
        "_tick",
        "_wait_since_ns",
        "_wasted",
        "clock_steps_back",
        "clock_waits",
        "exhausted_ticks",
    )

    id_type: ClassVar[type[IdValue]]
    tick_ns: ClassVar[int] = 1_000_000  # one tick is one millisecond unless a scheme says
    random_bits: ClassVar[int] = 0  # low bits filled at random per ID (short60)
    _int_mask: ClassVar[int | None] = None
    _placement: ClassVar[RunPlacement | None] = None
    """How the class's ``_make_from_run`` places a run value's bits in its ID, for the
    compiled core to do the same (checked against the maker before it is used)."""
    _tag_slot: ClassVar[str | None] = None
    """The value type's slot that takes a run value's bits above ``_int_mask``
    (elastic64's width), for the compiled core's values."""
    _batch_texts: ClassVar[_Texts]
    """What renders a batch's texts: the value type's ``texts_of_ints``, or the compiled
    core's renderer of the same forms (set per class)."""
    locked_path: ClassVar[bool] = LOCKED_PATH_FORCED
    """Whether ``generate()`` and ``generate_nowait()`` take the lock for every ID.

    Read once, when a subclass is created. Always true when
    :data:`LOCKED_PATH_FORCED`; a subclass may set it to ``True`` to force the
    locked path (for tests, or to be cautious), never to turn it off.
    """

    # -- what the factory reads of a scheme's generator ------------------------------
    identity_fields: ClassVar[tuple[str, ...]] = ()
    """The options that name the identity no other process may hold at the same
    time; the first is the one counted (claimed from :meth:`identity_pool`, one
    after another for several generators). Their ranges are the value type's fields."""
    space: ClassVar[str | None] = None
    """The kind of identity a coordinator claims for it (``coordinate.base.SPACES``:
    schemes whose IDs could meet share one); ``None``: it claims none."""

    @classmethod
    def scheme_options(cls) -> tuple[str, ...]:
        """The options its constructor takes besides :data:`COMMON_OPTIONS` and a claim
        (read from its signature)."""
        parameters = inspect.signature(cls.__init__).parameters
        return tuple(
            name
            for name in parameters
            if name not in {"self", "claim"} and name not in COMMON_OPTIONS
        )

    options_about: ClassVar[Mapping[str, str]] = {}
    """What the options that are not the value type's fields (or mean something else
    here) are for, for help texts; the value type's fields describe the others."""
    options_choices: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    """The values an option that is text may take (snowflake's ``layout``)."""

    @classmethod
    def specialised(cls, options: Mapping[str, Any]) -> type[TickGenerator[Any]]:
        """The class that makes generators with these options (snowflake: one per
        layout, with its value type, tick and space); the class itself for most."""
        return cls

    @classmethod
    def identity_pool(cls) -> range:
        """The values a coordinator may claim for the counted identity field."""
        field = cls.id_type.field(cls.identity_fields[0])
        return range(field.low, field.high + 1)

    @classmethod
    def checked_identity(
        cls, identity: Mapping[str, int], named: Callable[[str], str] = str
    ) -> dict[str, int]:
        """``identity`` with each field checked against the value type's range
        (``ConfigurationError`` naming the field as ``named`` says); a scheme with a
        default for a field fills it in (elastic64's width)."""
        checked = {}
        for name in cls.identity_fields:
            field = cls.id_type.field(name)
            checked[name] = check_identity_field(named(name), identity[name], field.low, field.high)
        return checked

    @classmethod
    def identity_free_because(cls, options: Mapping[str, Any]) -> str | None:
        """Why a generator with these options needs no identity, as the refusal of one
        given anyway (``None``: it needs one)."""
        if cls.space is None:
            return f"{cls.id_type.scheme} generators take no coordinator: they hold no identity"
        return None

    def __init__(
        self,
        *,
        limit: int,
        seq_shift: int,
        clock: Clock | None = None,
        max_clock_wait_ms: float = DEFAULT_MAX_CLOCK_WAIT_MS,
        max_ahead_ticks: int = 0,
        claim: Claim | None = None,
    ) -> None:
        if max_clock_wait_ms < 0:
            raise ConfigurationError(f"max_clock_wait_ms must be >= 0, got {max_clock_wait_ms!r}")
        self._clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        self._now_ns: Callable[[], int] = self._clock.time_ns
        system_clock = type(self._clock) is SystemClock
        self._compiled = (
            _speedups is not None
            and not type(self).locked_path
            and (_compiled_clocks == "any" or (system_clock and _compiled_clocks == "system"))
        )
        self._run_clock = None if system_clock else self._clock
        self._layout: Any = None  # the compiled core's layout: None unmade, False none
        self._lock = threading.Lock()
        self._limit = limit
        self._seq_shift = seq_shift
        self._random_bits = self.random_bits
        self._max_clock_wait_ns = round(max_clock_wait_ms * 1_000_000)
        self._max_ahead = max_ahead_ticks
        self._make: Callable[[int], IdT] = _plain_maker(self.id_type)
        # No tick yet: the first ID opens one. Ticks at or below _tick are
        # spent (-1: nothing spent for a fresh static identity).
        self._tick = -1
        self._run: _Runlike = self._new_run(_NO_RUN_VALUES, 0)
        self._pending: range | None = None  # the rest of the tick (short60)
        self._wait_since_ns = 0  # the clock reading of the newest decision to wait
        self._async_turn: tuple[object, asyncio.Lock] | None = None  # see _clock_turn
        self._blocked: Callable[[], Exception] | None = None
        self._banked = 0
        self._wasted = 0
        self.clock_waits = 0
        """Times a caller had to wait for the clock (tick used up or clock behind)."""
        self.clock_steps_back = 0
        """Times the clock was seen behind the newest tick handed out."""
        self.exhausted_ticks = 0
        """Ticks whose sequence numbers ran out before the clock let the next one open:
        each made its callers wait at the scheme's cap (counted once per tick)."""
        self._exhausted_tick = -1  # the newest tick counted there
        # A claimed identity (see idmint.coordinate); None for a static one.
        self._claim = claim
        self._epoch = 0
        self._floor_fresh = False
        self._need_ceiling_ms: int | None = None
        self._closers: list[Callable[[], None]] = []
        if claim is not None:
            if self.tick_ns % 1_000_000:
                # A claim's floor, ceiling and high-water mark are whole ms: a tick
                # shorter than one (muid's us) could not be told from its neighbours.
                raise ConfigurationError(f"{self.id_type.scheme} identities cannot be claimed")
            claim.attach(self)
        _FORK_WATCH.generators.add(self)

    # -- scheme hooks -------------------------------------------------------
    def _base_for_tick(self, tick: int) -> int:
        """The ID's bits for ``tick`` with sequence (and random bits) zero."""
        raise NotImplementedError

    def _tick_layout(self) -> TickLayout | None:
        """How ``_base_for_tick`` makes its bits, for the compiled core to open ticks
        itself (``None``: every tick is opened here)."""
        return None

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
        self._retire_tick()

    def _describe_identity(self) -> str:
        return "static identity"

    def _set_identity(self, identity: Mapping[str, int]) -> None:
        """Take on a claimed identity (its fields as the claim names them)."""
        raise ConfigurationError(f"{self.id_type.scheme} identities cannot be claimed")

    # -- claims ---------------------------------------------------------------------
    @property
    def claim(self) -> Claim | None:
        """The claim this generator's identity comes from, if any."""
        return self._claim

    @property
    def core(self) -> Literal["c", "python"]:
        """The core this generator runs on (see :data:`CORE`)."""
        return "c" if self._compiled else "python"

    def _fence(self) -> None:
        """Stop the hot path at once; the locked path then consults the claim.

        Called from other threads (the claim's listener and renewal thread).
        A thread already past the check may still finish one ID: its timestamp
        is within the recorded ceiling, which no successor goes below.
        """
        self._run.until_ns = 0

    def _highest_tick(self) -> int:
        """The last ms of the newest tick handed out (a claim records it on release;
        -1: none). A successor floored there starts after that tick."""
        with self._lock:
            tick = self._tick
        ms_per_tick = self.tick_ns // 1_000_000
        if tick < 0 or ms_per_tick <= 1:
            return tick
        return (tick + 1) * ms_per_tick - 1

    def _adopt(self, grant: Grant) -> None:
        """Switch to a newly granted identity (caller holds the lock)."""
        self._set_identity(grant.identity)
        self._retire_tick()
        # Ticks up to the predecessor's high-water mark are spent for us, and
        # so are our own: a changed layout (elastic64's width) must not meet
        # IDs it already made.
        # (In ticks: the tick holding the floor's ms is spent too.)
        self._tick = max(self._tick, grant.floor_ms // (self.tick_ns // 1_000_000))
        self._floor_fresh = True
        self._epoch = grant.epoch

    def close(self) -> None:
        """Release what this generator owns (a claimed identity, its connection)."""
        claim = self._claim
        self._fence()  # the open tick must not go on issuing after close()
        # The claim is released while we are still attached to it: it fences
        # us for good and records the newest tick we used, including one a
        # thread opened a moment ago.
        while self._closers:
            self._closers.pop(0)()
        if claim is not None:
            claim.detach(self)

    def close_with(self, *closers: Callable[[], None]) -> None:
        """Make :meth:`close` call ``closers`` too, in the order given (after those
        given before): what the generator owns besides its identity, such as its
        claim and the coordinator it was claimed from."""
        self._closers.extend(closers)

    def __enter__(self: GeneratorT) -> GeneratorT:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- issuing ------------------------------------------------------------------
    def generate(self) -> IdT:
        """Issue one ID. Thread-safe; waits (briefly) when the tick is used up.

        Each scheme's class gets its own lock-free hot path in place of this
        from ``__init_subclass__`` (see :func:`_hot_path`), or the locked one
        (:data:`LOCKED_PATH`).
        """
        return self._generate_slow(0)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if LOCKED_PATH_FORCED:
            cls.locked_path = True
        if "id_type" in cls.__dict__:
            cls._batch_texts = _compiled_texts(cls.id_type) or cls.id_type.texts_of_ints
        if cls.locked_path:
            cls.generate = _locked_path(cls, wait=True)  # type: ignore[method-assign,assignment]
            cls.generate_nowait = _locked_path(cls, wait=False)  # type: ignore[method-assign,assignment]
        elif "id_type" in cls.__dict__:
            make = getattr(cls, "_make_from_run", None)
            generate = _hot_path(cls.id_type, cls.random_bits, make)
            generate_nowait = _hot_path(cls.id_type, cls.random_bits, make, wait=False)
            if _speedups is not None:
                # The compiled methods hand generators on the pure core to these.
                generate = _compiled_path(cls, "generate", generate)
                generate_nowait = _compiled_path(cls, "generate_nowait", generate_nowait)
                cls.batch = _compiled_path(cls, "batch", TickGenerator.batch)  # type: ignore[method-assign]
            cls.generate = generate  # type: ignore[method-assign,assignment]
            cls.generate_nowait = generate_nowait  # type: ignore[method-assign,assignment]
        if "id_type" in cls.__dict__ and cls._placement is not None:
            _place_batches(cls)

    def generate_nowait(self) -> IdT | None:
        """Issue one ID if that needs no waiting, else ``None``.

        For event loops: a ``None`` means the tick is used up or the claim is
        in doubt; ``await agenerate()`` then waits without blocking the loop.
        Replaced per class like :meth:`generate`.
        """
        return self._generate_slow(0, wait=False)

    @overload
    def _generate_slow(self, wasted: int) -> IdT: ...

    @overload
    def _generate_slow(self, wasted: int, wait: bool) -> IdT | None: ...

    def _generate_slow(self, wasted: int, wait: bool = True) -> IdT | None:
        # Kept lean, as it runs for the first ID of every tick: acquire() and
        # release() instead of `with` (half the cost), no IdBatch.
        lock = self._lock
        while True:
            lock.acquire()
            try:
                self._wasted += wasted
                wasted = 0
                taken = self._take_locked(1)
            finally:
                lock.release()
            if not isinstance(taken, int):
                break
            if not wait:
                return None
            self._wait(taken)
        value = taken[0]
        if self._random_bits:
            value |= getrandbits(self._random_bits)
        if self._int_mask is None:
            obj: IdT = _new(self.id_type)  # type: ignore[assignment]
            obj._int = value
            return obj
        return self._make(value)

    def batch(self, count: int) -> IdBatch[IdT]:
        """Issue ``count`` IDs, in order, as an :class:`IdBatch`."""
        if type(count) is not int or count < 1:
            self._check_count(count)
            return IdBatch([], self._make, self._int_mask, self._batch_texts)
        # The common case, a batch that fits in the open tick, in one locked
        # step and without _fill's frame: it runs cold (once per ms or so),
        # when every Python call costs several times what it costs in a loop.
        lock = self._lock
        lock.acquire()
        try:
            taken = self._take_locked(count)
        finally:
            lock.release()
        if isinstance(taken, int):
            out: list[int] = []
            self._wait(taken)
        elif len(taken) == count and not self._random_bits:
            return IdBatch(taken, self._make, self._int_mask, self._batch_texts)
        else:
            out = self._with_random_bits(taken)
        return self._batch_rest(out, count)

    def _batch_rest(self, out: list[int], count: int) -> IdBatch[IdT]:
        """The batch of ``count`` whose first IDs are ``out`` (where the compiled
        core hands a batch over, too)."""
        while True:
            wait_until_ns = self._fill(out, count)
            if wait_until_ns is None:
                return IdBatch(out, self._make, self._int_mask, self._batch_texts)
            self._wait(wait_until_ns)

    def _wait(self, until_ns: int) -> None:
        if until_ns == _WAIT_FOR_CLAIM:
            assert self._claim is not None
            self._claim.wait(min_ceiling_ms=self._need_ceiling_ms)
            return
        self.clock_waits += 1
        self._clock.sleep_until_ns(until_ns, self._wait_since_ns)

    async def agenerate(self) -> IdT:
        """Issue one ID without ever blocking the event loop."""
        return (await self.abatch(1))[0]

    async def abatch(self, count: int) -> IdBatch[IdT]:
        """Issue ``count`` IDs; waits for the clock on the event loop."""
        self._check_count(count)
        out: list[int] = []
        wait_until_ns = self._fill(out, count)
        while wait_until_ns is not None:
            if wait_until_ns == _WAIT_FOR_CLAIM:
                import asyncio

                assert self._claim is not None
                await asyncio.to_thread(self._claim.wait, min_ceiling_ms=self._need_ceiling_ms)
                wait_until_ns = self._fill(out, count)
                continue
            # Callers on one loop wait for this generator's clock in turn: the
            # first waits out the ticks it needs while the others wait for it.
            # All waiting for the same tick would wake together for IDs only
            # one of them gets, and go back to sleep, every tick. (Not for a
            # claim: that wait may end in an error, which all should see at once.)
            async with self._clock_turn():
                while wait_until_ns is not None and wait_until_ns != _WAIT_FOR_CLAIM:
                    self.clock_waits += 1
                    await self._clock.asleep_until_ns(wait_until_ns, self._wait_since_ns)
                    wait_until_ns = self._fill(out, count)
        return IdBatch(out, self._make, self._int_mask, self._batch_texts)

    def _clock_turn(self) -> asyncio.Lock:
        """The lock the callers on this event loop take turns waiting with."""
        import asyncio

        loop = asyncio.get_running_loop()
        turn = self._async_turn
        if turn is None or turn[0] is not loop:
            # One loop at a time keeps its lock here: callers on another loop
            # (in another thread) make their own, and only miss the turns.
            turn = self._async_turn = (loop, asyncio.Lock())
        return turn[1]

    def __iter__(self) -> Iterator[IdT]:
        while True:
            yield self.generate()

    @property
    def ids_per_tick(self) -> int:
        """How many IDs one tick (ms; us for muid) holds: the scheme's rate cap."""
        return self._limit

    @property
    def issued(self) -> int:
        """How many IDs this generator has issued.

        Exact when one thread mints; under contention it can be off by one
        per tick boundary, where a thread's value is dropped in a race.
        """
        run = self._run
        return self._banked + run.size - length_hint(run.values) - self._wasted

    # -- the locked path ---------------------------------------------------------
    @staticmethod
    def _check_count(count: int) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ConfigurationError(f"count must be a non-negative integer, got {count!r}")

    def _fill(self, out: list[int], count: int) -> int | None:
        """Append ID ints to ``out`` until it holds ``count``, or return when to retry."""
        while len(out) < count:
            with self._lock:
                taken = self._take_locked(count - len(out))
            if isinstance(taken, int):
                return taken
            out += self._with_random_bits(taken) if self._random_bits else taken
        return None

    def _with_random_bits(self, ints: Sequence[int]) -> list[int]:
        """``ints`` with the scheme's random bits (if it has any) filled in, each afresh."""
        if not self._random_bits:
            return list(ints)
        return list(map(or_, ints, map(getrandbits, repeat(self._random_bits))))

    def _take_locked(self, want: int) -> Sequence[int] | int:  # noqa: PLR0915
        """Take up to ``want`` IDs of one tick, or say when to ask again.

        Returns the ID ints (a non-empty list, or a ``range`` when they are
        the start of a tick opened here), or the wall-clock time in ns to
        wait for. Caller holds ``self._lock``.
        """
        if self._compiled:
            # From here on the compiled core opens no tick of its own (and so
            # touches no _tick) until this opens one and arms its run again.
            cast("_CompiledRun", self._run).disarm()
            if _FORK_WATCH.compiled_forks != cast(ModuleType, _speedups).forks():
                _FORK_WATCH.catch_up()
        if self._blocked is not None:
            raise self._blocked()
        tick_ns = self.tick_ns
        now_ns = self._now_ns()
        now = now_ns // tick_ns
        claim = self._claim
        deadline_mono_ns: int | None = None
        if claim is None:
            ceiling = _NO_CEILING
            until_cap = _NO_CEILING
        else:
            grant = claim.grant()
            if grant is None:
                self._need_ceiling_ms = None
                return _WAIT_FOR_CLAIM
            if grant.epoch != self._epoch:
                self._adopt(grant)
            # The claim speaks in ms, the ticks may be longer (Sonyflake's 10 ms):
            # tick t may be opened when it starts at or below the ceiling. A
            # successor, whose floor is that ceiling, starts after the tick
            # holding it (see _adopt), so the tick is ours alone.
            ceiling = grant.ceiling_ms // (tick_ns // 1_000_000)
            deadline_mono_ns = grant.deadline_mono_ns
            until_cap = now_ns + deadline_mono_ns - self._clock.monotonic_ns()
        tick = self._tick
        if now > tick:
            if now > ceiling:
                self._need_ceiling_ms = now * tick_ns // 1_000_000
                return _WAIT_FOR_CLAIM
            opening = now
        else:
            # The clock is at or behind the newest tick. Behind by more than
            # we may borrow means it stepped back, or (fresh claim) that it is
            # behind the previous holder's high-water mark.
            lag_ns = (tick - self._max_ahead) * tick_ns - now_ns
            if lag_ns > 0:
                self._check_lag(lag_ns)
            # Renewals extend a run's life; a fenced run comes back here.
            self._run.until_ns = min((tick + 1) * tick_ns, until_cap)
            taken: Sequence[int] = self._run.take(want)
            if len(taken) < want and self._pending is not None:
                self._switch_run(self._pending, self._run.until_ns)
                self._pending = None
                taken = [*taken, *self._run.take(want - len(taken))]
            if taken:
                return taken
            opening = tick + 1  # this tick is used up: borrow the next, if allowed
            if opening - now > self._max_ahead:
                # The waiter compares the clock with this reading: earlier means
                # it stepped back since. Another thread may overwrite it first,
                # but only with a later reading, which still reveals such a step.
                self._wait_since_ns = now_ns
                if tick != self._exhausted_tick:
                    # The compiled core counts the ticks it waits on alike (count_exhausted).
                    self._exhausted_tick = tick
                    self.exhausted_ticks += 1
                return (opening - self._max_ahead) * tick_ns
            if opening > ceiling:
                self._need_ceiling_ms = opening * tick_ns // 1_000_000
                return _WAIT_FOR_CLAIM
        # Open tick `opening`: its IDs become the run. Written out here, not
        # in helpers, because it runs once per tick and usually cold, when
        # each Python call costs several times what it does in a loop.
        base = self._base_for_tick(opening)
        step = 1 << self._seq_shift
        self._tick = opening
        self._floor_fresh = False
        first = base
        if self._random_bits:
            # A scheme with random bits (short60) also starts each tick's
            # sequence at a random point and wraps round to cover the rest,
            # so two processes minting a few IDs per ms rarely pick the same
            # sequence numbers.
            first = base + getrandbits(self._limit.bit_length() - 1) * step
            self._pending = range(base, first, step) if first != base else None
        values = range(first, base + self._limit * step, step)
        old = self._run
        old.until_ns = 0  # threads still holding it drop what they take and come back
        self._banked += old.size - length_hint(old.values)
        end_ns = (opening + 1) * tick_ns
        until_ns = end_ns if end_ns < until_cap else until_cap
        # Our IDs come off the front before the run is published, so no other
        # thread can take them; a batch's are a slice of the range (no ints made).
        ours: Sequence[int]
        if self._compiled:
            ours = values[:want]
            run = self._new_run(values[want:], until_ns, len(values))
            if self._compiled and not self._random_bits:  # still: its values may be too wide
                self._arm(cast("_CompiledRun", run), opening, base, ceiling, deadline_mono_ns)
            self._run = run
            return ours
        run = _new(_Run)
        if want == 1:
            run.values = iter(values)
            ours = (next(run.values),)
        else:
            ours = values[:want]
            run.values = iter(values[want:])
        run.size = len(values)
        run.until_ns = until_ns
        self._run = run
        return ours

    def _check_lag(self, lag_ns: int) -> None:
        if self._floor_fresh and self._claim is not None:
            # Behind the predecessor's high-water mark: wait as long as for a claim.
            tolerance_ns = max(
                self._max_clock_wait_ns, round(self._claim.options.wait_timeout_s * 1e9)
            )
            if lag_ns > tolerance_ns:
                raise ClockMovedBackwards(
                    lag_ns / 1e6,
                    tolerance_ns / 1e6,
                    detail=(
                        f"this host's clock is {lag_ns / 1e6:.0f} ms behind the high-water "
                        f"mark the previous holder of {self._describe_identity()} recorded; "
                        "issuing now could repeat its IDs. Check NTP on this host"
                    ),
                )
            return
        self.clock_steps_back += 1
        if lag_ns > self._max_clock_wait_ns:
            self._run.until_ns = 0  # keep the hot path out until the clock is back
            raise ClockMovedBackwards(lag_ns / 1e6, self._max_clock_wait_ns / 1e6)

    def _switch_run(self, values: range, until_ns: int) -> None:
        old = self._run
        old.until_ns = 0  # threads still holding it drop what they take and come here
        self._banked += old.size - length_hint(old.values)
        self._run = self._new_run(values, until_ns)

    def _new_run(self, values: range, until_ns: int, size: int | None = None) -> _Runlike:
        """A run of ``values`` (``size``: of the whole tick, if more), the compiled
        core's where this generator is on it."""
        if size is None:
            size = len(values)
        if self._compiled:
            assert _speedups is not None
            # The clock behind this tick (a step back) sends batches here at once.
            from_ns = (self._tick - self._max_ahead) * self.tick_ns
            try:
                compiled: _CompiledRun = _speedups.Run(
                    values, size, until_ns, from_ns, self._run_clock
                )
            except OverflowError:  # values wider than the compiled core makes
                self._compiled = False
            else:
                return compiled
        run: _Run = _new(_Run)  # skips a Python-level __init__: this runs once per tick
        run.values = iter(values)
        run.size = size
        run.until_ns = until_ns
        return run

    def _retire_tick(self) -> None:
        """Spend the current tick: the next ID comes from a later one."""
        self._switch_run(_NO_RUN_VALUES, 0)
        self._pending = None
        self._layout = None  # the identity may change: its layout is made again

    # -- the compiled core ------------------------------------------------------------
    def _arm(
        self, run: _CompiledRun, tick: int, base: int, ceiling: int, deadline_mono_ns: int | None
    ) -> None:
        """Let the compiled run of ``tick`` (just opened, ``base`` its base value)
        open the ticks after it by itself, up to ``ceiling`` and until the claim's
        deadline, as this method would with the same grant. Caller holds the lock.

        Whatever changes the grant or the identity reaches the run before it can
        matter: a claim that is lost, suspended or given another identity fences
        the generator (which disarms its run), and a renewed grant is taken up
        when the run comes back here past the old one's ceiling or deadline.
        """
        layout = self._layout
        try:
            if layout is None or (layout is not False and layout.base(tick) != base):
                layout = self._layout = self._compiled_layout(tick)
            if layout is not False and layout.base(tick) == base:
                run.arm(layout, tick, ceiling, deadline_mono_ns)
        except ValueError:  # a tick beyond what the compiled layout holds
            return

    def _compiled_layout(self, tick: int) -> Any:
        """The compiled layout of this generator's IDs, or False where there is none.

        The scheme's declaration (``_tick_layout``) must make the same base values as
        ``_base_for_tick`` at every tick tried (around ``tick``, across uid64's 16 s
        blocks, at both ends of the scheme's range), or it is not used.
        """
        assert _speedups is not None
        declared = self._tick_layout()
        if declared is None:
            return False
        try:
            layout = _speedups.Layout(
                tick_ns=self.tick_ns,
                limit=self._limit,
                step=1 << self._seq_shift,
                max_ahead=self._max_ahead,
                identity=declared.identity,
                time_shift=declared.time_shift,
                low=declared.low,
                high=declared.high,
                reversed=declared.reversed,
            )
        except (OverflowError, ValueError):
            return False
        block = 1 << 14
        tries = {
            tick - 1,
            tick,
            tick + 1,
            tick + 2,
            tick // block * block + block - 1,
            tick // block * block + block,
            declared.low,
            declared.high,
            *(tick ^ (1 << bit) for bit in range(0, 48, 5)),
        }
        for tried in sorted(tries):
            if declared.low <= tried <= declared.high:
                try:
                    if layout.base(tried) != self._base_for_tick(tried):
                        return False
                except ValueError:  # beyond the compiled layout: it never opens those
                    continue
        return layout


def _hot_path(
    id_type: type[IdValue],
    random_bits: int,
    make: Callable[[int], Any] | None = None,
    *,
    wait: bool = True,
) -> Callable[[Any], Any]:
    """``generate()`` (or ``generate_nowait()``) specialised for one scheme's class.

    The next value of the tick's run, if the clock is still inside the run's
    time, wrapped in the scheme's type; anything else goes the locked way. The
    scheme's type, random width and maker (``make``: a class's
    ``_make_from_run``, for values that carry more than the ID) are closed over
    rather than read from ``self``: at ~250 ns per ID, each attribute read and
    branch saved is a few percent, so there is one variant per kind of class.
    """
    if make is not None:

        def generate(self: TickGenerator[Any]) -> Any:
            run = self._run
            try:
                value = next(run.values)
            except StopIteration:
                return self._generate_slow(0, wait=wait)
            if self._now_ns() < run.until_ns:
                return make(value)
            return self._generate_slow(1, wait=wait)

    elif random_bits:

        def generate(self: TickGenerator[Any]) -> Any:
            run = self._run
            try:
                value = next(run.values)
            except StopIteration:
                return self._generate_slow(0, wait=wait)
            if self._now_ns() < run.until_ns:
                obj = _new(id_type)
                obj._int = value | getrandbits(random_bits)
                return obj
            return self._generate_slow(1, wait=wait)

    else:

        def generate(self: TickGenerator[Any]) -> Any:
            run = self._run
            try:
                value = next(run.values)
            except StopIteration:
                return self._generate_slow(0, wait=wait)
            if self._now_ns() < run.until_ns:
                obj = _new(id_type)
                obj._int = value
                return obj
            return self._generate_slow(1, wait=wait)

    template = TickGenerator.generate if wait else TickGenerator.generate_nowait
    generate.__name__ = template.__name__
    generate.__doc__ = template.__doc__
    return generate


def _place_batches(cls: type[TickGenerator[Any]]) -> None:
    """Make ``cls``'s batches of IDs, not of run values (its ``_placement``): the
    compiled core places them where the generator is on it and can, Python otherwise."""
    placement = cls._placement
    assert placement is not None
    run_batch = cls.batch
    place_all: Callable[[Sequence[int]], list[int]] | None = getattr(run_batch, "place_all", None)
    if place_all is not None:
        try:
            place_all(range(0))
        except TypeError:  # the maker's placement is one the compiled core cannot copy
            place_all = None
    plain = _plain_maker(cls.id_type)

    def placed(generator: TickGenerator[Any], made: IdBatch[Any]) -> IdBatch[Any]:
        values = made._ints
        if generator._compiled and place_all is not None:
            ints = place_all(values)
        else:
            ints = placement.apply_all(values)
        return IdBatch(ints, plain, None, cls._batch_texts)

    def batch(self: TickGenerator[Any], count: int) -> IdBatch[Any]:
        return placed(self, run_batch(self, count))

    async def abatch(self: TickGenerator[Any], count: int) -> IdBatch[Any]:
        return placed(self, await TickGenerator.abatch(self, count))

    batch.__doc__ = TickGenerator.batch.__doc__
    abatch.__doc__ = TickGenerator.abatch.__doc__
    cls.batch = batch  # type: ignore[method-assign]
    cls.abatch = abatch  # type: ignore[method-assign]


def _slot(owner: type, name: str) -> object:
    """The descriptor of the slot ``name`` of ``owner`` (from the class that declares it)."""
    for klass in owner.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    raise AttributeError(f"{owner.__name__} has no slot {name}")


def _slot_values(value: object) -> dict[str, object]:
    """Every slot ``value`` fills, by name (to compare two values made two ways)."""
    names = {n for k in type(value).__mro__ for n in k.__dict__.get("__slots__", ())}
    return {name: getattr(value, name, None) for name in sorted(names)}


def _compiled_path(cls: type[TickGenerator[Any]], kind: str, pure: Callable[..., Any]) -> Any:
    """``generate()``, ``generate_nowait()`` or ``batch()`` of ``cls`` in the compiled core.

    Its values are made as the pure core makes them: the value type's slots found
    from their descriptors, checked here by making a value both ways (a maker the
    compiled core cannot copy is called instead). ``pure`` serves generators on
    the pure core; where the compiled method cannot be made at all, it is used.
    """
    assert _speedups is not None
    id_type = cls.id_type
    make = getattr(cls, "_make_from_run", None)
    mask = cls._int_mask
    tag = cls._tag_slot
    placement = cls._placement

    def compiled(maker: Callable[[int], Any] | None) -> Any:
        assert _speedups is not None
        return _speedups.HotPath(
            kind=kind,
            owner=cls,
            pure=pure,
            run_slot=_slot(TickGenerator, "_run"),
            tick_slot=_slot(TickGenerator, "_tick"),
            waits_slot=_slot(TickGenerator, "clock_waits"),
            exhausted_slots=(
                _slot(TickGenerator, "exhausted_ticks"),
                _slot(TickGenerator, "_exhausted_tick"),
            ),
            make_slot=_slot(TickGenerator, "_make"),
            id_type=id_type,
            int_slot=_slot(id_type, "_int"),
            tag_slot=_slot(id_type, tag) if tag is not None else None,
            tag_shift=mask.bit_length() if mask is not None else 64,
            maker=maker,
            random_bits=cls.random_bits,
            batch_type=IdBatch,
            batch_slots=tuple(_slot(IdBatch, n) for n in ("_ints", "_make", "_mask", "_texts")),
            mask=mask,
            texts=cls._batch_texts,
            placement=None
            if placement is None or maker is not None
            else (
                placement.split,
                placement.high_shift,
                placement.low_shift,
                placement.fixed,
                placement.noise_bits,
            ),
        )

    def reference(value: int) -> object:
        if make is not None:
            return make(value)
        made = _new(id_type)
        made._int = value
        return made

    noise = ~placement.noise_mask if placement is not None else -1

    def same(made: object, expected: object) -> bool:
        """Whether two values agree in every slot (their random bits aside)."""
        if type(made) is not type(expected):
            return False
        mine, theirs = _slot_values(made), _slot_values(expected)
        mine["_int"] = cast(int, mine["_int"]) & noise
        theirs["_int"] = cast(int, theirs["_int"]) & noise
        return mine == theirs

    pattern = 0x0123_4567_89AB_CDEF_FEDC_BA98_7654_3210
    if mask is None:
        probes = [pattern & (1 << 64) - 1]
    elif tag is not None:
        probes = [(9 << mask.bit_length()) | 0x4567]
    else:
        probes = [pattern & mask, mask, 1 << (mask.bit_length() - 1)]
    try:
        path = compiled(None)
        if not all(same(path.make(probe), reference(probe)) for probe in probes):
            path = compiled(make if make is not None else reference)
    except (TypeError, AttributeError, ValueError):  # slots not as the compiled core needs
        return pure
    return path


def compiled_values(values: range) -> Any:
    """``values`` as a run the compiled core takes from (None: it is not in use), for
    values that are not ticks of a clock (muid's offsets in a transaction)."""
    if _speedups is None or _compiled_clocks == "none":
        return None
    try:
        return _speedups.Run(values, len(values), 1 << 62)  # good until a time never reached
    except OverflowError:
        return None


def compiled_take(owner: type, pure: Callable[[Any], Any], id_type: type[IdValue]) -> Any:
    """``pure`` (a method that takes the next value of ``owner``'s ``_offsets``, a run of
    :func:`compiled_values`) in the compiled core, which builds the values as
    ``pure`` does; ``pure`` where there is none. ``pure`` serves everything else:
    a run used up or made before a fork, or no run at all."""
    if _speedups is None:
        return pure
    try:
        return _speedups.HotPath(
            kind="take",
            owner=owner,
            pure=pure,
            run_slot=_slot(owner, "_offsets"),
            tick_slot=None,
            waits_slot=None,
            make_slot=None,
            id_type=id_type,
            int_slot=_slot(id_type, "_int"),
            tag_slot=None,
            tag_shift=64,
            maker=None,
            random_bits=0,
            batch_type=None,
            batch_slots=None,
            mask=None,
            texts=None,
            exhausted_slots=None,
            placement=None,
        )
    except (TypeError, AttributeError, ValueError):  # slots not as the compiled core needs
        return pure


def _locked_path(cls: type[TickGenerator[Any]], *, wait: bool) -> Callable[[Any], Any]:
    """``generate()`` (or ``generate_nowait()``) for ``cls`` that takes the lock for every ID.

    Where ``next()`` on the shared run is not atomic (no GIL), or when asked
    for. The hot path's steps, with the lock held around ``next()`` and the
    clock check: every other taker of the run (:meth:`TickGenerator._take_locked`)
    holds the same lock, so no two threads can take the same value. The value
    object is built after the lock is released, inline where the scheme's
    value is its int alone, as :func:`_hot_path` does.
    """
    # A class without an id_type of its own yet (an abstract base) builds values
    # through the instance's maker; so does one that keeps bits above the ID.
    id_type: type[IdValue] = getattr(cls, "id_type", IdValue)
    random_bits = cls.random_bits
    make = getattr(cls, "_make_from_run", None)
    inline = hasattr(cls, "id_type") and cls._int_mask is None and make is None

    def generate(self: TickGenerator[Any]) -> Any:
        lock = self._lock
        lock.acquire()  # not `with`: half the cost, and this runs for every ID
        try:
            run = self._run
            value = next(run.values, None)  # run values are ints, never None
            fresh = value is not None and self._now_ns() < run.until_ns
        finally:
            lock.release()
        if value is None:
            return self._generate_slow(0, wait=wait)
        if not fresh:
            return self._generate_slow(1, wait=wait)
        if random_bits:
            value |= getrandbits(random_bits)
        if inline:
            obj = _new(id_type)
            obj._int = value
            return obj
        return make(value) if make is not None else self._make(value)

    template = TickGenerator.generate if wait else TickGenerator.generate_nowait
    generate.__name__ = template.__name__
    generate.__doc__ = template.__doc__
    return generate


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
