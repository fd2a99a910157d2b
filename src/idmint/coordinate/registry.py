"""Plug-ins found by URL scheme in an entry-point group: coordinator drivers, contract hooks.

Every plug-in, idmint's own included, is registered in its package's metadata
(``[project.entry-points."idmint.coordinators"]`` in ``pyproject.toml``), so an
installed driver and a built-in one are found the same way and neither can
hide the other: two packages that register one scheme make that scheme an
error naming both, never a silent choice.
"""

from __future__ import annotations

import functools
from importlib import import_module
from typing import TYPE_CHECKING, Generic, TypeVar

from idmint.errors import ConfigurationError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = ["Registry"]

PluginT = TypeVar("PluginT")


class Registry(Generic[PluginT]):
    """The classes registered under one entry-point group, by URL scheme."""

    def __init__(self, group: str, kind: type[PluginT], what: str) -> None:
        self.group = group
        self.kind = kind
        self.what = what
        """What a plug-in is, for messages: ``coordinator driver``."""

    def registered(self) -> dict[str, list[str]]:
        """Scheme -> where each registration points (``module:Class (package)``)."""
        return {scheme: [_where(entry) for entry in found] for scheme, found in _group(self.group)}

    def schemes(self) -> list[str]:
        return sorted(scheme for scheme, _ in _group(self.group))

    def find(self, scheme: str) -> type[PluginT] | None:
        """The class registered for ``scheme`` (imported now), or None if there is none.

        Two registrations for one scheme are a :class:`ConfigurationError` that
        names both: which one a lookup found would depend on the order packages
        happen to be installed in.
        """
        found = dict(_group(self.group)).get(scheme)
        if not found:
            return None
        if len(found) > 1:
            raise ConfigurationError(
                f"{len(found)} {self.what}s are registered for {scheme}:// "
                f"(entry-point group {self.group}): "
                + " and ".join(_where(entry) for entry in found)
                + "; uninstall all but one"
            )
        (entry,) = found
        module_name, _, attribute = entry.value.partition(":")
        loaded = getattr(import_module(module_name), attribute)
        if not (isinstance(loaded, type) and issubclass(loaded, self.kind)):
            raise ConfigurationError(
                f"the {scheme}:// {self.what} {entry.value} is not a "
                f"{self.kind.__module__}.{self.kind.__qualname__}"
            )
        return loaded

    def forget(self) -> None:
        """Read the installed packages' metadata again at the next lookup."""
        _group.cache_clear()


@functools.cache
def _group(group: str) -> tuple[tuple[str, tuple[EntryPoint, ...]], ...]:
    # Reading every installed package's metadata costs milliseconds: once per process,
    # and importing what reads it costs more than the rest of `import idmint`'s
    # coordination: only when a URL is first looked up.
    from importlib.metadata import entry_points

    by_scheme: dict[str, dict[str, EntryPoint]] = {}
    for entry in entry_points(group=group):
        # The same target twice (one package seen through two paths) is one driver.
        by_scheme.setdefault(entry.name, {}).setdefault(entry.value, entry)
    return tuple((scheme, tuple(found.values())) for scheme, found in sorted(by_scheme.items()))


def _where(entry: EntryPoint) -> str:
    package = getattr(entry, "dist", None)
    return f"{entry.value} (from {package.name} {package.version})" if package else entry.value
