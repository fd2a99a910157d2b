"""The optional compiled core (everything else about the package is in pyproject.toml).

``idmint.generate._speedups`` is built where a C compiler and Python's headers
are, on Linux with the GIL: it is optional, and a build that fails says so once
and leaves the pure-Python core, which does the same (see docs/generators.md).
"""

from __future__ import annotations

import sys
import sysconfig
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

COMPILED_CORE = "idmint.generate._speedups"


class OptionalBuildExt(build_ext):
    """``build_ext`` that lets the compiled core go rather than fail the install."""

    skipped = False

    def run(self) -> None:
        try:
            super().run()
        except Exception as error:  # no compiler at all, or it cannot run
            self._skip(error)

    def build_extension(self, ext: Any) -> None:
        try:
            super().build_extension(ext)
        except Exception as error:  # a compiler error, missing Python.h
            self._skip(error)

    def _skip(self, error: Exception) -> None:
        if OptionalBuildExt.skipped:
            return
        OptionalBuildExt.skipped = True
        detail = " ".join(str(error).split())
        if len(detail) > 120:
            detail = detail[:117] + "..."
        print(
            f"idmint: the compiled core was not built ({type(error).__name__}: {detail}); "
            "idmint works the same on its pure-Python core, more slowly. For the compiled "
            "one, install a C compiler and Python's headers (Debian: gcc python3-dev) "
            "and install idmint again.",
            file=sys.stderr,
        )


def _compiled_core() -> list[Extension]:
    # Linux only (clock_nanosleep, getrandom); not where the GIL is disabled, as the
    # compiled core relies on it and core.py would not load it there.
    if not sys.platform.startswith("linux") or sysconfig.get_config_var("Py_GIL_DISABLED"):
        return []
    return [
        Extension(
            COMPILED_CORE,
            sources=["src/idmint/generate/_speedups.c"],
            extra_compile_args=["-O2", "-std=gnu11"],
        )
    ]


setup(ext_modules=_compiled_core(), cmdclass={"build_ext": OptionalBuildExt})
