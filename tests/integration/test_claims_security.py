"""Claims on coordinators that authenticate: ZooKeeper digest ACLs, etcd TLS and users.

``zk_auth`` refuses clients that have not authenticated (any ``user:password``
authenticates with the digest scheme; ACLs decide what each may touch).
``etcd_secure`` serves HTTPS from a private CA and has authentication enabled.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import time
from collections.abc import Iterator
from typing import Protocol

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE, Permissions, make_digest_acl
from tests.integration.claims_helpers import (
    Backend,
    held_generators,
    holder_of_this_process,
    run_idmint,
)
from tests.servers.etcd import EtcdCluster
from tests.servers.zookeeper import ZooKeeperEnsemble

from idmint import (
    ConfigurationError,
    CoordinatorRefused,
    PoolExhausted,
    new_generator,
)

USER = "idmint"


class KazooFactory(Protocol):
    """What the ``kazoo_as`` fixture gives: a started client for a user and password."""

    def __call__(self, user: str, secret: str) -> KazooClient: ...


@pytest.fixture
def password() -> str:
    return f"pw-{secrets.token_urlsafe(12)}"


@pytest.fixture
def zk_secure(zk_auth: ZooKeeperEnsemble, password: str) -> Backend:
    """The authenticating ZooKeeper, with URLs carrying ``idmint:<password>``."""
    return Backend("zk", zk_auth, credentials=(USER, password))


@pytest.fixture
def kazoo_as(zk_auth: ZooKeeperEnsemble) -> Iterator[KazooFactory]:
    """kazoo clients authenticated as ``(user, password)``, closed after the test."""
    clients: list[KazooClient] = []

    def connect(user: str, secret: str) -> KazooClient:
        client = KazooClient(hosts=zk_auth.hosts, auth_data=[("digest", f"{user}:{secret}")])
        clients.append(client)
        client.start(timeout=15)
        return client

    yield connect
    for client in clients:
        client.stop()
        client.close()


CREDENTIALS_HINT = re.compile(r"user:password|credential", re.IGNORECASE)


def test_zk_claims_work_with_credentials(
    zk_secure: Backend, password: str, exit_stack: contextlib.ExitStack
) -> None:
    root = zk_secure.new_root()
    url = zk_secure.url(root)
    generator = exit_stack.enter_context(new_generator("uid64", coordinator=url))
    values = generator.batch(5_000).ints()
    assert len(set(values)) == len(values)
    held = held_generators(zk_secure, url)
    assert set(held) == {generator.generator}
    assert held[generator.generator].holder == holder_of_this_process()

    minted = run_idmint("generate", "--coordinator", url, "--count", "1000")
    assert minted.returncode == 0, minted.stderr
    assert len(set(minted.stdout.split())) == 1_000
    assert password not in minted.stderr


def test_zk_acls_protect_the_pool(
    zk_secure: Backend, zk_auth: ZooKeeperEnsemble, exit_stack: contextlib.ExitStack
) -> None:
    """The documented ACLs, for the URL's user: pool READ+CREATE, its claim nodes READ
    (a claimant may also give its own session's identity rights on its node), the rest
    ALL; nothing for anyone else."""
    root = zk_secure.new_root()
    generator = exit_stack.enter_context(new_generator("uid64", coordinator=zk_secure.url(root)))
    admin = KazooClient(hosts=zk_auth.hosts, auth_data=[zk_auth.super_auth])
    admin.start(timeout=15)
    exit_stack.callback(admin.close)
    exit_stack.callback(admin.stop)

    def perms(path: str) -> tuple[set[int], list[str]]:
        """The URL user's permissions on ``path``, and every other identity listed."""
        acls, _ = admin.get_acls(path)
        mine = {acl.perms for acl in acls if acl.id.id.split(":")[0] == USER}
        others = [f"{acl.id.scheme}:{acl.id.id}" for acl in acls if acl.id.id.split(":")[0] != USER]
        assert all(acl.id.scheme == "digest" for acl in acls), acls  # never world:anyone
        return mine, others

    assert perms(f"{root}/pool") == ({Permissions.READ | Permissions.CREATE}, [])
    claim_node, _ = perms(f"{root}/pool/{generator.generator}")
    assert claim_node == {Permissions.READ}
    for path in (root, f"{root}/queue", f"{root}/hwm", f"{root}/cluster-id"):
        assert perms(path) == ({Permissions.ALL}, []), path


def test_zk_without_credentials_fails_clearly(zk_auth: ZooKeeperEnsemble) -> None:
    anonymous = Backend("zk", zk_auth)
    url = anonymous.url(connect_timeout=2)
    with pytest.raises(CoordinatorRefused, match=CREDENTIALS_HINT):
        new_generator("uid64", coordinator=url)

    result = run_idmint("generate", "--coordinator", url, "--count", "3")
    assert result.returncode == 77, "EX_NOPERM: the coordinator refused us"
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("idmint: error:")]
    assert len(errors) == 1, result.stderr
    assert CREDENTIALS_HINT.search(errors[0])


@pytest.mark.parametrize("who", ["wrong password", "other user"])
def test_zk_other_credentials_are_locked_out(
    zk_secure: Backend,
    zk_auth: ZooKeeperEnsemble,
    password: str,
    kazoo_as: KazooFactory,
    who: str,
    exit_stack: contextlib.ExitStack,
) -> None:
    root = zk_secure.new_root()
    generator = exit_stack.enter_context(new_generator("uid64", coordinator=zk_secure.url(root)))
    claimed = generator.generator
    stranger = (USER, "not-" + password) if who == "wrong password" else ("mallory", password)

    with pytest.raises(CoordinatorRefused, match=CREDENTIALS_HINT) as refused:
        new_generator("uid64", coordinator=zk_secure.url(root, credentials=stranger))
    assert password not in str(refused.value)

    client = kazoo_as(*stranger)
    with pytest.raises(NoAuthError):
        client.get(f"{root}/hwm/{claimed}")
    with pytest.raises(NoAuthError):
        client.set(f"{root}/hwm/{claimed}", b'{"ceiling_ms": 0}')
    with pytest.raises(NoAuthError):
        client.delete(f"{root}/pool/{claimed}")
    with pytest.raises(NoAuthError):
        client.create(f"{root}/pool/{claimed + 1}", b"", ephemeral=True)
    assert generator.batch(100)
    assert set(held_generators(zk_secure, zk_secure.url(root))) == {claimed}


def test_zk_claim_node_cannot_be_deleted_or_changed_with_the_same_credentials(
    zk_secure: Backend, password: str, kazoo_as: KazooFactory, exit_stack: contextlib.ExitStack
) -> None:
    root = zk_secure.new_root()
    url = zk_secure.url(root)
    generator = exit_stack.enter_context(new_generator("uid64", coordinator=url))
    node = f"{root}/pool/{generator.generator}"
    other = kazoo_as(USER, password)  # the same user, in another session
    data, stat = other.get(node)  # readable

    with pytest.raises(NoAuthError):
        other.delete(node)
    with pytest.raises(NoAuthError):
        other.set(node, b'{"holder": "someone else"}')
    with pytest.raises(NoAuthError):
        other.set_acls(node, OPEN_ACL_UNSAFE)
    with pytest.raises(NoAuthError):
        other.set_acls(f"{root}/pool", [make_digest_acl(USER, password, all=True)])

    assert other.get(node) == (data, stat)
    first = generator.batch(1_000).ints()
    assert len(set(first)) == len(first)
    assert set(held_generators(zk_secure, url)) == {generator.generator}


def test_zk_password_is_never_printed(
    zk_secure: Backend, password: str, exit_stack: contextlib.ExitStack
) -> None:
    root = zk_secure.new_root()
    url = zk_secure.url(root, generators="0-0", claim_timeout=0.5)
    exit_stack.enter_context(new_generator("uid64", coordinator=url))
    messages: list[str] = []
    for bad in (url, zk_secure.url(root, generators="0-0", bogus=1)):
        with pytest.raises((PoolExhausted, ConfigurationError)) as failed:
            new_generator("uid64", coordinator=bad)
        messages.append(str(failed.value))
    bad_scheme = url.replace("zk://", "zookeeper2://", 1)
    with pytest.raises(ConfigurationError) as unknown:
        new_generator("uid64", coordinator=bad_scheme)
    messages.append(str(unknown.value))
    for arguments in (
        ("generate", "--coordinator", url, "--count", "1"),
        ("generate", "--coordinator", bad_scheme),
        ("claims", "list", "--coordinator", url),
        ("claims", "list", "--coordinator", url, "--format", "json"),
    ):
        result = run_idmint(*arguments)
        messages += [result.stdout, result.stderr]

    leaked = [message for message in messages if password in message]
    assert not leaked, f"the password was printed: {leaked}"


# -- etcd over TLS with users --------------------------------------------------------------


def _etcd_secure(etcd_secure: EtcdCluster, *, password: str | None = None) -> Backend:
    user = etcd_secure.user_credentials
    assert user is not None
    return Backend(
        "etcd",
        etcd_secure,
        credentials=(user.user, password if password is not None else user.password),
        tls=True,
        ca_path=etcd_secure.ca_path,
        root_prefix=etcd_secure.auth_prefix,
    )


def test_etcd_claims_work_over_tls_with_credentials(
    etcd_secure: EtcdCluster, exit_stack: contextlib.ExitStack
) -> None:
    backend = _etcd_secure(etcd_secure)
    url = backend.url()
    first = exit_stack.enter_context(new_generator("uid64", coordinator=url))
    second = exit_stack.enter_context(new_generator("uid64", coordinator=url))
    assert first.generator != second.generator
    values = first.batch(5_000).ints() + second.batch(5_000).ints()
    assert len(set(values)) == len(values)
    held = held_generators(backend, url)
    assert set(held) == {first.generator, second.generator}
    assert {row.holder for row in held.values()} == {holder_of_this_process()}

    minted = run_idmint("generate", "--coordinator", url, "--count", "1000")
    assert minted.returncode == 0, minted.stderr
    assert len(set(minted.stdout.split())) == 1_000


def test_etcd_wrong_password_fails_clearly(etcd_secure: EtcdCluster) -> None:
    wrong = f"wrong-{secrets.token_urlsafe(8)}"
    url = _etcd_secure(etcd_secure, password=wrong).url(connect_timeout=3)
    started = time.monotonic()
    with pytest.raises(CoordinatorRefused) as refused:
        new_generator("uid64", coordinator=url)
    # Refused is final: it is said at once, not after connect_timeout of retries.
    assert time.monotonic() - started < 3
    message = str(refused.value)
    assert re.search(r"password|credential|authenticat", message, re.IGNORECASE), message
    assert wrong not in message

    result = run_idmint("generate", "--coordinator", url, "--count", "3")
    assert result.returncode == 77, "EX_NOPERM: the coordinator refused us"
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert wrong not in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr


def test_etcd_untrusted_certificate_fails_clearly(etcd_secure: EtcdCluster) -> None:
    backend = _etcd_secure(etcd_secure)
    backend.ca_path = None  # TLS, but trusting only the system CAs, which do not know ours
    with pytest.raises(CoordinatorRefused, match=r"(?i)certificate|tls|ssl|\bca\b"):
        new_generator("uid64", coordinator=backend.url(connect_timeout=3))
    result = run_idmint("generate", "--coordinator", backend.url(connect_timeout=3))
    assert result.returncode == 77, result.stderr
