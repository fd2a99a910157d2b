"""Claims across OS processes: many CLI minters at once, and a holder paused past its claim.

The CLI (``python -m idmint generate``) is the process under test; its IDs are
decoded with :class:`idmint.Uid64` to see which generator ID and timestamp each used.
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import time
from collections import Counter

from tests.integration.claims_helpers import (
    DEFAULT_TTL_S,
    Backend,
    CliProcess,
    decode,
    held_generators,
    server_backends,
    shared_backends,
    wait_for,
)

from idmint import Snowflake, Uuid7

PROCESSES = 16
IDS_PER_PROCESS = 50_000


def _minting_at_once(
    exit_stack: contextlib.ExitStack, scheme: str, url: str, processes: int, count: int
) -> list[CliProcess]:
    """``processes`` CLI minters of ``count`` IDs of ``scheme`` each, started at once on
    the coordinator ``url``, once all have exited (status 0)."""
    arguments = ("generate", "--scheme", scheme, "--coordinator", url, "--count", str(count))
    started = [exit_stack.enter_context(CliProcess(*arguments)) for _ in range(processes)]
    for process in started:
        assert process.wait(timeout=120) == 0, process.stderr
    return started


@shared_backends
def test_sixteen_processes_mint_800000_unique_ids(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    # A longer session than elsewhere: 16 interpreters share 2 cores, and a claim
    # whose renewal thread starves past the deadline only waits, but slowly.
    url = backend.url(ttl=10)
    processes = _minting_at_once(exit_stack, "uid64", url, PROCESSES, IDS_PER_PROCESS)

    every_id: list[int] = []
    used: list[int] = []
    for process in processes:
        ids = process.ids()
        assert len(ids) == IDS_PER_PROCESS, process.stderr
        generators = {i.generator for i in ids}
        assert len(generators) == 1, f"process {process.pid} used generators {generators}"
        used.append(generators.pop())
        every_id.extend(int(i) for i in ids)

    assert len(every_id) == PROCESSES * IDS_PER_PROCESS
    duplicates = [value for value, n in Counter(every_id).items() if n > 1]
    assert not duplicates, f"{len(duplicates)} IDs minted twice, e.g. {duplicates[:5]}"
    assert len(set(used)) == PROCESSES, f"generator IDs shared: {sorted(used)}"
    assert held_generators(backend, url) == {}, "every process should have released its claim"


@shared_backends
def test_eight_sonyflake_processes_mint_unique_ids(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    """Sonyflake's layout (10 ms ticks, a 16-bit worker) claimed from each coordinator."""
    url = backend.url(ttl=10)
    arguments = ("generate", "--scheme", "snowflake", "--layout", "sonyflake")
    processes = [
        exit_stack.enter_context(CliProcess(*arguments, "--coordinator", url, "--count", "20000"))
        for _ in range(8)
    ]
    for process in processes:
        assert process.wait(timeout=120) == 0, process.stderr
    sonyflake = Snowflake.of("sonyflake")
    every_id = [line for process in processes for line in process.lines]
    assert len(every_id) == 8 * 20_000
    duplicates = [value for value, n in Counter(every_id).items() if n > 1]
    assert not duplicates, f"{len(duplicates)} IDs minted twice, e.g. {duplicates[:5]}"
    workers = [{sonyflake(line).worker for line in process.lines} for process in processes]
    assert all(len(used) == 1 for used in workers)
    assert len({used.pop() for used in workers}) == 8, f"workers shared: {workers}"
    assert backend.list_claims(url) == [], "every process should have released its claim"


@server_backends
def test_paused_holder_never_overlaps_its_successor(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    """A holder SIGSTOPped past its session timeout, its successor, and the thaw.

    What the design guarantees: the paused holder A mints only timestamps at or below
    the ceiling C recorded for generator 0 before its session expired (it cannot have
    renewed after), and its successor B starts strictly above C. When A wakes its
    deadline has passed: it mints nothing more with generator 0 unless it claims it
    again, which it cannot while B holds it. So with the same generator ID, every ID
    of A is at or below C and every ID of B above it; A either recovers (claims again,
    later, above B) or gives up with one error line.
    """
    root = backend.new_root()
    url = backend.url(root, ttl=DEFAULT_TTL_S, generators="0-0", wait_timeout=3)
    arguments = ("generate", "--coordinator", url, "--count", "0")

    holder = exit_stack.enter_context(CliProcess(*arguments))
    holder.wait_for_lines(5_000, timeout=30, what="A to mint")
    holder.send(signal.SIGSTOP)
    stopped_at = time.monotonic()

    # A's session expires on the server: its claim disappears from the list. Only
    # then is the ceiling it recorded final (a renewal it sent may have landed).
    wait_for(
        lambda: 0 not in held_generators(backend, url),
        timeout=DEFAULT_TTL_S * 3 + 5,
        what="the paused holder's claim to expire",
    )
    mark = backend.read_mark(root, 0)
    assert mark is not None, "A recorded no high-water mark for generator 0"
    ceiling = int(mark["ceiling_ms"])
    printed_before_pause = len(holder.lines)  # the pipe is drained by now

    successor = exit_stack.enter_context(CliProcess(*arguments))
    successor.wait_for_lines(1, timeout=DEFAULT_TTL_S * 3 + 10, what="B to mint")
    assert holder.running, holder.stderr
    assert time.monotonic() - stopped_at > DEFAULT_TTL_S

    holder.send(signal.SIGCONT)
    successor_before = len(successor.lines)

    def holder_recovered() -> bool:
        # Lines A had buffered before the pause may arrive now; they are at or
        # below the ceiling. A recovered when it prints timestamps above it.
        lines = holder.lines
        return len(lines) > printed_before_pause and decode(lines[-1:])[0].timestamp_ms > ceiling

    def settled() -> bool:
        return len(successor.lines) > successor_before + 5_000 and (
            holder_recovered() or not holder.running
        )

    wait_for(settled, timeout=30, what="B to carry on and A to recover or give up")
    holder_exited_by_itself = not holder.running
    for process in (successor, holder):
        if process.running:
            process.send(signal.SIGTERM)
    assert successor.wait(timeout=30) == 128 + signal.SIGTERM, successor.stderr
    holder_status = holder.wait(timeout=30)

    a_ids = holder.ids()
    b_ids = successor.ids()
    a_values = [int(i) for i in a_ids]
    b_values = [int(i) for i in b_ids]
    assert len(set(a_values)) == len(a_values), "A minted an ID twice"
    assert len(set(b_values)) == len(b_values), "B minted an ID twice"
    shared = set(a_values) & set(b_values)
    assert not shared, f"{len(shared)} IDs minted by both A and B"

    assert {i.generator for i in b_ids} == {0}
    b_times = [i.timestamp_ms for i in b_ids]
    assert min(b_times) > ceiling, (
        f"B minted at {min(b_times)}, at or below A's recorded ceiling {ceiling}"
    )
    # A's IDs: at or below the ceiling, so before B's first; or (had it claimed
    # generator 0 again after B let go) above everything B minted.
    assert {i.generator for i in a_ids} == {0}
    a_late = [i for i in a_ids if i.timestamp_ms > ceiling]
    a_early = [i.timestamp_ms for i in a_ids if i.timestamp_ms <= ceiling]
    assert len(a_early) >= printed_before_pause
    assert max(a_early) < min(b_times)
    assert all(i.timestamp_ms > max(b_times) for i in a_late), (
        f"A minted {len(a_late)} IDs above the ceiling {ceiling} while B held generator 0: "
        f"{[str(i) for i in a_late[:5]]}"
    )
    if holder_exited_by_itself:
        # It gave up: one clear error line, no traceback (after what it said it waited for).
        assert holder_status not in (0, 128 + signal.SIGTERM), holder.stderr
        assert "Traceback" not in holder.stderr, holder.stderr
        errors = [
            line
            for line in holder.stderr.splitlines()
            if line.startswith("idmint:") and not line.startswith("idmint: waiting ")
        ]
        assert len(errors) == 1, holder.stderr
        assert holder.stderr.splitlines()[-1] == errors[0]
        assert "claim" in errors[0], errors[0]
    else:
        # It recovered: it carried on, with a generator ID other than B's or later.
        assert any(i.timestamp_ms > ceiling for i in a_ids[printed_before_pause:])


UUID7_PROCESSES = 8
UUID7_PER_PROCESS = 20_000


@shared_backends
def test_eight_uuid7_processes_at_once_share_no_uuid(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    """uuid7's node is claimed in its own space like every identity: 8 minters at once on
    one coordinator hold 8 nodes, and (ms, node, counter) keeps every UUID apart."""
    url = backend.url(ttl=10)
    processes = _minting_at_once(exit_stack, "uuid7", url, UUID7_PROCESSES, UUID7_PER_PROCESS)
    every_id: list[str] = []
    nodes: list[int] = []
    for process in processes:
        ids = [Uuid7(line) for line in process.lines]
        assert len(ids) == UUID7_PER_PROCESS, process.stderr
        assert all(earlier < later for earlier, later in itertools.pairwise(ids))
        used = {value.node for value in ids}
        assert len(used) == 1, f"process {process.pid} used nodes {used}"
        nodes.append(used.pop())
        every_id.extend(process.lines)
    duplicates = [value for value, n in Counter(every_id).items() if n > 1]
    assert not duplicates, f"{len(duplicates)} UUIDs minted twice, e.g. {duplicates[:5]}"
    assert len(set(nodes)) == UUID7_PROCESSES, f"nodes shared: {sorted(nodes)}"
    held = [row for row in backend.list_claims(url) if row.space == "uuid7"]
    assert held == [], "every process should have released its claim"
