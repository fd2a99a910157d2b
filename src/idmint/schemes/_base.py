"""Machinery shared by the ID value types: the views of the int, comparison, parsing helpers.

Every scheme's value type keeps one canonical int in ``_int`` (a slot, like
``ipaddress.IPv4Address._ip``); everything else is derived from it on demand.
Public attributes are read-only properties and ``__slots__`` forbids new ones,
so instances behave as immutable values. The generators build instances with
``object.__new__`` plus a slot store instead of going through parsing, which is
why the slot is not guarded by a ``__setattr__`` override: that guard would cost
every minted ID a further ~50 ns.

As ``uuid.UUID`` derives its views from its one int, :class:`IdValue` derives
what every scheme shows from what the scheme declares: ``bytes`` from ``bits``,
``str()`` from the text codec (``text_of_int``), ``time`` from the field that
counts time (``per_second``), ``to_dict()`` from ``fields``. A scheme writes
its layout (the field properties), its fields, its text codec and ``build``.
"""

from __future__ import annotations

import datetime as _dt
import inspect
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal, TypeVar, cast

from idmint.errors import ConfigurationError, InvalidId, quoted

UNIX_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
# datetime cannot go past year 9999; IDs whose time would land later are refused
# at parse time rather than failing later in ``.time``.
LAST_DATETIME_MS = 253_402_300_799_999

# The units a time field can count in, and how many of each make a second.
_PER_SECOND: Final = {"ms": 1000, "us": 1_000_000}

_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_DECIMAL_DIGITS = frozenset("0123456789")

IdT = TypeVar("IdT", bound="IdValue")


@dataclass(frozen=True)
class Field:
    """One field of a scheme's IDs: what ``to_dict()`` shows and ``build()`` takes.

    The range comes from the scheme's layout constants; where it depends on
    another field (elastic64's node and burst on node_bits) it is the widest.
    """

    name: str
    about: str
    """What it is, for help texts: ``"ms since 1970-01-01 UTC"``."""
    low: int = 0
    high: int = 0
    choices: tuple[str, ...] = ()
    """A text field's values (uid64's mode); such a field has no range."""
    decoded: bool = True
    """Whether ``to_dict()`` shows it (short60's ``random`` is only a name ``build()`` takes)."""
    per_second: int = 0
    """For the field that counts time: its units per second (1000: ms since
    1970-01-01 UTC). An ID's ``time``, and the ``time`` of ``to_dict()``, are read
    from it; 0 for every other field."""
    shift: int | None = None
    """Where a field that stands in the int as it is lies: ``bits`` bits from bit
    ``shift`` up, holding the value less ``low``. :class:`IdValue` then derives the
    field's property, and ``_packed`` puts it in place. None: the scheme writes the
    property (a field split in parts or stored transformed, as uid64's)."""
    bits: int = 0

    @classmethod
    def at(
        cls, name: str, about: str, shift: int, bits: int, *, low: int = 0, **more: Any
    ) -> Field:
        """A field standing as it is in ``bits`` bits from bit ``shift``: it holds
        ``low`` and the ``2**bits - 1`` values above."""
        return cls(name, about, low, low + (1 << bits) - 1, shift=shift, bits=bits, **more)

    @classmethod
    def unix_time(
        cls,
        unit: Literal["ms", "us"] = "ms",
        *,
        low: int = 0,
        high: int | None = None,
        shift: int | None = None,
        bits: int = 0,
        note: str = "",
    ) -> Field:
        """The field that counts an ID's time: ``timestamp_ms`` (or ``timestamp_us``),
        ``unit`` since 1970-01-01 UTC. It holds ``low`` (the scheme's epoch, where it
        stands in the int as 0) to ``high``, by default the ``2**bits - 1`` values
        above ``low``. ``note``: what the help text adds (snowflake's tick)."""
        about = f"{unit} since 1970-01-01 UTC" + (f" ({note})" if note else "")
        if high is None:
            high = low + (1 << bits) - 1
        per_second = _PER_SECOND[unit]
        return cls(
            f"timestamp_{unit}", about, low, high, per_second=per_second, shift=shift, bits=bits
        )


class IdValue:
    """Base of the scheme value types; not used on its own."""

    __slots__ = ("_int",)
    _int: int

    scheme: ClassVar[str]
    """The scheme name as the CLI and server spell it, e.g. ``"uid64"``."""
    bits: ClassVar[int]
    """How many bits an ID has: its int is below ``2**bits``; its bytes are as few
    as hold them."""
    _forms: ClassVar[str]
    """How IDs of the scheme can be given, for error messages."""
    _byte_length: ClassVar[int]
    _max_int: ClassVar[int]
    _family: ClassVar[type[IdValue]]
    """The scheme's root type: its instances convert into each other (uid64, uid64-v1)."""
    _time_field: ClassVar[Field]
    _decoded: ClassVar[tuple[Field, ...]]

    # -- what the CLI, the server, storage and pydantic read of a scheme ------------
    summary: ClassVar[str]
    """One line for ``idmint schemes``: size, fields, rate."""
    fields: ClassVar[tuple[Field, ...]]
    """The fields, in the order ``to_dict()`` shows them."""
    text_pattern: ClassVar[str]
    """A regular expression every text form matches (it need not refuse all bad ones)."""
    text_length: ClassVar[int]
    """The longest text the reader takes."""
    json_description: ClassVar[str]
    json_example: ClassVar[str]
    """A canonical text form, for JSON schemas."""
    needs_node_bits: ClassVar[bool] = False
    """Whether reading an ID needs the node-ID width it was minted under
    (elastic64): the readers then take it as their second argument."""
    fixed_bits: ClassVar[tuple[int, int]] = (0, 0)
    """Bits every ID of the scheme has at one value, as ``(mask, value)`` (uuid7's
    version and variant): the bounds of an instant (:meth:`first_at`) keep them."""
    bound_options: ClassVar[tuple[str, ...]] = ()
    """What :meth:`first_at` and the other bounds take besides the time, where the
    layout depends on it (uid64's ``mode``, elastic64's ``node_bits``)."""
    variant_options: ClassVar[Mapping[str, str]] = {}
    """The options that pick one of the scheme's layouts (snowflake's ``layout``,
    ``epoch_ms``, ...), which :meth:`variant` takes, and what each is;
    generators take them too."""
    variant_choices: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    """The values those of them that are text may take."""

    @classmethod
    def variant(cls, **options: Any) -> type[IdValue]:
        """The value type of the layout ``options`` name (``ConfigurationError`` if
        it cannot be used); the type itself where the scheme has one layout."""
        if options:
            raise ConfigurationError(
                f"{cls.scheme} IDs have one layout: no {', '.join(sorted(options))}"
            )
        return cls

    @classmethod
    def variant_parts(cls) -> dict[str, Any]:
        """The parts of the layout this type reads IDs in, for those who draw it (the
        server's page); empty where the scheme has one layout."""
        return {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._family = next(c for c in cls.__mro__ if IdValue in c.__bases__)
        if hasattr(cls, "bits"):
            cls._max_int = (1 << cls.bits) - 1
            cls._byte_length = (cls.bits + 7) // 8
        if hasattr(cls, "fields"):
            timed = [field for field in cls.fields if field.per_second]
            if len(timed) != 1 or not timed[0].decoded:
                raise TypeError(f"{cls.__name__}: one decoded field must count time (per_second)")
            cls._time_field = timed[0]
            cls._decoded = tuple(field for field in cls.fields if field.decoded)
            for field in cls.fields:
                if field.shift is not None and not hasattr(cls, field.name):
                    setattr(cls, field.name, _field_property(field))

    def __new__(cls: type[IdT], value: object) -> IdT:
        return cls.parse(value)

    # -- reading ---------------------------------------------------------------
    @classmethod
    def parse(cls: type[IdT], value: object) -> IdT:
        """Read an ID from its text form, its bytes, its int, or an ID of the same family."""
        if isinstance(value, str):
            return cls.from_text(value)
        if isinstance(value, (bytes, bytearray, memoryview)):
            return cls.from_bytes(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return cls.from_int(value)
        if isinstance(value, cls._family):
            return cls.from_int(value._int)
        raise reject_type(cls.scheme, value, cls._forms)

    @classmethod
    def from_text(cls: type[IdT], text: str) -> IdT:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def _read(cls, value: object, node_bits: int | None) -> IdValue:
        """:meth:`parse`, given the width where the scheme needs one (elastic64)."""
        return cls.parse(value)

    @classmethod
    def _read_text(cls, text: str, node_bits: int | None) -> IdValue:
        """:meth:`from_text`, given the width where the scheme needs one (elastic64)."""
        return cls.from_text(text)

    @classmethod
    def _coerce(cls, value: object, node_bits: int | None, where: str) -> IdValue:
        """``value`` as this type for a column or field ``where`` (see :func:`coerce_id`)."""
        return cls.parse(value)

    @classmethod
    def field(cls, name: str) -> Field:
        """The field called ``name``."""
        for candidate in cls.fields:
            if candidate.name == name:
                return candidate
        raise KeyError(f"{cls.scheme} IDs have no field {name!r}")

    @classmethod
    def _check_fields(cls, **values: object) -> None:
        """Each of ``values`` within its field's range, else ``InvalidId`` naming it."""
        for name, value in values.items():
            field = cls.field(name)
            check_field(cls.scheme, name, value, field.low, field.high)

    @classmethod
    def _packed(cls, **values: int) -> int:
        """The int of ``values``, each checked against its field's range and put where
        its field lies (every field named has a ``shift``)."""
        cls._check_fields(**values)
        packed = 0
        for name, value in values.items():
            field = cls.field(name)
            assert field.shift is not None, name
            packed |= (value - field.low) << field.shift
        return packed

    @classmethod
    def build_fields(cls) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The fields ``build()`` needs and those it may take, read from its signature."""
        parameters = inspect.signature(cls.build).parameters.values()  # type: ignore[attr-defined]
        required = tuple(p.name for p in parameters if p.default is inspect.Parameter.empty)
        optional = tuple(p.name for p in parameters if p.default is not inspect.Parameter.empty)
        return required, optional

    @classmethod
    def from_bytes(cls: type[IdT], data: bytes | bytearray | memoryview) -> IdT:
        """Read the big-endian byte form."""
        return cls.from_int(int_from_bytes(cls.scheme, data, cls._byte_length))

    @classmethod
    def from_int(cls: type[IdT], value: int) -> IdT:
        """Read the unsigned int form."""
        check_field(cls.scheme, "value", value, 0, cls._max_int)
        return cls._checked(value)

    @classmethod
    def _checked(cls: type[IdT], value: int) -> IdT:
        """Build from an int in range; schemes with more rules (uid64-v1) check them here."""
        return cls._trusted(value)

    @classmethod
    def _trusted(cls: type[IdT], value: int) -> IdT:
        obj = object.__new__(cls)
        obj._int = value
        return obj

    # -- the IDs bounding an instant ------------------------------------------
    # Range queries ("rows created yesterday") need the smallest and largest ID a
    # time can be in. Where the time field stands as it is (a ``shift``) they are
    # read from the declared fields: the time in place, every other bit as low or
    # as high as it goes, the fixed bits kept. Such a scheme sorts by time when
    # nothing but fixed bits lies above its time field.
    @classmethod
    def first_at(cls: type[IdT], when: _dt.datetime | int, **options: Any) -> IdT:
        """The smallest ID whose time is the tick (the ms; the us for muid) holding ``when``.

        ``when``: an aware datetime, or ms since 1970-01-01 UTC. ``options``: what
        the layout depends on (:attr:`bound_options`: uid64's ``mode``,
        elastic64's ``node_bits``). Every ID minted in that tick lies within
        ``[first_at(when), last_at(when)]``. For a span of time, use
        :meth:`between`, which refuses layouts that do not sort by time.
        """
        return cls._bound(when, 0, options)

    @classmethod
    def last_at(cls: type[IdT], when: _dt.datetime | int, **options: Any) -> IdT:
        """The largest ID whose time is the tick holding ``when`` (see :meth:`first_at`)."""
        return cls._bound(when, 1, options)

    @classmethod
    def between(
        cls: type[IdT], start: _dt.datetime | int, end: _dt.datetime | int, **options: Any
    ) -> tuple[IdT, IdT]:
        """The smallest and largest ID of the times from ``start`` up to, not including,
        ``end``: ``WHERE id BETWEEN low AND high`` finds the rows made in ``[start, end)``.

        Only for layouts that sort by time (:meth:`orders_by_time`); others (uid64 in
        spread mode, whose IDs of one second are spread over the whole key space)
        raise ``InvalidId`` (problem ``"order"``): no range of IDs holds a span of
        their times.
        """
        if not cls.orders_by_time(**options):
            raise InvalidId(
                cls.scheme,
                f"{cls._layout_name(options)} do not sort by time, so no range of IDs "
                "holds the IDs of a span of time; bound one tick with first_at() and "
                "last_at(), or use a layout that sorts by time",
                problem="order",
            )
        first, last = cls._tick_of(start), cls._tick_of(end, past_end=True) - 1
        if last < first:
            raise InvalidId(
                cls.scheme, f"the span ends ({end}) where it starts ({start})", problem="time"
            )
        return cls._bound(first, 0, options, tick=True), cls._bound(last, 1, options, tick=True)

    @classmethod
    def orders_by_time(cls, **options: Any) -> bool:
        """Whether IDs of this layout (with ``options``, as :meth:`first_at`'s) sort by time:
        the time field is above every bit that varies."""
        cls._check_bound_options(options)
        field = cls._time_field
        if field.shift is None:
            return False
        above = cls._max_int >> (field.shift + field.bits) << (field.shift + field.bits)
        return above & ~cls.fixed_bits[0] == 0

    @classmethod
    def _layout_name(cls, options: Mapping[str, Any]) -> str:
        """What IDs of this layout are called, for a refusal of a span of them."""
        return "these IDs"

    @classmethod
    def _check_bound_options(cls, options: Mapping[str, Any]) -> None:
        unknown = sorted(set(options) - set(cls.bound_options))
        if unknown:
            takes = ", ".join(cls.bound_options) or "nothing but the time"
            raise TypeError(f"{cls.scheme} bounds take {takes}, not {', '.join(unknown)}")

    @classmethod
    def _tick_of(cls, when: object, *, past_end: bool = False) -> int:
        """``when`` (an aware datetime or ms since 1970) in the scheme's time unit
        (``past_end``: the end of a span, which may be one unit past the last time)."""
        field = cls._time_field
        if isinstance(when, _dt.datetime):
            if when.utcoffset() is None:
                raise InvalidId(
                    cls.scheme,
                    f"{when.isoformat()} is a naive datetime; give its time zone "
                    "(tzinfo=datetime.timezone.utc)",
                    problem="time",
                )
            micros = (when - UNIX_EPOCH) // _dt.timedelta(microseconds=1)
            count = micros * field.per_second // 1_000_000
        elif isinstance(when, int) and not isinstance(when, bool):
            count = when * field.per_second // 1000
        else:
            raise InvalidId(
                cls.scheme,
                f"a time is an aware datetime or ms since 1970, not {type(when).__name__}",
                problem="type",
            )
        if not field.low <= count <= field.high + past_end:
            raise InvalidId(
                cls.scheme,
                f"{when} is outside the times {cls.scheme} IDs can hold "
                f"({iso_time(field.low, field.per_second)} to "
                f"{iso_time(field.high, field.per_second)})",
                problem="range",
            )
        return count

    @classmethod
    def _bound(
        cls: type[IdT],
        when: object,
        high: int,
        options: Mapping[str, Any],
        *,
        tick: bool = False,
    ) -> IdT:
        cls._check_bound_options(options)
        count = cast(int, when) if tick else cls._tick_of(when)
        bounds = cls._tick_bounds(count, options)
        return cast(IdT, cls._read(bounds[high], options.get("node_bits")))

    @classmethod
    def _tick_bounds(cls, count: int, options: Mapping[str, Any]) -> tuple[int, int]:
        """The smallest and largest int of an ID whose time field holds ``count``."""
        field = cls._time_field
        if field.shift is None:  # pragma: no cover - such a scheme writes its own
            raise NotImplementedError(f"{cls.scheme} must say where its time lies")
        mask, fixed = cls.fixed_bits
        low = (count - field.low) << field.shift
        below = (1 << field.shift) - 1
        return low & ~mask | fixed, (low | below) & ~mask | fixed

    # -- identity ---------------------------------------------------------
    def __int__(self) -> int:
        return self._int

    def __index__(self) -> int:
        return self._int

    def _key(self) -> Any:
        return self._int

    def __eq__(self, other: object) -> bool:
        # Only the same type compares equal: an ID is not its int, its text or
        # an ID of another scheme that happens to share the bits.
        if type(other) is type(self):
            return bool(self._key() == other._key())
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        if type(other) is type(self):
            return bool(self._key() != other._key())
        return NotImplemented

    def __lt__(self, other: object) -> bool:
        if type(other) is type(self):
            return bool(self._key() < other._key())
        return NotImplemented

    def __le__(self, other: object) -> bool:
        if type(other) is type(self):
            return bool(self._key() <= other._key())
        return NotImplemented

    def __gt__(self, other: object) -> bool:
        if type(other) is type(self):
            return bool(self._key() > other._key())
        return NotImplemented

    def __ge__(self, other: object) -> bool:
        if type(other) is type(self):
            return bool(self._key() >= other._key())
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.scheme, self._key()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuild through the public constructor so unpickling re-validates.
        return (type(self), (self._int,))

    def __copy__(self: IdT) -> IdT:
        return self

    def __deepcopy__(self: IdT, memo: object) -> IdT:
        return self

    # pydantic v2 field support; idmint.schemes._pydantic is imported only when pydantic asks.
    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from idmint.schemes._pydantic import id_core_schema

        return id_core_schema(cls)

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: Any) -> Any:
        from idmint.schemes._pydantic import id_json_schema

        return id_json_schema(cls)

    # -- the text codec, provided by each scheme -----------------------------------------
    @classmethod
    def text_of_int(cls, value: int) -> str:  # pragma: no cover - abstract
        """The canonical text of the ID ``value`` without building a value object."""
        raise NotImplementedError

    @classmethod
    def texts_of_ints(cls, values: Sequence[int]) -> list[str]:
        """The canonical texts of many IDs at once (a scheme may do it in bulk)."""
        return list(map(cls.text_of_int, values))

    # -- what every ID shows, derived from the declarations -----------------------------
    @classmethod
    def time_runs_out_s(cls) -> float:
        """When the scheme's time field can hold no later time: the Unix time (s) one
        unit past its highest value (uid64: 2**42 ms, in 2109)."""
        field = cls._time_field
        return (field.high + 1) / field.per_second

    @classmethod
    def time_left_s(cls, now_s: float) -> float:
        """Seconds from ``now_s`` (Unix time) until the time field runs out (0 once it has)."""
        return max(0.0, cls.time_runs_out_s() - now_s)

    def __str__(self) -> str:
        return self.text_of_int(self._int)

    @property
    def time(self) -> _dt.datetime:
        """When the ID was minted, as an aware UTC datetime (in the scheme's precision)."""
        field = self._time_field
        return time_of(getattr(self, field.name), field.per_second)

    def to_dict(self) -> dict[str, Any]:
        """The scheme, the text, the time in ISO 8601 and every decoded field, in order."""
        shown: dict[str, Any] = {"scheme": self.scheme, "id": str(self), "time": None}
        for field in self._decoded:
            value = getattr(self, field.name)
            shown[field.name] = str(value) if field.choices else value
        field = self._time_field
        shown["time"] = iso_time(shown[field.name], field.per_second)
        return shown

    # Defined last: inside the class body the names `int` and `bytes` mean these properties.
    @property
    def int(self) -> int:
        """The ID as an unsigned integer."""
        return self._int

    @property
    def bytes(self) -> bytes:
        """The ID as big-endian bytes."""
        return self._int.to_bytes(self._byte_length, "big")


def _field_property(field: Field) -> property:
    """A property reading ``field`` where it lies in the int (its ``shift``)."""
    assert field.shift is not None
    shift, mask, low = field.shift, (1 << field.bits) - 1, field.low
    if low:
        return property(lambda self: low + ((self._int >> shift) & mask), doc=field.about)
    return property(lambda self: (self._int >> shift) & mask, doc=field.about)


def coerce_id(
    id_type: type[IdValue], value: object, node_bits: int | None = None, *, where: str
) -> IdValue:
    """``value`` (an ID of the family, its text, int or bytes) as an ``id_type``.

    Raises ``InvalidId`` for anything else. An elastic64 value of another width is
    refused rather than re-read: the same 64 bits name another node under another
    width, and the column's width is what readers will use.
    """
    return id_type._coerce(value, node_bits, where)


def a_scheme(name: str) -> str:
    """``"an elastic64"``, ``"a uid64"``: the scheme's name with its article, for messages."""
    # By sound: uid64 is read "you-id", so only the other vowels take "an".
    return f"{'an' if name[:1] in 'aeio' else 'a'} {name}"


# -- parsing helpers ---------------------------------------------------------


def check_representable(scheme: str, timestamp_ms: int) -> None:
    """``InvalidId`` if an ID's time, ``timestamp_ms``, is past the last ms a
    ``datetime`` holds (:data:`LAST_DATETIME_MS`): such an ID is refused when read,
    not later by its ``time``."""
    if timestamp_ms > LAST_DATETIME_MS:
        raise InvalidId(
            scheme,
            f"timestamp {timestamp_ms} ms is after 9999-12-31, "
            "the last time this library can represent",
            problem="range",
        )


def check_field(scheme: str, name: str, value: object, low: int, high: int) -> int:
    """Return ``value`` if it is an int in ``[low, high]``, else raise ``InvalidId``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidId(
            scheme,
            f"{name} must be an integer, got {type(value).__name__} {value!r}",
            problem="type",
        )
    if not low <= value <= high:
        raise InvalidId(
            scheme,
            f"{name} {value} is out of range; expected {low}..{high}",
            problem="range",
        )
    return value


def int_from_bytes(scheme: str, data: bytes | bytearray | memoryview, length: int) -> int:
    if len(data) != length:
        raise InvalidId(scheme, f"expected {length} bytes, got {len(data)}", problem="length")
    return int.from_bytes(bytes(data), "big")


def int_from_hex(scheme: str, text: str, length: int, what: str = "hex digits") -> int:
    if len(text) != length:
        raise InvalidId(
            scheme,
            f"expected {length} {what}, got {len(text)} characters: {quoted(text)}",
            problem="length",
        )
    check_characters(scheme, text, _HEX_DIGITS, "a hex digit 0-9 or a-f")
    return int(text, 16)


def int_from_decimal(scheme: str, text: str, length: int) -> int:
    """The int that 1 to ``length`` decimal digits (surrounding space stripped) write."""
    stripped = text.strip()
    if not stripped or len(stripped) > length:
        raise InvalidId(
            scheme,
            f"expected 1 to {length} decimal digits, got {len(stripped)} characters: "
            f"{quoted(text)}",
            problem="length",
        )
    check_characters(scheme, stripped, _DECIMAL_DIGITS, "a decimal digit")
    return int(stripped)


def check_characters(scheme: str, text: str, allowed: Container[str], expected: str) -> None:
    """``InvalidId`` naming the first character of ``text`` not ``allowed``, and its place."""
    for position, char in enumerate(text):
        if char not in allowed:
            raise InvalidId(
                scheme,
                f"bad character {char!r} at position {position} of {quoted(text)}; "
                f"expected {expected}",
                problem="character",
            )


def reject_type(scheme: str, value: object, expected: str) -> InvalidId:
    return InvalidId(
        scheme,
        f"cannot read an ID from {type(value).__name__}; expected {expected}",
        problem="type",
    )


def time_of(count: int, per_second: int) -> _dt.datetime:
    """The aware UTC datetime ``count`` units of ``1/per_second`` s after 1970-01-01."""
    return UNIX_EPOCH + _dt.timedelta(microseconds=count * 1_000_000 // per_second)


def iso_time(count: int, per_second: int) -> str:
    """ISO 8601 UTC in the units' precision, with a ``Z``: 2019-07-03T18:45:04.129Z for ms."""
    digits = len(str(per_second)) - 1
    whole = time_of(count, per_second).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{whole}.{count % per_second:0{digits}d}Z"


def iso_ms(ms: int) -> str:
    """ISO 8601 UTC with millisecond precision and a ``Z``: 2019-07-03T18:45:04.129Z."""
    return iso_time(ms, 1000)
