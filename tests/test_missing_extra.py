"""A missing optional dependency says the exact line that installs it.

Each case runs in a fresh interpreter in which the dependency cannot be imported
(:func:`tests.installed.run_without`), so nothing is uninstalled. The install line
printed must run this interpreter's pip on this source tree, editable (the test
environment is an editable install, as ``scripts/bootstrap-venv`` makes it), with
the right extra.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import textwrap
from pathlib import Path

import pytest
import tomllib
from tests.cli_process import assert_one_error_line
from tests.installed import modules_outside, run_without
from tests.servers.ports import free_port

from idmint.errors import ConfigurationError, MissingExtra, needs_extra

ROOT = Path(__file__).resolve().parents[1]

CLI = "from idmint.cli import main; sys.exit(main({argv!r}))"
IMPORT = textwrap.dedent(
    """
    try:
        import {target}
    except ModuleNotFoundError as error:
        from idmint.errors import MissingExtra
        assert isinstance(error, MissingExtra), type(error)
        print(error, file=sys.stderr)
        sys.exit(3)
    """
)


def assert_install_line(message: str, extra: str, cwd: Path) -> None:
    """``message`` ends with a command that installs ``extra`` here, editable."""
    found = re.search(r"install it with: (.+)$", message)
    assert found, message
    argv = shlex.split(found.group(1))
    python, rest = argv[0], argv[1:]
    assert os.path.samefile(cwd / python, sys.executable), python  # this interpreter's pip
    assert rest[:4] == ["-m", "pip", "install", "-e"], argv
    source, _, extras = rest[4].partition("[")
    assert os.path.samefile(cwd / source, ROOT), source
    assert extras == f"{extra}]", rest[4]
    assert len(rest) == 5, argv


CLI_CASES = [
    ("kazoo", "zookeeper", ["generate", "--coordinator", "zk://127.0.0.1:1/idmint"]),
    ("kazoo", "zookeeper", ["discovery", "list", "--coordinator", "zk://127.0.0.1:1/d"]),
    ("kazoo", "zookeeper", ["fetch", "--discovery", "zk://127.0.0.1:1/d", "--count", "1"]),
    ("uvicorn", "server", ["serve", "--port", "0"]),
]


@pytest.mark.parametrize(
    ("module", "extra", "argv"), CLI_CASES, ids=[" ".join(case[2][:2]) for case in CLI_CASES]
)
@pytest.mark.parametrize("where", ["root", "elsewhere"])
def test_cli_names_the_install_line_of_a_missing_extra(
    module: str, extra: str, argv: list[str], where: str, tmp_path: Path
) -> None:
    cwd = ROOT if where == "root" else tmp_path
    done = run_without({module}, CLI.format(argv=argv), cwd)
    line = assert_one_error_line(done.stderr)
    assert done.returncode == 2, done.stderr
    assert f"needs the {extra} extra ({module} is not installed)" in line
    assert_install_line(line, extra, cwd)


@pytest.mark.parametrize(
    ("target", "module", "extra"),
    [
        ("idmint.sqlalchemy", "sqlalchemy", "sqlalchemy"),
        ("idmint.django", "django", "django"),
        ("idmint.pydantic", "pydantic_core", "pydantic"),
    ],
)
def test_importing_a_face_without_its_extra_names_the_install_line(
    target: str, module: str, extra: str
) -> None:
    done = run_without({module}, IMPORT.format(target=target), ROOT)
    assert done.returncode == 3, done.stderr
    assert f"{target} needs the {extra} extra ({module} is not installed)" in done.stderr
    assert_install_line(done.stderr.strip(), extra, ROOT)


def test_the_install_line_names_the_source_tree_as_dot_from_its_root() -> None:
    argv = ["claims", "list", "--coordinator", "zk://127.0.0.1:1/idmint"]
    done = run_without({"kazoo"}, CLI.format(argv=argv), ROOT)
    assert done.stderr.endswith(" -m pip install -e '.[zookeeper]'\n"), done.stderr


def test_other_import_errors_go_through_as_they_are() -> None:
    """A broken installation (a dependency of kazoo missing) is not the extra missing."""
    with (
        pytest.raises(ModuleNotFoundError) as raised,
        needs_extra("zookeeper", "kazoo", needed_by="zk://"),
    ):
        raise ModuleNotFoundError("No module named 'six'", name="six")
    assert not isinstance(raised.value, MissingExtra)


def test_missing_extra_is_both_a_configuration_error_and_an_import_error() -> None:
    error = MissingExtra("zookeeper", "kazoo", needed_by="zk://")
    assert isinstance(error, ConfigurationError)
    assert isinstance(error, ModuleNotFoundError)
    assert error.name == "kazoo"
    assert error.extra == "zookeeper"
    assert str(error).endswith(error.install)


def extra_requirements(*extras: str) -> list[str]:
    """What pyproject.toml's extras require (the source, not the installed metadata)."""
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [text for extra in extras for text in optional["optional-dependencies"][extra]]


ASYNC_ENGINE = textwrap.dedent(
    """
    import asyncio
    from sqlalchemy.ext.asyncio import create_async_engine

    async def connect():
        async with create_async_engine({url!r}).connect():
            pass

    try:
        asyncio.run(connect())
    except Exception as error:
        print(type(error).__name__, error, file=sys.stderr)
    """
)


def test_the_sqlalchemy_extra_carries_what_async_sessions_need() -> None:
    """docs/storage.md's async example after ``pip install 'idmint[sqlalchemy]'`` and a
    driver: the engine gets as far as the database (here: nothing listens). (Once:
    "the greenlet library is required to use this function".)"""
    with_driver = [*extra_requirements("sqlalchemy"), "psycopg[binary]"]
    url = f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/none"
    done = run_without(modules_outside(with_driver), ASYNC_ENGINE.format(url=url), ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("OperationalError "), done.stderr
