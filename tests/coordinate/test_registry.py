"""Finding drivers: only the packages that register in the group are read.

The registry scans the metadata directories on ``sys.path`` for the group's
entries instead of asking ``importlib.metadata``, which reads every installed
package's and takes longer to import than the rest. It must find exactly what
``importlib.metadata`` finds, and hand over to it where the scan cannot see
(a zip on the path).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.testing.broken_drivers import BROKEN, PACKAGE, install

from idmint.coordinate import DRIVERS, ENTRY_POINT_GROUP, connect, registry


def _as_scanned(group: str) -> list[tuple[str, str, tuple[str, str] | None]]:
    found = registry._scanned(group)
    assert found is not None, "the scan handed over to importlib.metadata"
    return sorted((e.name, e.value, e.package) for e in found)


def _as_importlib_finds(group: str) -> list[tuple[str, str, tuple[str, str] | None]]:
    return sorted((e.name, e.value, e.package) for e in registry._from_importlib_metadata(group))


@pytest.fixture
def on_path() -> Iterator[list[str]]:
    """Directories (or zips) to put first on ``sys.path`` for one test."""
    added: list[str] = []
    yield added
    for entry in added:
        sys.path.remove(entry)
    DRIVERS.forget()


def _put_first(on_path: list[str], entry: Path) -> None:
    sys.path.insert(0, str(entry))
    on_path.append(str(entry))
    DRIVERS.forget()


@pytest.mark.parametrize("group", [ENTRY_POINT_GROUP, "idmint.contract_hooks"])
def test_the_scan_finds_what_importlib_metadata_finds(
    group: str, tmp_path: Path, on_path: list[str]
) -> None:
    """In this environment, with another package registering drivers on the path, and
    that package's metadata seen through a second path entry too (it counts once)."""
    _put_first(on_path, install(tmp_path / "site", BROKEN))
    _put_first(on_path, tmp_path / "site")  # the same directory twice: one package
    scanned = _as_scanned(group)
    assert scanned == _as_importlib_finds(group)
    assert any(package == (PACKAGE, "1.0") for _, _, package in scanned)


def test_a_zip_on_the_path_is_read_through_importlib_metadata(
    tmp_path: Path, on_path: list[str]
) -> None:
    """A package's metadata inside a zip on the path: the scan cannot list it, so the
    registry asks importlib.metadata, and finds the zip's driver."""
    site = install(tmp_path / "site", BROKEN)
    archive = tmp_path / "drivers.zip"
    with zipfile.ZipFile(archive, "w") as packed:
        for file in site.rglob("*"):
            packed.write(file, file.relative_to(site).as_posix())
    _put_first(on_path, archive)
    assert registry._scanned(ENTRY_POINT_GROUP) is None
    assert DRIVERS.registered()["sharedid"] == [
        f"tests.testing.broken_drivers:SharedIdCoordinator (from {PACKAGE} 1.0)"
    ]


def test_a_connect_reads_no_metadata_but_the_groups() -> None:
    """A process that connects to a coordinator imports no importlib.metadata and opens
    the entry points of the installed packages, but not their other metadata, except
    for the packages that register in the group."""
    probe = textwrap.dedent(
        """
        import builtins, json, os, sys
        opened = []
        real_open = builtins.open
        def watching(file, *args, **kwargs):
            opened.append(os.fspath(file) if not isinstance(file, int) else "")
            return real_open(file, *args, **kwargs)
        builtins.open = watching
        from idmint.coordinate import connect
        connect("static://?generator=1").close()
        builtins.open = real_open
        metadata = [p for p in opened if ".dist-info" in p or ".egg-info" in p]
        print(json.dumps({
            "importlib.metadata": "importlib.metadata" in sys.modules,
            "headers": sorted({os.path.basename(os.path.dirname(p)) for p in metadata
                               if not p.endswith("entry_points.txt")}),
        }))
        """
    )
    shown = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    seen = json.loads(shown)
    assert seen["importlib.metadata"] is False
    assert all(name.lower().startswith("idmint") for name in seen["headers"]), seen["headers"]


def test_a_driver_in_a_scanned_package_connects(tmp_path: Path, on_path: list[str]) -> None:
    _put_first(on_path, install(tmp_path / "site", BROKEN))
    with connect("sharedid://x") as coordinator:
        assert type(coordinator).__name__ == "SharedIdCoordinator"


def test_the_test_only_memory_driver_is_usable_but_not_advertised() -> None:
    """``memory://`` is for tests and drills: reachable by its scheme, absent from the
    lists people read (``--coordinator``'s help, an unknown scheme's error)."""
    from idmint.errors import ConfigurationError

    with connect("memory://not-advertised") as coordinator:
        assert coordinator.description == "memory://not-advertised"
    assert "memory" in DRIVERS.schemes()
    assert "memory" not in DRIVERS.listed()
    assert {"zk", "etcd", "postgresql", "redis", "local", "static"} <= set(DRIVERS.listed())
    generate_help = subprocess.run(
        [sys.executable, "-m", "idmint", "generate", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "redis://" in generate_help
    assert "memory://" not in generate_help
    with pytest.raises(ConfigurationError, match="unknown coordinator scheme") as error:
        connect("bogus://x")
    assert "memory://" not in str(error.value)
    assert "zk://" in str(error.value)
