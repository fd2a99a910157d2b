"""Django model fields for idmint's IDs (install ``idmint[django]``).

::

    from django.db import models
    from idmint import Uid64Generator
    from idmint.django import Uid64Field

    _order_ids = Uid64Generator(generator=5, mode="time-sequential")

    def new_order_id():  # a module-level function: migrations refer to it by name
        return _order_ids.generate()

    class Order(models.Model):
        id = Uid64Field(primary_key=True, default=new_order_id)

Storage is the same as :mod:`idmint.sqlalchemy`'s, so that the database's order
is the value types' order: uid64, uid64-v1 and elastic64 as ``bigint`` holding
the ID minus 2**63, short60 as ``bigint`` as it is, muid as ``uuid`` on
PostgreSQL and 16 bytes elsewhere (docs/storage.md); uuid7 as Django's
``UUIDField`` stores a UUID (``uuid`` on PostgreSQL, ``char(32)`` elsewhere).

Attribute values are the scheme's value types. Assignments, lookups and forms
take the value type, its text, its int or its bytes; a malformed value raises
``idmint.InvalidId`` in queries and saves, and is a ``ValidationError`` with the
same message in forms and ``full_clean()``. Forms, the admin and serialization
(``dumpdata``) show and take the text form.
"""

from __future__ import annotations

from typing import Any, ClassVar

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

with needs_extra("django", "django", needed_by="idmint.django"):
    from django import forms
    from django.core import exceptions
    from django.db import models

__all__ = [
    "Elastic64Field",
    "IdField",
    "IdFormField",
    "MuidField",
    "Short60Field",
    "SnowflakeField",
    "Uid64Field",
    "Uid64V1Field",
    "Uuid7Field",
]


class IdFormField(forms.CharField):
    """A text input that reads an ID of one scheme and shows its text form."""

    def __init__(
        self, *, id_type: type[IdValue], node_bits: int | None = None, **kwargs: Any
    ) -> None:
        self.id_type = id_type
        self.node_bits = node_bits
        super().__init__(**kwargs)
        # A hint for the browser only: CharField's max_length validator would be
        # run on the parsed ID; the parser checks lengths itself.
        self.widget.attrs.setdefault("maxlength", str(id_type.text_length))

    def prepare_value(self, value: Any) -> Any:
        return str(value) if isinstance(value, IdValue) else value

    def to_python(self, value: Any) -> IdValue | None:
        text = super().to_python(value)
        if text in self.empty_values:
            return None
        try:
            return coerce_id(self.id_type, text, self.node_bits, where="this field")
        except InvalidId as error:
            raise exceptions.ValidationError(str(error), code="invalid") from None


class IdField(models.Field):
    """Base of the ID model fields; use one of the scheme fields."""

    id_type: ClassVar[type[IdValue]]
    description = "An idmint ID"

    def _node_bits(self) -> int | None:
        return None

    def get_internal_type(self) -> str:
        # The 64-bit IDs are bigints to Django: its column type per database, its
        # foreign keys and migrations all follow from that.
        return "BigIntegerField"

    def _coerce(self, value: object) -> IdValue:
        return coerce_id(self.id_type, value, self._node_bits(), where=f"field {self.name or ''!r}")

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> IdValue | None:
        if value is None:
            return None
        return _storage.from_stored(self.id_type, value, self._node_bits())

    def to_python(self, value: Any) -> IdValue | None:
        if value is None:
            return None
        try:
            return self._coerce(value)
        except InvalidId as error:
            raise exceptions.ValidationError(str(error), code="invalid") from None

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        if value is None:
            return None
        return self._coerce(value)

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if not prepared:
            value = self.get_prep_value(value)
        if isinstance(value, IdValue):
            return _storage.to_stored(
                value, native_uuid=connection.vendor in _storage.NATIVE_UUID_DATABASES
            )
        return value

    def value_to_string(self, obj: Any) -> str:
        value = self.value_from_object(obj)
        return "" if value is None else str(value)

    def formfield(self, **kwargs: Any) -> Any:
        defaults: dict[str, Any] = {
            "form_class": IdFormField,
            "id_type": self.id_type,
            "node_bits": self._node_bits(),
        }
        defaults.update(kwargs)
        return super().formfield(**defaults)


class Uid64Field(IdField):
    """A uid64: ``bigint`` holding the ID minus 2**63 (order preserved, 8 bytes)."""

    id_type = Uid64
    description = "A uid64 ID"


class Uid64V1Field(IdField):
    """A uid64-v1 ID, stored like :class:`Uid64Field`."""

    id_type = Uid64V1
    description = "A uid64-v1 ID"


class Short60Field(IdField):
    """A short60 ID: ``bigint`` holding the 60-bit int as it is."""

    id_type = Short60
    description = "A short60 ID"


class SnowflakeField(IdField):
    """A snowflake ID of one layout (Twitter's by default): ``bigint`` holding the
    63-bit int as it is; values of another layout are refused."""

    id_type = Snowflake
    description = "A snowflake ID"

    def __init__(self, *args: Any, layout: str = "twitter", **kwargs: Any) -> None:
        # The layout's own value type, for this field alone.
        setattr(self, "id_type", Snowflake.of(layout))  # noqa: B010 - a class variable's default
        self.layout = layout
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        if self.layout != "twitter":
            kwargs["layout"] = self.layout
        return name, path, args, kwargs


class Elastic64Field(IdField):
    """An elastic64 ID of one node-ID width, stored like :class:`Uid64Field`.

    The width is not in the stored bits, so the field needs it to read them;
    values of another width are refused (their bits would name another node).
    """

    id_type = Elastic64
    description = "An elastic64 ID"

    def __init__(self, *args: Any, node_bits: int, **kwargs: Any) -> None:
        try:
            self.node_bits = check_node_bits(node_bits)
        except InvalidId as error:
            raise ConfigurationError(f"Elastic64Field: {error}") from None
        super().__init__(*args, **kwargs)

    def _node_bits(self) -> int | None:
        return self.node_bits

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        kwargs["node_bits"] = self.node_bits
        return name, path, args, kwargs


class MuidField(IdField):
    """A muid: ``uuid`` on PostgreSQL, 16 big-endian bytes elsewhere."""

    id_type = Muid
    description = "A muid"

    def get_internal_type(self) -> str:
        return "MuidField"

    def db_type(self, connection: Any) -> str:
        vendor = connection.vendor
        if vendor in _storage.NATIVE_UUID_DATABASES:
            return "uuid"
        if vendor in ("mysql", "microsoft"):
            return "binary(16)"
        if vendor == "oracle":
            return "RAW(16)"
        return "blob"

    def rel_db_type(self, connection: Any) -> str:
        return self.db_type(connection)


class Uuid7Field(IdField):
    """A uuid7: stored as Django's ``UUIDField`` stores a UUID (``uuid`` where the
    database has one, ``char(32)`` of lowercase hex elsewhere), so a ``UUIDField``
    can become a ``Uuid7Field`` without touching its column or its data. Both
    forms sort as the UUIDs do."""

    id_type = Uuid7
    description = "A uuid7 (RFC 9562 version-7 UUID)"

    def get_internal_type(self) -> str:
        return "UUIDField"

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if not prepared:
            value = self.get_prep_value(value)
        if isinstance(value, Uuid7):
            return value.uuid if connection.features.has_native_uuid_field else value.hex
        return value

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> IdValue | None:
        if value is None:
            return None
        return Uuid7.parse(value)
