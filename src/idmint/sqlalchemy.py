"""SQLAlchemy 2 column types for idmint's IDs (install ``idmint[sqlalchemy]``).

::

    import sqlalchemy as sa
    from idmint import Uid64Generator
    from idmint.sqlalchemy import Uid64Type

    ids = Uid64Generator(generator=5, mode="time-sequential")
    orders = sa.Table(
        "orders", sa.MetaData(),
        sa.Column("id", Uid64Type(), primary_key=True, default=ids.generate),
    )

Values come out as the scheme's value type (``Uid64``, ...). Going in, a column
takes the value type, its text, its int or its bytes, read with the scheme's own
parser: anything else raises :class:`InvalidColumnValue`, an ``idmint.InvalidId``
that SQLAlchemy lets through unwrapped (not as a ``StatementError``).

Storage keeps the database's order equal to the value types' order on every
dialect (docs/storage.md has the table and the reasons):

==========================  =================================  ==========================
type                        PostgreSQL                         other dialects
==========================  =================================  ==========================
``Uid64Type``,              ``BIGINT``: the ID minus 2**63     the same
``Uid64V1Type``,            (its top bit flipped)
``Elastic64Type``
``Short60Type``             ``BIGINT``: the ID as it is        the same
``MuidType``                ``UUID``                           16 bytes (``BLOB`` on SQLite,
                                                               ``BINARY(16)`` on MySQL,
                                                               MariaDB, SQL Server)
``Uuid7Type``               ``UUID``                           ``CHAR(32)`` of lowercase hex
                                                               (``sa.Uuid``'s fallback)
==========================  =================================  ==========================
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

from idmint import _storage
from idmint.errors import ConfigurationError, InvalidId, needs_extra
from idmint.schemes import (
    Elastic64,
    IdValue,
    Muid,
    Short60,
    Snowflake,
    Uid64,
    Uid64V1,
    Uuid7,
    coerce_id,
)
from idmint.schemes.elastic64 import check_node_bits

with needs_extra("sqlalchemy", "sqlalchemy", needed_by="idmint.sqlalchemy"):
    import sqlalchemy as sa
    from sqlalchemy.dialects import postgresql
    from sqlalchemy.engine import Dialect
    from sqlalchemy.exc import DontWrapMixin
    from sqlalchemy.types import TypeDecorator, TypeEngine

__all__ = [
    "Elastic64Type",
    "IdType",
    "InvalidColumnValue",
    "MuidType",
    "Short60Type",
    "SnowflakeType",
    "Uid64Type",
    "Uid64V1Type",
    "Uuid7Type",
]

IdT = TypeVar("IdT", bound=IdValue)

_BINARY16_DIALECTS = frozenset({"mysql", "mariadb", "mssql"})


class InvalidColumnValue(InvalidId, DontWrapMixin):
    """A value for an ID column, or one read from it, that is not an ID of its scheme.

    An ``idmint.InvalidId`` with the same message, ``scheme`` and ``problem``;
    SQLAlchemy raises it as it is instead of wrapping it in a ``StatementError``.
    """

    @classmethod
    def of(cls, error: InvalidId) -> InvalidColumnValue:
        message = str(error)
        prefix = f"invalid {error.scheme} ID: " if error.scheme else "invalid ID: "
        return cls(error.scheme, message.removeprefix(prefix), problem=error.problem)


class IdType(TypeDecorator[IdT], Generic[IdT]):
    """Base of the ID column types; use one of the scheme types."""

    impl: TypeEngine[Any] | type[TypeEngine[Any]] = sa.BigInteger
    cache_ok = True
    id_type: ClassVar[type[IdValue]]

    @property
    def _stored_as(self) -> str:
        return _storage.storage_kind(self.id_type)

    @property
    def python_type(self) -> type[Any]:
        return self.id_type

    def _node_bits(self) -> int | None:
        return None

    def _where(self) -> str:
        return f"a {type(self).__name__} column"

    def coerce_value(self, value: object) -> IdT:
        """``value`` as the column's value type, or :class:`InvalidColumnValue`."""
        try:
            result: Any = coerce_id(self.id_type, value, self._node_bits(), where=self._where())
        except InvalidId as error:
            raise InvalidColumnValue.of(error) from None
        return result  # type: ignore[no-any-return]

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        # A value of the column's own type (what generators mint) needs no parsing;
        # elastic64 values still have their width checked.
        if type(value) is not self.id_type or self.id_type.needs_node_bits:
            value = self.coerce_value(value)
        if self._stored_as == _storage.BIGINT_FLIPPED:
            return value._int - _storage.TOP_BIT
        return _storage.to_stored(value, native_uuid=dialect.name in _storage.NATIVE_UUID_DATABASES)

    def process_literal_param(self, value: Any, dialect: Dialect) -> Any:
        return self.process_bind_param(value, dialect)

    def process_result_value(self, value: Any, dialect: Dialect) -> IdT | None:
        if value is None:
            return None
        try:
            result: Any = _storage.from_stored(self.id_type, value, self._node_bits())
        except InvalidId as error:
            raise InvalidColumnValue.of(error) from None
        return result  # type: ignore[no-any-return]


class Uid64Type(IdType[Uid64]):
    """A uid64 column: ``BIGINT`` holding the ID minus 2**63 (order preserved, 8 bytes)."""

    id_type = Uid64
    cache_ok = True  # asked of each class: without it, no statement caching


class Uid64V1Type(IdType[Uid64V1]):
    """A uid64-v1 column, stored like :class:`Uid64Type`."""

    id_type = Uid64V1
    cache_ok = True


class Short60Type(IdType[Short60]):
    """A short60 column: ``BIGINT`` holding the 60-bit int as it is."""

    id_type = Short60
    cache_ok = True


class SnowflakeType(IdType[Snowflake]):
    """A snowflake column of one layout (Twitter's by default): ``BIGINT`` holding the
    63-bit int as it is. Values of another layout are refused (their bits mean
    another time and worker)."""

    id_type = Snowflake
    cache_ok = True

    def __init__(self, layout: str = "twitter") -> None:
        # The layout's own value type, for this column alone.
        setattr(self, "id_type", Snowflake.of(layout))  # noqa: B010 - a class variable's default
        self.layout = layout
        super().__init__()

    def _where(self) -> str:
        return f"a SnowflakeType(layout={self.layout!r}) column"

    def __repr__(self) -> str:
        return f"SnowflakeType(layout={self.layout!r})"


class Elastic64Type(IdType[Elastic64]):
    """An elastic64 column of one node-ID width, stored like :class:`Uid64Type`.

    The width is not in the stored bits, so the column needs it to read them;
    values of another width are refused (their bits would name another node).
    """

    id_type = Elastic64
    cache_ok = True

    def __init__(self, node_bits: int) -> None:
        try:
            self.node_bits = check_node_bits(node_bits)
        except InvalidId as error:
            raise ConfigurationError(f"Elastic64Type: {error}") from None
        super().__init__()

    def _node_bits(self) -> int | None:
        return self.node_bits

    def _where(self) -> str:
        return f"an Elastic64Type(node_bits={self.node_bits}) column"

    def __repr__(self) -> str:
        return f"Elastic64Type(node_bits={self.node_bits})"


class MuidType(IdType[Muid]):
    """A muid column: ``UUID`` on PostgreSQL, 16 big-endian bytes elsewhere."""

    impl = sa.LargeBinary
    id_type = Muid
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name in _storage.NATIVE_UUID_DATABASES:
            return dialect.type_descriptor(postgresql.UUID(as_uuid=True))
        if dialect.name in _BINARY16_DIALECTS:
            return dialect.type_descriptor(sa.BINARY(16))
        return dialect.type_descriptor(sa.LargeBinary(16))

    def literal_processor(self, dialect: Dialect) -> Callable[[Any], str]:
        # SQLAlchemy's generic binary literal is a quoted string of the raw bytes,
        # which SQLite refuses (NUL bytes) and no database reads as binary.
        def render(value: Any) -> str:
            hex_digits = f"{self.coerce_value(value).int:032x}"
            if dialect.name in _storage.NATIVE_UUID_DATABASES:
                return f"'{uuid.UUID(hex_digits)}'"
            if dialect.name == "mssql":
                return f"0x{hex_digits}"
            return f"X'{hex_digits}'"

        return render


class Uuid7Type(IdType[Uuid7]):
    """A uuid7 column stored as SQLAlchemy's ``sa.Uuid`` stores a ``uuid.UUID``:
    PostgreSQL's ``UUID``, ``CHAR(32)`` of lowercase hex elsewhere (``sa.Uuid``'s
    own form where there is no native type). Both sort as the UUIDs do, and a
    ``sa.Uuid`` column on PostgreSQL or SQLite can become a ``Uuid7Type`` as it is."""

    impl = sa.Uuid
    id_type = Uuid7
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        # Only PostgreSQL's uuid sorts as the UUID does; SQL Server's UNIQUEIDENTIFIER
        # and MariaDB's UUID compare their byte groups in another order.
        native = dialect.name in _storage.NATIVE_UUID_DATABASES
        return dialect.type_descriptor(sa.Uuid(as_uuid=True, native_uuid=native))

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if type(value) is not Uuid7:
            value = self.coerce_value(value)
        return value.uuid

    def process_result_value(self, value: Any, dialect: Dialect) -> Uuid7 | None:
        if value is None:
            return None
        try:
            return Uuid7.parse(value)
        except InvalidId as error:
            raise InvalidColumnValue.of(error) from None
