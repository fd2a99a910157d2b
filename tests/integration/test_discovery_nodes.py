"""Elastic node IDs in real ZooKeeper: groups, width changes, and no duplicate meanwhile.

What :mod:`idmint.coordinate.zookeeper_groups` promises, checked against a real server:

* node IDs are distinct, never reserved (< 8), and fill group 0 (8..255) before
  group 1; the next group is created when the last one is three-quarters full
  (``GROW_AT``) and empty trailing groups are removed when the last non-empty group
  is less than half full (``SHRINK_BELOW``); every node follows the groups' width;
* while the width grows and shrinks under load, no two nodes mint the same 64 bits,
  each node's IDs decode with its width to its node ID, and a node whose ID needs
  more bits than a peer publishes mints nothing until that peer widens (or goes),
  and then only after the peer's ``switched_ms``.

"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from tests.integration.discovery_helpers import (
    ClaimResult,
    ClaimWorker,
    CliMinter,
    ElasticMinter,
    group_members,
    now_ms,
    published,
    raw_client,
    unique_root,
    wait_for,
    zk_url,
)
from tests.servers.zookeeper import ZooKeeperEnsemble

from idmint import Elastic64
from idmint.clock import OffsetClock
from idmint.coordinate.url import parse_url
from idmint.coordinate.zookeeper import NodeIdCoordinator
from idmint.coordinate.zookeeper_groups import (
    GROUP_SIZE,
    GROW_AT,
    RESERVED,
    SHRINK_BELOW,
    NodeIdClaim,
    width_for_groups,
)
from idmint.errors import ClaimLost
from idmint.factory import new_generator
from idmint.generate import Elastic64Generator

WORKERS = 3
"""Processes sharing the 300 sessions of the big test (each ~100 sessions, 4 threads each)."""

PARALLEL = 8
"""Claims in flight at once per worker."""

THREADS_PER_CLAIM = 5
FDS_PER_CLAIM = 5
"""Upper bounds per held claim: a kazoo client (connection thread, two callback
workers, its socket and wake-up pipe) plus the claim's renewal thread."""


def coordinator_for(url: str) -> NodeIdCoordinator:
    return NodeIdCoordinator(parse_url(url))


def elastic64_on(url: str, **options: Any) -> Elastic64Generator:
    """``new_generator("elastic64", coordinator=url)``: a node-ID claim and its generator."""
    generator = new_generator("elastic64", coordinator=url, **options)
    assert isinstance(generator, Elastic64Generator)
    return generator


def _first_id(claim: NodeIdClaim) -> Elastic64:
    """The first ID a generator on ``claim`` mints (the generator closed after it)."""
    with Elastic64Generator(claim=claim) as generator:
        return generator.generate()


def published_widths(client: KazooClient, root: str) -> dict[int, int]:
    """``{node: published width}`` for every held node ID."""
    widths: dict[int, int] = {}
    for nodes in group_members(client, root).values():
        for node in nodes:
            info = published(client, root, node)
            if info is not None:
                widths[node] = int(info["width"])
    return widths


def fake_peer_data(width: int, switched_ms: int = -1) -> bytes:
    """A node znode's data as NodeIdClaim publishes it."""
    return json.dumps(
        {"width": width, "switched_ms": switched_ms, "holder": "test:fake", "token": "fake"}
    ).encode()


def node_path(root: str, node: int) -> str:
    return f"{root}/nodes/{node >> 8:02X}/{node & 0xFF:02X}"


def make_layout(client: KazooClient, root: str, groups: range) -> None:
    """The persistent znodes ``ensure_node_layout`` (and group creation) would make."""
    client.create(f"{root}/nodehwm", makepath=True)
    for group in groups:
        client.create(f"{root}/nodes/{group:02X}", makepath=True)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1)]


# -- 300 nodes ------------------------------------------------------------------------


def _claim_spread(workers: list[ClaimWorker], total: int) -> list[ClaimResult]:
    """``total`` claims split over the workers, all workers at once; every claim must work."""
    counts = [
        total // len(workers) + (1 if i < total % len(workers) else 0) for i in range(len(workers))
    ]
    for worker, count in zip(workers, counts, strict=True):
        if count:
            worker.start_claims(count, PARALLEL)
    results: list[ClaimResult] = []
    for worker, count in zip(workers, counts, strict=True):
        if count:
            report = worker.finish()
            assert not report.errors, f"{len(report.errors)} claims failed: {report.errors[:3]}"
            results += report.claimed
    return results


def _release(workers: list[ClaimWorker], nodes: set[int]) -> None:
    """Close the claims of ``nodes`` (wherever they are held), all workers at once."""
    busy: list[tuple[ClaimWorker, set[int]]] = []
    for worker in workers:
        mine = [node for node in worker.nodes if node in nodes]
        if mine:
            worker.start_release(mine)
            busy.append((worker, set(mine)))
    for worker, held in busy:
        assert set(worker.finish().released) == held
    assert not nodes - {node for _, held in busy for node in held}, "released nodes not held"


def _wait_all_publish(client: KazooClient, root: str, nodes: set[int], width: int) -> None:
    wait_for(
        lambda: published_widths(client, root) == dict.fromkeys(nodes, width),
        timeout=30,
        what=f"all {len(nodes)} nodes to publish width {width}",
    )


def test_300_nodes_get_distinct_ids_in_groups_made_ahead_and_removed_behind(
    zk: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    """300 sessions claim node IDs concurrently, spread over 3 processes.

    The claims come in three concurrent waves so that the thresholds are observable:
    group 1 is created when group 0 holds 3/4 of its 256 IDs (the 8 reserved count),
    i.e. at the 184th node, before any node needs it. (A stampede across a group's
    creation is ``test_claims_in_flight_when_a_group_is_added_widen_too``.)
    """
    group1_at = math.ceil(GROW_AT * GROUP_SIZE) - RESERVED  # nodes in group 0 that add group 1
    assert group1_at == 184
    # Group 2 would need group 1 three-quarters full (192 of 256): 248 + 192 = 440 nodes.
    group2_at = (GROUP_SIZE - RESERVED) + math.ceil(GROW_AT * GROUP_SIZE)
    assert group2_at == 440
    # Leaving, group 1 goes when group 0 is under half full: fewer than 128 - 8 nodes.
    keep_group1_down_to = math.ceil(SHRINK_BELOW * GROUP_SIZE) - RESERVED
    assert keep_group1_down_to == 120

    root = unique_root()
    url = zk_url(zk, root, session_timeout=10)
    with contextlib.ExitStack() as stack, raw_client(zk) as observer:
        workers = [
            stack.enter_context(ClaimWorker(url, tmp_path / f"worker-{i}.log"))
            for i in range(WORKERS)
        ]
        baselines = [worker.ready() for worker in workers]

        started = time.monotonic()
        timings = _claim_spread(workers, group1_at - 1)
        wave1_s = time.monotonic() - started
        assert group_members(observer, root) == {0: list(range(8, 8 + group1_at - 1))}

        timings += _claim_spread(workers[:1], 1)
        # Created ahead of need: group 1 exists, empty, as soon as group 0 is 3/4 full.
        assert group_members(observer, root) == {0: list(range(8, 8 + group1_at)), 1: []}
        _wait_all_publish(observer, root, set(range(8, 8 + group1_at)), 9)

        started3 = time.monotonic()
        timings += _claim_spread(workers, 300 - group1_at)
        wave3_s = time.monotonic() - started3
        claimed = [result.node for result in timings]
        assert len(claimed) == 300
        assert len(set(claimed)) == 300, "two claims got the same node ID"
        assert min(claimed) >= RESERVED
        # Group 0 first (8..255), then group 1 from its start; group 2 not yet (52 < 192).
        expected = set(range(8, 256)) | set(range(256, 256 + 52))
        assert set(claimed) == expected
        assert group_members(observer, root) == {
            0: list(range(8, 256)),
            1: list(range(256, 308)),
        }
        _wait_all_publish(observer, root, expected, 9)

        seconds = [result.seconds for result in timings]
        for worker, baseline in zip(workers, baselines, strict=True):
            stats = worker.stats()
            extra_threads = stats.threads - baseline.threads
            extra_fds = stats.fds - baseline.fds
            print(
                f"[300 nodes] worker holds {stats.held} claims: "
                f"+{extra_threads} threads, +{extra_fds} fds"
            )
            assert extra_threads <= THREADS_PER_CLAIM * stats.held
            assert extra_fds <= FDS_PER_CLAIM * stats.held
        print(
            f"[300 nodes] wave 1 ({group1_at - 1} claims) {wave1_s:.1f} s, "
            f"wave 3 ({300 - group1_at} claims) {wave3_s:.1f} s; per claim "
            f"p50 {statistics.median(seconds):.2f} s, p99 {percentile(seconds, 0.99):.2f} s, "
            f"max {max(seconds):.2f} s ({WORKERS} processes x {PARALLEL} in flight)"
        )

        # Leaving. Group 1 empty but group 0 full: group 1 stays (no flapping).
        _release(workers, set(range(256, 308)))
        assert group_members(observer, root) == {0: list(range(8, 256)), 1: []}
        # Down to 120 nodes: group 0 is exactly half full, not under: group 1 stays.
        _release(workers, set(range(8 + keep_group1_down_to, 256)))
        assert group_members(observer, root) == {0: list(range(8, 128)), 1: []}
        # One more: under half full, and the empty trailing group goes; width back to 8.
        _release(workers, {127})
        assert group_members(observer, root) == {0: list(range(8, 127))}
        _wait_all_publish(observer, root, set(range(8, 127)), 8)

        _release(workers, set(range(8, 127)))
        assert group_members(observer, root) == {0: []}
        for worker, baseline in zip(workers, baselines, strict=True):
            stats = worker.stats()
            assert stats.held == 0
            # Every session closed: nothing leaks per claim.
            assert stats.threads <= baseline.threads + 1, (stats.threads, baseline.threads)
            assert stats.fds <= baseline.fds + 1, (stats.fds, baseline.fds)


# -- the width under load ---------------------------------------------------------------


def _expected_groups_growing(live: list[int], group_size: int) -> list[int]:
    """Groups while nodes only join (see maintain_groups): up to the last non-empty
    one, plus the next one once that is GROW_AT full (reserved IDs count in group 0)."""
    occupancy = Counter(node >> 8 for node in live)
    occupancy[0] += RESERVED
    last = max(
        group for group, count in occupancy.items() if count > (RESERVED if group == 0 else 0)
    )
    groups = list(range(last + 1))
    if occupancy[last] >= GROW_AT * group_size:
        groups.append(last + 1)
    return groups


def test_width_grows_and_shrinks_under_load_without_a_duplicate(zk: ZooKeeperEnsemble) -> None:
    """Four elastic64 generators mint while 29 more nodes join and then leave.

    With group_size=16: group 0 is 8..15, group 1 256..271, group 2 512..527. Group 1
    appears with the 4th node (12 of 16 held, counting the reserved 8), group 2 when
    group 1 holds 12; so widths go 8 -> 9 -> 10. Group 2 goes again when, it being
    empty, group 1 drops to 7 nodes (under half): width 10 -> 9. (Width 8 never comes
    back at this group size: group 0 is always at least half full with the reserved 8.)

    The minters sit on the IDs most at risk: 8, 264 (264 mod 2**8 == 8) and 520
    (520 mod 2**9 == 8) in this process, and 9 in an ``idmint generate`` process.
    """
    group_size = 16
    root = unique_root()
    # Sessions long enough that minting threads starving kazoo's on a loaded
    # machine expire none: a node that claims again gets another ID than planned.
    url = zk_url(zk, root, session_timeout=10, group_size=group_size)
    coordinator = coordinator_for(url)
    in_process, cli = {8, 264, 520}, 9
    plan = [8, *range(9, 16), *range(256, 272), *range(512, 521)]
    minters: dict[int, ElasticMinter | CliMinter] = {}
    with contextlib.ExitStack() as stack, raw_client(zk) as observer:
        closers: dict[int, contextlib.ExitStack] = {}
        for expected_node in plan:
            node_stack = stack.enter_context(contextlib.ExitStack())
            if expected_node in in_process:
                generator = elastic64_on(url)
                node_stack.callback(generator.close)
                node = generator.node
                minters[node] = ElasticMinter(generator).start()
                node_stack.callback(minters[node].stop)
            elif expected_node == cli:
                cli_minter = CliMinter(url)
                node_stack.callback(cli_minter.close)
                node = cli_minter.node()
                minters[node] = cli_minter
            else:
                claim = coordinator.claim()
                node_stack.callback(claim.close)
                assert claim.node is not None
                node = claim.node
            assert node == expected_node
            closers[node] = node_stack
            groups = sorted(group_members(observer, root))
            assert groups == _expected_groups_growing(sorted(closers), group_size), (node, groups)
            width = width_for_groups(groups[-1])
            for minter in minters.values():
                minter.wait_for_width(width)
        # The thresholds, by hand: group 1 with the 4th node (11), group 2 with 267.
        assert _expected_groups_growing([8, 9, 10], group_size) == [0]
        assert _expected_groups_growing([8, 9, 10, 11], group_size) == [0, 1]
        assert _expected_groups_growing([*range(8, 16), *range(256, 267)], group_size) == [0, 1]
        assert _expected_groups_growing([*range(8, 16), *range(256, 268)], group_size) == [0, 1, 2]

        # Leaving: group 2 empties; group 1 still full, so group 2 stays.
        for node in [520, *range(519, 511, -1)]:
            closers.pop(node).close()
            assert sorted(group_members(observer, root)) == [0, 1, 2], node
        # Group 1 down to 8 of 16 (half): stays; to 7: the empty group 2 goes.
        for node in [271, 270, 269, 268, 267, 266, 265, 263]:
            closers.pop(node).close()
            assert sorted(group_members(observer, root)) == [0, 1, 2], node
        closers.pop(262).close()
        assert sorted(group_members(observer, root)) == [0, 1]
        for node in (8, 9, 264):
            minters[node].wait_for_width(9)
            _wait_published(observer, root, node, 9)
        for minter in minters.values():
            minter.stop()

    finished = minters[cli]
    assert isinstance(finished, CliMinter)
    cli_minter = finished
    assert cli_minter.exit_status == 143, cli_minter.process.stderr
    assert "Traceback" not in cli_minter.process.stderr
    assert cli_minter.nodes == {cli}
    # Every 64-bit value once, across all nodes and widths.
    owner: dict[int, tuple[int, int]] = {}
    duplicates = []
    for node, minter in minters.items():
        if isinstance(minter, ElasticMinter):
            assert not minter.errors, minter.errors[:3]
        for value, width in zip(minter.values, minter.widths, strict=True):
            if value in owner:
                duplicates.append((value, owner[value], (node, width)))
            owner[value] = (node, width)
    assert not duplicates, f"{len(duplicates)} duplicates, e.g. {duplicates[:3]}"
    # Each node's IDs decode, with the width they were minted at, to that node.
    for node, minter in minters.items():
        pairs = zip(minter.values, minter.widths, strict=True)
        decoded = {Elastic64.from_int(value, width).node for value, width in pairs}
        assert decoded == {node}
    # The widths seen, in order.
    runs = {node: minter.segments() for node, minter in minters.items()}
    assert [width for width, _, _ in runs[8]] == [8, 9, 10, 9]
    assert [width for width, _, _ in runs[9]] == [8, 9, 10, 9]
    assert [width for width, _, _ in runs[264]] == [9, 10, 9]
    assert [width for width, _, _ in runs[520]] == [10]
    print(
        "[width] IDs per width run:",
        {node: [(w, last - first + 1) for w, first, last in r] for node, r in runs.items()},
    )

    def ticks(node: int, run: int) -> list[int]:
        _, first, last = runs[node][run]
        return [value >> 16 for value in minters[node].values[first : last + 1]]

    # The protocol on the record: a node needing k bits starts after every tick its
    # peers minted at fewer bits; after the shrink, narrow IDs come after the wide ones.
    assert min(ticks(264, 0)) > max(ticks(8, 0) + ticks(9, 0))
    assert min(ticks(520, 0)) > max(ticks(8, 1) + ticks(9, 1) + ticks(264, 0))
    assert min(ticks(8, 3) + ticks(9, 3) + ticks(264, 2)) > max(ticks(520, 0))


# -- the protocol, step by step ------------------------------------------------------------


@contextlib.contextmanager
def _group0_full_with_a_narrow_peer(
    zk: ZooKeeperEnsemble, root: str
) -> Iterator[tuple[KazooClient, KazooClient]]:
    """Group 0 (group_size 16: 8..15) held by fake peers, group 1 half held.

    Node 8 is held by ``narrow``, publishing width 8 (a peer that has not seen group
    1 yet); nodes 9..15 and 256..263 by ``others``, publishing width 9. The next claim
    lands on 264, whose ID at 8 bits is node 8's: its narrower twin. Yields
    ``(others, narrow)``.
    """
    with raw_client(zk) as others, raw_client(zk) as narrow:
        make_layout(others, root, range(2))
        narrow.create(node_path(root, 8), fake_peer_data(8), ephemeral=True)
        for node in [*range(9, 16), *range(256, 264)]:
            others.create(node_path(root, node), fake_peer_data(9), ephemeral=True)
        yield others, narrow


class _ClaimInThread:
    """``coordinator.claim()`` in a thread; ``done`` is set when it returns or raises."""

    def __init__(self, coordinator: NodeIdCoordinator) -> None:
        self.coordinator = coordinator
        self.claim: NodeIdClaim | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.done_at = 0.0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.claim = self.coordinator.claim()
        except BaseException as error:
            self.error = error
        finally:
            self.done_at = time.monotonic()
            self.done.set()

    def result(self, timeout: float) -> NodeIdClaim:
        assert self.done.wait(timeout), "the claim did not return"
        if self.error is not None:
            raise self.error
        assert self.claim is not None
        return self.claim

    def close(self) -> None:
        self.done.wait(60)
        if self.claim is not None:
            self.claim.close()


def _wait_published(client: KazooClient, root: str, node: int, width: int) -> None:
    wait_for(
        lambda: (published(client, root, node) or {}).get("width") == width,
        timeout=15,
        what=f"node {node} to publish width {width}",
    )


@pytest.mark.parametrize("peer_then", ["widens", "vanishes"])
def test_a_node_waits_for_its_narrower_twin_and_only_for_it(
    zk: ZooKeeperEnsemble, peer_then: str
) -> None:
    root = unique_root()
    coordinator = coordinator_for(zk_url(zk, root, session_timeout=4, group_size=16))
    with _group0_full_with_a_narrow_peer(zk, root) as (others, narrow):
        # Peers that are not 264's twins switched "later": that must not hold it up.
        not_twins_switched = now_ms() + 10_000
        for node in [*range(9, 16), *range(256, 264)]:
            others.set(node_path(root, node), fake_peer_data(9, not_twins_switched))
        claiming = _ClaimInThread(coordinator)
        try:
            # The claim lands on 264 and publishes the 9 bits it needs...
            _wait_published(others, root, 264, 9)
            # ...and goes no further while its twin, node 8, publishes 8.
            assert not claiming.done.wait(1.0), (
                f"the claim returned while its narrower twin publishes width 8: "
                f"{claiming.claim or claiming.error!r}"
            )
            # The twin switched "just now" (or left, having minted up to its mark):
            # the new node must start after that tick.
            twin_done = now_ms() + 300
            changed_at = time.monotonic()
            if peer_then == "widens":
                narrow.set(node_path(root, 8), fake_peer_data(9, twin_done))
            else:
                mark = json.dumps({"ceiling_ms": twin_done, "holder": "test:fake"})
                others.create(f"{root}/nodehwm/0008", mark.encode())
                narrow.stop()  # its session ends; the narrow znode goes with it
            claim = claiming.result(15)
            assert claiming.done_at >= changed_at
            assert (claim.node, claim.width) == (264, 9)
            first = _first_id(claim)
            assert (first.node, first.node_bits) == (264, 9)
            assert first.timestamp_ms > twin_done
            assert first.timestamp_ms < not_twins_switched
        finally:
            claiming.close()


@pytest.mark.parametrize("successor_publishes_after_ms", [True, False])
def test_a_wider_node_starts_after_the_ids_a_departed_narrower_node_minted(
    zk: ZooKeeperEnsemble, successor_publishes_after_ms: bool
) -> None:
    """Node 8 minting at 8 bits and node 264 at 9 share their low 8 bits: 264's IDs
    must come after every millisecond 8 used, even when 8 has left and its host's
    clock ran ahead. Its node ID is held again by the time 264 claims (group 0 must be
    full for a claim to land in group 1); the new holder publishes the mark it
    started after, or, if it does not say, 264 reads node 8's high-water mark. Node
    256, whose twin would be the reserved node 0, does not wait for node 8."""
    root = unique_root()
    url = zk_url(zk, root, session_timeout=4, group_size=16)
    # Far enough ahead that node 256 mints before node 8's last millisecond
    # however long a loaded machine takes to get there; node 264 waits it out.
    ahead = OffsetClock(5_000)
    with raw_client(zk) as others:
        make_layout(others, root, range(1))
        first = coordinator_for(url).claim(clock=ahead)
        try:
            assert (first.node, first.width) == (8, 8)
            narrow = Elastic64Generator(claim=first, clock=ahead)
            last_narrow_ms = max(narrow.generate().timestamp_ms for _ in range(5))
            narrow.close()
        finally:
            first.close()
        mark = json.loads(others.get(f"{root}/nodehwm/0008")[0])
        assert mark["ceiling_ms"] >= last_narrow_ms
        # The fleet moves on: node 8 is held again, group 0 fills, group 1 appears.
        after = {"after_ms": mark["ceiling_ms"]} if successor_publishes_after_ms else {}
        for node in range(8, 16):
            data = {**json.loads(fake_peer_data(9)), **(after if node == 8 else {})}
            others.create(node_path(root, node), json.dumps(data).encode(), ephemeral=True)
        others.create(f"{root}/nodes/01")
        not_a_twin = coordinator_for(url).claim()
        try:
            assert (not_a_twin.node, not_a_twin.width) == (256, 9)
            unrelated = Elastic64Generator(claim=not_a_twin)
            try:
                assert unrelated.generate().timestamp_ms < last_narrow_ms
            finally:
                unrelated.close()
        finally:
            not_a_twin.close()
        for node in range(256, 264):
            others.create(node_path(root, node), fake_peer_data(9), ephemeral=True)
        wide_claim = coordinator_for(url).claim()
        try:
            assert (wide_claim.node, wide_claim.width) == (264, 9)
            first_wide = _first_id(wide_claim)
        finally:
            wide_claim.close()
    assert first_wide.timestamp_ms > last_narrow_ms, (
        f"node 264 minted at {first_wide.timestamp_ms}, not after node 8's last "
        f"narrow millisecond {last_narrow_ms}"
    )


def test_node_ids_on_three_members_grow_a_group_and_outlive_the_leader(
    zk3: ZooKeeperEnsemble,
) -> None:
    """24 nodes claim at once through a 3-member ensemble (group_size 16, so group 1 is
    made and the twin rule runs across members), then the leader stops: every node keeps
    its ID and mints on, and no two IDs are equal."""
    root = unique_root()
    url = zk_url(zk3, root, session_timeout=8, group_size=16)
    with contextlib.ExitStack() as stack:
        with ThreadPoolExecutor(8) as pool:
            generators = list(pool.map(lambda _: elastic64_on(url), range(24)))
        for generator in generators:
            stack.callback(generator.close)
        nodes = [generator.node for generator in generators]
        assert len(set(nodes)) == 24
        assert min(nodes) >= RESERVED
        values = [value.int for g in generators for value in g.batch(50)]
        leader = zk3.leader()
        assert leader is not None, "no member says it leads"
        with zk3.member_stopped(leader):
            values += [value.int for g in generators for value in g.batch(50)]
            assert [g.node for g in generators] == nodes
        values += [value.int for g in generators for value in g.batch(50)]
    assert len(values) == 24 * 150
    assert len(set(values)) == len(values), "an ID was minted twice"


def test_a_claim_gives_up_when_a_peer_never_widens(zk: ZooKeeperEnsemble) -> None:
    root = unique_root()
    url = zk_url(zk, root, session_timeout=4, group_size=16, claim_timeout=2)
    with _group0_full_with_a_narrow_peer(zk, root):
        started = time.monotonic()
        with pytest.raises(ClaimLost, match=r"needs 9-bit node IDs.*\(e\.g\. 8\)"):
            coordinator_for(url).claim()
        assert time.monotonic() - started >= 2


def test_a_failed_claim_gives_its_node_id_back(zk: ZooKeeperEnsemble) -> None:
    root = unique_root()
    url = zk_url(zk, root, session_timeout=2, group_size=16, claim_timeout=1)
    with _group0_full_with_a_narrow_peer(zk, root) as (others, _):
        with pytest.raises(ClaimLost):
            coordinator_for(url).claim()
        # The claim failed: nobody should hold 264 any more (at most a session timeout).
        wait_for(
            lambda: published(others, root, 264) is None,
            timeout=5,
            what="the failed claim's node 264 to be given back",
        )


def test_claims_in_flight_when_a_group_is_added_widen_too(zk: ZooKeeperEnsemble) -> None:
    """A claim still in ``_acquire`` when another node adds a group must follow it.

    Node A lands on 264 (group 1) and waits for its narrow twin 8. Meanwhile node C
    lands on 267, the 12th of group 1's 16 IDs, so C's ``maintain_groups`` adds group
    2 (width 10). When the twin widens both go ahead; A must then use 10 bits too.
    """
    root = unique_root()
    coordinator = coordinator_for(zk_url(zk, root, session_timeout=10, group_size=16))
    with _group0_full_with_a_narrow_peer(zk, root) as (others, narrow):
        first = _ClaimInThread(coordinator)
        second: _ClaimInThread | None = None
        try:
            _wait_published(others, root, 264, 9)
            for node in (265, 266):
                others.create(node_path(root, node), fake_peer_data(9), ephemeral=True)
            second = _ClaimInThread(coordinator)
            _wait_published(others, root, 267, 10)
            assert sorted(group_members(others, root)) == [0, 1, 2]
            narrow.set(node_path(root, 8), fake_peer_data(10))
            claim_a = first.result(15)
            claim_c = second.result(15)
            assert (claim_a.node, claim_c.node) == (264, 267)
            assert claim_c.width == 10
            wait_for(
                lambda: (
                    claim_a.width == 10 and (published(others, root, 264) or {}).get("width") == 10
                ),
                timeout=4,
                what="node 264 to follow group 2 to width 10",
            )
        finally:
            first.close()
            if second is not None:
                second.close()


def test_shrinking_waits_for_the_ticks_of_a_wider_node_that_left(zk: ZooKeeperEnsemble) -> None:
    """Node 520 (width 10) mints ahead of the clock, then leaves; group 2 goes and node
    8 narrows to 9 bits. Its 9-bit IDs must come after 520's last tick."""
    root = unique_root()
    url = zk_url(zk, root, session_timeout=10, group_size=16)
    coordinator = coordinator_for(url)
    with contextlib.ExitStack() as stack, raw_client(zk) as observer:
        narrow = stack.enter_context(elastic64_on(url))
        assert narrow.node == 8
        fillers: dict[int, NodeIdClaim] = {}
        for expected in [*range(9, 16), *range(256, 272), *range(512, 520)]:
            claim = coordinator.claim()
            stack.callback(claim.close)
            assert claim.node == expected
            fillers[expected] = claim
        wide = elastic64_on(url, max_ahead_ms=1500)
        stack.callback(wide.close)
        assert (wide.node, wide.node_bits) == (520, 10)
        # Group 2 keeps only 520; group 1 drops under half full (7 of 16).
        for node in [*range(512, 520), *range(263, 272)]:
            fillers.pop(node).close()
        assert sorted(group_members(observer, root)) == [0, 1, 2]
        wide_values: list[int] = []
        while not wide_values or (wide_values[-1] >> 16) < now_ms() + 800:
            wide_values += wide.batch(1024).ints()
        last_wide_tick = max(value >> 16 for value in wide_values)
        wide.close()  # leaves: group 2 is removed, and node 8 narrows to 9 bits
        assert sorted(group_members(observer, root)) == [0, 1]
        _wait_published(observer, root, 8, 9)
        narrow_values: list[int] = []
        give_up = time.monotonic() + 15
        while len(narrow_values) < 2048:
            assert time.monotonic() < give_up, "node 8 never minted at width 9"
            batch = narrow.batch(128)
            narrow_values += [v.int for v in batch if v.node_bits == 9]
        common = set(narrow_values) & set(wide_values)
        assert not common, (
            f"{len(common)} of node 8's {len(narrow_values)} 9-bit IDs were also minted "
            f"by node 520, e.g. {sorted(common)[:3]}"
        )
        assert min(value >> 16 for value in narrow_values) > last_wide_tick
