"""scripts/coordinators: local coordinators for trying idmint, as a user runs it.

The script is run as a child process on free ports (or, to check the fallback, with
ZooKeeper's usual port taken by the test); its URLs are used through the CLI, and it
is stopped with the terminal's Ctrl-C (SIGINT to its process group).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from tests.cli_process import CliProcess, ps, run_idmint
from tests.servers import wait_until
from tests.servers.ports import LOOPBACK, free_port

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "coordinators"
START_TIMEOUT_S = 120.0  # installs nothing here, but two JVM/etcd starts on a busy machine
STOP_TIMEOUT_S = 120.0  # four servers stopped one after another on a busy machine


class Coordinators(CliProcess):
    """``scripts/coordinators ARGS`` in its own process group, its output read as it comes."""

    def __init__(self, *args: str, command: Sequence[str] | None = None, **settings: Any) -> None:
        super().__init__(
            command=[*(command or [sys.executable, str(SCRIPT)]), *args],
            session=True,
            stamp=False,
            **settings,
        )

    def urls(self, count: int) -> list[str]:
        """The first ``count`` lines of stdout: the coordinators' URLs."""
        self.wait_for_lines(count, timeout=START_TIMEOUT_S, what=f"{count} URLs")
        return self.lines[:count]

    def data_directory(self) -> Path:
        """The data directory named by the line that says the servers are up."""

        def ended() -> None:
            assert self.running, f"scripts/coordinators ended:\n{self.stderr}"

        line = r"deletes their data \((.+)\)$"
        wait_until(
            lambda: re.search(line, self.stderr, re.M) is not None,
            timeout=START_TIMEOUT_S,
            description="the line naming the data directory",
            check=ended,
        )
        found = re.search(line, self.stderr, re.M)
        assert found
        return Path(found.group(1))

    def stop_status(self, signum: signal.Signals) -> int:
        """Its exit status after ``signum`` to its process group (SIGINT: Ctrl-C)."""
        os.killpg(self.pid, signum)
        try:
            return self.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGUSR1)  # the script prints its stack (faulthandler)
            with contextlib.suppress(TimeoutError):
                wait_until(lambda: "File " in self.stderr, timeout=10, description="a stack")
            left = ps("-o", "pid,stat,etime,args", "-g", str(self.pid))
            raise AssertionError(
                f"scripts/coordinators did not stop:\n{self.stderr}\nstill running:\n{left}"
            ) from None


@pytest.fixture
def coordinators() -> Iterator[list[Coordinators]]:
    """Scripts a test starts; killed, with their group, afterwards."""
    started: list[Coordinators] = []
    yield started
    for script in started:
        script.close()


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(2)
        return probe.connect_ex((LOOPBACK, port)) == 0


def _pids_using(directory: Path) -> list[int]:
    """Processes whose command line names ``directory`` (the servers it started)."""
    pids = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and str(directory) in (entry / "cmdline").read_text():
                pids.append(int(entry.name))
    return pids


def test_coordinators_serve_urls_that_claim_and_stop_cleanly_on_ctrl_c(
    coordinators: list[Coordinators],
) -> None:
    zk_port, etcd_port, pg_port, redis_port = (free_port() for _ in range(4))
    script = Coordinators(
        *("--zookeeper-port", str(zk_port), "--etcd-port", str(etcd_port)),
        *("--postgresql-port", str(pg_port), "--redis-port", str(redis_port)),
    )
    coordinators.append(script)
    urls = script.urls(4)
    assert urls == [
        f"zk://{LOOPBACK}:{zk_port}/idmint",
        f"etcd://{LOOPBACK}:{etcd_port}/idmint",
        f"postgresql://postgres@{LOOPBACK}:{pg_port}/postgres",
        f"redis://{LOOPBACK}:{redis_port}/0",
    ]
    data = script.data_directory()
    assert data.is_dir()

    for url in urls:
        # A new database pool settles its first claim for a TTL: a short one here.
        url += "?ttl=2" if url.startswith(("postgresql", "redis")) else ""
        generated = run_idmint("generate", "--coordinator", url, "--count", "3")
        assert generated.returncode == 0, generated.stderr
        assert len(set(generated.stdout.split())) == 3
        listed = run_idmint("claims", "list", "--coordinator", url)
        assert listed.returncode == 0, listed.stderr

    assert script.stop_status(signal.SIGINT) == 0, script.stderr
    assert "Traceback" not in script.stderr
    assert not data.exists()
    for port in (zk_port, etcd_port, pg_port, redis_port):
        assert not _listening(port)
    assert not _pids_using(data)


def test_coordinators_end_with_the_log_of_a_server_that_died(
    coordinators: list[Coordinators],
) -> None:
    script = Coordinators("etcd", "--etcd-port", "0")
    coordinators.append(script)
    (url,) = script.urls(1)
    assert url.startswith(f"etcd://{LOOPBACK}:")
    data = script.data_directory()
    (etcd_pid,) = _pids_using(data)

    os.kill(etcd_pid, signal.SIGKILL)

    assert script.wait(STOP_TIMEOUT_S) == 1
    assert "etcd stopped; the end of its log" in script.stderr, script.stderr
    assert not data.exists()


def test_coordinators_take_another_port_when_the_usual_one_is_taken(
    coordinators: list[Coordinators],
) -> None:
    with socket.socket() as squatter:
        with contextlib.suppress(OSError):  # taken already: as good for this test
            squatter.bind((LOOPBACK, 2181))
            squatter.listen()
        script = Coordinators("zookeeper")
        coordinators.append(script)
        (url,) = script.urls(1)
    address = re.fullmatch(rf"zk://{re.escape(LOOPBACK)}:(\d+)/idmint", url)
    assert address, url
    port = int(address.group(1))
    assert port != 2181
    script.data_directory()
    assert f"port 2181 is taken; ZooKeeper listens on {port} instead" in script.stderr
    generated = run_idmint("generate", "--coordinator", url, "--count", "1")
    assert generated.returncode == 0, generated.stderr

    assert script.stop_status(signal.SIGTERM) == 0, script.stderr


def test_coordinators_refuse_an_unknown_name() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "consul"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "unknown coordinator 'consul'; choose from zookeeper, etcd" in done.stderr


def _fresh_clone(destination: Path) -> Path:
    """The repository's files as a clone has them (no .venv, nothing installed)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted in the work tree is not the clone's
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def test_coordinators_run_as_the_quick_start_writes_them_on_a_fresh_clone(
    coordinators: list[Coordinators], tmp_path: Path
) -> None:
    """``scripts/coordinators`` by its path, its ``python3`` the system's (which has no
    idmint), on a clone with no .venv: it makes .venv as scripts/run does (here a
    stand-in for scripts/bootstrap-venv links this test's venv, without pip) and runs
    in it, and the URL claims; then again with .venv made. (Once it stopped at once:
    ModuleNotFoundError: No module named 'idmint'.)"""
    clone = _fresh_clone(tmp_path / "clone")
    calls = tmp_path / "bootstrap-calls"
    bootstrap = clone / "scripts" / "bootstrap-venv"
    bootstrap.write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\n'
        f"[ -e {clone}/.venv ] || ln -s {Path(sys.prefix)} {clone}/.venv\n"
    )
    system = tmp_path / "system-bin"
    system.mkdir()
    (system / "python3").symlink_to(Path(sys.base_prefix) / "bin" / "python3")
    environment = {"PATH": f"{system}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(tmp_path)}
    no_idmint = subprocess.run(
        ["python3", "-c", "import idmint"], env=environment, capture_output=True, check=False
    )
    assert no_idmint.returncode == 1, "this python3 has idmint: the test would prove nothing"

    for made_before in (False, True):
        script = Coordinators(
            *("redis", "--redis-port", "0"),
            command=[str(clone / "scripts" / "coordinators")],
            env=environment,
        )
        coordinators.append(script)
        (url,) = script.urls(1)
        assert url.startswith(f"redis://{LOOPBACK}:"), script.stderr
        script.data_directory()
        generated = run_idmint("generate", "--coordinator", url + "?ttl=2", "--count", "2")
        assert generated.returncode == 0, generated.stderr
        assert script.stop_status(signal.SIGINT) == 0, script.stderr
        assert "Traceback" not in script.stderr
        # With what scripts/run installs: the default of scripts/bootstrap-venv.
        assert calls.read_text() == "\n" * (1 if made_before else 0) + "\n", made_before


def test_bootstrap_venv_installs_only_extras_not_installed_since_pyproject_changed(
    tmp_path: Path,
) -> None:
    """scripts/run after scripts/test (whose extras include run's) runs no pip; an
    extra not installed yet, or a changed pyproject.toml, does. (Once any other set of
    extras than the last one ran pip again.)"""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "bootstrap-venv", tmp_path / "scripts")
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    pip = tmp_path / "pip-calls"
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\necho "$*" >> {pip}\n')
    python.chmod(0o755)

    def bootstrap(*target: str) -> list[str]:
        """The pip commands ``scripts/bootstrap-venv TARGET`` ran."""
        pip.write_text("")
        _run_script(tmp_path / "scripts" / "bootstrap-venv", *target)
        return pip.read_text().splitlines()

    install = "-m pip install --quiet --disable-pip-version-check -e "
    assert bootstrap(".[test,server,zookeeper,postgres,redis,mysql]") == [
        install + ".[test,server,zookeeper,postgres,redis,mysql]"
    ]
    assert bootstrap() == []  # scripts/run's extras: installed already
    assert bootstrap(".[server]") == []
    assert bootstrap(".[django,server]") == [install + ".[django,server]"]
    assert bootstrap(".[django]") == []
    with (tmp_path / "pyproject.toml").open("a") as project:
        project.write("\n# changed\n")
    assert bootstrap(".[server]") == [install + ".[server]"]
    assert bootstrap() == [install + ".[server,zookeeper,postgres,redis,mysql]"]


def _run_script(path: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """``path ARGUMENTS`` run to completion, which must succeed."""
    done = subprocess.run(
        [str(path), *arguments], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ([], "(.venv/bin/idmint serve)"),
        (
            ["--port", "9000", "--scheme", "muid"],
            "(.venv/bin/idmint serve --port 9000 --scheme muid)",
        ),
    ],
)
def test_scripts_run_says_what_it_starts(tmp_path: Path, arguments: list[str], said: str) -> None:
    """The script as written, in a copy of the tree whose venv and installer are stand-ins."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "run", tmp_path / "scripts" / "run")
    stand_ins = {
        tmp_path / "scripts" / "bootstrap-venv": "#!/bin/sh\nexit 0\n",
        tmp_path / ".venv" / "bin" / "idmint": '#!/bin/sh\necho "idmint $*"\n',
    }
    for path, text in stand_ins.items():
        path.write_text(text)
        path.chmod(0o755)
    done = _run_script(tmp_path / "scripts" / "run", *arguments)
    assert done.stderr == f"scripts/run: starting the ID server {said}\n"
    assert done.stdout == " ".join(["idmint", "serve", *arguments]) + "\n"
