"""idmint.django on SQLite and a real PostgreSQL: a generated migration, save and load,
order, lookups, bad values, forms, the admin and serialization.

The project is tests/storage/django_app (settings, models, admin). Django is set up
once per process, by the ``project`` fixture, with both databases.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.servers.postgres import PostgresServer

from idmint import (
    Elastic64,
    InvalidId,
    Mode,
    Muid,
    Short60,
    Snowflake,
    Uid64,
    Uid64V1,
    Uuid7,
    Uuid7Generator,
)

DATABASES = ("default", "postgres")
TOP = 1 << 63


@dataclass
class Project:
    migrations: Path


@pytest.fixture(scope="module")
def project(
    postgres: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Project]:
    import django
    from django.core.management import call_command
    from django.db import connections

    root = tmp_path_factory.mktemp("django")
    package = f"idmint_storage_migrations_{uuid.uuid4().hex[:8]}"
    (root / package).mkdir()
    (root / package / "__init__.py").touch()
    environment = {
        "DJANGO_SETTINGS_MODULE": "tests.storage.django_app.settings",
        "IDMINT_DJANGO_SQLITE": str(root / "default.sqlite3"),
        "IDMINT_DJANGO_POSTGRES_PORT": str(postgres.port),
        "IDMINT_DJANGO_POSTGRES_DATABASE": postgres.create_database("storage_django"),
        "IDMINT_DJANGO_MIGRATIONS": package,
    }
    saved = {name: os.environ.get(name) for name in environment}
    os.environ.update(environment)
    sys.path.insert(0, str(root))
    try:
        django.setup()
        call_command("makemigrations", "idmint_storage", verbosity=0)
        for database in DATABASES:
            call_command("migrate", database=database, verbosity=0)
        yield Project(root / package)
    finally:
        connections.close_all()
        sys.path.remove(str(root))
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# -- migrations --------------------------------------------------------------------------


def test_the_generated_migration_names_the_fields_and_round_trips(project: Project) -> None:
    from django.core.management import call_command

    migration = (project.migrations / "0001_initial.py").read_text()
    assert "idmint.django.Uid64Field(" in migration
    assert "default=tests.storage.django_app.models.new_order_id" in migration
    assert "idmint.django.Elastic64Field(" in migration
    assert "node_bits=12" in migration
    assert "idmint.django.MuidField(" in migration
    # Nothing left to migrate: every field deconstructs to what it was built from.
    call_command("makemigrations", "idmint_storage", check=True, dry_run=True, verbosity=0)


def test_fields_deconstruct_into_equal_fields(project: Project) -> None:
    from django.utils.module_loading import import_string
    from tests.storage.django_app.models import Order

    from idmint.django import IdField

    fields = [field for field in Order._meta.fields if isinstance(field, IdField)]
    assert {type(field).__name__ for field in fields} == {
        "Uid64Field",
        "Uid64V1Field",
        "Elastic64Field",
        "MuidField",
        "Short60Field",
        "Uuid7Field",
        "SnowflakeField",
    }
    for field in fields:
        _, path, args, kwargs = field.deconstruct()
        clone = import_string(path)(*args, **kwargs)
        assert clone.deconstruct()[1:] == (path, args, kwargs)
        assert getattr(clone, "node_bits", None) == getattr(field, "node_bits", None)
        assert getattr(clone, "id_type", None) is getattr(field, "id_type", None)


def test_columns_in_each_database(project: Project) -> None:
    from django.db import connections

    expected = {
        "default": {
            "id": "bigint",
            "shard": "bigint",
            "short": "bigint",
            "batch": "blob",
            "public": "char(32)",  # as Django's UUIDField
            "sony": "bigint",
        },
        "postgres": {
            "id": "bigint",
            "shard": "bigint",
            "short": "bigint",
            "batch": "uuid",
            "public": "uuid",
            "sony": "bigint",
        },
    }
    for database, columns in expected.items():
        with connections[database].cursor() as cursor:
            if database == "postgres":
                cursor.execute(
                    "SELECT column_name, data_type FROM information_schema.columns "
                    "WHERE table_name = 'idmint_storage_order'"
                )
                found = dict(cursor.fetchall())
            else:
                cursor.execute("PRAGMA table_info(idmint_storage_order)")
                found = {row[1]: row[2].lower() for row in cursor.fetchall()}
        assert {name: found[name] for name in columns} == columns


# -- save and load ---------------------------------------------------------------------------


@pytest.mark.parametrize("database", DATABASES)
def test_a_uuid7_field_is_stored_as_a_uuidfield(project: Project, database: str) -> None:
    from django.db import connections
    from tests.storage.django_app.models import Order

    rfc = Uuid7("017F22E2-79B0-7CC3-98C4-DC0C0C07398F")
    minted = Uuid7Generator(node=3).batch(3)
    for number, form in enumerate((rfc.uuid, str(minted[0]), minted[1].int, minted[2])):
        Order.objects.using(database).create(public=form, note=f"uuid7 {number}")
    loaded = Order.objects.using(database).filter(note__startswith="uuid7").order_by("public")
    assert [order.public for order in loaded] == sorted([rfc, *minted])
    assert all(type(order.public) is Uuid7 for order in loaded)
    for form in (rfc, str(rfc), rfc.hex, rfc.uuid, "urn:uuid:" + str(rfc)):
        assert Order.objects.using(database).filter(public=form).count() == 1
    # What Django's UUIDField would have stored reads back as the same UUID.
    with connections[database].cursor() as cursor:
        cursor.execute("SELECT public FROM idmint_storage_order WHERE note = %s", ["uuid7 0"])
        (stored,) = cursor.fetchone()
    assert stored == (rfc.uuid if database == "postgres" else rfc.hex)
    Order.objects.using(database).filter(note__startswith="uuid7").delete()


@pytest.mark.parametrize("database", DATABASES)
def test_save_and_load_every_field(project: Project, database: str) -> None:
    from tests.storage.django_app.models import Line, Order

    shard = Elastic64.build(timestamp_ms=1_700_000_000_000, node=300, node_bits=12)
    batch = Muid("05D5EAC793E61F-17B9F5B9479DF-94AC0")
    sony = Snowflake.of("sonyflake")(648196499762577408)
    order = Order(
        legacy=str(Uid64V1(TOP + 0x3F0)),  # text
        shard=shard.int,  # an int
        batch=batch.bytes,  # bytes
        short=Short60(11093174944930914),
        tweet="1212092628029698048",
        sony=sony,
        note=database,
    )
    order.save(using=database)
    assert type(order.id) is Uid64
    assert order.id.generator == 6
    line = Line.objects.using(database).create(order=order)
    loaded = Order.objects.using(database).get(pk=str(order.id))
    assert loaded.id == order.id
    assert loaded.legacy == Uid64V1(TOP + 0x3F0)
    assert loaded.shard == shard
    assert loaded.batch == batch
    assert loaded.short == Short60("xinaS8QBh")
    assert loaded.tweet == Snowflake("1212092628029698048")
    assert loaded.tweet.timestamp_ms == 1577820376771
    assert loaded.sony == sony
    assert type(loaded.sony) is type(sony)
    assert [type(value) for value in (loaded.id, loaded.legacy, loaded.shard, loaded.batch)] == [
        Uid64,
        Uid64V1,
        Elastic64,
        Muid,
    ]
    reloaded_line = Line.objects.using(database).select_related("order").get(pk=line.id)
    assert type(reloaded_line.id) is Muid
    assert reloaded_line.order_id == order.id
    assert type(reloaded_line.order_id) is Uid64
    assert reloaded_line.order.short == Short60("xinaS8QBh")
    assert list(order.lines.using(database).all()) == [line]
    # Lookups take every form, and a null stays null.
    for form in (batch, str(batch), batch.dashed, batch.int, batch.bytes):
        assert Order.objects.using(database).filter(batch=form).count() == 1
    empty = Order.objects.using(database).create(note="empty")
    assert Order.objects.using(database).get(pk=empty.pk).batch is None


@pytest.mark.parametrize("database", DATABASES)
def test_order_by_and_time_ranges_follow_the_value_types(project: Project, database: str) -> None:
    from tests.storage.django_app.models import Order

    objects = Order.objects.using(database)
    note = f"order-{database}"
    timestamps = [(1 << 41) + delta for delta in range(-30, 30, 3)]  # across 2**63
    ids = [
        *(Uid64.build(timestamp_ms=t, generator=6, mode=Mode.TIME_SEQUENTIAL) for t in timestamps),
        *(Uid64.build(timestamp_ms=t, generator=7) for t in timestamps),  # spread
        Uid64(0),
        Uid64(TOP - 1),
        Uid64(TOP),
        Uid64((1 << 64) - 1),
    ]
    objects.bulk_create(Order(id=value, note=note) for value in reversed(ids))
    in_order = list(objects.filter(note=note).order_by("id").values_list("id", flat=True))
    assert in_order == sorted(ids)
    low = Uid64.build(timestamp_ms=timestamps[3], mode=Mode.TIME_SEQUENTIAL)
    high = Uid64.build(timestamp_ms=timestamps[-3], mode=Mode.TIME_SEQUENTIAL)
    between = objects.filter(note=note, id__gte=low, id__lt=str(high)).order_by("-id")
    assert list(between.values_list("id", flat=True)) == sorted(
        (value for value in ids if low <= value < high), reverse=True
    )
    assert objects.filter(note=note, id__in=[str(ids[0]), ids[-1].int]).count() == 2


@pytest.mark.parametrize("database", DATABASES)
def test_bad_values_raise_invalid_id(project: Project, database: str) -> None:
    from django.core.exceptions import ValidationError
    from tests.storage.django_app.models import Order

    with pytest.raises(InvalidId, match="expected 16 hex digits"):
        Order(id="abc").save(using=database)
    with pytest.raises(InvalidId, match="reserved bits"):
        Order(legacy=Uid64(0xFC00)).save(using=database)
    with pytest.raises(InvalidId, match="holds IDs of node_bits=12"):
        Order(shard=Elastic64(5, node_bits=10)).save(using=database)
    with pytest.raises(InvalidId, match="not sonyflake"):
        Order(sony=Snowflake(5)).save(using=database)  # Twitter's layout in Sonyflake's field
    with pytest.raises(InvalidId, match="bad character '!'"):
        Order.objects.using(database).filter(short="ab!").count()
    with pytest.raises(ValidationError) as caught:
        Order(id="0123456789abcdeZ").full_clean()
    assert caught.value.message_dict["id"] == [
        "invalid uid64 ID: bad character 'Z' at position 15 of '0123456789abcdeZ'; "
        "expected a hex digit 0-9 or a-f"
    ]


# -- forms, admin, serialization -----------------------------------------------------------------


def test_model_forms_show_and_read_the_text_form(project: Project) -> None:
    from django import forms
    from tests.storage.django_app.models import Order

    class OrderForm(forms.ModelForm):  # type: ignore[type-arg]
        class Meta:
            model = Order
            fields = ("id", "shard", "batch", "short")

    order = Order(shard=Elastic64(75735064375574528, node_bits=12), short=Short60(5))
    html = str(OrderForm(instance=order))
    assert f'value="{order.id}"' in html
    assert 'value="75735064375574528"' in html
    assert 'value="F"' in html  # short60 5 is "F"
    bound = OrderForm(
        {
            "id": str(order.id),
            "shard": "17",
            "batch": "05D5EAC793E61F-17B9F5B9479DF-94AC0",
            "short": "formBh",
        }
    )
    assert bound.is_valid(), bound.errors
    assert bound.cleaned_data["batch"] == Muid("05D5EAC793E61F17B9F5B9479DF94AC0")
    assert bound.cleaned_data["shard"] == Elastic64(17, node_bits=12)
    bad = OrderForm({"id": "nothex", "short": "a b"})
    assert not bad.is_valid()
    assert bad.errors["id"] == [
        "invalid uid64 ID: expected 16 hex digits, got 6 characters: 'nothex'"
    ]
    assert bad.errors["short"][0].startswith("invalid short60 ID: bad character ' '")


def test_the_admin_lists_edits_and_validates_text_forms(project: Project) -> None:
    from django.contrib.auth.models import User
    from django.test import Client
    from tests.storage.django_app.models import Order

    order = Order.objects.create(
        shard=Elastic64(75735064375574528, node_bits=12),
        batch=Muid("05D5EAC793E61F17B9F5B9479DF94AC0"),
        short=Short60("admin1"),
        note="admin",
    )
    admin_user, _ = User.objects.get_or_create(
        username="admin", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(admin_user)

    listing = client.get("/admin/idmint_storage/order/").content.decode()
    for text in (
        str(order.id),
        "75735064375574528",
        "05D5EAC793E61F17B9F5B9479DF94AC0",
        "xinaS8QBh",
    ):
        assert text in listing

    change_url = f"/admin/idmint_storage/order/{order.id}/change/"
    page = client.get(change_url)
    assert page.status_code == 200
    assert f'value="{order.id}"' in page.content.decode()

    form = {
        "id": str(order.id),
        "legacy": "",
        "shard": "75735064375574528",
        "batch": "05D5EAC793E61F-17B9F5B9479DF-94AC0",
        "short": "F",
        "note": "edited",
    }
    saved = client.post(change_url, {**form, "_save": "Save"})
    assert saved.status_code == 302, saved.content.decode()[:2000]
    order.refresh_from_db()
    assert (order.short, order.note) == (Short60(5), "edited")

    refused = client.post(change_url, {**form, "short": "toolong12345"})
    assert refused.status_code == 200
    assert "invalid short60 ID: expected 1 to 10 characters, got 12" in refused.content.decode()
    order.refresh_from_db()
    assert order.short == Short60(5)


def test_serialization_uses_the_text_form(project: Project) -> None:
    from django.core import serializers
    from tests.storage.django_app.models import Order

    order = Order(shard=Elastic64(9, node_bits=12), batch=Muid(7), short=Short60(5), note="json")
    text = serializers.serialize("json", [order])
    assert f'"pk": "{order.id}"' in text
    assert '"batch": "00000000000000000000000000000007"' in text
    (restored,) = serializers.deserialize("json", text)
    assert restored.object.pk == order.id
    assert (restored.object.shard, restored.object.batch, restored.object.short) == (
        order.shard,
        order.batch,
        order.short,
    )
