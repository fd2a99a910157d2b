"""How ID values are stored in SQL databases: shared by idmint.sqlalchemy and idmint.django.

A scheme's storage follows from the range of its value type's ints, and the rule
for every scheme is that the database's order of the stored values is the
value type's order (which is the order of the unsigned int, see
``IdValue.__lt__``), so that ``ORDER BY`` and index range scans mean what the
Python comparisons mean:

- IDs that can reach 2**63 but not 2**64 (uid64, uid64-v1, elastic64) go into a signed
  BIGINT as ``id - 2**63``, which is the ID with its top bit flipped read as a
  two's-complement number. The map is monotonic over the whole unsigned range;
  storing the bits as they are would put every ID at or above 2**63 (half of all
  spread-mode uid64 IDs) before the others.
- IDs below 2**63 (short60: 60 bits) fit a BIGINT as they are.
- 16-byte IDs (muid: 128 bits): PostgreSQL's ``uuid`` (compared byte by byte, so in the
  unsigned order of the big-endian bytes) or 16 big-endian bytes elsewhere,
  which every database compares byte by byte too.

Nothing here imports a database library.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

from idmint.errors import ConfigurationError
from idmint.schemes import IdValue

TOP_BIT: Final = 1 << 63
UUID_BYTES: Final = 16

BIGINT_FLIPPED: Final = "bigint-flipped"
BIGINT: Final = "bigint"
UUID_OR_BYTES: Final = "uuid-or-bytes"


def storage_kind(id_type: type[IdValue]) -> str:
    """How IDs of ``id_type`` are stored: read from the range of its ints."""
    if id_type._max_int < TOP_BIT:
        return BIGINT
    if id_type._max_int < TOP_BIT << 1:
        return BIGINT_FLIPPED
    if id_type._byte_length == UUID_BYTES:
        return UUID_OR_BYTES
    raise ConfigurationError(
        f"{id_type.scheme} IDs ({id_type._byte_length} bytes) fit no SQL column idmint knows"
    )


# Dialect / vendor names (SQLAlchemy's dialect.name, Django's connection.vendor)
# whose native uuid type is compared byte by byte.
NATIVE_UUID_DATABASES: Final = frozenset({"postgresql"})


def to_bigint(value: int, kind: str) -> int:
    """The BIGINT stored for the unsigned ``value``."""
    return value - TOP_BIT if kind == BIGINT_FLIPPED else value


def from_bigint(stored: int, kind: str) -> int:
    """The unsigned ID behind the stored BIGINT."""
    return stored + TOP_BIT if kind == BIGINT_FLIPPED else stored


def from_stored(id_type: type[IdValue], stored: Any, node_bits: int | None = None) -> IdValue:
    """The value behind what the database returned for a column of ``id_type``."""
    kind = storage_kind(id_type)
    if kind == UUID_OR_BYTES:
        if isinstance(stored, uuid.UUID):
            return id_type.from_int(stored.int)
        if isinstance(stored, str):  # a driver without uuid support
            return id_type.from_int(uuid.UUID(stored).int)
        return id_type.from_bytes(stored)
    return id_type._read(from_bigint(stored, kind), node_bits)


def to_stored(value: IdValue, *, native_uuid: bool) -> int | bytes | uuid.UUID:
    """What the database stores for ``value`` (already of the column's type)."""
    kind = storage_kind(type(value))
    if kind == UUID_OR_BYTES:
        return uuid.UUID(int=value.int) if native_uuid else value.int.to_bytes(UUID_BYTES, "big")
    return to_bigint(value.int, kind)
