"""Generator IDs claimed through Apache ZooKeeper, with java-uniqueid's layout.

URL grammar::

    zk://[user:password@]host:port[,host:port...][/root][?option=value&...]

The root defaults to ``/idmint``. With ``user:password`` the client
authenticates with ZooKeeper's digest scheme and protects what it creates
with ACLs (see below); without, nodes are open, as java-uniqueid makes them.

The options (:class:`ZooKeeperOptions`; this table is made from its declaration):

{options}

Layout of the generator space under the root (java-uniqueid 3.2's, plus ``hwm``;
every other space but elastic64's node IDs has its ``pool`` and ``hwm`` under
``<root>/<space>``, and no queue or cluster: :mod:`idmint.coordinate.spaces`)::

    <root>/queue                    the lock queue: ephemeral tickets
                                    nr-<14-digit ms>-<4 digits>, lock node
                                    nr-00000000000000
    <root>/pool/<n>                 ephemeral claim of generator n (decimal); data
                                    is JSON {"holder", "since_ms", "token"} from
                                    idmint, empty from Java
    <root>/cluster-id               the cluster ID in ASCII decimal ("0")
    <root>/hwm/<n>                  persistent high-water mark of generator n:
                                    JSON {"ceiling_ms", "renewed_ms",
                                    "released_ms", "holder"}

Renewal is a compare-and-set of ``hwm/<n>`` on the version we last wrote: if
anyone else has claimed generator n since (they write ``hwm/<n>`` before they
issue anything), our renewal fails and we stop; if our session has expired,
ZooKeeper refuses the write. Either way nothing is issued past our deadline.

With credentials, ``pool`` grants READ and CREATE only: no client can delete a
claim node, which disappears only when its claimant's session ends (release
closes the session). ``root``, ``queue``, ``hwm`` and ``cluster-id`` are
readable and writable by that user only.
"""

from __future__ import annotations

import itertools
import json
import logging
import random
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from idmint.coordinate.base import (
    ClaimInfo,
    ClaimSource,
    Coordinator,
    DriverClaim,
    HighWaterMark,
    holder_description,
    holder_of,
)
from idmint.coordinate.options import ClaimOptions, flag, option, seconds, whole, with_options_table
from idmint.coordinate.spaces import GENERATOR, NODE, SPACES, Space
from idmint.coordinate.url import CoordinatorUrl
from idmint.coordinate.zookeeper_groups import DEFAULT_ROOT as DEFAULT_DISCOVERY_ROOT
from idmint.coordinate.zookeeper_groups import GROUP_SIZE, RESERVED, NodeGroups, NodeIdClaim
from idmint.coordinate.zookeeper_session import (
    ZooKeeperAccess,
    ZooKeeperSessionClaim,
    kazoo_module,
    read_mark,
    session_of,
    translate_error,
    translated,
)
from idmint.errors import ConfigurationError, CoordinatorUnavailable, PoolExhausted

__all__ = [
    "NodeIdCoordinator",
    "ZooKeeperClaim",
    "ZooKeeperCoordinator",
    "ZooKeeperOptions",
    "kazoo_module",
    "read_mark",
    "translate_error",
]

log = logging.getLogger("idmint.coordinate.zookeeper")

DEFAULT_ROOT = "/idmint"
DEFAULT_SESSION_TIMEOUT_S = 10.0
LOCK_TICKET = "nr-00000000000000"  # java-uniqueid's "locking ticket"


@dataclass(frozen=True)
class ZooKeeperOptions(ClaimOptions):
    """The options of a ``zk://`` URL."""

    session_timeout_s: float = option(
        "session_timeout",
        DEFAULT_SESSION_TIMEOUT_S,
        "s; the ZooKeeper session timeout (the server may lower it; the negotiated value "
        "is what fences)",
        seconds(minimum=1),
    )
    queue: bool = option(
        "queue",
        True,
        "honour java-uniqueid's queue lock, so Java and Python claimants queue fairly "
        "together: with the queue empty the claim's transaction takes and lets go of the "
        "lock (it lands only while the lock is free); otherwise queue and look once "
        "holding the lock (not held while waiting for a free ID)",
        flag(),
    )
    group_size: int = option(
        "group_size",
        GROUP_SIZE,
        "elastic64 node IDs per group; fewer (for tests) make the width change with a "
        "handful of nodes",
        whole(RESERVED + 1, GROUP_SIZE),
    )


__doc__ = with_options_table(__doc__, ZooKeeperOptions)


class ZooKeeperCoordinator(ZooKeeperAccess, Coordinator):
    """A ZooKeeper ensemble used as a pool of identities (see the module docs).

    Generator IDs (uid64) and short60 node IDs are claimed from java-uniqueid's
    pool layout under the root; elastic64 node IDs from the groups of
    :mod:`idmint.coordinate.zookeeper_groups`, whose width follows the fleet.
    """

    default_root = DEFAULT_ROOT
    options_type = ZooKeeperOptions

    def __init__(self, url: CoordinatorUrl) -> None:
        options = self._take_url(url, ZooKeeperOptions, needs_hosts=True)
        self.hosts = ",".join(f"{host}:{port or 2181}" for host, port in url.hosts)
        self.root = url.path or self.default_root
        self.description = f"zk://{self.hosts}{self.root}"
        self.ttl_s = options.session_timeout_s
        self.use_queue = options.queue
        self.credentials = f"{url.username}:{url.password}" if url.username is not None else None
        self.groups = NodeGroups(self, url.path, options.group_size)

    @classmethod
    def pool_within(cls, url: CoordinatorUrl, name: str) -> CoordinatorUrl:
        return url.replace(path=f"{url.path or cls.default_root}/{name}")

    def cluster_from(
        self, client: Any, cluster_read: Any, cluster: int | None, space: Space = GENERATOR
    ) -> tuple[int, bool]:
        """The pool's cluster ID from ``cluster_read`` (a read of ``cluster-id`` sent
        earlier; None in a space without clusters), laying the pool out first when it
        is new; and whether it did.

        Nothing else is checked here: the first look at the pool finds what else
        is missing (java-uniqueid writes ``cluster-id`` when its generator is
        built and makes ``queue`` and ``pool`` only at its first claim, never
        ``hwm``), and the claimant then lays it out and looks again.
        """
        kazoo = kazoo_module()
        if cluster_read is None:
            return 0, False
        try:
            data, _ = cluster_read.get()
        except kazoo.exceptions.NoNodeError:
            return self.ensure_layout(client, cluster, space), True
        return self._check_cluster(data, cluster), False

    def space_root(self, space: Space) -> str:
        """Where a space's ``pool`` and ``hwm`` live: the root itself for the space
        java-uniqueid shares, ``<root>/<space>`` for the others."""
        return space.within(self.root)

    def mark_path(self, space: Space, identity: Mapping[str, int]) -> str:
        """The znode that holds the high-water mark of ``identity`` of ``space``."""
        source, _ = self._claimed_by(space)
        if source is self.groups:
            return self.groups.mark_path(space.numbered(identity)[1])
        return f"{self.space_root(space)}/hwm/{space.numbered(identity)[1]}"

    def ensure_layout(self, client: Any, cluster: int | None, space: Space = GENERATOR) -> int:
        """Create root, queue, pool, hwm and cluster-id as needed; return the cluster ID.

        What exists is read at once, then what is missing is created in one
        transaction (which lands whole or not at all: if someone, a Java
        claimant say, made a part meanwhile, what is still missing is read
        again). Claimants racing to do the same all go on.

        The space java-uniqueid shares has its queue; a space with clusters its
        ``cluster-id``; any other space has a pool and marks only, cluster 0.
        """
        kazoo = kazoo_module()
        acls = self.acls()
        base = self.space_root(space)
        parts = [(base, acls["tree"])]
        if space.java_uniqueid:
            parts.append((f"{base}/queue", acls["tree"]))
        parts += [(f"{base}/pool", acls["pool"]), (f"{base}/hwm", acls["tree"])]
        cluster_path = f"{self.root}/cluster-id"
        if space.clustered:
            parts.append((cluster_path, acls["tree"]))
        with translated(f"preparing {base} in ZooKeeper"):
            while True:
                present = [client.exists_async(path) for path, _ in parts]
                missing = [
                    part
                    for part, pending in zip(parts, present, strict=True)
                    if pending.get() is None
                ]
                if not missing:
                    break
                if missing[0][0] == base and base.rpartition("/")[0]:
                    client.ensure_path(base.rpartition("/")[0])  # the root's own parents
                # All at once, in one request: claimants racing here (a fresh pool's
                # first stampede) each send one, one lands, the others fail at once.
                transaction = client.transaction()
                for path, acl in missing:
                    data = str(cluster or 0).encode() if path == cluster_path else b""
                    transaction.create(path, data, acl=acl)
                exceptions = kazoo.exceptions
                results = transaction.commit()
                if not any(isinstance(result, Exception) for result in results):
                    break
                refused = [
                    result
                    for result in results
                    if isinstance(result, Exception)
                    and not isinstance(
                        result,
                        (
                            exceptions.NodeExistsError,
                            exceptions.RolledBackError,
                            exceptions.RuntimeInconsistency,
                        ),
                    )
                ]
                if refused:
                    raise refused[0]
                # A part exists now (someone else's transaction landed): look again.
            if not space.clustered:
                return 0
            data, _ = client.get(cluster_path)
        return self._check_cluster(data, cluster)

    def _check_cluster(self, data: bytes, cluster: int | None) -> int:
        """The cluster ID ``cluster-id`` holds, which must be the one asked for."""
        cluster_path = f"{self.root}/cluster-id"
        try:
            stored = int(data.decode("ascii").strip())
        except (UnicodeDecodeError, ValueError):
            raise ConfigurationError(
                f"{cluster_path} holds {data!r}; java-uniqueid and idmint expect a cluster "
                "ID in ASCII decimal"
            ) from None
        if cluster is not None and stored != cluster:
            raise ConfigurationError(
                f"{cluster_path} says this pool is cluster {stored}, but the URL asks for "
                f"cluster={cluster}; drop the option or use another root"
            )
        return stored

    # -- the Coordinator interface ---------------------------------------------------------
    def _claimed_by(self, space: Space) -> tuple[ClaimSource, type[DriverClaim[Any]]]:
        # Identities whose width may grow (elastic64's node IDs) come from the groups,
        # whose width follows the fleet; the narrowest width's pool does not limit them.
        return (self.groups, NodeIdClaim) if space.width is not None else (self, ZooKeeperClaim)

    def read_mark(self, space: Space, identity: Mapping[str, int]) -> HighWaterMark | None:
        path = self.mark_path(space, identity)
        with self.short_session() as client, translated(f"reading the mark {path}"):
            return read_mark(client, path)[0]

    def held(self, space: Space) -> set[tuple[int, int]]:
        if space.width is not None:
            return super().held(space)  # the groups' nodes: list_nodes()
        with self.short_session() as client:
            return self.held_through(client, space)

    def held_through(self, client: Any, space: Space) -> set[tuple[int, int]]:
        """:meth:`held` through ``client`` (a claim's own session): one read of the pool's
        children, and of the cluster ID where the space has clusters."""
        kazoo = kazoo_module()
        base = self.space_root(space)
        with translated(f"listing claims under {base}"):
            try:
                names = client.get_children(f"{base}/pool")
            except kazoo.exceptions.NoNodeError:
                return set()
            cluster = self._read_cluster(client) if space.clustered else 0
        return {(cluster, int(name)) for name in names if name.isdigit()}

    def list_claims(self) -> list[ClaimInfo]:
        kazoo = kazoo_module()
        rows: list[ClaimInfo] = []
        with self.short_session() as client, translated(f"listing claims under {self.root}"):
            for space in SPACES:
                if space.width is not None:
                    continue  # in the groups: list_nodes()
                base = self.space_root(space)
                try:
                    held = client.get_children(f"{base}/pool")
                except kazoo.exceptions.NoNodeError:
                    continue
                cluster = self._read_cluster(client) if space.clustered else 0
                for name in sorted(held, key=lambda n: (len(n), n)):
                    if not name.isdigit():
                        continue
                    try:
                        data, stat = client.get(f"{base}/pool/{name}")
                    except kazoo.exceptions.NoNodeError:
                        continue
                    mark, _ = read_mark(client, f"{base}/hwm/{name}")
                    rows.append(
                        ClaimInfo(
                            cluster=cluster,
                            generator=int(name),
                            holder=holder_of(data)[0],
                            since_ms=int(stat.ctime),
                            high_water_mark_ms=mark.ceiling_ms if mark else None,
                            space=space.name,
                        )
                    )
        return rows

    def list_nodes(self) -> dict[int, dict[str, Any]]:
        """Every live elastic node ID of the groups with its published data."""
        return self.groups.list_nodes()

    def _read_cluster(self, client: Any) -> int:
        kazoo = kazoo_module()
        try:
            data, _ = client.get(f"{self.root}/cluster-id")
            return int(data.decode("ascii").strip())
        except (kazoo.exceptions.NoNodeError, ValueError, UnicodeDecodeError):
            return 0

    def close(self) -> None:
        """Nothing to close: each claim has its own session."""


class ZooKeeperClaim(ZooKeeperSessionClaim["ZooKeeperCoordinator"]):
    """One generator ID (or short60 node ID) of the pool, held through its own session."""

    look_every_s = 1.0

    def _held_now(self) -> set[tuple[int, int]] | None:
        # Through the claim's own session: no session of its own for a look.
        client = self.client
        return None if client is None else self.coordinator.held_through(client, self.space)

    def _begin(self) -> None:
        super()._begin()
        self._base = self.coordinator.space_root(self.space)
        self._session_id: int | None = None
        self._path: str | None = None
        self._queue_lock_held: _JavaQueueLock | None = None
        self._pool_cluster: int | None = None
        """The pool's cluster ID, read at the claim's first look."""
        self._pool_changed: threading.Event | None = None
        """Set when a claim node comes or goes (None: look again at once)."""

    def _acquire(self) -> tuple[Mapping[str, int], int]:
        client = self._connected_client()
        if client.client_id is None or client.client_id[0] != self._session_id:
            self._session_id = session_of(client)
        self._pool_cluster = None
        with translated("claiming a generator ID"):
            return super()._acquire()

    def _look(self, deadline: float) -> tuple[Mapping[str, int], int] | None:
        kazoo = kazoo_module()
        coordinator = self.coordinator
        client = self._client
        queued = coordinator.use_queue and self.space.java_uniqueid
        self._pool_changed = None
        try:
            # One round trip for the first look: the cluster, the pool, the queue
            # and a few marks are read together.
            cluster_read = None
            if self._pool_cluster is None and self.space.clustered:
                cluster_read = client.get_async(f"{coordinator.root}/cluster-id")
            look = self._send_look(client, queue=queued)
            if self._pool_cluster is None:
                self._pool_cluster, laid_out = coordinator.cluster_from(
                    client, cluster_read, self.options.cluster, self.space
                )
                if laid_out:  # the look went out before: it found nothing there
                    look = self._send_look(client, queue=queued)
            found = self._look_and_claim(client, look, deadline)
            if found is not None:
                number, floor = found
                return self._identity(number, self._pool_cluster), floor
            # A claim node going is an event; a hold-off ending is not, so the
            # next look comes when the soonest one ends (and at least once a second).
            self._pool_changed = self._watch_pool(client)
        except kazoo.exceptions.NoNodeError:
            # The pool lacks a part (a pool made by java-uniqueid, which makes queue
            # and pool at its first claim and never hwm): lay it out, look again.
            if time.monotonic() >= deadline:
                raise
            coordinator.ensure_layout(client, self.options.cluster, self.space)
        except kazoo.exceptions.ConnectionLoss:
            # The connection dropped during the look, and the lock's release has
            # removed what it may have left in the queue. The session lives on
            # while kazoo reconnects: look again (the next request waits for the
            # connection), for as long as the claim may take.
            if time.monotonic() >= deadline:
                raise
        return None

    def _wait_for_change(self, seconds: float) -> bool:
        if self._pool_changed is not None:
            self._wait_event(self._pool_changed, seconds)
        return self._closed.is_set()

    def _nothing_free(self) -> Exception:
        where = f"zk://{self.coordinator.hosts}{self._base}"
        return self._pool_exhausted(f"cluster {self._pool_cluster}", where)

    def _send_look(self, client: Any, *, queue: bool) -> _Look:
        """Send the reads of one look at the pool: its claims, the marks of a few IDs
        picked at random, and the queue (``queue``: whether it is to be honoured)."""
        root = self._base
        pool = self.options.pool
        return _Look(
            queue_children=(
                client.get_children_async(f"{self.coordinator.root}/queue") if queue else None
            ),
            pool_children=client.get_children_async(f"{root}/pool"),
            marks={
                number: client.get_async(f"{root}/hwm/{number}")
                for number in random.sample(pool, min(_CANDIDATES, len(pool)))
            },
        )

    def _look_and_claim(self, client: Any, look: _Look, deadline: float) -> tuple[int, int] | None:
        """Claim from ``look`` without queueing when java-uniqueid's queue is empty (or
        not honoured); otherwise queue for the lock and look again holding it."""
        if look.queue_children is None:
            return self._try_claim(client, look)
        if not look.queue_children.get():
            # Nobody queues and nobody holds the lock: the claim takes and lets go
            # of the lock in its own transaction, which lands only if the lock is
            # still free then. Claimants that meet there serialise nothing.
            try:
                return self._try_claim(client, look, lock_free_if_unlocked=True)
            except _LockTaken:
                pass  # a claimant (a Java one, say) has the lock: queue behind it
        # The queue lock is held for one look at the pool, never while waiting:
        # a claimant waiting for its narrow range to free up must not hold up
        # claimants whose ranges have room.
        with self._queue_lock(client, deadline) as pool_children:
            return self._try_claim(client, _Look(None, pool_children, {}))

    def _try_claim(
        self, client: Any, look: _Look, *, lock_free_if_unlocked: bool = False
    ) -> tuple[int, int] | None:
        """One look at the pool: claim a free ID that is not held off, if there is one.

        One transaction when it works and one of the IDs whose marks the look
        read is free; a round trip more for each batch of marks read after that.
        The transaction creates the claim node only if the ID's mark is still
        the one read. Claimants that do not hold the queue lock start at a
        random free ID (racing for the lowest would only fail each other's
        transactions); the lock's holder takes the lowest, as Java does.

        ``lock_free_if_unlocked``: the transaction also requires the queue lock
        to be free (:class:`_LockTaken` if it is not).
        """
        root = self._base
        pool = self.options.pool
        taken = {int(name) for name in look.pool_children.get() if name.isdigit()}
        # Walked lazily: a pool of thousands is not listed to claim one ID.
        known = [number for number in look.marks if number not in taken]
        if self._queue_lock_held is None:
            start = random.randrange(len(pool))
            rest: Iterator[int] = itertools.chain(pool[start:], pool[:start])
        else:
            rest = iter(pool)
        others = (n for n in rest if n not in taken and n not in look.marks)
        # The marks the look read first, then a few at once: one round trip
        # passes several held-off IDs.
        batch = known or list(itertools.islice(others, 1))
        while batch:
            reads = [
                (n, look.marks[n] if n in look.marks else client.get_async(f"{root}/hwm/{n}"))
                for n in batch
            ]
            now_ms = self.clock.time_ns() // 1_000_000
            for number, pending in reads:
                mark, version = _mark_of(pending)
                if self._held_off(number, mark, now_ms):
                    continue
                if self._create_claim_node(
                    client, number, mark, version, now_ms, unlocked=lock_free_if_unlocked
                ):
                    return number, mark.ceiling_ms if mark else -1
            batch = list(itertools.islice(others, _MARKS_PER_LOOK))
        return None

    def _create_claim_node(
        self,
        client: Any,
        number: int,
        mark: HighWaterMark | None,
        version: int,
        now_ms: int,
        *,
        unlocked: bool = False,
    ) -> bool:
        """Create ``pool/<number>``, in one transaction with a check that the ID's mark is
        still at ``version`` (or with the mark itself, when there is none yet).

        ``unlocked``: and with java-uniqueid's queue lock taken and let go, so the
        transaction lands only while nobody holds the lock (:class:`_LockTaken`
        otherwise); nobody sees it held.
        """
        kazoo = kazoo_module()
        root = self._base
        path, hwm_path = f"{root}/pool/{number}", f"{root}/hwm/{number}"
        data = json.dumps(
            {"holder": holder_description(), "since_ms": now_ms, "token": self._token}
        ).encode()
        # The first ceiling goes with the claim: the transaction creates the
        # claim node and writes the mark only if the mark is still the one read.
        sent_mono = self.clock.monotonic_ns()
        ceiling = self._first_ceiling(mark.ceiling_ms if mark is not None else -1)
        self._took(mark)
        first = self._mark(ceiling)
        first_data = json.dumps(first.to_json()).encode()
        transaction = client.transaction()
        lock_path = f"{self.coordinator.root}/queue/{LOCK_TICKET}"
        if unlocked:
            transaction.create(lock_path, b"", acl=self.coordinator.acls()["tree"], ephemeral=True)
            transaction.delete(lock_path)
        transaction.create(path, data, acl=self.owned_acl, ephemeral=True)
        if mark is None:
            transaction.create(hwm_path, first_data, acl=self.coordinator.acls()["tree"])
        else:
            transaction.set_data(hwm_path, first_data, version)
        lock = self._queue_lock_held
        if lock is not None and not lock.still_ours:
            lock = None
        if lock is not None:
            # The queue lock goes with the claim: the next claimant in line hears
            # of it as the claim lands, not a round trip later.
            transaction.delete(lock.lock_path)
        try:
            results = transaction.commit()
        except kazoo.exceptions.ConnectionLoss:
            # The transaction may have landed: find our node as kazoo's lock
            # recipe finds its own, by what only we could have written.
            if not self._is_ours(client, path):
                raise
            results = []
        if unlocked and results and isinstance(results[0], kazoo.exceptions.NodeExistsError):
            raise _LockTaken
        failures = [result for result in results if isinstance(result, Exception)]
        if any(isinstance(f, kazoo.exceptions.NoNodeError) for f in failures):
            self.coordinator.ensure_layout(client, self.options.cluster, self.space)
            return False  # hwm/ was missing (a pool Java made): look again
        if failures:
            # Someone claimed it or wrote its mark since we looked; or a retry
            # of our own transaction found what the first attempt made.
            if not self._is_ours(client, path):
                return False
            version = read_mark(client, hwm_path)[1]
        else:
            version = 0 if mark is None else version + 1
            self._recorded_with_claim = (ceiling, sent_mono)
        if lock is not None:
            # The transaction landed (now or on an earlier attempt), lock delete
            # and all: a delete of our own now would take the next holder's.
            lock.lock_deleted()
        self._path = path
        self._hwm_path = hwm_path
        # Ours now: nobody else writes the mark while our node exists.
        self._hwm_version = version
        return True

    def _watch_pool(self, client: Any) -> threading.Event:
        """An event set when a claim node is added to or removed from the pool."""
        changed = threading.Event()
        client.get_children(f"{self._base}/pool", watch=lambda event: changed.set())
        return changed

    @contextmanager
    def _queue_lock(self, client: Any, deadline: float) -> Iterator[Any]:
        """Hold java-uniqueid's queue lock (generator IDs with ``queue=true``) in the block.

        Yields the pool's children read right after the lock was taken (an
        async result), or None when there is no queue.
        """
        # java-uniqueid's queue orders claimants of generator IDs; other spaces
        # are idmint's alone and need no queue (creating a claim is atomic).
        if not self.coordinator.use_queue or not self.space.java_uniqueid:
            yield None
            return
        lock = _JavaQueueLock(
            client,
            f"{self.coordinator.root}/queue",
            self.coordinator.acls(),
            f"{self._base}/pool",
        )
        try:
            lock.acquire(deadline)
            self._queue_lock_held = lock
            yield lock.pool_children
        finally:
            self._queue_lock_held = None
            # Whatever ended the look, nothing of ours may stay in the queue: the
            # session lives on, and every claimant behind would wait on it.
            lock.release(within_s=self.ttl_s)

    def _reclaim(self) -> None:
        # A LOST session's client reconnects with a new session by itself.
        self._path = None
        super()._reclaim()


class _JavaQueueLock:
    """java-uniqueid's lock: ephemeral tickets in ``queue``, then the lock ticket.

    Not needed for safety (creating ``pool/<n>`` is atomic) but it keeps Java
    and Python claimants from stampeding the pool together.

    A request whose connection drops may or may not have been applied: a ticket
    or the lock node may then exist, made by our session, which lives on while
    kazoo reconnects, and every claimant behind it (Java's too) would wait for
    it. So the lock remembers every node it may have made until it knows the
    node is gone, and :meth:`release` removes what remains, once the connection
    is back, by the node's owner (our session) rather than by what we believe.
    """

    def __init__(self, client: Any, path: str, acls: dict[str, Any], pool_path: str) -> None:
        self.client = client
        self.path = path
        self.lock_path = f"{path}/{LOCK_TICKET}"
        self.acl = acls["tree"]
        self.pool_path = pool_path
        self.pool_children: Any = None
        """The pool's children as read right after the lock was taken (async result)."""
        self.ticket: str | None = None
        self.held = False
        self.session: int | None = None
        """The session that takes the lock: what it makes is ephemeral to it."""
        self._maybe_made: set[str] = set()
        """Paths of nodes we made or may have made, and have not seen go."""

    def _take_ticket(self) -> str:
        kazoo = kazoo_module()
        while True:
            name = f"nr-{int(time.time() * 1000):014d}-{random.randrange(10000):04d}"
            path = f"{self.path}/{name}"
            self._maybe_made.add(path)
            try:
                self.client.create(path, b"", acl=self.acl, ephemeral=True)
            except kazoo.exceptions.NodeExistsError:
                self._maybe_made.discard(path)  # someone else's
                continue
            return name

    def acquire(self, deadline: float) -> None:
        self.session = session_of(self.client)
        self.ticket = self._take_ticket()
        first_in_line = False
        while True:
            # Each hand-over of the lock is on the path of every claimant behind
            # it, so the one first in line, woken by the lock going, tries for it
            # at once: reading the queue again would only confirm its place.
            if first_in_line and self._take_lock():
                return
            children = sorted(self.client.get_children(self.path))
            locked = bool(children) and children[0] == LOCK_TICKET
            if locked:
                children.pop(0)
            if self.ticket not in children:
                self.ticket = self._take_ticket()  # the queue was cleared under us
                first_in_line = False
                continue
            position = children.index(self.ticket)
            first_in_line = position == 0
            if first_in_line:
                # A lock we saw held is waited for, not tried (a transaction
                # that would fail); one we saw free is tried.
                if not locked and self._take_lock():
                    return
                predecessor = LOCK_TICKET
            else:
                predecessor = children[position - 1]
            moved = threading.Event()
            stat = self.client.exists(f"{self.path}/{predecessor}", watch=_setter(moved))
            if stat is None:
                continue
            if stat.ephemeralOwner == self.session:
                # Ours, left by a look whose connection dropped before it knew
                # what it had made: waiting on it would wait for ever.
                self._remove_if_ours(f"{self.path}/{predecessor}", deadline)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not moved.wait(remaining):
                raise PoolExhausted(
                    f"timed out waiting in the claim queue at {self.path} behind "
                    f"{predecessor}; another claimant may be stuck"
                )

    def _take_lock(self) -> bool:
        """Create the lock node and drop our ticket, in one transaction; False if held."""
        kazoo = kazoo_module()
        ticket_path = f"{self.path}/{self.ticket}"
        transaction = self.client.transaction()
        transaction.create(self.lock_path, b"", acl=self.acl, ephemeral=True)
        transaction.delete(ticket_path)
        self._maybe_made.add(self.lock_path)
        pending = transaction.commit_async()
        # Sent behind the transaction on the same session, so it reads the pool
        # as it is once we hold the lock: the holder's first look costs no
        # extra round trip (wasted if the lock is held, which is rarer).
        self.pool_children = self.client.get_children_async(self.pool_path)
        results = pending.get()
        if not any(isinstance(result, Exception) for result in results):
            self.held, self.ticket = True, None
            self._maybe_made.discard(ticket_path)
            return True
        self._maybe_made.discard(self.lock_path)  # the transaction made nothing
        if isinstance(results[0], kazoo.exceptions.NodeExistsError):
            return False
        raise results[0] if isinstance(results[0], Exception) else results[1]

    def lock_deleted(self) -> None:
        """The lock node was deleted on our behalf (with the claim, in its transaction)."""
        self.held = False
        self._maybe_made.discard(self.lock_path)

    @property
    def still_ours(self) -> bool:
        """Held, by the session that took it. After the session expired the lock
        node went with it, and the node now at its path is another claimant's."""
        return self.held and session_of(self.client) == self.session

    def release(self, within_s: float) -> None:
        """Delete our ticket and the lock, if we made them and they are still there.

        Each delete is checked. A lost connection is waited out for up to
        ``within_s`` (the session timeout: by then the session, and with it
        every node it made, is gone anyway).
        """
        kazoo = kazoo_module()
        if self.still_ours:
            # Known to be ours: one request, unless the connection drops under it
            # (then it is looked for below).
            try:
                self.client.delete(self.lock_path)
                self._maybe_made.discard(self.lock_path)
            except kazoo.exceptions.NoNodeError:
                self._maybe_made.discard(self.lock_path)
            except kazoo.exceptions.KazooException:
                pass
        self.held = False
        self.ticket = None
        deadline = time.monotonic() + within_s
        for path in sorted(self._maybe_made):
            try:
                self._remove_if_ours(path, deadline)
            except Exception as error:  # the claim's own error, if any, matters more
                log.warning("could not remove %s from the claim queue: %s", path, error)
        self._maybe_made.clear()

    def _remove_if_ours(self, path: str, deadline: float) -> None:
        """Delete ``path`` if the session that takes the lock made it and still lives.

        The node's owner says whose it is: while the connection is down kazoo
        cannot tell us our session's ID, and after the session ended another
        claimant's node may stand at the path.
        """
        kazoo = kazoo_module()
        from kazoo.handlers.threading import KazooTimeoutError

        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _not_removed(path)
            try:
                # Asked, not assumed; a request sent while the connection is down
                # waits for it to come back.
                stat = self.client.exists_async(path).get(timeout=remaining)
                if stat is None or stat.ephemeralOwner != self.session:
                    break  # gone, or not ours
                if session_of(self.client) != self.session:
                    break  # our session ended, and its nodes with it
                self.client.delete_async(path, version=stat.version).get(timeout=remaining)
                break
            except (kazoo.exceptions.NoNodeError, kazoo.exceptions.SessionExpiredError):
                break  # gone, or our session (and the node with it) is
            except kazoo.exceptions.ConnectionLoss:
                continue  # look again once reconnected
            except KazooTimeoutError:
                raise _not_removed(path) from None
        self._maybe_made.discard(path)


def _not_removed(path: str) -> CoordinatorUnavailable:
    return CoordinatorUnavailable(
        f"could not remove {path}, which our session made, from the claim queue: "
        "ZooKeeper did not answer in time"
    )


def _setter(event: threading.Event) -> Any:
    return lambda _watched: event.set()


_MARKS_PER_LOOK = 8
"""Marks of free IDs read at once: enough to pass a few held-off IDs in one round trip."""

_CANDIDATES = 1
"""IDs picked at random whose marks a look reads with the pool's claims: in a pool
with room, such an ID is most likely free and claimable, and the claim needs no
other read (one more read each would cost every claim a request)."""


@dataclass(frozen=True)
class _Look:
    """The reads of one look at the pool, as sent (kazoo async results)."""

    queue_children: Any
    """java-uniqueid's queue, when it is honoured and not held by us (else None)."""
    pool_children: Any
    marks: dict[int, Any]
    """Marks of IDs read with the pool's claims, by ID."""


class _LockTaken(Exception):
    """A claim meant to land only while the queue lock is free found it held."""


def _mark_of(pending: Any) -> tuple[HighWaterMark | None, int]:
    """A mark and its version from a ``get_async`` result (-1 when there is none)."""
    kazoo = kazoo_module()
    try:
        data, stat = pending.get()
    except kazoo.exceptions.NoNodeError:
        return None, -1
    return HighWaterMark.from_bytes(data), stat.version


class NodeIdCoordinator(ZooKeeperCoordinator):
    """The ZooKeeper driver as service discovery uses it: its root defaults to
    ``/discovery``, and what it claims are elastic node IDs in the groups."""

    default_root = DEFAULT_DISCOVERY_ROOT
    default_space = NODE
    spaces = (NODE,)

    def ensure_node_layout(self, client: Any) -> None:
        self.groups.ensure_layout(client)
