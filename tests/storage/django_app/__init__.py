"""A throwaway Django project for tests/storage/test_storage_django.py: settings, one app.

Its migrations are not in the repository: the tests generate them into a temporary
package (``MIGRATION_MODULES``) with ``makemigrations`` and apply them.
"""
