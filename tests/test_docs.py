"""Every code block of README.md and docs/*.md runs as written.

A block's info string says what it is and how it is checked:

``python``   run as a script in a fresh interpreter (exit status 0)
``console``  each ``$ `` line run by bash (``set -o pipefail``); the lines after it,
             up to the next ``$ `` line or a blank line, are its output. Output of
             ``decode``, ``encode`` and ``schemes`` must match exactly; any other is
             an example, compared by shape: the same lines and fields, with IDs,
             numbers, times and addresses free to differ (JSON by its structure).
             ``idmint serve``, ``idmint discovery register`` and ``--count 0``
             (unless piped on) run until interrupted: each is awaited until it has
             printed its output (or a first line), then gets the terminal's Ctrl-C
             (SIGINT to its process group) and must stop cleanly (0 or 130, no
             traceback): a ``--count 0`` stream at once, a server or registration
             when the block ends, as if it ran in a second terminal meanwhile.
``sh``       run by ``bash -e`` (in a temporary directory, as every block)
``sql``      run against PostgreSQL and SQLite (under ``-- PostgreSQL`` and
             ``-- SQLite`` headings) on tables ``orders`` (uid64), ``shards``
             (elastic64, 12 node bits) and ``documents`` (muid) holding one known ID
             each; every statement must find one row, and a single value read must
             be that ID's text form
``json``     parsed, line by line; ``toml`` and ``yaml`` parsed
``text``     not code (layouts, bit diagrams, trees): not run
(none)       a failure: say what the block is

An HTML comment on the line before the fence says more, in ``;``-separated parts::

    <!-- docs-test: needs zookeeper, etcd -->

``needs S, ...``   the servers the block talks to: ``zookeeper``, ``etcd``,
                   ``postgresql``, ``redis``, ``id-servers`` (two ``idmint serve``
                   registered in ZooKeeper discovery). They are the session's test
                   servers; the block's URLs are rewritten to reach them:
                   ``zk://hosts/path`` and ``etcd://host:port/path`` get the test server
                   and a path prefix of their own (``/docs-<random>``; blocks needing
                   ``id-servers`` share the servers' prefix),
                   ``postgresql[+driver]://...`` a fresh database (its query string
                   kept), ``redis://host:port/db`` the test server with a key prefix of
                   its own (its query string kept), each ``http://host:port`` another
                   ID server. A block that uses a
                   server it does not declare fails, and so does a declaration the
                   block does not use.
``file PATH``      PATH (a placeholder such as a token file) is a temporary file.
``continues``      a python block run after the python block before it in the same
                   file, as one script (its ``needs`` add up).
``django-models``  a python block that is a Django app's ``models.py``: it is loaded
                   by Django (SQLite), migrated and checked with
                   ``makemigrations --check``, and a row with every field's default
                   is validated (``full_clean``, as a form does) and created.
``skip REASON``    not run; the reason (the rest of the comment) is required.

``<!-- docs-test: skip-file REASON -->`` on a line of its own (not before a fence)
skips every block of its file.

Everything a block starts (ID servers, ports, local:// lock files) is the
session's or the test's own; nothing listens on the usual ports.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from tests.cli_process import CliProcess
from tests.server.server_helpers import IdmintServer
from tests.servers.etcd import EtcdCluster
from tests.servers.ports import free_port
from tests.servers.postgres import PostgresServer
from tests.servers.redis import RedisServer
from tests.servers.zookeeper import ZooKeeperEnsemble

from idmint import Elastic64, Muid, Uid64
from idmint.sqlalchemy import Elastic64Type, MuidType, Uid64Type

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SERVERS = ("zookeeper", "etcd", "postgresql", "redis", "id-servers")
NOT_RUN = {"text", "json", "toml", "yaml"}
"""Info strings of blocks that are data, not commands (the data is parsed)."""
DETERMINISTIC = {"decode", "encode", "schemes"}
"""Subcommands whose output depends only on their input."""
COMMAND_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
ID_SERVERS_PREFIX = "/docs-id-servers"
"""Where the ID servers of ``needs id-servers`` register (``<prefix>/discovery``)."""

_MARKER = re.compile(r"<!--\s*docs-test:\s*(.*?)\s*-->")
_FILE_SKIP = re.compile(r"^<!--\s*docs-test:\s*skip-file\s+(\S.*?)\s*-->$", re.M)
_FENCE = re.compile(r"^( *)```(\S*)\s*$")  # indented within a list item, too
_ZK_URL = re.compile(r"zk://(?:[^/@\s\"']+@)?[\w.-]+:\d+(?:,[\w.-]+:\d+)*(/[^\s\"'?]*)?")
_ETCD_URL = re.compile(r"etcd://[\w.-]+:\d+(/[^\s\"'?]*)?")
_POSTGRES_URL = re.compile(r"postgresql(\+\w+)?://[^\s\"'?]+(\?[^\s\"']*)?")
_REDIS_URL = re.compile(r"rediss?://[^\s\"'?]+(\?[^\s\"']*)?")
_HTTP_URL = re.compile(r"https?://[\w.-]+:\d+")
_PORT_OPTION = re.compile(r"(--port[ =])\d+")


# -- finding the blocks -------------------------------------------------------------


@dataclass
class Block:
    """One fenced block of a document, with what its marker says."""

    path: Path
    line: int
    """Line number of the opening fence."""
    info: str
    code: str
    needs: set[str] = field(default_factory=set)
    files: list[str] = field(default_factory=list)
    continues: Block | None = None
    django_models: bool = False
    skip: str | None = None

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}:{self.info or 'no-info'}"

    def chain(self) -> list[Block]:
        """This block after the blocks it continues, first one first."""
        return [*(self.continues.chain() if self.continues else []), self]

    def all_needs(self) -> set[str]:
        return set().union(*(block.needs for block in self.chain()))

    def all_files(self) -> list[str]:
        return [path for block in self.chain() for path in block.files]


def _apply_marker(block: Block, marker: str, previous_python: Block | None) -> None:
    skip = re.search(r"(?:^|;)\s*skip(?:\s+(.*))?$", marker)  # the reason is the rest, ; and all
    if skip:
        assert skip.group(1), f"{block.name}: say why the block is not run"
        block.skip = skip.group(1).strip()
        marker = marker[: skip.start()]
    for part in filter(None, (piece.strip() for piece in marker.split(";"))):
        word, _, rest = part.partition(" ")
        rest = rest.strip()
        if word == "needs":
            block.needs |= {name.strip() for name in rest.split(",")}
            unknown = block.needs - set(SERVERS)
            assert not unknown, f"{block.name}: unknown server {unknown}; known: {SERVERS}"
        elif word == "file":
            block.files.append(rest)
        elif word == "continues":
            assert previous_python is not None, f"{block.name}: no python block to continue"
            block.continues = previous_python
        elif word == "django-models":
            block.django_models = True
        else:
            raise AssertionError(f"{block.name}: unknown docs-test marker part {part!r}")


def find_blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path`` in order, with their markers applied."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    file_skip = _FILE_SKIP.search(text)
    blocks: list[Block] = []
    previous_python: Block | None = None
    index = 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if not fence:
            index += 1
            continue
        indent, info = fence.groups()
        end = index + 1
        while end < len(lines) and lines[end].rstrip() != indent + "```":
            end += 1
        code = "".join(line.removeprefix(indent) + "\n" for line in lines[index + 1 : end])
        block = Block(path, index + 1, info, code)
        before = index - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        marker = _MARKER.fullmatch(lines[before].strip()) if before >= 0 else None
        if marker:
            _apply_marker(block, marker.group(1), previous_python)
        if file_skip:
            block.skip = file_skip.group(1)
        if block.info == "python":
            previous_python = block
        blocks.append(block)
        index = end + 1
    return blocks


BLOCKS = [block for document in DOCUMENTS for block in find_blocks(document)]
CHECKED = [block for block in BLOCKS if block.skip is None]
"""The blocks this test runs; the others say why not in their marker."""


def test_docs_have_blocks_to_check() -> None:
    """The parser finds every block (a change of format must not make this test vacuous)."""
    kinds = {block.info for block in CHECKED}
    assert {"python", "console", "sql", "text"} <= kinds, kinds
    for document in DOCUMENTS:
        fences = re.findall(r"^\s*(?:```|~~~)", document.read_text(encoding="utf-8"), re.M)
        found = [block for block in BLOCKS if block.path == document]
        assert len(fences) == 2 * len(found), f"{document.name}: a fence the parser missed"


def test_every_id_the_docs_decode_was_minted_in_the_past() -> None:
    """A sample ID whose time lies ahead looks like a bug to a reader. (Once README's
    uid64 decoded to 2073: a spread-mode ID written as if it were time-sequential.)"""
    now = dt.datetime.now(dt.timezone.utc)
    shown = [
        (document.name, json.loads(line))
        for document in DOCUMENTS
        for line in document.read_text(encoding="utf-8").splitlines()
        if line.startswith('{"scheme": ') and '"time": ' in line
    ]
    assert len(shown) >= 3  # README's decode of three schemes, at least
    for name, fields in shown:
        minted = dt.datetime.fromisoformat(fields["time"].replace("Z", "+00:00"))
        assert dt.datetime(2015, 1, 1, tzinfo=dt.timezone.utc) < minted <= now, (name, fields)


# -- the test servers, and the URLs that reach them ---------------------------------


@pytest.fixture(scope="session")
def docs_id_servers(zk: ZooKeeperEnsemble) -> Iterator[list[IdmintServer]]:
    """Two uid64 ID servers, registered in discovery at ``<zk>/docs-id-servers/discovery``."""
    discovery = f"zk://{zk.hosts}{ID_SERVERS_PREFIX}/discovery"
    servers = [IdmintServer("--discovery", discovery) for _ in range(2)]
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.close()


@dataclass
class Place:
    """Where a block runs: its directory, environment and rewritten URLs."""

    directory: Path
    env: dict[str, str]
    rewrite: Callable[[str], str]
    database_url: Callable[[str], str] | None = None


def place_for(block: Block, request: pytest.FixtureRequest, directory: Path) -> Place:
    """Start (or reuse) the servers ``block`` needs; the place where it runs against them."""
    needs = block.all_needs()
    prefix = ID_SERVERS_PREFIX if "id-servers" in needs else f"/docs-{uuid.uuid4().hex[:12]}"
    zk = request.getfixturevalue("zk") if "zookeeper" in needs else None
    etcd: EtcdCluster | None = request.getfixturevalue("etcd") if "etcd" in needs else None
    postgres: PostgresServer | None = (
        request.getfixturevalue("postgres") if "postgresql" in needs else None
    )
    redis: RedisServer | None = request.getfixturevalue("redis") if "redis" in needs else None
    id_servers: list[IdmintServer] = (
        request.getfixturevalue("docs_id_servers") if "id-servers" in needs else []
    )
    database = f"docs_{uuid.uuid4().hex[:12]}"
    if postgres is not None:
        postgres.create_database(database)
    files: dict[str, Path] = {}
    for number, placeholder in enumerate(block.all_files()):
        files[placeholder] = directory / f"file-{number}"
        files[placeholder].write_text("docs-test-token\n", encoding="utf-8")
    servers_by_address: dict[str, str] = {}

    def rewrite(code: str) -> str:
        def zk_url(match: re.Match[str]) -> str:
            assert zk is not None, f"{block.name} uses {match.group(0)}: add needs zookeeper"
            return f"zk://{zk.hosts}{prefix}{match.group(1) or ''}"

        def etcd_url(match: re.Match[str]) -> str:
            assert etcd is not None, f"{block.name} uses {match.group(0)}: add needs etcd"
            return f"etcd://{etcd.endpoints[0]}{prefix}{match.group(1) or ''}"

        def postgres_url(match: re.Match[str]) -> str:
            assert postgres is not None, f"{block.name} uses {match.group(0)}: needs postgresql"
            return postgres.url(f"postgresql{match.group(1) or ''}", database) + (
                match.group(2) or ""
            )

        def redis_url(match: re.Match[str]) -> str:
            assert redis is not None, f"{block.name} uses {match.group(0)}: add needs redis"
            # The block's own prefix goes under one of the block's own.
            query = match.group(1) or ""
            own = f"prefix=docs{prefix}"
            if "prefix=" in query:
                query = query.replace("prefix=", f"{own}-", 1)
            else:
                query += ("&" if query else "?") + own
            return f"redis://{redis.endpoint}/0{query}"

        def http_url(match: re.Match[str]) -> str:
            assert id_servers, f"{block.name} uses {match.group(0)}: add needs id-servers"
            address = match.group(0)
            if address not in servers_by_address:
                taken = len(servers_by_address)
                assert taken < len(id_servers), f"{block.name}: more servers than the test has"
                servers_by_address[address] = id_servers[taken].url.rstrip("/")
            return servers_by_address[address]

        code = _ZK_URL.sub(zk_url, code)
        code = _ETCD_URL.sub(etcd_url, code)
        code = _POSTGRES_URL.sub(postgres_url, code)
        code = _REDIS_URL.sub(redis_url, code)
        if id_servers:
            code = _HTTP_URL.sub(http_url, code)
        for placeholder, path in files.items():
            code = code.replace(placeholder, str(path))
        return code

    # A reader's settings would change what the examples do; a pool directory of
    # the block's own (IDMINT_LOCAL_DIR) keeps it from the reader's pool and from
    # identities that other tests of the session hold (generator=5, say).
    env = {
        **{name: value for name, value in os.environ.items() if not name.startswith("IDMINT_")},
        "IDMINT_LOCAL_DIR": str(directory / "pool"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONUNBUFFERED": "1",
    }
    place = Place(directory, env, rewrite)
    if postgres is not None:
        place.database_url = lambda driver: postgres.url(driver, database)
    return place


def _check_declared_servers(block: Block) -> None:
    """A block declares exactly the servers its code uses (see the module docstring)."""
    if block.info == "console":
        code = "\n".join(command.text for command in console_commands(block.code))
    else:
        code = "".join(part.code for part in block.chain())
    used = set()
    if _ZK_URL.search(code):
        used.add("zookeeper")
    if _ETCD_URL.search(code):
        used.add("etcd")
    if _POSTGRES_URL.search(code) or "-- PostgreSQL" in code:
        used.add("postgresql")
    if _REDIS_URL.search(code):
        used.add("redis")
    if _HTTP_URL.search(code):
        used.add("id-servers")
    assert used == block.all_needs(), (
        f"{block.name}: uses {sorted(used)} but its marker says needs {sorted(block.all_needs())}"
    )


# -- comparing output by shape ------------------------------------------------------

_ISO_TIME = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z"


def field_pattern(example: str) -> str:
    """The regex a printed field must match when the docs show ``example`` there."""
    if not re.search(r"\d", example):
        return re.escape(example)
    if re.fullmatch(_ISO_TIME, example):
        return _ISO_TIME
    if example.isdigit():
        return r"\d+"
    for alphabet in ("0-9a-f", "0-9A-F", "0-9A-Za-z_-"):
        if re.fullmatch(f"[{alphabet}]+", example):
            return f"[{alphabet}]{{{len(example)}}}"
    return r"\S+"  # an address, a holder (host:pid), a count in brackets


def same_shape(example: Any, actual: Any) -> bool:
    """Whether a parsed JSON value has the structure the docs' ``example`` shows."""
    if isinstance(example, dict):
        return (
            isinstance(actual, dict)
            and example.keys() == actual.keys()
            and all(same_shape(example[key], actual[key]) for key in example)
        )
    if isinstance(example, list):
        return (
            isinstance(actual, list)
            and len(example) == len(actual)
            and all(same_shape(e, a) for e, a in zip(example, actual, strict=True))
        )
    if isinstance(example, str):
        return isinstance(actual, str) and bool(re.fullmatch(field_pattern(example), actual))
    if isinstance(example, bool) or example is None:
        return example == actual
    return type(example) is type(actual)


def _as_json(lines: list[str]) -> list[Any] | None:
    """The JSON values shown by ``lines``: one (maybe wrapped) or one per line; or None."""
    with contextlib.suppress(ValueError):
        return [json.loads("\n".join(lines))]
    with contextlib.suppress(ValueError):
        return [json.loads(line) for line in lines]
    return None


def records(expected: list[str]) -> int:
    """How many output lines ``expected`` stands for (a wrapped JSON value is one)."""
    values = _as_json(expected)
    return len(values) if values is not None else len(expected)


def assert_output(expected: list[str], actual: list[str], *, exact: bool, what: str) -> None:
    if exact:
        assert actual == expected, f"{what}: printed\n" + "\n".join(actual)
        return
    shown = _as_json(expected)
    if shown is not None:
        printed = _as_json(actual)
        assert printed is not None, f"{what}: printed {actual}, not JSON"
        assert len(printed) == len(shown), f"{what}: printed {actual}"
        for example, value in zip(shown, printed, strict=True):
            assert same_shape(example, value), f"{what}: {value!r} is not shaped like {example!r}"
        return
    assert len(actual) == len(expected), f"{what}: printed\n" + "\n".join(actual)
    for example, line in zip(expected, actual, strict=True):
        pattern = r"\s+".join(field_pattern(word) for word in example.split())
        assert re.fullmatch(r"\s*" + pattern + r"\s*", line), (
            f"{what}: {line!r} is not shaped like {example!r}"
        )


# -- console blocks -----------------------------------------------------------------


@dataclass
class Command:
    text: str
    """The command line(s) after ``$ ``, continuation lines included."""
    expected: list[str]
    """The output the docs show after it."""

    def words(self) -> list[str]:
        return shlex.split(self.text.replace("\\\n", " "), comments=True)

    def pipeline(self) -> list[list[str]]:
        stages: list[list[str]] = [[]]
        for word in self.words():
            if word == "|":
                stages.append([])
            else:
                stages[-1].append(word)
        return stages

    @property
    def runs_until_interrupted(self) -> bool:
        argv = self.pipeline()[0]
        serves = argv[:2] == ["idmint", "serve"] or argv[:3] == ["idmint", "discovery", "register"]
        return self.streams or (serves and len(self.pipeline()) == 1)

    @property
    def streams(self) -> bool:
        """An ``idmint`` writing IDs until interrupted (``--count 0``, not piped on)."""
        stages = self.pipeline()
        return (
            len(stages) == 1
            and stages[0][:1] == ["idmint"]
            and any(
                word == "--count" and following == "0"
                for word, following in itertools.pairwise(stages[0])
            )
        )

    @property
    def deterministic(self) -> bool:
        return all(
            stage[:1] == ["idmint"] and stage[1:2] and stage[1] in DETERMINISTIC
            for stage in self.pipeline()
        )


def console_commands(code: str) -> list[Command]:
    commands: list[Command] = []
    lines = code.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if not line.startswith("$ "):
            assert not line.strip(), f"output without a command: {line!r}"
            continue
        text = line[2:]
        while text.endswith("\\") and index < len(lines):
            text += "\n" + lines[index]
            index += 1
        expected = []
        while index < len(lines) and lines[index].strip() and not lines[index].startswith("$ "):
            expected.append(lines[index])
            index += 1
        commands.append(Command(text, expected))
    return commands


def start_until_interrupted(command: str, place: Place, env: dict[str, str]) -> CliProcess:
    """``command`` in a shell, in a process group of its own (for the Ctrl-C it will get)."""
    return CliProcess(
        command=["bash", "-c", "exec " + command],
        cwd=place.directory,
        env=env,
        session=True,
        stamp=False,
    )


def interrupt(process: CliProcess, what: str) -> None:
    """Ctrl-C, as a terminal sends it; the command must stop cleanly."""
    process.interrupt()
    try:
        status = process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{what}: still running after SIGINT") from None
    assert status in (0, 128 + signal.SIGINT), f"{what}: status {status}\n{process.stderr}"
    assert "Traceback" not in process.stderr, f"{what}:\n{process.stderr}"


def run_console(block: Block, place: Place) -> None:
    commands = console_commands(block.code)
    assert commands, f"{block.name}: no $ command"
    running: list[tuple[CliProcess, str]] = []
    try:
        for command in commands:
            text = _PORT_OPTION.sub(lambda m: f"{m.group(1)}{free_port()}", command.text)
            text = place.rewrite(text)
            env = {**place.env, "IDMINT_PORT": str(free_port())}
            what = f"{block.name}: $ {command.text}"
            if command.runs_until_interrupted:
                process = start_until_interrupted(text, place, env)
                running.append((process, what))
                count = max(1, records(command.expected))
                process.wait_for_lines(count, timeout=COMMAND_TIMEOUT_S, what=what)
                if command.expected:
                    assert_output(command.expected, process.lines[:count], exact=False, what=what)
                if command.streams:  # a stream holds nothing the next commands need
                    interrupt(*running.pop())
                continue
            done = run_script(["bash", "-o", "pipefail", "-c", text], place, what, env=env)
            if command.expected:
                assert_output(
                    command.expected,
                    done.stdout.splitlines(),
                    exact=command.deterministic,
                    what=what,
                )
        while running:
            interrupt(*running.pop())
    finally:
        for process, _ in running:
            process.close()


# -- python, sh, sql and data blocks ------------------------------------------------


def run_script(
    argv: list[str], place: Place, what: str, *, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` where the block runs; it must succeed."""
    done = subprocess.run(
        argv,
        cwd=place.directory,
        env=env or place.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"{what}: status {done.returncode}\n{done.stdout}{done.stderr}"
    return done


def run_python(block: Block, place: Place) -> None:
    code = "".join(part.code for part in block.chain())
    if block.chain()[0].django_models:
        run_django_models(place.rewrite(code), place, block.name)
        return
    script = place.directory / "block.py"
    script.write_text(place.rewrite(code), encoding="utf-8")
    run_script([sys.executable, str(script)], place, block.name)


DJANGO_CHECK = textwrap.dedent(
    """
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["shop"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "shop.sqlite"}},
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        USE_TZ=True,
    )
    django.setup()
    from django.apps import apps
    from django.core.management import call_command

    call_command("makemigrations", "shop", verbosity=0)
    call_command("makemigrations", "shop", check=True, dry_run=True, verbosity=0)
    call_command("migrate", verbosity=0)
    for model in apps.get_app_config("shop").get_models():
        row = model()
        row.full_clean()  # as a model form or the admin validates it: null needs blank
        row.save()
        assert model.objects.get(pk=row.pk).pk == row.pk
    """
)


def run_django_models(code: str, place: Place, what: str) -> None:
    app = place.directory / "shop"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "models.py").write_text(code, encoding="utf-8")
    check = place.directory / "check_models.py"
    check.write_text(DJANGO_CHECK, encoding="utf-8")
    run_script([sys.executable, str(check)], place, what)


SQL_ROWS: dict[str, tuple[sa.types.TypeEngine[Any], Any, str]] = {
    "orders": (Uid64Type(), Uid64("ab6278961f7f88d5"), "ab6278961f7f88d5"),
    "shards": (
        Elastic64Type(node_bits=12),
        Elastic64(75735064375574528, node_bits=12),
        "75735064375574528",
    ),
    "documents": (
        MuidType(),
        Muid("05D5EAC793E61F17B9F5B9479DF94AC0"),
        "05D5EAC793E61F17B9F5B9479DF94AC0",
    ),
}
"""The tables the SQL examples read: column type, the one ID stored, its text form."""


def sql_statements(block: Block) -> Iterator[tuple[str, str]]:
    """``(dialect, statement)`` for each statement, by the ``-- PostgreSQL`` headings."""
    dialect = ""
    statement: list[str] = []
    for line in block.code.splitlines():
        heading = re.match(r"--\s*(PostgreSQL|SQLite)\b", line.strip())
        if heading:
            dialect = heading.group(1).lower()
            continue
        statement.append(line)
        if line.split("--", 1)[0].rstrip().endswith(";"):
            assert dialect, f"{block.name}: a statement before any -- PostgreSQL/SQLite heading"
            yield dialect, "\n".join(statement)
            statement = []
    assert not "".join(statement).strip(), f"{block.name}: a statement without ;"


def run_sql(block: Block, place: Place) -> None:
    engines: dict[str, sa.Engine] = {}
    try:
        for dialect, statement in sql_statements(block):
            if dialect not in engines:
                if dialect == "sqlite":
                    url = f"sqlite:///{place.directory / 'docs.sqlite'}"
                else:
                    assert place.database_url, f"{block.name}: add needs postgresql"
                    url = place.database_url("postgresql+psycopg")
                engines[dialect] = engine = sa.create_engine(url)
                metadata = sa.MetaData()
                for table_name, (column_type, _, _) in SQL_ROWS.items():
                    sa.Table(table_name, metadata, sa.Column("id", column_type, primary_key=True))
                metadata.create_all(engine)
                with engine.begin() as connection:
                    for table_name, (_, value, _) in SQL_ROWS.items():
                        connection.execute(metadata.tables[table_name].insert(), {"id": value})
            table = re.search(r"\bFROM\s+(\w+)", statement, re.I)
            assert table, f"{block.name}: {statement} reads no table"
            assert table.group(1) in SQL_ROWS, f"{block.name}: {statement} reads an unknown table"
            with engines[dialect].connect() as connection:
                rows = connection.exec_driver_sql(statement).all()
            assert len(rows) == 1, f"{block.name}: {statement} found {rows}"
            if len(rows[0]) == 1 and not re.match(r"SELECT\s+\*", statement, re.I):
                shown = SQL_ROWS[table.group(1)][2]
                assert str(rows[0][0]) == shown, f"{block.name}: {statement} gave {rows[0][0]}"
    finally:
        for engine in engines.values():
            engine.dispose()


def check_data(block: Block) -> None:
    if block.info == "json":
        for line in block.code.splitlines():
            json.loads(line)
    elif block.info == "toml" and sys.version_info >= (3, 11):  # tomllib is new in 3.11
        import tomllib

        tomllib.loads(block.code)
    elif block.info == "yaml":
        yaml.safe_load(block.code)


# -- the test -----------------------------------------------------------------------


@pytest.mark.parametrize("block", CHECKED, ids=[block.name for block in CHECKED])
def test_block_runs_as_written(
    block: Block, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    assert block.info, f"{block.name}: give the block an info string (```text if not code)"
    if block.info in NOT_RUN:
        assert not block.needs, f"{block.name}: a {block.info} block is not run"
        check_data(block)
        return
    _check_declared_servers(block)
    place = place_for(block, request, tmp_path)
    if block.info == "python":
        run_python(block, place)
    elif block.info == "console":
        run_console(block, place)
    elif block.info == "sh":
        script = tmp_path / "block.sh"
        script.write_text(place.rewrite(block.code), encoding="utf-8")
        run_script(["bash", "-e", str(script)], place, block.name)
    elif block.info == "sql":
        run_sql(block, place)
    else:
        raise AssertionError(f"{block.name}: no way to check a {block.info!r} block")


def test_the_first_generators_example_runs_beside_holders_of_generators_0_to_4(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """docs/generators.md's first block while another holder has generator IDs 0 to 4
    of its pool: the free ID it claims is 5, the one it configures next, and it must
    not collide with itself. (Once IdentityInUse: the free one was still held.)"""
    from idmint.factory import new_generators

    [block] = [b for b in BLOCKS if b.path.name == "generators.md" and b.continues is None][:1]
    place = place_for(block, request, tmp_path)
    pool = Path(place.env["IDMINT_LOCAL_DIR"])
    holders = new_generators("uid64", 5, coordinator=f"local://{pool}")
    try:
        assert sorted(holder.generator for holder in holders) == [0, 1, 2, 3, 4]
        run_python(block, place)
    finally:
        for holder in holders:
            holder.close()
