"""The ID schemes: value types and codecs, pure code with no I/O.

``SCHEMES`` maps each scheme's name (as the CLI and the server spell it) to its
value type, which describes the scheme to everything above (fields and their
ranges, text form, summary; see :class:`IdValue`); :func:`parse_id` reads text
with a given or guessed scheme.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from idmint.errors import InvalidId, quoted
from idmint.schemes._base import (
    Field,
    IdValue,
    a_scheme,
    check_field,
    coerce_id,
    int_from_hex,
    iso_ms,
)
from idmint.schemes.elastic64 import Elastic64
from idmint.schemes.muid import Muid
from idmint.schemes.short60 import Short60
from idmint.schemes.snowflake import Snowflake
from idmint.schemes.uid64 import Mode, Uid64, Uid64V1
from idmint.schemes.uuid7 import Uuid7

__all__ = [
    "SCHEMES",
    "Elastic64",
    "Field",
    "IdValue",
    "Mode",
    "Muid",
    "Short60",
    "Snowflake",
    "Uid64",
    "Uid64V1",
    "Uuid7",
    "a_scheme",
    "check_field",
    "coerce_id",
    "guess_scheme",
    "int_from_hex",
    "iso_ms",
    "parse_id",
    "scheme_type",
    "variant_of",
]

SCHEMES: Final[dict[str, type[IdValue]]] = {
    "uid64": Uid64,
    "uid64-v1": Uid64V1,
    "elastic64": Elastic64,
    "muid": Muid,
    "short60": Short60,
    "uuid7": Uuid7,
    "snowflake": Snowflake,
}

_MUID_SHAPE = re.compile(Muid.text_pattern)
_HEX16_SHAPE = re.compile(Uid64.text_pattern)
_DECIMAL_SHAPE = re.compile(Elastic64.text_pattern)
_SHORT60_SHAPE = re.compile(Short60.text_pattern)
_SHORT60_FULL_LENGTH = Short60.text_length
# A UUID as people write it: dashed, in braces or a URN (32 bare hex digits are a muid).
_UUID_SHAPE = re.compile(
    r"(?i:urn:uuid:)?[{]?[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}[}]?"
    r"|(?i:urn:uuid:)[0-9a-fA-F]{32}|[{][0-9a-fA-F]{32}[}]"
)


def scheme_type(name: str) -> type[IdValue]:
    """The value type of scheme ``name``, or ``InvalidId`` listing the known names."""
    try:
        return SCHEMES[name]
    except KeyError:
        raise InvalidId(
            None,
            f"unknown scheme {quoted(name)}; expected one of {', '.join(SCHEMES)}",
            problem="scheme",
        ) from None


def variant_of(scheme: str, options: Mapping[str, object]) -> type[IdValue]:
    """The value type of ``scheme`` in the layout ``options`` pick (generator options,
    say: snowflake's ``layout``...); the scheme's own type where they pick none."""
    id_type = scheme_type(scheme)
    picked = {
        name: value
        for name, value in options.items()
        if name in id_type.variant_options and value is not None
    }
    return id_type.variant(**picked) if picked else id_type


def guess_scheme(text: str, *, node_bits: int | None = None) -> str:
    """Name the scheme ``text`` must be in, when its shape allows only one.

    Only full-length forms are guessed: a UUID's dashed 8-4-4-4-12 form (or braces, or
    ``urn:uuid:``) can only be a uuid7 (a UUID of another version is then refused as one); 32
    bare hex digits (or the dashed 14-13-5 form) are a muid, as they were before uuid7 (name the
    scheme for a UUID written so); 16 hex digits with a letter among them only a uid64 (uid64-v1
    IDs are uid64 IDs with the same fields); 10 base-64 characters with a non-digit only a
    short60 (every short60 minted since 2020 has 10). Decimal digits are an elastic64 ID when a
    width is given; without one they could as well be a snowflake (of any layout), so they are
    never guessed. Anything else, such as 16 decimal digits (hex or decimal?) or a short string
    (a short60 from before 2020, or a typo?), raises ``InvalidId`` asking for the scheme.
    """
    candidate = text.strip()
    if _UUID_SHAPE.fullmatch(candidate):
        return "uuid7"
    if _MUID_SHAPE.fullmatch(candidate):
        return "muid"
    is_decimal = _DECIMAL_SHAPE.fullmatch(candidate) is not None
    if is_decimal and node_bits is not None:
        return "elastic64"
    if _HEX16_SHAPE.fullmatch(candidate) and not is_decimal:
        return "uid64"
    if _SHORT60_SHAPE.fullmatch(candidate) and not is_decimal:
        if len(candidate) == _SHORT60_FULL_LENGTH:
            return "short60"
        raise InvalidId(
            None,
            f"{quoted(candidate)} could be a short60 ID, but has {len(candidate)} characters where "
            f"every short60 minted since 2020 has {_SHORT60_FULL_LENGTH}; name the scheme if "
            "it is one",
            problem="ambiguous",
        )
    if is_decimal:
        readings = ["elastic64 (give its node_bits)", "snowflake"]
        if len(candidate) == 16:
            readings.insert(0, "uid64 (hex)")
        if len(candidate) <= 10:
            readings.append("short60")
        raise InvalidId(
            None,
            f"cannot tell the scheme of {quoted(candidate)}: it could be {' or '.join(readings)}; "
            "name the scheme",
            problem="ambiguous",
        )
    raise InvalidId(
        None,
        f"{quoted(candidate)} has the shape of no scheme: expected 16 or 32 hex digits, "
        "a dashed UUID, a short60 string of up to 10 base-64 characters, or decimal digits",
        problem="format",
    )


def parse_id(text: str, scheme: str | None = None, *, node_bits: int | None = None) -> IdValue:
    """Read ``text`` as an ID of ``scheme`` (guessed from its shape when ``None``)."""
    if not isinstance(text, str):
        raise InvalidId(
            scheme,
            f"cannot read an ID from {type(text).__name__}; expected text "
            "(use the scheme's type for ints and bytes, e.g. Uid64(0x...))",
            problem="type",
        )
    name = scheme if scheme is not None else guess_scheme(text, node_bits=node_bits)
    cls = scheme_type(name)
    if node_bits is not None and scheme is not None and not cls.needs_node_bits:
        takers = " and ".join(n for n, t in SCHEMES.items() if t.needs_node_bits)
        raise InvalidId(
            name,
            f"node_bits applies only to {takers} IDs, not {name}",
            problem="node_bits",
        )
    return cls._read_text(text, node_bits)
