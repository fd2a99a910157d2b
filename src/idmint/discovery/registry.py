"""Service discovery in ZooKeeper: instances registered under their node IDs.

Layout under the discovery root (default ``/discovery``), next to ``nodes``::

    <root>/servicetypes/<service>/<node>                 EPHEMERAL, one per instance;
                                                         JSON {"service", "node", "host",
                                                         "port", "endpoints", "metadata"}
    <root>/endpoints/<endpoint>/<key or _>/<service>:<node>   EPHEMERAL, one per instance
                                                         offering the endpoint (``_`` when it
                                                         has no key)

``<node>`` is the instance's elastic node ID in decimal. Every instance node
lives in the session of the instance's node-ID claim, so a killed instance
disappears within the session timeout, and an instance whose session is lost
claims a node ID again and registers again by itself.

With credentials in the URL, ``servicetypes/<service>`` and
``endpoints/<endpoint>/<key>`` grant READ and CREATE only: no client can
delete another instance's registration; it goes when its owner's session ends
(which is what ``Registration.close()`` does).

>>> discovery = Discovery("zk://127.0.0.1:2181/discovery")          # doctest: +SKIP
>>> with discovery.register("billing", host="10.0.0.7", port=8080,
...                         endpoints=["invoices", "tax:eu"]) as me:  # doctest: +SKIP
...     discovery.resolve("tax", key="eu")                          # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from idmint.clock import Clock
from idmint.coordinate import CoordinatorUrl, connect, driver
from idmint.coordinate.zookeeper import ZooKeeperCoordinator
from idmint.coordinate.zookeeper_groups import NodeIdClaim
from idmint.coordinate.zookeeper_session import kazoo_module, translate_error
from idmint.errors import ConfigurationError, CoordinationError, quoted
from idmint.factory import generator_on

__all__ = ["Discovery", "Endpoint", "Instance", "Registration", "Watch"]

log = logging.getLogger("idmint.discovery")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
NO_KEY = "_"


def _check_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"{kind} {quoted(name)} is not a valid name: use letters, digits, '.', '_' and '-' "
            "(starting with a letter or digit, at most 128 characters)"
        )
    return name


@dataclass(frozen=True)
class Endpoint:
    """An endpoint an instance offers: a name and an optional key (``None``: plain)."""

    name: str
    key: str | None = None

    @classmethod
    def parse(cls, text: str | Endpoint) -> Endpoint:
        """``"name"`` or ``"name:key"``."""
        if isinstance(text, Endpoint):
            return text
        name, colon, key = text.partition(":")
        _check_name("endpoint", name)
        if colon:
            _check_name("endpoint key", key)
            # NO_KEY ("_") cannot be given: names start with a letter or digit.
        return cls(name, key if colon else None)

    @property
    def znode_key(self) -> str:
        return self.key if self.key is not None else NO_KEY

    def __str__(self) -> str:
        return self.name if self.key is None else f"{self.name}:{self.key}"


@dataclass(frozen=True)
class Instance:
    """One registered instance of a service."""

    service: str
    node: int
    host: str | None = None
    port: int | None = None
    endpoints: tuple[Endpoint, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "host": self.host,
            "port": self.port,
            "endpoints": [str(endpoint) for endpoint in self.endpoints],
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_json(cls, service: str, node: int, data: bytes) -> Instance:
        try:
            info = json.loads(data or b"{}")
        except ValueError:
            info = {}
        return cls(
            service=service,
            node=node,
            host=info.get("host"),
            port=info.get("port"),
            endpoints=tuple(Endpoint.parse(e) for e in info.get("endpoints", [])),
            metadata=info.get("metadata") or {},
        )


class Registration:
    """An instance held in discovery until closed; re-registers after a lost session."""

    def __init__(self, discovery: Discovery, claim: NodeIdClaim, instance: Instance) -> None:
        self._discovery = discovery
        self.claim = claim
        self._instance = instance
        self._lock = threading.Lock()
        self._closed = False
        claim.on_reclaimed(lambda _claim: self._write())
        self._write()

    @property
    def node(self) -> int:
        """The instance's node ID (may change after a lost session)."""
        assert self.claim.node is not None
        return self.claim.node

    @property
    def instance(self) -> Instance:
        return Instance(
            service=self._instance.service,
            node=self.node,
            host=self._instance.host,
            port=self._instance.port,
            endpoints=self._instance.endpoints,
            metadata=self._instance.metadata,
        )

    def generator(self, **options: Any) -> Any:
        """An elastic64 generator on this instance's node ID (closing it keeps the claim)."""
        return generator_on(self.claim, "elastic64", **options)

    def _write(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._discovery._write_registration(self.claim, self.instance)

    def close(self) -> None:
        """Deregister: end the instance's session, which removes its znodes."""
        with self._lock:
            self._closed = True
        self.claim.close()

    deregister = close

    def __enter__(self) -> Registration:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Watch:
    """A running watch; ``cancel()`` stops the callbacks."""

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Discovery:
    """Register instances and find them, in ZooKeeper (see the module docs).

    ``url``: ``zk://[user:password@]hosts[/root]?session_timeout=...``; the root
    defaults to ``/discovery``.
    """

    def __init__(self, url: str | CoordinatorUrl, *, clock: Clock | None = None) -> None:
        parsed = CoordinatorUrl.parse(url)
        # Asked of the registry, before anything is connected to.
        if not issubclass(driver(parsed.scheme), ZooKeeperCoordinator):
            raise ConfigurationError(
                "service discovery lives in ZooKeeper; expected a zk:// URL, got "
                f"{parsed.redacted()}"
            )
        coordinator = connect(parsed)
        assert isinstance(coordinator, ZooKeeperCoordinator)
        self.nodes = coordinator
        self.root = coordinator.groups.root
        self._clock = clock
        self._client: Any = None
        self._client_owner = os.getpid()
        self._client_lock = threading.Lock()

    # -- registering -----------------------------------------------------------------------
    def register(
        self,
        service: str,
        *,
        host: str | None = None,
        port: int | None = None,
        endpoints: Iterable[str | Endpoint] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> Registration:
        """Claim a node ID and register an instance of ``service`` under it."""
        _check_name("service", service)
        parsed = tuple(Endpoint.parse(endpoint) for endpoint in endpoints)
        if port is not None and not (isinstance(port, int) and 0 < port < 65536):
            raise ConfigurationError(f"port must be 1..65535, got {port!r}")
        claim = self.nodes.claim(clock=self._clock, space="node")
        assert isinstance(claim, NodeIdClaim)
        try:
            return Registration(
                self,
                claim,
                Instance(service, claim.node or 0, host, port, parsed, dict(metadata or {})),
            )
        except BaseException:
            claim.close()
            raise

    def _write_registration(self, claim: NodeIdClaim, instance: Instance) -> None:
        """Create the instance's znodes in its claim's session, changeable by it alone."""
        kazoo = kazoo_module()
        client = claim.client
        acls = self.nodes.acls()
        owned = claim.owned_acl
        data = json.dumps({"service": instance.service, **instance.to_json()}).encode()
        service_path = f"{self.root}/servicetypes/{instance.service}"
        znodes = [(f"{service_path}/{instance.node}", data)]
        try:
            self._ensure(client, service_path, acls)
            for endpoint in instance.endpoints:
                parent = f"{self.root}/endpoints/{endpoint.name}/{endpoint.znode_key}"
                self._ensure(client, parent, acls)
                znodes.append((f"{parent}/{instance.service}:{instance.node}", b""))
            # One transaction, so a reader never sees the instance without its
            # endpoints (or an endpoint pointing at no instance yet).
            transaction = client.transaction()
            for path, content in znodes:
                transaction.create(path, content, acl=owned, ephemeral=True)
            results = transaction.commit()
            if any(isinstance(result, Exception) for result in results):
                # Typically a retried write whose first attempt landed: make
                # sure each znode is there and ours, one by one.
                for path, content in znodes:
                    self._create_ephemeral(client, path, content, owned)
        except kazoo.exceptions.KazooException as error:
            raise translate_error(error, f"registering {instance.service}") from error

    def _ensure(self, client: Any, path: str, acls: Mapping[str, Any]) -> None:
        kazoo = kazoo_module()
        if client.exists(path) is not None:
            return
        parent = path.rsplit("/", 1)[0]
        if client.exists(parent) is None:
            with contextlib.suppress(kazoo.exceptions.NodeExistsError):
                client.create(parent, b"", acl=acls["tree"], makepath=True)
        # Like the pool of generator IDs: create, no delete, so only an
        # instance's own session can remove its registration.
        with contextlib.suppress(kazoo.exceptions.NodeExistsError):
            client.create(path, b"", acl=acls["pool"])

    def _create_ephemeral(self, client: Any, path: str, data: bytes, acl: list[Any]) -> None:
        kazoo = kazoo_module()
        try:
            client.create(path, data, acl=acl, ephemeral=True)
        except kazoo.exceptions.NodeExistsError:
            _, stat = client.get(path)
            if stat.ephemeralOwner != client.client_id[0]:
                raise CoordinationError(
                    f"{path} is held by another session; is another process using the same node ID?"
                ) from None

    # -- looking up ------------------------------------------------------------------------
    def _reader(self) -> Any:
        with self._client_lock:
            if self._client is None or self._client_owner != os.getpid():
                # A fork child's copy of the parent's session has no reader thread
                # behind it: the child opens its own.
                self._client, _ = self.nodes.client()
                self._client_owner = os.getpid()
            return self._client

    def services(self) -> list[str]:
        """Names of the service types that have (or had) instances."""
        return sorted(self._children(f"{self.root}/servicetypes"))

    def instances(self, service: str) -> list[Instance]:
        """The live instances of ``service``, by node ID."""
        _check_name("service", service)
        names = self._children(f"{self.root}/servicetypes/{service}")
        found = self._read_instances([(service, name) for name in names])
        return sorted(found, key=lambda instance: instance.node)

    def resolve(self, endpoint: str, key: str | None = None) -> list[Instance]:
        """The live instances offering ``endpoint`` (with ``key``, or plain)."""
        wanted = Endpoint.parse(endpoint if key is None else f"{endpoint}:{key}")
        path = f"{self.root}/endpoints/{wanted.name}/{wanted.znode_key}"
        refs = [ref.rpartition(":") for ref in self._children(path)]  # <service>:<node>
        found = self._read_instances([(service, node) for service, _, node in refs])
        return sorted(found, key=lambda instance: (instance.service, instance.node))

    def _read_instances(self, names: list[tuple[str, str]]) -> list[Instance]:
        """The live instances among ``(service, node znode name)``, read pipelined."""
        kazoo = kazoo_module()
        client = self._reader()
        reads = [
            (service, name, client.get_async(f"{self.root}/servicetypes/{service}/{name}"))
            for service, name in names
        ]
        found = []
        for service, name, read in reads:
            try:
                data, _ = read.get()
            except kazoo.exceptions.NoNodeError:
                continue  # left since it was listed
            except kazoo.exceptions.KazooException as error:
                raise translate_error(error, f"reading instances of {service}") from error
            found.append(Instance.from_json(service, int(name), data))
        return found

    def endpoints(self) -> dict[str, dict[str, list[int]]]:
        """``{endpoint: {key or "_": [node IDs]}}`` for every endpoint with instances."""
        table: dict[str, dict[str, list[int]]] = {}
        for name in sorted(self._children(f"{self.root}/endpoints")):
            keys: dict[str, list[int]] = {}
            for key in sorted(self._children(f"{self.root}/endpoints/{name}")):
                refs = self._children(f"{self.root}/endpoints/{name}/{key}")
                nodes = sorted(int(ref.rpartition(":")[2]) for ref in refs)
                if nodes:
                    keys[key] = nodes
            if keys:
                table[name] = keys
        return table

    def snapshot(self, service: str | None = None) -> dict[str, Any]:
        """What ``idmint discovery list --format json`` prints."""
        names = [service] if service is not None else self.services()
        services = {name: [i.to_json() for i in self.instances(name)] for name in names}
        endpoints = self.endpoints()
        if service is not None:
            nodes = {entry["node"] for entry in services[service]}
            endpoints = {
                name: {k: [n for n in v if n in nodes] for k, v in keys.items() if set(v) & nodes}
                for name, keys in endpoints.items()
            }
            endpoints = {name: keys for name, keys in endpoints.items() if keys}
        return {
            "services": {name: entries for name, entries in services.items() if entries},
            "endpoints": endpoints,
        }

    def _children(self, path: str) -> list[str]:
        kazoo = kazoo_module()
        try:
            return list(self._reader().get_children(path))
        except kazoo.exceptions.NoNodeError:
            return []
        except kazoo.exceptions.KazooException as error:
            raise translate_error(error, f"reading {path}") from error

    # -- watching ----------------------------------------------------------------------------
    def watch_service(self, service: str, callback: Callable[[str, Instance], None]) -> Watch:
        """Call ``callback("join" | "leave", instance)`` as instances come and go.

        Instances present when the watch starts are reported as joins. The
        callback runs in kazoo's callback thread: keep it short.
        """
        _check_name("service", service)
        path = f"{self.root}/servicetypes/{service}"
        return self._watch(path, lambda names: {int(n): n for n in names}, service, callback)

    def watch_endpoint(
        self,
        endpoint: str,
        callback: Callable[[str, Instance], None],
        key: str | None = None,
    ) -> Watch:
        """Like :meth:`watch_service`, for the instances offering an endpoint."""
        wanted = Endpoint.parse(endpoint if key is None else f"{endpoint}:{key}")
        path = f"{self.root}/endpoints/{wanted.name}/{wanted.znode_key}"
        return self._watch(path, lambda names: {n: n for n in names}, None, callback)

    def _watch(
        self,
        path: str,
        index: Callable[[list[str]], Mapping[Any, str]],
        service: str | None,
        callback: Callable[[str, Instance], None],
    ) -> Watch:
        kazoo_module()  # says which extra to install when kazoo is missing
        from kazoo.recipe.watchers import ChildrenWatch

        client = self._reader()
        handle = Watch()
        known: dict[Any, Instance] = {}
        acls = self.nodes.acls()
        self._ensure(client, path, acls)

        def on_children(names: list[str]) -> bool | None:
            if handle.cancelled:
                return False  # tells kazoo to stop watching
            current = index(names)
            for key in sorted(set(known) - set(current)):
                callback("leave", known.pop(key))
            for key in sorted(set(current) - set(known)):
                instance = self._lookup(service, current[key])
                known[key] = instance
                callback("join", instance)
            return None

        ChildrenWatch(client, path, on_children)
        return handle

    def _lookup(self, service: str | None, name: str) -> Instance:
        """The instance a znode name stands for; ``service=None``: an endpoint ref.

        An instance already gone is just its service and node (a watch still
        reports who left).
        """
        kazoo = kazoo_module()
        if service is None:  # an endpoint ref: <service>:<node>
            service, _, name = name.rpartition(":")
        try:
            data, _ = self._reader().get(f"{self.root}/servicetypes/{service}/{name}")
        except kazoo.exceptions.NoNodeError:
            return Instance(service=service, node=int(name))
        return Instance.from_json(service, int(name), data)

    def close(self) -> None:
        with self._client_lock:
            if self._client is not None and self._client_owner != os.getpid():
                self._client = None  # the parent's session: only the parent ends it
            if self._client is not None:
                self._client.stop()
                self._client.close()
                self._client = None

    def __enter__(self) -> Discovery:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
