"""The optional compiled core (everything else about the package is in pyproject.toml).

``idmint.generate._speedups`` is built where a C compiler and Python's headers
are, on Linux with the GIL: it is optional, and a build that fails says so once
and leaves the pure-Python core, which does the same (see docs/generators.md).
``IDMINT_BUILD_COMPILED_CORE=required`` makes a failed build an error (scripts/test).
"""

from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

COMPILED_CORE = "idmint.generate._speedups"
SOURCE = "src/idmint/generate/_speedups.c"


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
            # An editable install keeps the module in the source tree: one built
            # from an older source must not stay there looking current.
            Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)
            self._skip(error)

    def _skip(self, error: Exception) -> None:
        if os.environ.get("IDMINT_BUILD_COMPILED_CORE") == "required":  # scripts/test, CI
            raise error
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
    source_sha256 = hashlib.sha256(Path(SOURCE).read_bytes()).hexdigest()
    return [
        Extension(
            COMPILED_CORE,
            sources=[SOURCE],
            define_macros=[("IDMINT_SOURCE_SHA256", f'"{source_sha256}"')],
            extra_compile_args=["-O2", "-std=gnu11"],
        )
    ]


setup(ext_modules=_compiled_core(), cmdclass={"build_ext": OptionalBuildExt})
