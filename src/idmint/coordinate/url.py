"""Coordinator URLs: ``scheme://[user:password@]host:port[,host:port...]/path?option=value``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote

from idmint.coordinate.base import ClaimOptions
from idmint.errors import ConfigurationError

__all__ = ["CoordinatorUrl", "parse_url"]


@dataclass(frozen=True)
class CoordinatorUrl:
    scheme: str
    hosts: tuple[tuple[str, int], ...]
    path: str
    username: str | None
    password: str | None
    options: dict[str, str]
    text: str

    def redacted(self) -> str:
        """The URL with the password hidden, for messages and logs."""
        if self.password is None:
            return self.text
        return self.text.replace(f":{self.password}@", ":***@", 1)

    def hosts_text(self) -> str:
        return ",".join(f"{host}:{port}" for host, port in self.hosts)

    # -- typed options -----------------------------------------------------------
    def check_known(self, known: Iterable[str]) -> None:
        allowed = set(known)
        unknown = sorted(set(self.options) - allowed)
        if unknown:
            raise ConfigurationError(
                f"{self.scheme}:// does not take option(s) {', '.join(unknown)}; "
                f"it takes {', '.join(sorted(allowed))}"
            )

    def number(self, name: str, default: float, *, minimum: float = 0.0) -> float:
        raw = self.options.get(name)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise ConfigurationError(
                f"{self.scheme}:// option {name} must be a number, got {raw!r}"
            ) from None
        if value < minimum:
            raise ConfigurationError(
                f"{self.scheme}:// option {name} must be at least {minimum:g}, got {raw}"
            )
        return value

    def integer(self, name: str, default: int | None, *, low: int, high: int) -> int | None:
        raw = self.options.get(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ConfigurationError(
                f"{self.scheme}:// option {name} must be an integer, got {raw!r}"
            ) from None
        if not low <= value <= high:
            raise ConfigurationError(
                f"{self.scheme}:// option {name} {value} is out of range; expected {low}..{high}"
            )
        return value

    def flag(self, name: str, default: bool) -> bool:
        raw = self.options.get(name)
        if raw is None:
            return default
        lowered = raw.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigurationError(
            f"{self.scheme}:// option {name} must be true or false, got {raw!r}"
        )

    def pool(self, name: str, size: int) -> range:
        """``LO-HI`` (inclusive) within ``0..size-1``; the whole range if absent."""
        raw = self.options.get(name)
        if raw is None:
            return range(size)
        low_text, dash, high_text = raw.partition("-")
        try:
            low = int(low_text)
            high = int(high_text) if dash else low
        except ValueError:
            raise ConfigurationError(
                f"{self.scheme}:// option {name} must look like LO-HI (e.g. 0-63), got {raw!r}"
            ) from None
        if not 0 <= low <= high < size:
            raise ConfigurationError(
                f"{self.scheme}:// option {name}={raw} must satisfy 0 <= LO <= HI <= {size - 1}"
            )
        return range(low, high + 1)

    def claim_options(self, *, pool_size: int, ttl_s: float) -> ClaimOptions:
        return ClaimOptions(
            pool=self.pool("generators", pool_size),
            cluster=self.integer("cluster", None, low=0, high=15),
            claim_timeout_s=self.number("claim_timeout", 30.0),
            connect_timeout_s=self.number("connect_timeout", 10.0, minimum=0.1),
            wait_timeout_s=self.number("wait_timeout", 10.0),
            margin_s=(self.number("margin", 0.0) if "margin" in self.options else None),
            skew_ms=round(self.number("skew", 1.0) * 1000),
        )


COMMON_OPTIONS = (
    "generators",
    "cluster",
    "claim_timeout",
    "connect_timeout",
    "wait_timeout",
    "margin",
    "skew",
)


def parse_url(text: str) -> CoordinatorUrl:
    """Split a coordinator URL; hosts default to port ``default_port`` of the driver."""
    scheme, sep, rest = text.partition("://")
    if not sep or not scheme:
        raise ConfigurationError(
            f"coordinator {text!r} is not a URL; expected e.g. zk://127.0.0.1:2181/idmint, "
            "etcd://127.0.0.1:2379/idmint or static://?generator=5"
        )
    location, _, query = rest.partition("?")
    netloc, slash, path = location.partition("/")
    username = password = None
    if "@" in netloc:
        userinfo, _, netloc = netloc.rpartition("@")
        user, colon, secret = userinfo.partition(":")
        username = unquote(user)
        password = unquote(secret) if colon else ""
    hosts: list[tuple[str, int]] = []
    for item in filter(None, netloc.split(",")):
        host, colon, port_text = item.rpartition(":")
        if not colon:
            host, port_text = item, "0"
        try:
            port = int(port_text)
        except ValueError:
            raise ConfigurationError(
                f"coordinator URL {text!r}: {item!r} is not host:port"
            ) from None
        hosts.append((host.strip("[]"), port))
    options: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True, strict_parsing=False):
        if key in options:
            raise ConfigurationError(f"coordinator URL {text!r} gives option {key} twice")
        options[key] = value
    return CoordinatorUrl(
        scheme=scheme.lower(),
        hosts=tuple(hosts),
        path="/" + path.strip("/") if slash else "",
        username=username,
        password=password,
        options=options,
        text=text,
    )
