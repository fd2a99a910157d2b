from __future__ import annotations

from django.apps import AppConfig


class StorageTestsConfig(AppConfig):
    name = "tests.storage.django_app"
    label = "idmint_storage"
    default_auto_field = "django.db.models.BigAutoField"
