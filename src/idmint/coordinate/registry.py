"""Plug-ins found by URL scheme in an entry-point group: coordinator drivers, contract hooks.

Every plug-in, idmint's own included, is registered in its package's metadata
(``[project.entry-points."idmint.coordinators"]`` in ``pyproject.toml``), so an
installed driver and a built-in one are found the same way and neither can
hide the other: two packages that register one scheme make that scheme an
error naming both, never a silent choice.

A group is read once per process, when a URL is first looked up. Only the
packages that register in the group are read: the ``entry_points.txt`` of each
package's metadata directory on ``sys.path`` is opened and searched for the
group's header, and only those that have it are parsed (with the package's name
and version). ``importlib.metadata`` reads and parses every installed package's
(on Python 3.10 and 3.11 also when asked for one group), and takes longer to
import than the rest; it is used where a path entry is anything but a directory
of metadata directories (a zip, an egg) or another finder supplies metadata.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from dataclasses import dataclass
from importlib import import_module
from typing import Generic, TypeVar

from idmint.errors import ConfigurationError

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

    def listed(self) -> list[str]:
        """The schemes to show people: all but those whose class says ``listed = False``
        (``memory://``, a driver for tests). One that fails to load is shown: using it
        says why."""
        shown = []
        for scheme in self.schemes():
            try:
                found = self.find(scheme)
            except Exception:  # a broken plug-in is still installed: show it
                found = None
            if getattr(found, "listed", True):
                shown.append(scheme)
        return shown

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


@dataclass(frozen=True)
class _Entry:
    """One registration: ``name = value`` in a package's entry points."""

    name: str
    value: str
    package: tuple[str, str] | None
    """The registering package's name and version, where its metadata says."""


@functools.cache
def _group(group: str) -> tuple[tuple[str, tuple[_Entry, ...]], ...]:
    entries = _scanned(group)
    if entries is None:
        entries = _from_importlib_metadata(group)
    by_scheme: dict[str, dict[str, _Entry]] = {}
    for entry in entries:
        # The same target twice (one package seen through two paths) is one driver.
        by_scheme.setdefault(entry.name, {}).setdefault(entry.value, entry)
    return tuple((scheme, tuple(found.values())) for scheme, found in sorted(by_scheme.items()))


def _scanned(group: str) -> list[_Entry] | None:
    """The group's entries from the metadata directories on ``sys.path``; None where
    ``importlib.metadata`` must read them (see the module docstring).

    A package found through two path entries counts once, where it is found first,
    as ``importlib.metadata`` has it.
    """
    from importlib.machinery import PathFinder

    if any(f is not PathFinder and hasattr(f, "find_distributions") for f in sys.meta_path):
        return None
    header = f"[{group}]"
    seen: set[str] = set()
    entries: list[_Entry] = []
    for path in sys.path:
        directory = path or "."
        if os.path.basename(directory).lower().endswith(".egg"):
            return None
        try:
            names = sorted(os.listdir(directory))
        except NotADirectoryError:  # a zip or an egg file
            return None
        except OSError:  # path entries that do not exist are common
            continue
        for name in names:
            low = name.lower()
            if not low.endswith((".dist-info", ".egg-info")):
                continue
            package = re.sub(r"[-_.]+", "_", low.rpartition(".")[0].partition("-")[0])
            if package in seen:
                continue
            seen.add(package)
            metadata = os.path.join(directory, name)
            try:
                with open(os.path.join(metadata, "entry_points.txt"), encoding="utf-8") as file:
                    text = file.read()
            except OSError:  # none (most packages), or a metadata file, not a directory
                continue
            if header in text:
                entries += _entries_in(text, header, _name_and_version(metadata))
    return entries


def _entries_in(text: str, header: str, package: tuple[str, str] | None) -> list[_Entry]:
    """The ``name = value`` lines of the section ``header`` of an ``entry_points.txt``."""
    entries = []
    inside = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            inside = line == header
        elif inside and line and not line.startswith(("#", ";")):
            name, _, value = line.partition("=")
            entries.append(_Entry(name.strip(), value.strip(), package))
    return entries


def _name_and_version(metadata: str) -> tuple[str, str] | None:
    """A package's name and version, from the headers of its metadata directory."""
    fields: dict[str, str] = {}
    for filename in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(metadata, filename), encoding="utf-8") as file:
                for line in file:
                    if not line.strip():
                        break  # the headers end at the first blank line
                    key, _, value = line.partition(":")
                    if key in ("Name", "Version"):
                        fields.setdefault(key, value.strip())
        except OSError:
            continue
        break
    if "Name" not in fields:
        return None
    return fields["Name"], fields.get("Version", "")


def _from_importlib_metadata(group: str) -> list[_Entry]:
    from importlib.metadata import entry_points

    entries = []
    for entry in entry_points(group=group):
        found = getattr(entry, "dist", None)
        package = (found.name, found.version) if found is not None else None
        entries.append(_Entry(entry.name, entry.value, package))
    return entries


def _where(entry: _Entry) -> str:
    if entry.package is None:
        return entry.value
    name, version = entry.package
    return f"{entry.value} (from {name} {version})"
