"""Generator IDs claimed as leases in Redis, fenced, and safe when Redis forgets.

URL grammar::

    redis://[[user]:password@]host[:port][/db][?option=value&...]
    rediss://...           the same over TLS

``user`` is an ACL user (Redis 6 and newer; none: the default user), ``db`` the
database number (default 0), the port 6379 by default. Needs redis-py (the
``redis`` extra).

The options (:class:`RedisOptions`; this table is made from its declaration):

{options}

One hash per identity space holds the whole pool, so a pool is one key: it
lives in one slot, is evicted or flushed whole, and every request on it is one
atomic Lua script::

    <prefix>:generator     (and <prefix>:node, <prefix>:short60)
      pool                 the pool's record: JSON {"incarnation", "since_ms", "max_ttl_ms"}
      generation           every take, renewal and release adds one
      lease:<cluster>:<n>  "<expires_ms> <ttl_ms> <token> <JSON {holder, since_ms, token}>"
      mark:<cluster>:<n>   "<pool incarnation> <JSON high-water mark>"

A lease expires when Redis's clock (``TIME``) passes ``expires_ms``; one whose
expiry lies more than its TTL + 1 s ahead of that clock is taken as lapsed too
(the clock stepped back). The store's incarnation is the server's ``run_id``,
which every restart changes and a replica has its own of; the pool's is
``<run_id>/<epoch>`` (:mod:`idmint.coordinate.leases`). The key itself expires
at 2**52 ms (the year 142,000) + its generation: the generation's witness, which
``RESTORE`` (its TTL is the caller's) and fields written back with ``HSET``
leave apart from the hash's, so that the pool begins a new epoch. A restore
that also sets the key's exact expiry (``RESTORE ... ABSTTL`` with the
``PEXPIRETIME`` it was dumped with) is found at the next write of a holder
whose last write saw a later generation. Under a ``volatile-*`` eviction policy
the key can be evicted like any key with an expiry: a forget.

Supported: one Redis server, with or without replicas (a failover behind one
address is a new incarnation). Redis Cluster and Sentinel are refused with a
clear error (the layout fits Cluster, a pool being one key, but the driver
speaks to one server).
"""

from __future__ import annotations

import hashlib
import json
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from idmint.coordinate import peers
from idmint.coordinate.base import ClaimInfo, HighWaterMark, holder_of
from idmint.coordinate.leases import (
    STEP_BACK_SLACK_MS,
    Free,
    Lease,
    LeaseCoordinator,
    LeaseOptions,
    Look,
    PoolRecord,
    SharedClients,
    Take,
    first_line,
    reach_within,
)
from idmint.coordinate.options import TLS_ADVICE, TlsOptions, option, text, with_options_table
from idmint.coordinate.spaces import SPACES, Space
from idmint.coordinate.url import CoordinatorUrl
from idmint.errors import (
    ConfigurationError,
    CoordinationError,
    CoordinatorRefused,
    CoordinatorUnavailable,
    needs_extra,
)

if TYPE_CHECKING:
    import redis as redis_py

__all__ = ["GENERATION_WITNESS_MS", "RedisCoordinator", "RedisOptions", "RedisStore"]

DEFAULT_PREFIX = "idmint"
DEFAULT_PORT = 6379


@dataclass(frozen=True)
class RedisOptions(LeaseOptions, TlsOptions):
    """The options of a ``redis://`` URL."""

    prefix: str = option(
        "prefix",
        DEFAULT_PREFIX,
        "the keys' prefix: `<prefix>:<space>` (`idmint:generator`, ...)",
        text(
            lambda prefix: bool(prefix) and not any(c.isspace() for c in prefix),
            "non-empty and without spaces",
        ),
    )


__doc__ = with_options_table(__doc__, RedisOptions)

GENERATION_WITNESS_MS = 2**52
"""The pool's key expires at this + its generation (ms since the epoch: in the year
142,000): the generation kept where writing the hash back does not put it."""

# Every script starts with the store's clock and incarnation.
_PRELUDE = f"""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
local function lapsed(lease)
  local expires, ttl = string.match(lease, '^(%d+) (%d+) ')
  expires, ttl = tonumber(expires), tonumber(ttl)
  return expires < now or expires > now + ttl + {STEP_BACK_SLACK_MS}
end
local function token_of(lease)
  return string.match(lease, '^%d+ %d+ (%x+) ')
end
-- The lease of ID suffix if the token ARGV[3] holds it, else nil.
local function our_lease(suffix)
  local lease = redis.call('HGET', KEYS[1], 'lease:' .. suffix)
  if lease and token_of(lease) == ARGV[3] then return lease end
  return nil
end
-- Whether the hash is as these scripts left it (its generation and the key's expiry
-- agree), and its generation.
local function vouched()
  local generation = tonumber(redis.call('HGET', KEYS[1], 'generation') or '')
  if generation == nil then return false, 0 end
  return redis.call('PEXPIRETIME', KEYS[1]) == {GENERATION_WITNESS_MS} + generation, generation
end
-- Every write: the pool's next generation, witnessed by the key's expiry.
local function advance()
  local generation = redis.call('HINCRBY', KEYS[1], 'generation', 1)
  redis.call('PEXPIREAT', KEYS[1], {GENERATION_WITNESS_MS} + generation)
  return generation
end
-- A hash written back, or whose generation went back below the one the caller's
-- last write saw: its record vouches for nothing, and the next claimant begins a
-- new epoch.
local function doubt(seen)
  local ok, generation = vouched()
  if not ok or generation < seen then redis.call('HDEL', KEYS[1], 'pool') end
end
-- The pool's incarnation, for a mark written now: the record's, if of this run_id.
local function stamp()
  local raw = redis.call('HGET', KEYS[1], 'pool')
  if raw then
    local ok, record = pcall(cjson.decode, raw)
    if ok and type(record) == 'table' and type(record.incarnation) == 'string'
       and string.sub(record.incarnation, 1, #run_id + 1) == run_id .. '/' then
      return record.incarnation
    end
  end
  return run_id .. '/'
end
-- Lease ID suffix to the token ARGV[3] for ttl ms from now, and record its mark.
local function hold(suffix, ttl, holder, mark, incarnation)
  redis.call('HSET', KEYS[1],
    'lease:' .. suffix, string.format('%.0f %d %s %s', now + ttl, ttl, ARGV[3], holder),
    'mark:' .. suffix, incarnation .. ' ' .. mark)
end
"""

# KEYS: the pool. ARGV: cluster, lo, hi, start, want (0: all).
# Returns run_id, the record, whether the hash is vouched for (1 or 0), then (ID,
# mark) for each free ID from start on.
_LOOK = (
    _PRELUDE
    + """
local cluster, lo, hi = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local start, want = tonumber(ARGV[4]), tonumber(ARGV[5])
local size = hi - lo + 1
local out = {run_id, redis.call('HGET', KEYS[1], 'pool') or '', vouched() and 1 or 0}
local found = 0
for i = 0, size - 1 do
  local id = lo + (start - lo + i) % size
  local suffix = cluster .. ':' .. id
  local lease = redis.call('HGET', KEYS[1], 'lease:' .. suffix)
  if not lease or lapsed(lease) then
    out[#out + 1] = string.format('%d', id)
    out[#out + 1] = redis.call('HGET', KEYS[1], 'mark:' .. suffix) or ''
    found = found + 1
    if want > 0 and found >= want then break end
  end
end
return out
"""
)

# KEYS: the pool. ARGV: cluster, ID, token, holder JSON, ttl_ms, the incarnation the
# claimant saw, the mark it saw, its first mark, the record it saw, a record to write,
# the pool incarnation to stamp the mark with.
# Returns the pool's generation if the lease is ours (taken now, or by an earlier
# send of the same take), else 0.
_TAKE = (
    _PRELUDE
    + """
if run_id ~= ARGV[6] then return 0 end
local suffix = ARGV[1] .. ':' .. ARGV[2]
local lease = redis.call('HGET', KEYS[1], 'lease:' .. suffix)
if lease then
  if token_of(lease) == ARGV[3] then return math.max(select(2, vouched()), 1) end
  if not lapsed(lease) then return 0 end
end
if (redis.call('HGET', KEYS[1], 'mark:' .. suffix) or '') ~= ARGV[7] then return 0 end
if (redis.call('HGET', KEYS[1], 'pool') or '') ~= ARGV[9] then return 0 end
if ARGV[10] ~= '' then
  redis.call('HSET', KEYS[1], 'pool', ARGV[10])
elseif not vouched() then
  return 0  -- written back since the claimant looked: it must look again
end
hold(suffix, tonumber(ARGV[5]), ARGV[4], ARGV[8], ARGV[11])
return advance()
"""
)


def _on_our_lease(body: str) -> str:
    """A script on the caller's lease, run only while the lease carries its token.

    KEYS: the pool. ARGV: cluster, ID, token, the generation the holder's last
    write saw, then ``body``'s own. Returns 0 if the lease is not the caller's.
    """
    return (
        _PRELUDE
        + """
doubt(tonumber(ARGV[4]))
local suffix = ARGV[1] .. ':' .. ARGV[2]
local lease = our_lease(suffix)
if not lease then return 0 end
"""
        + body
    )


# ARGV[5]: ttl_ms, ARGV[6]: the new mark. Returns the pool's generation.
_RENEW = _on_our_lease(
    """
hold(suffix, tonumber(ARGV[5]), string.match(lease, '^%d+ %d+ %x+ (.*)$'), ARGV[6], stamp())
return advance()
"""
)

# ARGV[5]: the final mark ('' to keep the last one). Returns the pool's generation.
_RELEASE = _on_our_lease(
    """
redis.call('HDEL', KEYS[1], 'lease:' .. suffix)
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'mark:' .. suffix, stamp() .. ' ' .. ARGV[5]) end
return advance()
"""
)

# KEYS: the pool. Returns the store's clock, then the whole hash.
_LIST = """
local t = redis.call('TIME')
return {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
        redis.call('HGETALL', KEYS[1])}
"""


def _import_redis() -> Any:
    with needs_extra("redis", "redis", needed_by="redis://"):
        import redis
    return redis


class _Script:
    """A Lua script, run by its SHA1 (``EVALSHA``) and sent whole (``EVAL``, which
    also caches it on the server) only when the server does not know it yet: after
    it started, or ``SCRIPT FLUSH``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.sha = hashlib.sha1(text.encode()).hexdigest()

    def __call__(self, client: redis_py.Redis, key: str, args: Sequence[object]) -> Any:
        execute: Any = client.execute_command  # untyped in redis-py
        try:
            return execute("EVALSHA", self.sha, 1, key, *args)
        except _import_redis().exceptions.NoScriptError:
            # NOSCRIPT: nothing ran. The script itself, which the server keeps from now on.
            return execute("EVAL", self.text, 1, key, *args)


_LOOK_SCRIPT = _Script(_LOOK)
_TAKE_SCRIPT = _Script(_TAKE)
_RENEW_SCRIPT = _Script(_RENEW)
_RELEASE_SCRIPT = _Script(_RELEASE)
_LIST_SCRIPT = _Script(_LIST)

_CLIENTS: SharedClients[redis_py.Redis] = SharedClients(lambda client: None)
"""One client per server, database, user and TLS setting in a process. redis-py's
connection pool notices a fork by itself: a child opens connections of its own and
never touches its parent's."""


class RedisStore:
    """The pool's requests, each one Lua script on one hash (see the module docs)."""

    def __init__(
        self, client: redis_py.Redis, prefix: str, description: str, timeout_s: float
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.description = description
        self.timeout_s = timeout_s

    def key(self, space: Space) -> str:
        """The key of ``space``'s pool."""
        return f"{self.prefix}:{space.name}"

    def _call(self, doing: str, script: _Script, space: Space, args: Sequence[object]) -> Any:
        try:
            return script(self.client, self.key(space), args)
        except Exception as error:
            raise _translate(error, f"{doing} at {self.description}") from error

    def look(
        self, space: Space, cluster: int, pool: range, *, start: int, want: int | None
    ) -> Look:
        reply = self._call(
            "looking for a free ID",
            _LOOK_SCRIPT,
            space,
            [cluster, pool.start, pool.stop - 1, start, want or 0],
        )
        incarnation = _text(reply[0])
        record_raw = _text(reply[1])
        vouched = int(reply[2]) == 1
        free = []
        for index in range(3, len(reply) - 1, 2):
            mark_raw = _text(reply[index + 1])
            incarnation_of_mark, _, mark_json = mark_raw.partition(" ")
            free.append(
                Free(
                    cluster=cluster,
                    number=int(reply[index]),
                    mark=HighWaterMark.from_bytes(mark_json.encode()) if mark_raw else None,
                    mark_incarnation=incarnation_of_mark or None,
                    version=mark_raw,
                )
            )
        # A hash written back (a restore) vouches for nothing: a new epoch begins.
        record = PoolRecord.from_json(record_raw) if vouched else None
        return Look(incarnation, record, record_raw, free)

    def take(self, space: Space, attempt: Take) -> int | None:
        free = attempt.free
        holder = json.dumps(
            {"holder": attempt.holder, "since_ms": attempt.since_ms, "token": attempt.token}
        )
        generation = self._call(
            f"claiming {space} ID {free.number}",
            _TAKE_SCRIPT,
            space,
            [
                free.cluster,
                free.number,
                attempt.token,
                holder,
                attempt.ttl_ms,
                attempt.incarnation,
                free.version,
                json.dumps(attempt.mark.to_json()),
                attempt.record_version,
                attempt.record.to_json() if attempt.record is not None else "",
                attempt.stamp,
            ],
        )
        return int(generation) or None

    def renew(self, lease: Lease, ttl_ms: int, mark: HighWaterMark, generation: int) -> int | None:
        mark_text = json.dumps(mark.to_json())
        renewed = self._on_lease("renewing", _RENEW_SCRIPT, lease, generation, ttl_ms, mark_text)
        return int(renewed) or None

    def release(self, lease: Lease, mark: HighWaterMark | None, generation: int) -> None:
        final = json.dumps(mark.to_json()) if mark is not None else ""
        self._on_lease("releasing", _RELEASE_SCRIPT, lease, generation, final)

    def _on_lease(
        self, doing: str, script: _Script, lease: Lease, generation: int, *args: object
    ) -> Any:
        """A script of :func:`_on_our_lease` on ``lease``, with its own ``args``."""
        arguments = [lease.cluster, lease.number, lease.token, generation, *args]
        return self._call(f"{doing} the claim", script, lease.space, arguments)

    def read_mark(self, space: Space, cluster: int, number: int) -> HighWaterMark | None:
        try:
            raw = self.client.hget(self.key(space), f"mark:{cluster}:{number}")
        except Exception as error:
            raise _translate(error, f"reading a high-water mark at {self.description}") from error
        if raw is None:
            return None
        return HighWaterMark.from_bytes(_text(raw).partition(" ")[2].encode())

    def list_space(self, space: Space) -> list[ClaimInfo]:
        now_ms, flat = self._call("listing the claims", _LIST_SCRIPT, space, [])
        fields = {_text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}
        rows = []
        for name, lease in fields.items():
            kind, _, where = name.partition(":")
            cluster_text, _, number_text = where.partition(":")
            if kind != "lease" or not (cluster_text.isdigit() and number_text.isdigit()):
                continue
            expires_text, ttl_text, _token, holder_json = [*lease.split(" ", 3), "", "", ""][:4]
            try:
                expires, ttl = int(expires_text), int(ttl_text)
            except ValueError:
                continue
            if expires < now_ms or expires > now_ms + ttl + STEP_BACK_SLACK_MS:
                continue  # lapsed
            holder, since = holder_of(holder_json.encode())
            mark_raw = fields.get(f"mark:{where}", "")
            mark = (
                HighWaterMark.from_bytes(mark_raw.partition(" ")[2].encode()) if mark_raw else None
            )
            rows.append(
                ClaimInfo(
                    cluster=int(cluster_text),
                    generator=int(number_text),
                    holder=holder,
                    since_ms=since,
                    high_water_mark_ms=mark.ceiling_ms if mark else None,
                    space=space.name,
                )
            )
        return sorted(rows, key=lambda row: (row.cluster, row.generator))


class RedisCoordinator(LeaseCoordinator):
    """A Redis server used as a pool of generator IDs (see the module docs)."""

    store: RedisStore
    options_type = RedisOptions

    def __init__(self, url: CoordinatorUrl) -> None:
        options = self._take_url(url, RedisOptions)
        host, port = self._one_server(
            url,
            DEFAULT_PORT,
            refusal="give one Redis server; Redis Cluster and Sentinel are not supported "
            "(see docs/coordination.md)",
        )
        self.address = (host, port)
        database_text = url.path.strip("/") or "0"
        if not database_text.isdigit():
            raise ConfigurationError(
                f"{self.url}: the path is the database number (/0, /1, ...), "
                f"got {url.path!r}; the keys' prefix is the option prefix="
            )
        database = self.database = int(database_text)
        self.prefix = options.prefix
        self.ttl_s, self.max_ttl_s, timeout_s = options.ttl_s, options.max_ttl_s, options.timeout_s
        tls = options.uses_tls(url, "rediss")
        self.description = (
            f"{'rediss' if tls else 'redis'}://{host}:{port}/{database} {self.prefix}"
        )
        settings = {
            "host": host,
            "port": port,
            "db": database,
            "username": url.username or None,
            "password": url.password or None,
            "socket_timeout": timeout_s,
            "socket_connect_timeout": timeout_s,
        }
        if tls:
            settings.update(
                ssl=True,
                ssl_ca_certs=options.ca,
                ssl_certfile=options.cert,
                ssl_keyfile=options.key,
            )
        # The process's client for these settings (the password only as a digest).
        self._client_key = hashlib.sha256(repr(sorted(settings.items())).encode()).hexdigest()
        self._client = _CLIENTS.take(self._client_key, lambda: _new_client(settings))
        try:
            self.store = RedisStore(self._client, self.prefix, self.description, timeout_s)
            self._check_server()
        except BaseException:
            self.close()
            raise

    @classmethod
    def pool_within(cls, url: CoordinatorUrl, name: str) -> CoordinatorUrl:
        prefix = RedisOptions.from_url(url).prefix
        return url.replace(options={**url.options, **RedisOptions.query(prefix=f"{prefix}:{name}")})

    def _check_server(self) -> None:
        """Wait up to ``connect_timeout`` for the server; refuse what is not one Redis."""
        info = reach_within(
            self.options.connect_timeout_s,
            lambda _: self._client.info("server"),
            lambda error: _translate_first_contact(error, self.description, self.database),
            store=peers.REDIS,
            description=self.description,
            settings="host, port and TLS settings",
            hosts=[self.address],
            tls=self.description.startswith("rediss:"),
        )
        mode = str(info.get("redis_mode", "standalone"))
        if mode != "standalone":
            raise ConfigurationError(
                f"{self.description} is a Redis {mode.title()} server; idmint's redis:// "
                "claims need one Redis server (Cluster and Sentinel are not supported: "
                "see docs/coordination.md)"
            )

    def list_claims(self) -> list[ClaimInfo]:
        rows: list[ClaimInfo] = []
        for space in SPACES:
            rows += self.store.list_space(space)
        return rows

    def held(self, space: Space) -> set[tuple[int, int]]:
        return {(row.cluster, row.generator) for row in self.store.list_space(space)}

    def close(self) -> None:
        client_key, self._client_key = self._client_key, ""
        if client_key:
            _CLIENTS.give_back(client_key, _close_client)


def _new_client(settings: Mapping[str, Any]) -> redis_py.Redis:
    redis = _import_redis()
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    # No retries inside redis-py: a claim retries by itself, within its deadline.
    # A new connection sends nothing before our first request (but AUTH and SELECT
    # where the URL asks for them): no HELLO (RESP2), no CLIENT SETINFO, whose
    # round trips a fleet of processes starting at once would wait for.
    common = {
        **settings,
        "retry": Retry(NoBackoff(), 0),
        "health_check_interval": 0,
        "protocol": 2,
    }
    try:
        client: redis_py.Redis = redis.Redis(**common, driver_info=None)
    except TypeError:  # redis-py before driver_info
        client = redis.Redis(**common, lib_name=None, lib_version=None)
    return client


def _close_client(client: redis_py.Redis) -> None:
    client.close()


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def _translate_first_contact(error: BaseException, description: str, database: int) -> Exception:
    """What connecting to the server found: a database number it does not have is
    the URL's mistake, the rest as :func:`_translate` says."""
    redis = _import_redis()
    if isinstance(error, redis.exceptions.ResponseError) and "DB index" in str(error):
        return ConfigurationError(
            f"{description}: the server has no database {database} "
            f"({first_line(error)}); the URL's path is the database number (/0 to its "
            "`databases` setting - 1)"
        )
    return _translate(error, f"connecting to {description}")


def _translate(error: BaseException, doing: str) -> CoordinationError:
    """A redis-py error as the idmint error a caller can act on.

    Credentials, permissions and TLS are a refusal (waiting will not help);
    a connection that cannot be made or breaks, a timeout, a server still
    loading its data or a replica that will not take writes, an outage;
    anything else a :class:`CoordinationError` carrying the cause.
    """
    redis = _import_redis()
    errors = redis.exceptions
    cause = error.__cause__ or error.__context__
    if isinstance(error, errors.AuthenticationError) or (
        isinstance(error, errors.ResponseError) and str(error).startswith(("WRONGPASS", "NOAUTH"))
    ):
        return CoordinatorRefused(
            f"{doing}: Redis refused the credentials ({first_line(error)}); check the "
            "user:password in the URL"
        )
    if isinstance(error, (errors.AuthorizationError, errors.NoPermissionError)):
        return CoordinatorRefused(
            f"{doing}: Redis refused us ({first_line(error)}); check the ACL user's "
            "permissions on the prefix's keys, EVALSHA and INFO"
        )
    if isinstance(error, ssl.SSLError) or isinstance(cause, ssl.SSLError):
        return CoordinatorRefused(
            f"{doing}: the TLS handshake failed ({first_line(cause or error)}); {TLS_ADVICE}"
        )
    if isinstance(
        error,
        (errors.ConnectionError, errors.TimeoutError, errors.ReadOnlyError, OSError),
    ):
        return CoordinatorUnavailable(f"{doing}: {first_line(error)}")
    if isinstance(error, errors.ResponseError) and str(error).startswith("NOREPLICAS"):
        return CoordinatorUnavailable(
            f"{doing}: the server has fewer good replicas than its min-replicas-to-write "
            f"({first_line(error)}): it may no longer be the primary"
        )
    if isinstance(error, errors.ResponseError) and str(error).startswith("WRONGTYPE"):
        return CoordinationError(
            f"{doing}: a key under the prefix is not idmint's ({first_line(error)}); "
            "choose another prefix="
        )
    if isinstance(error, errors.RedisError):
        return CoordinationError(f"{doing}: Redis said {first_line(error)}")
    return CoordinationError(f"{doing}: {type(error).__name__}: {first_line(error)}")
