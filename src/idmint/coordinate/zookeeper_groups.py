"""Elastic node IDs in ZooKeeper: claimed in groups, with a width that follows the fleet.

What the ZooKeeper driver (:mod:`idmint.coordinate.zookeeper`) claims for the
``node`` space (elastic64), and what service discovery registers instances under.

Layout under the discovery root (default ``/discovery``)::

    <root>/nodes/<GG>          persistent group znode; GG = group, 2 upper-case hex digits
    <root>/nodes/<GG>/<II>     EPHEMERAL: node ID (GG << 8) | II is held; data is JSON
                               {"width", "switched_ms", "after_ms", "holder", "token"}
    <root>/nodehwm/<GGII>      persistent high-water mark of node ID GGII (JSON)

Node IDs are 16 bits, in 256 groups of 256 so no znode has thousands of
children. IDs 0..7 are reserved for services not managed here. A node takes
the first gap in the first group that is not full by creating an ephemeral
znode; creation is atomic, so two nodes never hold one ID.

**Width.** The elastic64 node-ID width follows the groups that exist:
group 0 only -> 8 bits, groups up to 1 -> 9, up to 3 -> 10, up to 7 -> 11 ...
up to 255 -> 16. The next group is created *ahead of need*, when the last one
is three-quarters full, and empty trailing groups are removed when the last
non-empty group is less than half full (the gap between the two stops the
width flapping). So the width grows before any node needs it.

**No duplicate while the width changes.** Two nodes with IDs ``a`` and ``b``
using widths ``wa <= wb`` can mint the same 64 bits in the same ms only if
``b mod 2**wa == a``, which needs ``b >= 2**wa``: only a node whose ID needs a
wider width than some peer uses is ever at risk, and only from that peer if it is
``b``'s *narrower twin* ``b mod 2**wa`` (at most one per width below ``b``'s, so at
most eight nodes in all). So:

1. Every node publishes in its znode the width it uses (``width``) and the
   newest tick it minted at the width before (``switched_ms``). Growing, it
   switches first and then publishes; shrinking, it publishes first and then
   switches, so the published width is never wider than the one in use.
2. A node whose ID needs ``k`` bits mints nothing until each of its narrower
   twins that is live and older than it (lower ``czxid``) publishes a width of
   at least ``k``, and then only at ticks after their ``switched_ms``: a twin's
   narrower-width IDs all have ticks at or before that. A newer twin made its
   znode after ours and our group existed, so by point 3 it never mints below
   our width. A twin that has left minted up to its node ID's high-water mark;
   if its node ID is held again, the holder publishes that mark as
   ``after_ms`` (it started after it too). A claim reads a handful of znodes,
   however large the fleet.
3. A node re-reads the groups (after a ``sync``) *after* creating its znode,
   so a node joining while a group is being added sees it before minting.
4. A group is removed only when empty (ZooKeeper refuses to delete a znode
   with children), so no live node's ID ever needs more bits than the width
   the groups give.
5. A node mints at width ``w`` (joining, or narrowing after a group went)
   only once its clock has passed the high-water marks of all node IDs that
   need more than ``w`` bits: those nodes have left, but their last IDs,
   borrowed ticks included, could equal ours. Until then it stays wide,
   which point 2 shows is always safe.

Each node ID claim is its own ZooKeeper session and fences itself exactly like
a generator-ID claim (deadline, high-water mark; see
:mod:`idmint.coordinate.base`): it stops on SUSPENDED and claims again on
LOST.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from idmint.coordinate.base import HighWaterMark, holder_description
from idmint.coordinate.zookeeper_session import (
    ZooKeeperAccess,
    ZooKeeperSessionClaim,
    kazoo_module,
    read_mark,
    translated,
)
from idmint.errors import ClaimLost, PoolExhausted
from idmint.schemes.elastic64 import MIN_NODE_BITS

__all__ = [
    "GROUP_COUNT",
    "RESERVED",
    "NodeGroups",
    "NodeIdClaim",
    "node_name",
    "width_for_groups",
]

log = logging.getLogger("idmint.discovery")

GROUP_COUNT = 256
GROUP_SIZE = 256
RESERVED = 8  # node IDs 0..7: for services not managed here
DEFAULT_ROOT = "/discovery"
GROW_AT = 0.75  # create the next group when the last one is this full
SHRINK_BELOW = 0.5  # remove empty trailing groups when the last one is under this


def width_for_groups(highest_group: int) -> int:
    """Node-ID width for groups 0..highest_group: 8 + bits of the highest group."""
    return MIN_NODE_BITS + highest_group.bit_length()


PeerInfo = tuple[dict[str, Any], int]
"""A live node's published JSON (width, switched_ms, after_ms, holder) and its znode's czxid."""


def node_name(node: int) -> tuple[str, str]:
    """(group, index) znode names of a node ID: 2 upper-case hex digits each."""
    return f"{node >> 8:02X}", f"{node & 0xFF:02X}"


class NodeGroups(ZooKeeperAccess):
    """The groups of elastic node IDs under a root (see the module docs), reached as
    the coordinator reaches its ensemble.

    ``root``: the URL's path (``/discovery`` without one). ``group_size``: the IDs
    per group (256; fewer, for tests, make the width change with a handful of nodes).
    """

    def __init__(self, access: ZooKeeperAccess, root: str, group_size: int = GROUP_SIZE) -> None:
        self.hosts = access.hosts
        self.ttl_s = access.ttl_s
        self.credentials = access.credentials
        self.options = access.options
        self.root = root or DEFAULT_ROOT
        self.description = f"zk://{self.hosts}{self.root}"
        self.group_size = group_size

    @property
    def nodes_path(self) -> str:
        return f"{self.root}/nodes"

    def mark_path(self, node: int) -> str:
        """The znode that holds node ID ``node``'s high-water mark."""
        return f"{self.root}/nodehwm/{node:04X}"

    def ensure_layout(self, client: Any) -> None:
        kazoo = kazoo_module()
        acls = self.acls()
        for path, acl in (
            (self.nodes_path, acls["tree"]),
            (f"{self.root}/nodehwm", acls["tree"]),
            (f"{self.nodes_path}/00", acls["pool"]),
        ):
            if client.exists(path) is None:
                with contextlib.suppress(kazoo.exceptions.NodeExistsError):
                    client.create(path, b"", acl=acl, makepath=True)

    def groups(self, client: Any, *, sync: bool = True) -> list[int]:
        """The group numbers that exist, ascending (after a sync, so not stale)."""
        if sync:
            client.sync(self.nodes_path)
        return sorted(int(name, 16) for name in client.get_children(self.nodes_path))

    def occupancy(self, client: Any, group: int) -> int:
        taken = len(client.get_children(f"{self.nodes_path}/{group:02X}"))
        return taken + (RESERVED if group == 0 else 0)

    def maintain_groups(self, client: Any) -> None:
        """Create the next group ahead of need; remove empty trailing groups."""
        kazoo = kazoo_module()
        groups = self.groups(client)
        counts = {group: self.occupancy(client, group) for group in groups}
        base = {0: RESERVED}
        non_empty = [g for g in groups if counts[g] > base.get(g, 0)] or [0]
        last = non_empty[-1]
        fill = counts.get(last, 0) / self.group_size
        # Groups grant CREATE but not DELETE: a node's znode goes only with its session.
        acl = self.acls()["pool"]
        if fill >= GROW_AT and last + 1 < GROUP_COUNT and last + 1 not in counts:
            with contextlib.suppress(kazoo.exceptions.NodeExistsError):
                client.create(f"{self.nodes_path}/{last + 1:02X}", b"", acl=acl)
        elif fill < SHRINK_BELOW:
            for group in reversed(groups):
                if group <= last:
                    break
                try:
                    client.delete(f"{self.nodes_path}/{group:02X}")
                except (kazoo.exceptions.NotEmptyError, kazoo.exceptions.NoNodeError):
                    break

    def peers(self, client: Any) -> dict[int, dict[str, Any]]:
        """Every live node ID with its published data (reads pipelined)."""
        live = self.read_peers(client, self.live_nodes(client), sync=False)
        return {node: info for node, (info, _) in live.items()}

    def live_nodes(self, client: Any) -> set[int]:
        """The node IDs whose znodes exist (after a sync; listings pipelined)."""
        client.sync(self.nodes_path)
        listings = [
            (group, client.get_children_async(f"{self.nodes_path}/{group:02X}"))
            for group in self.groups(client, sync=False)
        ]
        return {
            group << 8 | int(name, 16)
            for group, listing in listings
            for name in _result_or_empty(listing)
        }

    def read_peers(
        self, client: Any, nodes: Iterable[int], *, sync: bool = True
    ) -> dict[int, PeerInfo]:
        """The published data and creation zxid of ``nodes`` that are still live."""
        if sync:
            client.sync(self.nodes_path)
        reads = []
        for node in nodes:
            group, index = node_name(node)
            reads.append((node, client.get_async(f"{self.nodes_path}/{group}/{index}")))
        return _node_infos(reads)

    def list_nodes(self) -> dict[int, dict[str, Any]]:
        """Every live node ID with its published data."""
        with self.short_session() as client, translated(f"listing {self.nodes_path}"):
            return self.peers(client)


class NodeIdClaim(ZooKeeperSessionClaim[NodeGroups]):
    """One elastic node ID, its width kept in step with the groups (space ``node``)."""

    def _begin(self) -> None:
        super()._begin()
        self._nodes = self.coordinator
        self.node: int | None = None
        self.width = MIN_NODE_BITS
        self._switched_ms = -1
        # The newest tick earlier holders of our node ID may have used; None
        # until read, and then not published: readers fall back to the mark.
        self._after_ms: int | None = None
        self._node_path: str | None = None
        self._node_version = -1
        self._groups_changed = threading.Event()
        self._reclaim_listeners: list[Any] = []

    # -- claiming ---------------------------------------------------------------------------
    def _acquire(self) -> tuple[Mapping[str, int], int]:
        nodes = self._nodes
        client = self._connected_client()
        deadline = time.monotonic() + self.options.claim_timeout_s
        with translated("claiming a node ID"):
            nodes.ensure_layout(client)
            self._after_ms = None  # a new node ID (after LOST): its mark is unread
            node = self._create_node(client, deadline)
            nodes.maintain_groups(client)
            # Our node ID's earlier holders minted up to its high-water mark;
            # we start after it, and say so in our znode for nodes that join
            # later at a wider width (see _departed_narrower_ceiling).
            mark, self._hwm_version = read_mark(client, self._hwm_path or "")
            self._took(mark)
            after_ms = mark.ceiling_ms if mark is not None else -1
            self._after_ms = after_ms
            # Point 3 of the module docs: now that our znode exists, arm the
            # groups watch and read the groups with it, so a group added at any
            # moment from here on reaches us (through _maintain) before or
            # while we mint.
            self._groups_changed.clear()
            width = self._width_for(self._watch_groups(client))
            self.width = width
            self._switched_ms = -1
            self._publish(client)
            floor = max(
                self._wait_for_peers(client, node, deadline),
                self._departed_ceiling(client, width),
                after_ms,
            )
        return {"node": node, "node_bits": width}, floor

    def _create_node(self, client: Any, deadline: float) -> int:
        kazoo = kazoo_module()
        nodes = self._nodes
        while True:
            groups = nodes.groups(client)
            for group in groups:
                group_path = f"{nodes.nodes_path}/{group:02X}"
                try:
                    taken = {int(name, 16) for name in client.get_children(group_path)}
                except kazoo.exceptions.NoNodeError:
                    continue
                first = RESERVED if group == 0 else 0
                node = self._take_first_gap(client, group, first, taken)
                if node is not None:
                    return node
            last = groups[-1] if groups else -1
            if last + 1 >= GROUP_COUNT:
                raise PoolExhausted(
                    f"all {GROUP_COUNT * nodes.group_size - RESERVED} node IDs at "
                    f"{nodes.nodes_path} are held"
                )
            with contextlib.suppress(kazoo.exceptions.NodeExistsError):
                pool_acl = nodes.acls()["pool"]
                client.create(f"{nodes.nodes_path}/{last + 1:02X}", b"", acl=pool_acl)
            if time.monotonic() >= deadline:
                raise PoolExhausted(f"no node ID could be claimed at {nodes.nodes_path} in time")

    def _take_first_gap(self, client: Any, group: int, first: int, taken: set[int]) -> int | None:
        """Create our znode at the first free index of ``group``; None if all are gone.

        A lost race moves on to the next gap of the same listing instead of
        listing the group again, so many nodes claiming at once do not cost
        each other a listing per collision.
        """
        kazoo = kazoo_module()
        nodes = self._nodes
        group_path = f"{nodes.nodes_path}/{group:02X}"
        data = self._node_data(MIN_NODE_BITS, -1)
        for index in range(first, nodes.group_size):
            if index in taken:
                continue
            path = f"{group_path}/{index:02X}"
            try:
                client.create(path, data, acl=self.owned_acl, ephemeral=True)
            except kazoo.exceptions.NodeExistsError:
                continue
            except kazoo.exceptions.NoNodeError:
                return None  # the group went away: look at the groups again
            node = group << 8 | index
            self.node = node
            self._node_path = path
            self._node_version = 0
            self._hwm_path = nodes.mark_path(node)
            return node
        return None

    def _node_data(self, width: int, switched_ms: int) -> bytes:
        data: dict[str, Any] = {
            "width": width,
            "switched_ms": switched_ms,
            "holder": holder_description(),
            "token": self._token,
        }
        if self._after_ms is not None:
            data["after_ms"] = self._after_ms
        return json.dumps(data).encode()

    def _publish(self, client: Any) -> None:
        """Write our width and switch tick into our znode."""
        assert self._node_path is not None
        stat = client.set(
            self._node_path,
            self._node_data(self.width, self._switched_ms),
            version=self._node_version,
        )
        self._node_version = stat.version

    def _wait_for_peers(self, client: Any, node: int, deadline: float) -> int:
        """Point 2: wait until our twins use our width; return the tick to start after.

        Only a *twin* (:func:`_narrower_twins`), a node whose ID is ours cut to
        a narrower width, can mint our 64 bits at that width; any other node's
        IDs differ from ours in the low bits whatever widths the two use. And
        only a twin whose znode is older than ours can still be narrow: a newer
        one read the groups after its znode was made, when ours and our group
        existed, so it never mints below our width. So we read our twins (at
        most eight znodes, not the fleet), wait for the older narrow ones to
        widen or leave, and start after their ``switched_ms`` and after what
        departed holders of those node IDs minted.
        """
        needed = node.bit_length()
        twins = _narrower_twins(node)
        if not twins:
            return -1  # no narrower width can hold an ID equal to ours
        peers = self._nodes.read_peers(client, [node, *twins])
        if node not in peers:
            raise ClaimLost(f"node ID {node}'s znode is gone; the session may have expired")
        our_zxid = peers.pop(node)[1]
        switched = self._departed_narrower_ceiling(client, twins, peers)
        waiting_for: list[int] = []
        while True:
            for twin, (info, zxid) in peers.items():
                if zxid < our_zxid and int(info.get("width", MIN_NODE_BITS)) < needed:
                    waiting_for.append(twin)
                else:
                    switched = max(switched, int(info.get("switched_ms", -1)))
            if not waiting_for:
                return switched
            if time.monotonic() >= deadline:
                raise ClaimLost(
                    f"node ID {node} needs {needed}-bit node IDs, but {len(waiting_for)} live "
                    f"node(s) whose IDs can equal ours at a narrower width still use it "
                    f"(e.g. {waiting_for[0]}); they widen when they see the new group. "
                    "Check that those nodes are healthy"
                )
            # A poll of a few znodes; they widen within a round trip.
            if self._sleep(0.05):
                raise ClaimLost(f"{self.description}: closed while claiming")
            peers = self._nodes.read_peers(client, waiting_for)
            # One that left still narrow minted narrow IDs up to its mark.
            gone = [twin for twin in waiting_for if twin not in peers]
            switched = max(switched, self._departed_narrower_ceiling(client, gone, {}))
            waiting_for = []

    def _departed_narrower_ceiling(
        self, client: Any, twins: Iterable[int], live: Mapping[int, PeerInfo]
    ) -> int:
        """The newest tick earlier holders of ``twins`` may have used (-1: none).

        ``twins`` are node IDs that, at a narrower width, mint the same 64
        bits as we do (see :func:`_narrower_twins`). A holder that left
        (cleanly a moment ago, or on a clock ahead of ours) minted up to the
        node's high-water mark. When the node ID has a live holder again, that
        holder publishes ``after_ms``, the mark it started after, which bounds
        its predecessors without counting its own minting: a live twin is
        either older (then it widened, or we wait for it) or newer (then it
        never mints below our width).
        """
        highest = -1
        unpublished = []
        for other in twins:
            info = live.get(other)
            if info is not None and "after_ms" in info[0]:
                highest = max(highest, int(info[0]["after_ms"]))
            else:
                unpublished.append(other)
        return max(highest, self._highest_mark(client, unpublished))

    def _highest_mark(self, client: Any, nodes: Iterable[int]) -> int:
        """The highest ceiling among the high-water marks of ``nodes`` (-1: none); pipelined."""
        path = f"{self._nodes.root}/nodehwm"
        reads = [client.get_async(f"{path}/{node:04X}") for node in nodes]
        highest = -1
        for read in reads:
            try:
                data, _ = read.get()
            except kazoo_module().exceptions.NoNodeError:
                continue
            highest = max(highest, HighWaterMark.from_bytes(data).ceiling_ms)
        return highest

    # -- following the groups ------------------------------------------------------------
    def _watch_groups(self, client: Any) -> list[int]:
        """Read the groups (after a sync) with a watch that flags any change."""

        def changed(_event: Any) -> None:
            # kazoo's callback thread: no blocking calls. The renewal thread
            # re-reads the groups and re-arms the watch.
            self._groups_changed.set()
            self._resume_soon()

        nodes_path = self._nodes.nodes_path
        client.sync(nodes_path)
        return sorted(int(name, 16) for name in client.get_children(nodes_path, watch=changed))

    def _width_for(self, groups: list[int]) -> int:
        return max(
            width_for_groups(max(groups, default=0)),
            (self.node or 0).bit_length(),
            MIN_NODE_BITS,
        )

    def _departed_ceiling(self, client: Any, width: int) -> int:
        """The newest tick any node whose ID needs more than ``width`` bits may have used.

        Such nodes are gone (their groups were removed, which needs them empty),
        but their IDs, at the wider width, can equal ours at ``width``; so we
        mint at ``width`` only after their recorded high-water marks.
        """
        wider = []
        for name in client.get_children(f"{self._nodes.root}/nodehwm"):
            try:
                node = int(name, 16)
            except ValueError:
                continue
            if node >> width:
                wider.append(node)
        return self._highest_mark(client, wider)

    def _maintain(self) -> None:
        if not self._groups_changed.is_set():
            return
        self._groups_changed.clear()
        try:
            with translated("following the node groups"):
                self._follow_groups()
        except BaseException:
            self._groups_changed.set()  # not done: try again after the next renewal
            raise

    def _follow_groups(self) -> None:
        client = self._client
        node = self.node
        if client is None or node is None:
            return
        width = self._width_for(self._watch_groups(client))
        if width == self.width:
            return
        if width > self.width:
            # Grow: switch first (fences the generators), then publish with the
            # newest tick minted at the old width.
            self._update_identity({"node": node, "node_bits": width})
            self._switched_ms = self._highest_tick_used()
            self.width = width
            self._publish(client)
        else:
            # Shrink: staying wide is always safe, so wait until the clock has
            # passed every tick the departed wider nodes may have used; then
            # publish first, and switch.
            departed = self._departed_ceiling(client, width)
            if departed >= self.clock.time_ns() // 1_000_000:
                self._groups_changed.set()  # look again after the next renewal
                return
            self.width = width
            self._publish(client)
            self._update_identity({"node": node, "node_bits": width})
        log.info("%s: node %d now uses %d-bit node IDs", self, node, width)

    def _reclaim(self) -> None:
        super()._reclaim()
        for listener in list(self._reclaim_listeners):
            try:
                listener(self)
            except Exception as error:  # a listener's failure must not stop the claim
                log.warning("%s: re-registration failed: %s", self, error)

    def on_reclaimed(self, listener: Any) -> None:
        """Call ``listener(claim)`` after every new claim following a lost session."""
        self._reclaim_listeners.append(listener)

    def _release(self, final_ceiling_ms: int | None) -> None:
        connected = self._client is not None
        super()._release(final_ceiling_ms)
        if not connected:
            # Never reached ZooKeeper (the claim could not be made): nothing of
            # ours to tidy, and trying would wait out connect_timeout again.
            return
        # Our znode is gone with the session; tidy the groups with a short-lived client.
        try:
            with self._nodes.short_session() as client:
                self._nodes.maintain_groups(client)
        except Exception as error:  # best effort: the next claimant tidies too
            log.info("%s: could not tidy groups after release: %s", self, error)


def _result_or_empty(listing: Any) -> list[str]:
    """The children from an async listing, or none if the group went away."""
    kazoo = kazoo_module()
    try:
        return list(listing.get())
    except kazoo.exceptions.NoNodeError:
        return []


def _node_infos(reads: Iterable[tuple[int, Any]]) -> dict[int, PeerInfo]:
    """Await pipelined node reads: node -> (published data, creation zxid)."""
    kazoo = kazoo_module()
    found: dict[int, PeerInfo] = {}
    for node, read in reads:
        try:
            data, stat = read.get()
        except kazoo.exceptions.NoNodeError:
            continue  # left since it was listed
        try:
            info = json.loads(data or b"{}")
        except ValueError:
            info = {}
        found[node] = (info if isinstance(info, dict) else {}, stat.czxid)
    return found


def _narrower_twins(node: int) -> list[int]:
    """The node IDs that mint our IDs' 64 bits at a narrower width than ``node`` needs.

    At width ``w`` a node ``p`` puts ``p`` in its IDs' low ``w`` bits and burst
    bits above them; our ID has our node's low ``w`` bits there. So the only
    node that can mint our bits at width ``w`` is ``node mod 2**w`` (reserved
    IDs aside: they are not minted through idmint).
    """
    twins = {node & ((1 << width) - 1) for width in range(MIN_NODE_BITS, node.bit_length())}
    return sorted(twin for twin in twins if twin >= RESERVED and twin != node)
