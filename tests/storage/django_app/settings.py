"""Settings of the throwaway project; the test fixture fills in the environment first.

``default`` is a SQLite file (with the admin's tables, for the admin tests);
``postgres`` is the test session's PostgreSQL server and holds this app's tables only.
"""

from __future__ import annotations

import os
from typing import Any

SECRET_KEY = "storage-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
ROOT_URLCONF = "tests.storage.django_app.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "tests.storage.django_app.apps.StorageTestsConfig",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["IDMINT_DJANGO_SQLITE"],
    },
    "postgres": {
        "ENGINE": "django.db.backends.postgresql",
        "HOST": "127.0.0.1",
        "PORT": os.environ["IDMINT_DJANGO_POSTGRES_PORT"],
        "USER": "postgres",
        "NAME": os.environ["IDMINT_DJANGO_POSTGRES_DATABASE"],
    },
}
MIGRATION_MODULES = {"idmint_storage": os.environ["IDMINT_DJANGO_MIGRATIONS"]}


class OnlyOurAppOnPostgres:
    """The contrib apps' tables live in SQLite only."""

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return db != "postgres" or app_label == "idmint_storage"


DATABASE_ROUTERS = ["tests.storage.django_app.settings.OnlyOurAppOnPostgres"]
