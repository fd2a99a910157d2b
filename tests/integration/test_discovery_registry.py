"""Service discovery in real ZooKeeper: register, look up, watch, sessions, ACLs, CLI.

What :mod:`idmint.discovery.registry` and ``idmint discovery`` promise:

* registered instances (with plain and keyed endpoints) are what ``services()``,
  ``instances()``, ``resolve()``, ``endpoints()`` and ``snapshot()`` return, and
  watches report them joining and leaving;
* an instance lives in its node-ID claim's session: a killed process disappears
  within the session timeout; an expired session registers again by itself; losing
  one member of a 3-node ensemble costs nothing;
* with credentials, no other client - not even one with the same credentials - can
  delete or overwrite an instance's znodes;
* the CLI prints the node ID and holds the registration until SIGTERM (status 143,
  gone at once), lists it as text and JSON, and answers bad input with status 2 and
  one line on stderr.

"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Callable, Iterator

import pytest
from kazoo.exceptions import NoAuthError
from tests.integration.discovery_helpers import (
    CliProcess,
    EventLog,
    assert_one_error_line,
    raw_client,
    run_idmint,
    serving_member,
    unique_root,
    wait_for,
    zk_url,
)
from tests.servers.zookeeper import ZooKeeperEnsemble, expire_session

from idmint.coordinate.base import ClaimState
from idmint.coordinate.url import parse_url
from idmint.discovery import Discovery, Endpoint, Instance, NodeIdCoordinator, Registration
from idmint.errors import ConfigurationError


@contextlib.contextmanager
def registered(discovery: Discovery, service: str, **options: object) -> Iterator[Registration]:
    registration = discovery.register(service, **options)  # type: ignore[arg-type]
    try:
        yield registration
    finally:
        registration.close()


REGISTER = ("discovery", "register", "--coordinator")
"""``idmint discovery register --coordinator``: the URL follows."""

BILLING_EU: dict[str, object] = {
    "host": "10.0.0.7",
    "port": 8080,
    "endpoints": ["invoices", "tax:eu"],
}
"""An instance of the billing service, as the tests register it."""


def nodes_of(instances: list[Instance]) -> list[int]:
    return [instance.node for instance in instances]


# -- register, look up, watch ---------------------------------------------------------------


def test_registered_instances_are_listed_resolved_and_snapshotted(zk: ZooKeeperEnsemble) -> None:
    url = zk_url(zk, unique_root(), session_timeout=4)
    with contextlib.ExitStack() as stack:
        discovery = stack.enter_context(Discovery(url))
        billing1 = stack.enter_context(
            registered(discovery, "billing", **BILLING_EU, metadata={"zone": "a", "weight": 3})
        )
        billing2 = stack.enter_context(
            registered(
                discovery, "billing", host="10.0.0.8", port=8080, endpoints=["invoices", "tax:us"]
            )
        )
        shipping = stack.enter_context(
            registered(
                discovery,
                "shipping",
                host="10.0.0.9",
                port=9090,
                endpoints=[Endpoint("tax", "eu"), "labels"],
            )
        )
        b1, b2, sh = billing1.node, billing2.node, shipping.node
        assert (b1, b2, sh) == (8, 9, 10)  # first gaps of group 0

        # Looked up through another Discovery (its own session): nothing is cached.
        reader = stack.enter_context(Discovery(url))
        first = Instance(
            "billing",
            b1,
            "10.0.0.7",
            8080,
            (Endpoint("invoices"), Endpoint("tax", "eu")),
            {"zone": "a", "weight": 3},
        )
        second = Instance(
            "billing", b2, "10.0.0.8", 8080, (Endpoint("invoices"), Endpoint("tax", "us")), {}
        )
        third = Instance(
            "shipping", sh, "10.0.0.9", 9090, (Endpoint("tax", "eu"), Endpoint("labels")), {}
        )
        assert billing1.instance == first
        assert reader.services() == ["billing", "shipping"]
        assert reader.instances("billing") == [first, second]
        assert reader.instances("shipping") == [third]
        assert reader.instances("nobody") == []
        assert reader.resolve("invoices") == [first, second]
        assert reader.resolve("tax", key="eu") == [first, third]
        assert reader.resolve("tax:eu") == [first, third]
        assert reader.resolve("tax", key="us") == [second]
        assert reader.resolve("tax") == []  # nobody offers tax without a key
        assert reader.resolve("labels") == [third]
        assert reader.resolve("nothing") == []
        endpoints = {
            "invoices": {"_": [b1, b2]},
            "labels": {"_": [sh]},
            "tax": {"eu": [b1, sh], "us": [b2]},
        }
        assert reader.endpoints() == endpoints
        assert reader.snapshot() == {
            "services": {
                "billing": [first.to_json(), second.to_json()],
                "shipping": [third.to_json()],
            },
            "endpoints": endpoints,
        }
        assert reader.snapshot("billing") == {
            "services": {"billing": [first.to_json(), second.to_json()]},
            "endpoints": {"invoices": {"_": [b1, b2]}, "tax": {"eu": [b1], "us": [b2]}},
        }
        assert first.to_json() == {
            "node": b1,
            "host": "10.0.0.7",
            "port": 8080,
            "endpoints": ["invoices", "tax:eu"],
            "metadata": {"zone": "a", "weight": 3},
        }

        # The instance's generator mints on its node ID.
        generator = billing1.generator()
        try:
            assert {value.node for value in generator.batch(10)} == {b1}
        finally:
            generator.close()
        assert billing1.claim.state is ClaimState.ACTIVE  # closing the generator kept it

        # Closing a registration removes it at once (its session ends).
        billing2.close()
        assert reader.instances("billing") == [first]
        assert reader.resolve("tax", key="us") == []
        assert reader.endpoints() == {
            "invoices": {"_": [b1]},
            "labels": {"_": [sh]},
            "tax": {"eu": [b1, sh]},
        }


@pytest.mark.parametrize(
    ("service", "options", "message"),
    [
        ("bill ing", {}, "service 'bill ing' is not a valid name"),
        ("billing", {"endpoints": ["tax/eu"]}, "endpoint 'tax/eu' is not a valid name"),
        ("billing", {"endpoints": ["tax:"]}, "endpoint key '' is not a valid name"),
        ("billing", {"endpoints": ["tax:_"]}, "endpoint key '_' is not a valid name"),
        ("billing", {"port": 0}, "port must be 1..65535"),
    ],
    ids=["service", "endpoint", "empty-key", "reserved-key", "port"],
)
def test_bad_registrations_are_refused_before_claiming(
    zk: ZooKeeperEnsemble, service: str, options: dict[str, object], message: str
) -> None:
    root = unique_root()
    with Discovery(zk_url(zk, root)) as discovery, pytest.raises(ConfigurationError, match=message):
        discovery.register(service, **options)  # type: ignore[arg-type]
    with raw_client(zk) as observer:
        assert observer.exists(root) is None  # nothing claimed, nothing created


def test_watches_report_instances_joining_and_leaving(zk: ZooKeeperEnsemble) -> None:
    url = zk_url(zk, unique_root(), session_timeout=4)
    with contextlib.ExitStack() as stack:
        discovery = stack.enter_context(Discovery(url))
        watcher = stack.enter_context(Discovery(url))
        first = stack.enter_context(registered(discovery, "billing", endpoints=["tax:eu"]))
        service_log, endpoint_log, witness = EventLog(), EventLog(), EventLog()
        service_watch = watcher.watch_service("billing", service_log)
        endpoint_watch = watcher.watch_endpoint("tax", endpoint_log, key="eu")
        # Instances there when the watch starts are reported as joins.
        service_log.wait("join", first.node, timeout=10)
        endpoint_log.wait("join", first.node, timeout=10)

        second = discovery.register("billing", host="10.0.0.8", port=81, endpoints=["tax:eu"])
        stack.callback(second.close)
        service_log.wait("join", second.node, timeout=10)
        endpoint_log.wait("join", second.node, timeout=10)
        # Instances of other services, or other keys, are not reported.
        stack.enter_context(registered(discovery, "shipping", endpoints=["tax:us"]))
        stack.enter_context(registered(discovery, "billing-eu", endpoints=["tax"]))
        second.close()
        service_log.wait("leave", second.node, timeout=10)
        endpoint_log.wait("leave", second.node, timeout=10)

        assert service_log.events == [
            ("join", first.instance),
            ("join", second.instance),
            ("leave", second.instance),
        ]
        assert [(kind, i.service, i.node) for kind, i in endpoint_log.events] == [
            ("join", "billing", first.node),
            ("join", "billing", second.node),
            ("leave", "billing", second.node),
        ]
        # A cancelled watch reports nothing more. The witness, registered after it on
        # the same path and client, is called after it for every change.
        service_watch.cancel()
        endpoint_watch.cancel()
        seen = (list(service_log.events), list(endpoint_log.events))
        watcher.watch_service("billing", witness)
        third = stack.enter_context(registered(discovery, "billing", endpoints=["tax:eu"]))
        witness.wait("join", third.node, timeout=10)
        assert (service_log.events, endpoint_log.events) == seen


# -- sessions ------------------------------------------------------------------------------


def test_a_killed_instance_disappears_within_the_session_timeout(zk: ZooKeeperEnsemble) -> None:
    session_timeout = 2.0
    url = zk_url(zk, unique_root(), session_timeout=session_timeout)
    with Discovery(url) as discovery, contextlib.ExitStack() as stack:
        process = stack.enter_context(
            CliProcess(
                *REGISTER,
                url,
                "--service",
                "billing",
                "--endpoint",
                "tax:eu",
            )
        )
        process.wait_for_lines(1, timeout=30)
        node = int(process.lines[0])
        assert nodes_of(discovery.instances("billing")) == [node]
        assert nodes_of(discovery.resolve("tax", key="eu")) == [node]
        log = EventLog()
        discovery.watch_service("billing", log)
        log.wait("join", node, timeout=10)

        process.popen.kill()
        killed_at = time.monotonic()
        assert process.wait(10) == -signal.SIGKILL
        gone_at = wait_for(
            lambda: discovery.instances("billing") == [],
            timeout=session_timeout + 10,
            what="the killed instance to disappear",
        )
        log.wait("leave", node, timeout=5)
        elapsed = gone_at - killed_at
        print(f"[kill] instance gone {elapsed:.2f} s after SIGKILL (session {session_timeout} s)")
        # Its session expired: not before a good part of the timeout, and within it
        # (plus the server's 0.5 s tick and this poll).
        assert session_timeout / 2 <= elapsed <= session_timeout + 1.5
        assert discovery.resolve("tax", key="eu") == []
        assert discovery.endpoints() == {}
        assert node not in discovery.nodes.list_nodes()


def test_a_registration_comes_back_after_its_session_expires(zk: ZooKeeperEnsemble) -> None:
    root = unique_root()
    url = zk_url(zk, root, session_timeout=4)
    with contextlib.ExitStack() as stack:
        discovery = stack.enter_context(Discovery(url))
        reader = stack.enter_context(Discovery(url))
        observer = stack.enter_context(raw_client(zk))
        registration = stack.enter_context(
            registered(discovery, "billing", **BILLING_EU, metadata={"zone": "a"})
        )
        generator = registration.generator()
        stack.callback(generator.close)
        before = generator.generate()
        old_session = registration.claim.client.client_id[0]

        expire_session(registration.claim.client)

        def back() -> bool:
            client_id = registration.claim.client.client_id
            if registration.claim.state is not ClaimState.ACTIVE or client_id is None:
                return False
            if client_id[0] == old_session:
                return False
            stat = observer.exists(f"{root}/servicetypes/billing/{registration.node}")
            return stat is not None and stat.ephemeralOwner == client_id[0]

        wait_for(back, timeout=8, what="the registration to come back in a new session")
        node = registration.node
        assert reader.instances("billing") == [registration.instance]
        assert registration.instance.endpoints == (Endpoint("invoices"), Endpoint("tax", "eu"))
        assert registration.instance.metadata == {"zone": "a"}
        assert reader.resolve("tax", key="eu") == [registration.instance]
        assert reader.endpoints() == {"invoices": {"_": [node]}, "tax": {"eu": [node]}}
        assert list(discovery.nodes.list_nodes()) == [node]
        # The generator follows the claim to its (possibly new) node ID, later in time.
        after = generator.generate()
        assert after.node == node
        assert after.timestamp_ms >= before.timestamp_ms
        assert after.int != before.int


def test_a_registration_survives_losing_one_of_three_members(zk3: ZooKeeperEnsemble) -> None:
    root = unique_root()
    url = zk_url(zk3, root, session_timeout=8)
    with contextlib.ExitStack() as stack:
        discovery = stack.enter_context(Discovery(url))
        registration = stack.enter_context(registered(discovery, "billing", endpoints=["tax:eu"]))
        generator = registration.generator()
        stack.callback(generator.close)
        generator.generate()
        node = registration.node
        session = registration.claim.client.client_id[0]
        member = serving_member(zk3, session)
        assert member is not None, "cannot tell which member serves the registration"
        other = (member + 1) % 3
        reader = stack.enter_context(Discovery(zk_url(zk3, root, hosts=zk3.member_hosts(other))))
        observer = stack.enter_context(raw_client(zk3, hosts=zk3.member_hosts(other)))
        path = f"{root}/servicetypes/billing/{node}"

        with zk3.member_stopped(member):
            # The claim moves to another member within the session timeout, same session.
            wait_for(
                lambda: (
                    serving_member(zk3, session) not in (None, member)
                    and registration.claim.state is ClaimState.ACTIVE
                ),
                timeout=30,
                what="the registration's session to move to another member",
            )
            assert registration.claim.client.client_id[0] == session
            assert registration.node == node
            stat = observer.exists(path)
            assert stat is not None
            assert stat.ephemeralOwner == session
            assert nodes_of(reader.instances("billing")) == [node]
            assert nodes_of(reader.resolve("tax", key="eu")) == [node]
            assert generator.generate().node == node
        assert nodes_of(reader.instances("billing")) == [node]
        stat = observer.exists(path)
        assert stat is not None
        assert stat.ephemeralOwner == session


# -- ACLs ------------------------------------------------------------------------------------

CREDENTIALS = ("discovery", "s3cret:pass")


def test_registration_with_credentials_works_and_hides_from_other_users(
    zk_auth: ZooKeeperEnsemble,
) -> None:
    root = unique_root()
    url = zk_url(zk_auth, root, credentials=CREDENTIALS, session_timeout=4)
    with Discovery(url) as discovery, registered(discovery, "billing") as registration:
        assert nodes_of(discovery.instances("billing")) == [registration.node]
        with raw_client(zk_auth, auth=("someone", "else")) as stranger:
            with pytest.raises(NoAuthError):
                stranger.get(f"{root}/servicetypes/billing/{registration.node}")
            with pytest.raises(NoAuthError):
                stranger.create(f"{root}/servicetypes/billing/12345", b"{}", ephemeral=True)


@pytest.mark.parametrize(
    ("target", "action"),
    [
        ("registration", "delete"),
        ("registration", "set"),
        ("endpoint", "delete"),
        ("endpoint", "set"),
        ("node ID", "delete"),
        ("node ID", "set"),
    ],
)
def test_others_with_the_same_credentials_cannot_touch_an_instance(
    zk_auth: ZooKeeperEnsemble, target: str, action: str
) -> None:
    root = unique_root()
    url = zk_url(zk_auth, root, credentials=CREDENTIALS, session_timeout=4)
    with contextlib.ExitStack() as stack:
        discovery = stack.enter_context(Discovery(url))
        registration = stack.enter_context(registered(discovery, "billing", endpoints=["tax:eu"]))
        node = registration.node
        assert nodes_of(discovery.instances("billing")) == [node]
        path = {
            "registration": f"{root}/servicetypes/billing/{node}",
            "endpoint": f"{root}/endpoints/tax/eu/billing:{node}",
            "node ID": f"{root}/nodes/{node >> 8:02X}/{node & 0xFF:02X}",
        }[target]
        other = stack.enter_context(raw_client(zk_auth, auth=CREDENTIALS))
        data, _ = other.get(path)  # readable with the credentials
        attempt: Callable[[], object] = (
            (lambda: other.delete(path))
            if action == "delete"
            else (lambda: other.set(path, b'{"forged": true}'))
        )
        with pytest.raises(NoAuthError):
            attempt()
        assert other.get(path)[0] == data
        assert nodes_of(discovery.instances("billing")) == [node]
        assert nodes_of(discovery.resolve("tax", key="eu")) == [node]


def test_node_id_znodes_cannot_be_deleted_by_others_with_the_same_credentials(
    zk_auth: ZooKeeperEnsemble,
) -> None:
    """The group ACLs on their own (a node-ID claim cannot be made yet; see above).

    The layout comes from ``NodeIdCoordinator.ensure_node_layout``; the node znode is
    created as ``_create_node`` creates it, in its holder's session with the claim ACL.
    """
    root = unique_root()
    url = zk_url(zk_auth, root, credentials=CREDENTIALS)
    coordinator = NodeIdCoordinator(parse_url(url))
    path = f"{root}/nodes/00/08"
    with (
        raw_client(zk_auth, auth=CREDENTIALS) as holder,
        raw_client(zk_auth, auth=CREDENTIALS) as other,
    ):
        coordinator.ensure_node_layout(holder)
        holder.create(path, b"{}", acl=coordinator.acls()["claim"], ephemeral=True)
        with pytest.raises(NoAuthError):
            other.delete(path)
        stat = other.exists(path)
        assert stat is not None
        assert stat.ephemeralOwner == holder.client_id[0]


# -- the CLI --------------------------------------------------------------------------------


def test_cli_register_holds_lists_and_leaves_on_sigterm(zk: ZooKeeperEnsemble) -> None:
    root = unique_root()
    # A long session timeout: the registration must go because it is closed, not expired.
    url = zk_url(zk, root, session_timeout=20)
    with CliProcess(
        *REGISTER,
        url,
        "--service",
        "billing",
        "--endpoint",
        "invoices",
        "--endpoint",
        "tax:eu",
        "--host",
        "10.0.0.7",
        "--port",
        "8080",
        "--metadata",
        "zone=a",
        "--metadata",
        "tier=gold",
    ) as process:
        process.wait_for_lines(1, timeout=30)
        node = int(process.lines[0])
        assert node == 8

        listed = run_idmint("discovery", "list", "--coordinator", url, "--format", "json")
        assert listed.returncode == 0, listed.stderr
        expected = {
            "services": {
                "billing": [
                    {
                        "node": node,
                        "host": "10.0.0.7",
                        "port": 8080,
                        "endpoints": ["invoices", "tax:eu"],
                        "metadata": {"zone": "a", "tier": "gold"},
                    }
                ]
            },
            "endpoints": {"invoices": {"_": [node]}, "tax": {"eu": [node]}},
        }
        assert json.loads(listed.stdout) == expected
        only = run_idmint(
            "discovery", "list", "--coordinator", url, "--service", "billing", "--format", "json"
        )
        assert json.loads(only.stdout) == expected
        none = run_idmint(
            "discovery", "list", "--coordinator", url, "--service", "nobody", "--format", "json"
        )
        assert json.loads(none.stdout) == {"services": {}, "endpoints": {}}
        text = run_idmint("discovery", "list", "--coordinator", url)
        assert text.returncode == 0, text.stderr
        assert text.stdout.splitlines() == [
            "billing",
            f"  node {node:<6} {'10.0.0.7:8080':24} endpoints: invoices, tax:eu",
            f"endpoint invoices [_]: nodes {node}",
            f"endpoint tax [eu]: nodes {node}",
        ]
        assert process.running, "register did not hold the registration"
        assert process.lines == [str(node)]

        process.send(signal.SIGTERM)
        assert process.wait(30) == 143
        assert "Traceback" not in process.stderr, process.stderr
        assert process.lines == [str(node)]
        with Discovery(url) as discovery:
            assert discovery.instances("billing") == []
            assert discovery.endpoints() == {}
            assert discovery.nodes.list_nodes() == {}
    after = run_idmint("discovery", "list", "--coordinator", url, "--format", "json")
    assert json.loads(after.stdout) == {"services": {}, "endpoints": {}}


ZK = "<zk>"
"""Stands for the URL of the test server (and a fresh root) in the cases below."""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((*REGISTER, ZK), "the following arguments are required: --service"),
        ((*REGISTER, ZK, "--service", "billing", "--endpoint", "tax/eu"), "endpoint 'tax/eu'"),
        ((*REGISTER, ZK, "--service", "billing", "--endpoint", "tax:_"), "key '_' is not a"),
        ((*REGISTER, ZK, "--service", "bill ing"), "service 'bill ing' is not a valid name"),
        ((*REGISTER, ZK, "--service", "billing", "--metadata", "novalue"), "wants K=V"),
        ((*REGISTER, ZK, "--service", "billing", "--port", "70000"), "port must be 1..65535"),
        ((*REGISTER, ZK, "--service", "billing", "--port", "eighty"), "'eighty' is not an"),
        ((*REGISTER, "127.0.0.1:2181/d", "--service", "billing"), "is not a URL"),
        ((*REGISTER, "zk:///d", "--service", "billing"), "give at least one host:port"),
        ((*REGISTER, "etcd://127.0.0.1:1/d", "--service", "billing"), "expected a zk:// URL"),
        ((*REGISTER, "zk://127.0.0.1:1/d?bogus=1", "--service", "billing"), "bogus"),
        ((*REGISTER, "zk://127.0.0.1:1/d?group_size=4", "--service", "b"), "group_size 4"),
        (("discovery", "list", "--coordinator", "zk:///d"), "give at least one host:port"),
        (("discovery", "list", "--coordinator", ZK, "--format", "yaml"), "invalid choice"),
    ],
    ids=[
        "missing-service",
        "bad-endpoint",
        "reserved-key",
        "bad-service",
        "bad-metadata",
        "port-range",
        "port-not-int",
        "not-a-url",
        "no-hosts",
        "not-zookeeper",
        "unknown-option",
        "bad-group-size",
        "list-no-hosts",
        "list-bad-format",
    ],
)
def test_cli_rejects_bad_input_with_one_line(
    zk: ZooKeeperEnsemble, argv: tuple[str, ...], message: str
) -> None:
    """Status 2, nothing on stdout, one line on stderr, and nothing claimed."""
    root = unique_root()
    url = zk_url(zk, root)
    result = run_idmint(*(url if word == ZK else word for word in argv))
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    line = assert_one_error_line(result.stderr)
    assert message in line
    with raw_client(zk) as observer:
        assert observer.exists(root) is None
