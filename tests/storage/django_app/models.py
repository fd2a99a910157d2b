"""Models using every idmint field; defaults are module-level functions so that
migrations can name them."""

from __future__ import annotations

from django.db import models

from idmint import Muid, MuidGenerator, Uid64, Uid64Generator
from idmint.django import (
    Elastic64Field,
    MuidField,
    Short60Field,
    SnowflakeField,
    Uid64Field,
    Uid64V1Field,
    Uuid7Field,
)

_order_ids = Uid64Generator(generator=6, mode="time-sequential")
_line_ids = MuidGenerator(medallion=(1 << 48) + 6)


def new_order_id() -> Uid64:
    return _order_ids.generate()


def new_line_id() -> Muid:
    return _line_ids.generate()


class Order(models.Model):
    id = Uid64Field(primary_key=True, default=new_order_id)
    legacy = Uid64V1Field(null=True, blank=True)
    shard = Elastic64Field(node_bits=12, null=True, blank=True, db_index=True)
    batch = MuidField(null=True, blank=True)
    short = Short60Field(null=True, blank=True, unique=True)
    public = Uuid7Field(null=True, blank=True, unique=True)
    tweet = SnowflakeField(null=True, blank=True)
    sony = SnowflakeField(layout="sonyflake", null=True, blank=True)
    note = models.CharField(max_length=40, blank=True, default="")

    class Meta:
        app_label = "idmint_storage"


class Line(models.Model):
    id = MuidField(primary_key=True, default=new_line_id)
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="lines")

    class Meta:
        app_label = "idmint_storage"
