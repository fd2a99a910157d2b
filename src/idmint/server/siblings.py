"""One view of the whole server from any worker of ``idmint serve --workers N``.

Each worker counts for itself, in plain ints on its own event loop: the
request path touches nothing shared. The whole server is put together only
when ``/metrics`` or ``/v1/claims`` is asked for, by the worker the request
reached:

* every worker answers on a unix socket of its own in the supervisor's private
  run directory (``worker-<i>.sock``; the directory is mode 0700): a connection
  gets its snapshot (metrics families and claim rows, as JSON), then EOF;
* the answering worker asks each sibling at once, with a deadline, and adds its
  own;
* a snapshot is written to ``worker-<i>.json`` *before* it is reported to
  anyone, each second while the worker runs, and when it stops. A sibling that
  does not answer (dead, being replaced, stuck) is represented by that file.

Why this keeps every counter monotonic: whatever value was ever reported is at
most what the file holds. The replacement of a dead worker starts its counters
from the file (its *base*): counters and histograms go on from where its
predecessor was last seen instead of falling to zero, and a series of the
predecessor's that the replacement does not have (a generator ID it no longer
holds) goes on being reported with its last value. Gauges and the
``process_*`` families describe the process now running and are not carried
over. What a worker counted after its last write and before a SIGKILL was
never reported and is lost (at most one second's worth).

Every series carries a ``worker`` label (the worker's index, 0..N-1, kept by
its replacements), so generator identities of different workers stay distinct
and a sum over ``worker`` is the whole server. Two families are the
supervisor's view, made here: ``idmint_worker_up`` (1 if the worker answered
this scrape) and ``idmint_worker_restarts_total`` (how often it was replaced).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from idmint.server.metrics import FamilyData, Sample, render

__all__ = ["ASK_TIMEOUT_S", "SNAPSHOT_INTERVAL_S", "Siblings", "WorkerView"]

log = logging.getLogger("idmint.server")

SNAPSHOT_INTERVAL_S = 1.0
"""How often a worker writes its snapshot: what a SIGKILL can lose at most."""

ASK_TIMEOUT_S = 1.0
"""How long the answering worker waits for a sibling before using its file."""

_CARRIED_KINDS = ("counter", "histogram")
_MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024

SampleKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True)
class WorkerView:
    """One worker as seen by the answering worker: live, or from its last snapshot file."""

    index: int
    answering: bool
    snapshot: dict[str, Any] | None


def _carried(name: str, kind: str) -> bool:
    return kind in _CARRIED_KINDS and not name.startswith("process_")


def _key(name: str, labels: dict[str, str]) -> SampleKey:
    return name, tuple(sorted(labels.items()))


def families_to_json(families: Iterable[FamilyData]) -> list[Any]:
    return [[f.name, f.kind, f.help, [list(sample) for sample in f.samples]] for f in families]


def families_from_json(data: Any) -> list[FamilyData]:
    families = []
    for name, kind, help_text, samples in data:
        families.append(
            FamilyData(
                str(name),
                str(kind),
                str(help_text),
                [
                    (str(s), {str(k): str(v) for k, v in labels.items()}, value)
                    for s, labels, value in samples
                ],
            )
        )
    return families


class _Base:
    """The counters a worker's predecessors left: added to its own, series by series."""

    def __init__(self, families: Iterable[FamilyData]) -> None:
        self.families: dict[str, FamilyData] = {
            f.name: f for f in families if _carried(f.name, f.kind)
        }

    def add_to(self, families: list[FamilyData]) -> list[FamilyData]:
        if not self.families:
            return families
        merged = []
        seen = set()
        for family in families:
            base = self.families.get(family.name)
            if base is None or base.kind != family.kind:
                merged.append(family)
                continue
            seen.add(family.name)
            left = {
                _key(name, labels): (name, labels, value) for name, labels, value in base.samples
            }
            samples: list[Sample] = []
            for name, labels, value in family.samples:
                carried = left.pop(_key(name, labels), None)
                samples.append((name, labels, value + carried[2] if carried else value))
            samples += left.values()
            merged.append(FamilyData(family.name, family.kind, family.help, samples))
        merged += [base for name, base in self.families.items() if name not in seen]
        return merged


class Siblings:
    """This worker's part in the whole-server view: its socket, its file, its siblings'.

    ``collect`` gives this worker's metric families, ``claims`` its rows of
    ``/v1/claims``. Start in the ASGI lifespan (the event loop runs then),
    stop after the last request.
    """

    def __init__(
        self,
        *,
        index: int,
        count: int,
        generation: int,
        run_dir: Path,
        collect: Callable[[], list[FamilyData]],
        claims: Callable[[], list[dict[str, Any]]],
    ) -> None:
        self.index = index
        self.count = count
        self.generation = generation
        self.run_dir = run_dir
        self._collect = collect
        self._claims = claims
        self._label = {"worker": str(index)}
        predecessor = self._read_file(index)
        self._base = _Base(
            families_from_json(predecessor["families"]) if predecessor is not None else []
        )
        self._server: asyncio.AbstractServer | None = None
        self._writer_task: asyncio.Task[None] | None = None

    def socket_path(self, index: int) -> Path:
        return self.run_dir / f"worker-{index}.sock"

    def snapshot_path(self, index: int) -> Path:
        return self.run_dir / f"worker-{index}.json"

    # -- this worker ----------------------------------------------------------------------
    async def start(self) -> None:
        """Answer siblings on this worker's socket and write the snapshot each second."""
        if self._server is not None:
            return
        path = self.socket_path(self.index)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a killed predecessor's
        self.snapshot()
        self._server = await asyncio.start_unix_server(self._answer, path=str(path))
        self._writer_task = asyncio.create_task(self._write_periodically())

    async def stop(self) -> None:
        """Write the final snapshot and stop answering."""
        if self._writer_task is not None:
            self._writer_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer_task
            self._writer_task = None
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
            with contextlib.suppress(FileNotFoundError):
                self.socket_path(self.index).unlink()
        self.snapshot()

    def snapshot(self) -> dict[str, Any]:
        """This worker's counters (with its predecessors'), written to its file, then returned.

        Written first: whatever is reported must survive this worker (see the
        module docs).
        """
        families = [
            FamilyData(
                family.name,
                family.kind,
                family.help,
                [
                    (name, {**self._label, **labels}, value)
                    for name, labels, value in family.samples
                ],
            )
            for family in self._collect()
        ]
        snapshot = {
            "worker": self.index,
            "pid": os.getpid(),
            "generation": self.generation,
            "families": families_to_json(self._base.add_to(families)),
            "claims": [{**row, "worker": self.index, "pid": os.getpid()} for row in self._claims()],
        }
        data = json.dumps(snapshot, separators=(",", ":")).encode()
        _write_atomically(self.snapshot_path(self.index), data)
        return snapshot

    async def _write_periodically(self) -> None:
        while True:
            await asyncio.sleep(SNAPSHOT_INTERVAL_S)
            try:
                self.snapshot()
            except OSError as error:  # the run directory is gone: the supervisor is stopping
                log.debug("cannot write the worker snapshot: %s", error)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(json.dumps(self.snapshot(), separators=(",", ":")).encode())
            await writer.drain()
        except (OSError, ConnectionError):
            pass  # the asker gave up: it uses the file
        finally:
            writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await writer.wait_closed()

    # -- the whole server ------------------------------------------------------------------
    async def gather(self) -> list[WorkerView]:
        """Every worker: this one live, each sibling live or from its file."""
        others = [index for index in range(self.count) if index != self.index]
        answers = await asyncio.gather(*(self._ask(index) for index in others))
        views = {self.index: WorkerView(self.index, True, self.snapshot())}
        for index, answer in zip(others, answers, strict=True):
            if answer is not None:
                views[index] = WorkerView(index, True, answer)
            else:
                views[index] = WorkerView(index, False, self._read_file(index))
        return [views[index] for index in range(self.count)]

    async def _ask(self, index: int) -> dict[str, Any] | None:
        try:
            return await asyncio.wait_for(self._read_socket(index), ASK_TIMEOUT_S)
        except (OSError, ConnectionError, ValueError, asyncio.TimeoutError):
            return None

    async def _read_socket(self, index: int) -> dict[str, Any] | None:
        reader, writer = await asyncio.open_unix_connection(
            str(self.socket_path(index)), limit=_MAX_SNAPSHOT_BYTES
        )
        try:
            data = await reader.read(-1)
        finally:
            writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await writer.wait_closed()
        return _snapshot_or_none(data)

    def _read_file(self, index: int) -> dict[str, Any] | None:
        try:
            data = self.snapshot_path(index).read_bytes()
        except OSError:
            return None
        return _snapshot_or_none(data)

    async def render_metrics(self) -> str:
        """The whole server's ``/metrics`` text."""
        views = await self.gather()
        merged: dict[str, FamilyData] = {}
        up: list[Sample] = []
        restarts: list[Sample] = []
        for view in views:
            label = {"worker": str(view.index)}
            up.append(("idmint_worker_up", label, 1 if view.answering else 0))
            if view.snapshot is None:
                continue
            restarts.append(
                ("idmint_worker_restarts_total", label, int(view.snapshot.get("generation", 0)))
            )
            for family in families_from_json(view.snapshot["families"]):
                if not view.answering and not _carried(family.name, family.kind):
                    continue  # a gauge of a process that may be gone says nothing now
                known = merged.setdefault(
                    family.name, FamilyData(family.name, family.kind, family.help, [])
                )
                known.samples.extend(family.samples)
        workers = [
            FamilyData(
                "idmint_worker_up",
                "gauge",
                "1 if the worker answered this scrape; 0 if its last snapshot stands in for it.",
                up,
            ),
            FamilyData(
                "idmint_worker_restarts_total",
                "counter",
                "Times the supervisor replaced the worker after it died.",
                restarts,
            ),
        ]
        return render([*workers, *merged.values()])

    async def claims(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Every worker's claim rows, and each worker's pid and whether it answered."""
        rows: list[dict[str, Any]] = []
        workers = []
        for view in await self.gather():
            pid = view.snapshot.get("pid") if view.snapshot is not None else None
            workers.append({"worker": view.index, "pid": pid, "answering": view.answering})
            if view.answering and view.snapshot is not None:
                rows += view.snapshot.get("claims", [])
        return rows, workers


def _snapshot_or_none(data: bytes) -> dict[str, Any] | None:
    try:
        snapshot = json.loads(data)
    except ValueError:
        return None
    return snapshot if isinstance(snapshot, dict) and "families" in snapshot else None


def _write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path``: a reader sees the old file or the new one, never a part."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    try:
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
