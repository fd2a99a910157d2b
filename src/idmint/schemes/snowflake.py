"""snowflake: a 63-bit int of time, worker and sequence, in a layout the user names.

Twitter's layout, the default (``twitter``)::

     63 62                                         22 21          12 11          0
    +--+---------------------------------------------+--------------+-------------+
    |0 | time (41 bits): ms since 1288834974657      | worker       | sequence    |
    |  | (2010-11-04T01:42:54.657Z)                  | (10 bits)    | (12 bits)   |
    +--+---------------------------------------------+--------------+-------------+

Sonyflake's (``sonyflake``): 10 ms ticks, the sequence above the machine ID::

     63 62                                    24 23          16 15                0
    +--+----------------------------------------+--------------+------------------+
    |0 | time (39 bits): 10 ms ticks since      | sequence     | worker (machine) |
    |  | 2014-09-01T00:00:00Z                   | (8 bits)     | (16 bits)        |
    +--+----------------------------------------+--------------+------------------+

A :class:`Layout` says where each part lies: the epoch, the tick, the widths
of time, worker and sequence (which add up to 63: the sign bit stays 0, so
the IDs are positive in a signed 64-bit column), and the order of worker and
sequence. Every layout has a value type of its own (:meth:`Snowflake.of`);
IDs of two layouts never compare equal, whatever their ints. The text form is
the decimal integer, as Twitter's API prints it.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from functools import cache
from typing import Any, ClassVar, Final

from idmint.errors import ConfigurationError, InvalidId
from idmint.schemes._base import LAST_DATETIME_MS, Field, IdValue, int_from_decimal, iso_ms

ID_BITS: Final = 63  # the sign bit of a signed 64-bit int stays 0
MAX_WORKER_BITS: Final = 16
"""The widest worker a pool is kept for (Sonyflake's machine ID): 65,536 workers."""
MAX_TICK_MS: Final = 1000

TIME_WORKER_SEQUENCE: Final = "time-worker-sequence"
TIME_SEQUENCE_WORKER: Final = "time-sequence-worker"
ORDERS: Final = (TIME_WORKER_SEQUENCE, TIME_SEQUENCE_WORKER)

_TEXT_LENGTH: Final = len(str((1 << ID_BITS) - 1))


@dataclass(frozen=True)
class Layout:
    """Where a snowflake's parts lie, and what its time counts."""

    epoch_ms: int
    """The ms since 1970-01-01 UTC that time 0 stands for."""
    tick_ms: int
    """How many ms one unit of the time field is (Sonyflake: 10)."""
    time_bits: int
    worker_bits: int
    sequence_bits: int
    order: str = TIME_WORKER_SEQUENCE
    """Which of worker and sequence lies below the other: the last named is lowest."""

    @classmethod
    def of(
        cls,
        layout: Layout | str | None = None,
        *,
        epoch_ms: int | None = None,
        tick_ms: int | None = None,
        time_bits: int | None = None,
        worker_bits: int | None = None,
        sequence_bits: int | None = None,
        order: str | None = None,
        until_year: int | None = None,
    ) -> Layout:
        """A preset (``twitter`` when none is named) with the parts given changed,
        checked; ``ConfigurationError`` in one line where it cannot be used.
        ``until_year``: the layout must hold every time before that year begins."""
        if isinstance(layout, Layout):
            base = layout
        else:
            name = TWITTER_NAME if layout is None else str(layout).strip().lower()
            if name not in PRESETS:
                raise ConfigurationError(
                    f"no snowflake layout is called {layout!r}; the presets are "
                    + ", ".join(PRESETS)
                )
            base = PRESETS[name]
        changed: dict[str, Any] = {
            name: value
            for name, value in (
                ("epoch_ms", epoch_ms),
                ("tick_ms", tick_ms),
                ("time_bits", time_bits),
                ("worker_bits", worker_bits),
                ("sequence_bits", sequence_bits),
                ("order", order),
            )
            if value is not None
        }
        made = replace(base, **changed)
        made.check(until_year)
        return made

    def check(self, until_year: int | None = None) -> None:
        """``ConfigurationError`` if the layout is not 63 bits, has a part it cannot
        use, or runs out before ``until_year`` begins."""
        for part in fields(self):
            value = getattr(self, part.name)
            if part.name == "order":
                if value not in ORDERS:
                    raise ConfigurationError(
                        f"snowflake order {value!r} is not one of {', '.join(ORDERS)}"
                    )
            elif isinstance(value, bool) or not isinstance(value, int):
                raise ConfigurationError(f"snowflake {part.name} must be a whole number: {value!r}")
        total = self.time_bits + self.worker_bits + self.sequence_bits
        if total != ID_BITS:
            raise ConfigurationError(
                f"a snowflake layout has {ID_BITS} bits below the sign bit; "
                f"{self.time_bits} time + {self.worker_bits} worker + {self.sequence_bits} "
                f"sequence make {total}"
            )
        if not 1 <= self.worker_bits <= MAX_WORKER_BITS:
            raise ConfigurationError(
                f"snowflake worker_bits must be 1..{MAX_WORKER_BITS} (a pool of up to "
                f"{1 << MAX_WORKER_BITS} workers), got {self.worker_bits}"
            )
        if self.time_bits < 1 or self.sequence_bits < 0:
            raise ConfigurationError(
                "snowflake time_bits must be at least 1 and sequence_bits at least 0"
            )
        if not 1 <= self.tick_ms <= MAX_TICK_MS:
            raise ConfigurationError(
                f"snowflake tick_ms must be 1..{MAX_TICK_MS}, got {self.tick_ms}"
            )
        if self.epoch_ms < 0 or self.epoch_ms % self.tick_ms:
            # Ticks are counted from 1970, so that every process cuts time into
            # the same ticks; an epoch inside a tick would split one.
            raise ConfigurationError(
                f"snowflake epoch_ms must be a whole number of {self.tick_ms} ms ticks "
                f"after 1970-01-01, got {self.epoch_ms}"
            )
        if self.end_ms > LAST_DATETIME_MS:
            raise ConfigurationError(
                f"a snowflake layout of {self.time_bits} time bits of {self.tick_ms} ms runs "
                "past the year 9999; give the time fewer bits"
            )
        if until_year is not None:
            until_ms = _year_ms(until_year)
            if self.end_ms < until_ms:
                raise ConfigurationError(
                    f"this snowflake layout runs out at {iso_ms(self.end_ms + 1)}, before "
                    f"{until_year}: give the time more bits, a later epoch or a longer tick"
                )

    # -- what follows from the parts -----------------------------------------------
    @property
    def max_time(self) -> int:
        """The largest value of the time field."""
        return (1 << self.time_bits) - 1

    @property
    def end_ms(self) -> int:
        """The last ms (since 1970) an ID of this layout can carry."""
        return self.epoch_ms + (self.max_time + 1) * self.tick_ms - 1

    @property
    def time_shift(self) -> int:
        return self.worker_bits + self.sequence_bits

    @property
    def worker_shift(self) -> int:
        return self.sequence_bits if self.order == TIME_WORKER_SEQUENCE else 0

    @property
    def sequence_shift(self) -> int:
        return 0 if self.order == TIME_WORKER_SEQUENCE else self.worker_bits

    @property
    def name(self) -> str:
        """The preset's name where it is one, else ``custom``."""
        return next((name for name, preset in PRESETS.items() if preset == self), "custom")

    @property
    def space(self) -> str:
        """The identity space its workers are claimed in (why: coordinate/spaces.py)."""
        return space_name(self.worker_bits)

    def describe(self) -> str:
        """``twitter: 41/10/12 bits, 1 ms ticks since 2010-11-04T01:42:54.657Z``."""
        parts = (
            f"{self.time_bits}/{self.worker_bits}/{self.sequence_bits}"
            if self.order == TIME_WORKER_SEQUENCE
            else f"{self.time_bits}/{self.sequence_bits}/{self.worker_bits}"
        )
        return (
            f"{self.name}: {parts} bits ({self.order}), {self.tick_ms} ms ticks since "
            f"{iso_ms(self.epoch_ms)}"
        )


def space_name(worker_bits: int) -> str:
    """The identity space of the layouts with ``worker_bits``-bit workers."""
    return f"snowflake-w{worker_bits}"


def _year_ms(year: int) -> int:
    if isinstance(year, bool) or not isinstance(year, int) or not 1970 <= year <= 9999:
        raise ConfigurationError(f"until_year must be a year 1970..9999, got {year!r}")
    start = _dt.datetime(year, 1, 1, tzinfo=_dt.timezone.utc)
    return int(start.timestamp()) * 1000


TWITTER_NAME: Final = "twitter"
TWITTER: Final = Layout(1_288_834_974_657, 1, 41, 10, 12)
"""Twitter's: lasts until 2080-07-10."""
DISCORD: Final = Layout(1_420_070_400_000, 1, 41, 10, 12)
"""Discord's: Twitter's widths (its worker is 5 bits of worker and 5 of process)
from 2015-01-01."""
SONYFLAKE: Final = Layout(1_409_529_600_000, 10, 39, 16, 8, TIME_SEQUENCE_WORKER)
"""Sonyflake's: 10 ms ticks from 2014-09-01, lasting 174 years; a 16-bit machine ID."""

PRESETS: Final[dict[str, Layout]] = {
    TWITTER_NAME: TWITTER,
    "discord": DISCORD,
    "sonyflake": SONYFLAKE,
}
"""The named layouts. (Instagram's 41/13/10 is 64 bits: it does not fit.)"""


def _fields(layout: Layout) -> tuple[Field, ...]:
    if layout.tick_ms == 1:
        time = Field.unix_time(low=layout.epoch_ms, shift=layout.time_shift, bits=layout.time_bits)
    else:
        time = Field.unix_time(
            low=layout.epoch_ms,
            high=layout.epoch_ms + layout.max_time * layout.tick_ms,
            note=f"a whole {layout.tick_ms} ms tick",
        )
    worker = Field.at("worker", "worker ID", layout.worker_shift, layout.worker_bits)
    sequence = Field.at(
        "sequence",
        "position within the ms" if layout.tick_ms == 1 else "position within the tick",
        layout.sequence_shift,
        layout.sequence_bits,
    )
    if layout.order == TIME_WORKER_SEQUENCE:
        return (time, worker, sequence)
    return (time, sequence, worker)


class Snowflake(IdValue):
    """A snowflake ID in Twitter's layout; ``Snowflake.of(layout)`` for another.

    >>> Snowflake("1212092628029698048").timestamp_ms
    1577820376771
    """

    __slots__ = ()
    scheme = "snowflake"
    bits = ID_BITS
    layout: ClassVar[Layout] = TWITTER
    _forms = "decimal digits, 8 bytes or an int"
    summary = (
        "63 bits shown in decimal: time, worker, sequence in a named layout "
        f"({', '.join(PRESETS)} or your own); Twitter's: 41/10/12, 4096 IDs/ms"
    )
    fields = _fields(TWITTER)
    text_length = _TEXT_LENGTH
    text_pattern = f"[0-9]{{1,{_TEXT_LENGTH}}}"
    json_description = "A snowflake ID: decimal digits"
    json_example = "1212092628029698048"

    variant_options: ClassVar[Mapping[str, str]] = {
        "layout": "the bit layout: " + ", ".join(PRESETS),
        "epoch_ms": "the layout's epoch, in ms since 1970-01-01 UTC",
        "tick_ms": "the ms one unit of the layout's time counts",
        "time_bits": "the layout's time width",
        "worker_bits": "the layout's worker width",
        "sequence_bits": "the layout's sequence width",
        "order": "which of worker and sequence lies lower: " + ", ".join(ORDERS),
        "until_year": "refuse a layout that runs out before this year",
    }
    variant_choices: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "layout": tuple(PRESETS),
        "order": ORDERS,
    }

    @staticmethod
    def of(layout: Layout | str | None = None, **parts: Any) -> type[Snowflake]:
        """The value type of ``layout`` (a preset's name, or a :class:`Layout`), with
        the parts given changed (see :meth:`Layout.of`)."""
        return _type_of(Layout.of(layout, **parts))

    @classmethod
    def variant_parts(cls) -> dict[str, Any]:
        return asdict(cls.layout)

    @classmethod
    def variant(cls, **options: Any) -> type[Snowflake]:
        unknown = sorted(set(options) - set(cls.variant_options))
        if unknown:
            raise ConfigurationError(f"snowflake layouts have no {', '.join(unknown)}")
        return cls.of(options.pop("layout", None), **options)

    # -- the fields, wherever the layout puts them --------------------------------------
    @property
    def timestamp_ms(self) -> int:
        """Milliseconds since the Unix epoch (the start of its tick)."""
        layout = self.layout
        return layout.epoch_ms + (self._int >> layout.time_shift) * layout.tick_ms

    @property
    def worker(self) -> int:
        layout = self.layout
        return (self._int >> layout.worker_shift) & ((1 << layout.worker_bits) - 1)

    @property
    def sequence(self) -> int:
        layout = self.layout
        return (self._int >> layout.sequence_shift) & ((1 << layout.sequence_bits) - 1)

    # -- the IDs bounding an instant: the time lies at the top in ticks, in every layout --
    @classmethod
    def orders_by_time(cls, **options: Any) -> bool:
        cls._check_bound_options(options)
        return True  # nothing but the sign bit, always 0, lies above the time

    @classmethod
    def _tick_bounds(cls, count: int, options: Mapping[str, Any]) -> tuple[int, int]:
        # ``count`` is in ms; the layout stores whole ticks from its epoch.
        layout = cls.layout
        low = (count - layout.epoch_ms) // layout.tick_ms << layout.time_shift
        return low, low | ((1 << layout.time_shift) - 1)

    # -- codec ------------------------------------------------------------------------
    @classmethod
    def parse(cls, value: object) -> Any:
        if isinstance(value, Snowflake) and value.layout != cls.layout:
            # The same bits mean another time and worker in another layout.
            raise InvalidId(
                cls.scheme,
                f"{value} is a snowflake of layout {value.layout.describe()}, not "
                f"{cls.layout.describe()}",
                problem="type",
            )
        return super().parse(value)

    @classmethod
    def from_text(cls, text: str) -> Any:
        """Read the decimal text form."""
        return cls.from_int(int_from_decimal(cls.scheme, text, cls.text_length))

    @classmethod
    def text_of_int(cls, value: int) -> str:
        return str(value)

    @classmethod
    def build(cls, *, timestamp_ms: int, worker: int = 0, sequence: int = 0) -> Any:
        """Make the ID with these fields; each is range-checked, and the time must
        start a tick of the layout."""
        layout = cls.layout
        cls._check_fields(timestamp_ms=timestamp_ms)
        ticks, within = divmod(timestamp_ms - layout.epoch_ms, layout.tick_ms)
        if within:
            raise InvalidId(
                cls.scheme,
                f"timestamp_ms {timestamp_ms} is {within} ms into a {layout.tick_ms} ms tick; "
                f"this layout's times are whole ticks ({timestamp_ms - within} or "
                f"{timestamp_ms - within + layout.tick_ms})",
                problem="range",
            )
        return cls._checked(
            ticks << layout.time_shift | cls._packed(worker=worker, sequence=sequence)
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unpickle, (self.layout, self._int))


def _unpickle(layout: Layout, value: int) -> Snowflake:
    made: Snowflake = _type_of(layout).from_int(value)
    return made


@cache
def _type_of(layout: Layout) -> type[Snowflake]:
    """The value type of ``layout`` (one per layout, made once)."""
    if layout == TWITTER:
        return Snowflake
    name = layout.name
    made: type[Snowflake] = type(
        f"Snowflake_{name}",
        (Snowflake,),
        {
            "__slots__": (),
            "__module__": __name__,
            "layout": layout,
            "fields": _fields(layout),
            "__doc__": f"A snowflake ID of layout {layout.describe()}.",
        },
    )
    return made
