"""scripts/coordinators: local ZooKeeper and etcd for trying idmint, as a user runs it.

The script is run as a child process on free ports (or, to check the fallback, with
ZooKeeper's usual port taken by the test); its URLs are used through the CLI, and it
is stopped with the terminal's Ctrl-C (SIGINT to its process group).
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from tests.cli_process import run_idmint
from tests.servers.ports import LOOPBACK, free_port

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "coordinators"
START_TIMEOUT_S = 120.0  # installs nothing here, but two JVM/etcd starts on a busy machine
STOP_TIMEOUT_S = 60.0


class Coordinators:
    """``scripts/coordinators ARGS`` in its own process group, its output read as it comes."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(SCRIPT), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self._stdout: queue.Queue[str | None] = queue.Queue()
        self._stderr: queue.Queue[str | None] = queue.Queue()
        self._stderr_lines: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(stream, lines), daemon=True)
            for stream, lines in (
                (self.process.stdout, self._stdout),
                (self.process.stderr, self._stderr),
            )
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: IO[str] | None, lines: queue.Queue[str | None]) -> None:
        assert stream is not None
        for line in stream:
            if lines is self._stderr:
                self._stderr_lines.append(line.rstrip("\n"))
            lines.put(line.rstrip("\n"))
        lines.put(None)

    def _next(self, lines: queue.Queue[str | None], what: str) -> str:
        try:
            line = lines.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            raise AssertionError(f"scripts/coordinators printed no {what} in time") from None
        assert line is not None, f"scripts/coordinators ended before its {what}: {self.stderr()}"
        return line

    def urls(self, count: int) -> list[str]:
        """The first ``count`` lines of stdout: the coordinators' URLs."""
        return [self._next(self._stdout, "URL") for _ in range(count)]

    def data_directory(self) -> Path:
        """The data directory named by the line that says the servers are up."""
        while True:
            found = re.search(r"deletes their data \((.+)\)$", self._next(self._stderr, "data"))
            if found:
                return Path(found.group(1))

    def stderr(self) -> str:
        """What it wrote on stderr so far (all of it once it has been awaited)."""
        return "\n".join(self._stderr_lines)

    def wait(self) -> int:
        """Its exit status, once it and its output have ended."""
        try:
            status = self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError("scripts/coordinators did not stop") from None
        for reader in self._readers:
            reader.join(STOP_TIMEOUT_S)
        return status

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


@pytest.fixture
def coordinators() -> Iterator[list[Coordinators]]:
    """Scripts a test starts; killed afterwards if the test left one running."""
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
    zk_port, etcd_port = free_port(), free_port()
    script = Coordinators("--zookeeper-port", str(zk_port), "--etcd-port", str(etcd_port))
    coordinators.append(script)
    urls = script.urls(2)
    assert urls == [f"zk://{LOOPBACK}:{zk_port}/idmint", f"etcd://{LOOPBACK}:{etcd_port}/idmint"]
    data = script.data_directory()
    assert data.is_dir()

    for url in urls:
        generated = run_idmint("generate", "--coordinator", url, "--count", "3")
        assert generated.returncode == 0, generated.stderr
        assert len(set(generated.stdout.split())) == 3
        listed = run_idmint("claims", "list", "--coordinator", url)
        assert listed.returncode == 0, listed.stderr

    os.killpg(script.process.pid, signal.SIGINT)  # what Ctrl-C in its terminal sends
    assert script.wait() == 0, script.stderr()
    assert "Traceback" not in script.stderr()
    assert not data.exists()
    assert not _listening(zk_port)
    assert not _listening(etcd_port)
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

    assert script.wait() == 1
    assert re.search(r"etcd stopped; the end of its log", script.stderr()), script.stderr()
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
    assert f"port 2181 is taken; ZooKeeper listens on {port} instead" in script.stderr()
    generated = run_idmint("generate", "--coordinator", url, "--count", "1")
    assert generated.returncode == 0, generated.stderr

    os.killpg(script.process.pid, signal.SIGTERM)
    assert script.wait() == 0, script.stderr()


def test_coordinators_refuse_an_unknown_name() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "consul"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "unknown coordinator 'consul'; choose from zookeeper, etcd" in done.stderr
