"""Python code run as if only some packages were installed, in a fresh interpreter.

A finder placed first on ``sys.meta_path`` refuses the modules named (as if they
were not installed), so nothing is uninstalled: :func:`run_without`. What a given
install would lack is :func:`modules_outside`: the top-level modules of every
installed distribution that the requirements (and what they require, with the
extras they ask for) do not bring.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import textwrap
from collections.abc import Collection, Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

__all__ = ["BLOCK", "modules_outside", "run_without"]

BLOCK = textwrap.dedent(
    """
    import sys

    class NotInstalled:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in {modules!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
    """
)


def run_without(
    modules: Collection[str], code: str, cwd: Path, *, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with ``sys.executable`` where ``modules`` cannot be imported."""
    return subprocess.run(
        [sys.executable, "-c", BLOCK.format(modules=set(modules)) + code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _distributions_brought(requirements: Iterable[str]) -> set[str]:
    """The installed distributions ``requirements`` bring, with what they require."""
    brought: set[str] = set()
    wanted = [Requirement(text) for text in requirements]
    while wanted:
        requirement = wanted.pop()
        name = canonicalize_name(requirement.name)
        try:
            required = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue  # not for this platform or Python, or not installed here
        brought.add(name)
        for text in required:
            needed = Requirement(text)
            marker = needed.marker
            if marker is None or any(
                marker.evaluate({"extra": extra}) for extra in {"", *requirement.extras}
            ):
                wanted.append(needed)
    return brought


def modules_outside(requirements: Iterable[str]) -> set[str]:
    """Top-level modules an environment holding only ``requirements`` would lack
    (the standard library's and idmint's are never among them)."""
    brought = _distributions_brought(requirements) | {"idmint"}
    lacking = set()
    for module, distributions in importlib.metadata.packages_distributions().items():
        if not {canonicalize_name(d) for d in distributions} & brought:
            lacking.add(module)
    return lacking - set(sys.stdlib_module_names)
