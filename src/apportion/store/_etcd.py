"""``etcd://`` / ``etcds://`` — the distributed store: a real etcd v3 cluster behind the store contract.

Client choice: we talk to etcd's own v3 JSON gateway (``/v3/kv/range``, ``/v3/kv/txn``, ``/v3/lease/*``,
``/v3/watch``) with **httpx**, directly. The gateway ships inside every etcd >= 3.3 server (no sidecar), speaks plain
HTTP/1.1 + JSON (keys and values base64, int64 as strings, default-valued fields omitted), and maps one-to-one onto
the contract. httpx is maintained, small, typed, sync (what this codebase uses) and already a dependency of the
``[etcd]`` extra; no protobuf or gRPC stubs to keep in step with the server. The alternatives: ``etcd3gw`` (kept by
OpenStack tooz) wraps the same gateway but adds little beyond it and hides the error codes we need to map;
``aetcd`` is gRPC and async-only; ``etcd3`` 0.12 is unmaintained and breaks with current protobuf.

URL: ``etcd://[user:password@]host:port[,host:port...][?timeout=SECONDS]``; ``etcds://`` uses TLS and accepts
``cacert=`` (CA bundle to verify the server), ``cert=`` and ``key=`` (client certificate) in the query.

Behaviour worth knowing:

- **Failover.** Requests go to one endpoint until it fails; then the next one is tried, round-robin, until the
  request deadline (``timeout``, default 5 s). A request is re-sent elsewhere only when that cannot apply it twice:
  reads always; writes only when the endpoint was not reached or etcd rejected the request before proposing it (no
  leader, too many requests). A write whose outcome is unknown (connection lost mid-request, server-side timeout)
  raises ``StoreUnavailable`` — re-check with a compare, as with any CAS.
- **Errors.** Transport errors and etcd's ``Unavailable``-class codes → ``StoreUnavailable``; bad input (too many
  ops, duplicate keys in one txn, future revision) → ``InvalidRequest``; unknown lease → ``LeaseNotFound``; watch
  below the compaction point → ``Compacted``; etcd's NOSPACE refusal → ``StoreFull`` at once (see "Space" below);
  always ``raise ... from`` the cause.
- **Authentication** (``user:password@``): the token is fetched by the first request (under its time limit) and
  fetched again when it expires. A wrong user name or password is a user mistake: ``InvalidRequest("url", "etcd
  authentication failed ...")`` (CLI exit 2), raised by the first request; so is a server that needs credentials
  when the URL has none.
- **Leases.** etcd TTLs are whole seconds: ``grant(ttl_s)`` asks for ``ceil(ttl_s)`` (at least 1 s); the server may
  raise it to its minimum (1.5 x election timeout). ``Lease.ttl_s`` is the TTL etcd granted.
- **Watches.** A daemon thread per watch reads the NDJSON stream into a queue. When the stream breaks (member
  restart, leader change, endpoint down) it re-watches from the last delivered revision + 1 on the next endpoint,
  so no event is missed or repeated. The contract's "compacted" means ``start_revision <= compact point`` while etcd
  still serves the compact revision itself, so ``watch()`` first probes with a range read at ``start_revision - 1``
  (one round trip). etcd's first revision is 1 and holds no events.
- **Ranges.** A range is read in pages of ``RANGE_PAGE`` keys, the pages after the first at its revision (one
  snapshot; read again from the start if that revision is compacted meanwhile). A page may take longer than
  ``ATTEMPT_TIMEOUT_S`` on a loaded etcd: its attempts double after each round of endpoints (one endpoint: one
  attempt of the whole request timeout). Why: one answer of a 100,000-partition group (300,000 keys, ~50 MB of
  gateway JSON) took etcd 3.4 seconds to marshal, so every attempt timed out after 1 s and status failed ("no
  answer in time"). etcd 3.4 walks the rest of the range's index for every limited request (its count), so smaller
  pages cost it more in all; larger ones take longer to answer.
- **Permissions.** Everything apportion stores is under ``/apportion/`` and revision probes read the key
  ``/apportion/`` itself: a user whose role grants readwrite on the prefix ``/apportion/`` (and nothing else) can run
  workers, status and reports. (etcd 3.4 lets such a user compact the whole cluster too; defragmenting needs root.)
- **Compaction: etcd's job, not apportion's (decided in issue 27).** Every write adds a revision and etcd keeps every
  old one until compacted: a fleet committing 16,384 partitions every 5 s grew its database by ~194 MB/min until the
  2 GB quota (bench/etcd_space_bench.py: ~1.2 kB per commit with 300-byte checkpoints, half of it the old revisions
  compaction frees, half the group-history event that lives ``--history-retention``). apportion does not compact:
  compaction is cluster-wide (one call forgets the history of every key of every application on that etcd and cancels
  their watches that are behind), so the etcd's operator chooses it, once, for everyone; etcd does it itself with
  ``--auto-compaction-mode=periodic --auto-compaction-retention=1m`` (run by the leader, no coordination among 32
  workers, no extra permission, as Kubernetes' apiserver does for the etcd it owns every 5 min). apportion needs no
  history beyond a watch's resume after a broken stream, and survives any compaction at any time: a watch resumed
  below the compaction point raises ``Compacted`` and the member opens a new one and reads the group again
  (``FencedMember._replace_watch``; tests/etcd/test_compaction.py). ``compact()`` exists for the store contract and
  for tests. README "Running etcd for apportion" has the settings and the numbers.
- **Space.** Past ``--quota-backend-bytes`` etcd raises its NOSPACE alarm and refuses every put, transaction that
  puts and lease grant until an operator compacts, defragments and disarms it; reads, keepalives, revocations and
  deletes still work. Such a refusal (``database space exceeded``, code 8 like the retryable ``too many requests``) is
  raised at once as ``StoreFull`` (a ``StoreUnavailable``), never re-sent: the alarm is cluster-wide and the write was
  not applied. ``refusing_writes()`` holds its message until a write that NOSPACE would refuse is taken again (a
  worker logs each change once). So a running worker keeps its lease and partitions through the outage, its commits
  raise (not applied: commit again later) and it resumes by itself after the disarm; a starting worker exits 1.
- **Transactions.** etcd refuses two writes to the same key in one branch of a transaction, a put inside a range
  the same branch deletes included (``InvalidRequest`` here, unlike the memory backend), and more than
  ``--max-txn-ops`` (default 128) operations.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import math
import socket
import ssl
import threading
import time
from binascii import a2b_base64
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import httpx

from apportion.errors import ApportionError, Compacted, InvalidRequest, LeaseNotFound, StoreFull, StoreUnavailable
from apportion.store._base import Store, Watch, lease_id
from apportion.store._redact import redact_url
from apportion.store._types import (
    Compare,
    Delete,
    Event,
    EventType,
    Get,
    KeyValue,
    Lease,
    Op,
    Put,
    TxnResult,
)

DEFAULT_TIMEOUT_S = 5.0
MAX_TIMEOUT_S = 86_400.0  # a day, as every timing: a longer wait (inf, 1e300) overflows the waits that use it
CONNECT_TIMEOUT_S = 1.0
# How long one endpoint gets to answer an idempotent request before the next endpoint is tried. A healthy member
# answers a keepalive or a read in milliseconds even on a loaded machine; a frozen one never does.
ATTEMPT_TIMEOUT_S = 1.0
# Reads that only want a revision (the current one, or whether one is compacted) read this one key, count only: it is
# inside apportion's key space, so an etcd user whose role allows only the ``/apportion/`` prefix can run everything.
PROBE_KEY = b"/apportion/"
# A range is read in pages of at most this many keys, each a request of its own (the next page at the first one's
# revision: one snapshot). One answer of a whole 100,000-partition group (300,000 keys, ~50 MB of gateway JSON)
# takes etcd seconds to marshal: longer than ATTEMPT_TIMEOUT_S, so it was sent again and again until the deadline.
RANGE_PAGE = 10_000  # 300,000 keys: etcd 3.4 spent ~8.5 s of CPU in pages of 5,000, ~6 s in 10,000, ~5 s in 20,000
RANGE_RESTARTS = 3  # a range whose revision is compacted between two pages is read again, at most this often
WATCH_IDLE_S = 30.0  # a silent watch stream is re-opened after this long (guards against half-open connections)

log = logging.getLogger(__name__)
# httpx logs every request at INFO (hundreds of lines a minute for a worker): only its warnings reach the user.
for _noisy in ("httpx", "httpcore"):
    if logging.getLogger(_noisy).level == logging.NOTSET:
        logging.getLogger(_noisy).setLevel(logging.WARNING)

_TARGETS = {"value": "VALUE", "mod_revision": "MOD", "create_revision": "CREATE", "version": "VERSION"}
_RESULTS = {"==": "EQUAL", "!=": "NOT_EQUAL", "<": "LESS", ">": "GREATER"}

# gRPC status codes etcd returns in the gateway's error body.
_INVALID_ARGUMENT, _NOT_FOUND, _PERMISSION_DENIED, _RESOURCE_EXHAUSTED = 3, 5, 7, 8
_FAILED_PRECONDITION, _OUT_OF_RANGE, _UNAVAILABLE, _UNAUTHENTICATED = 9, 11, 14, 16
# Rejections etcd makes before proposing anything: safe to send the same write to another member.
_NOT_PROPOSED = ("no leader", "too many requests", "not capable", "unhealthy cluster", "proposal dropped")
# etcd's NOSPACE refusal (RESOURCE_EXHAUSTED, like "too many requests", which is worth retrying; this one is not: the
# alarm is cluster-wide, every member refuses until an operator disarms it).
_NO_SPACE = "database space exceeded"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str | None) -> bytes:
    return a2b_base64(text) if text else b""  # base64.b64decode's own work, without its wrapper's checks


def _prefix_end(prefix: bytes) -> bytes:
    """etcd's range_end for "every key starting with prefix": the prefix with its last byte incremented."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\x00"  # every key


def _range_body(key: str, prefix: bool) -> dict[str, Any]:
    raw = key.encode("ascii")
    body: dict[str, Any] = {"key": _b64(raw)}
    if prefix:
        body["range_end"] = _b64(_prefix_end(raw))
    return body


def _kv(data: Mapping[str, Any]) -> KeyValue:
    get = data.get  # a range of 100,000 partitions decodes 300,000 of these
    return KeyValue(
        _unb64(get("key")).decode("ascii"),
        _unb64(get("value")),
        int(get("create_revision", 0)),
        int(get("mod_revision", 0)),
        int(get("version", 0)),
        int(get("lease", 0)),
    )


def _event(data: Mapping[str, Any]) -> Event:
    kv = data.get("kv", {})
    if data.get("type") == "DELETE":
        key = _unb64(kv.get("key")).decode("ascii")
        return Event(EventType.DELETE, KeyValue(key, b"", 0, int(kv.get("mod_revision", 0)), 0, 0))
    return Event(EventType.PUT, _kv(kv))


def _revision(reply: Mapping[str, Any]) -> int:
    return int(reply.get("header", {}).get("revision", 0))


def _compare(compare: Compare) -> dict[str, Any]:
    body: dict[str, Any] = {
        "key": _b64(compare.key.encode("ascii")),
        "target": _TARGETS[compare.target],
        "result": _RESULTS[compare.op],
    }
    if isinstance(compare.operand, bytes):  # a value compare (Store.txn checked the operand's kind)
        body["value"] = _b64(compare.operand)
    else:
        body[compare.target] = str(compare.operand)
    return body


def _request_op(op: Op) -> dict[str, Any]:
    if isinstance(op, Put):
        put: dict[str, Any] = {"key": _b64(op.key.encode("ascii")), "value": _b64(op.value)}
        if op.lease:
            put["lease"] = str(op.lease)
        return {"request_put": put}
    if isinstance(op, Delete):
        return {"request_delete_range": _range_body(op.key, op.prefix)}
    return {"request_range": _range_body(op.key, op.prefix)}


def _response(op: Op, reply: Mapping[str, Any]) -> list[KeyValue] | int | None:
    if isinstance(op, Get):
        return [_kv(kv) for kv in reply.get("response_range", {}).get("kvs", [])]
    if isinstance(op, Delete):
        return int(reply.get("response_delete_range", {}).get("deleted", 0))
    return None


class _Unsent(Exception):
    """Internal: this endpoint did not take the request; another may (carries the cause)."""


@dataclass(frozen=True, slots=True)
class EtcdConfig:
    """What an ``etcd://`` / ``etcds://`` URL says."""

    endpoints: tuple[str, ...]  # base URLs, e.g. "http://127.0.0.1:2379"
    user: str | None = None
    password: str | None = None
    cacert: str | None = None
    cert: str | None = None
    key: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S

    @classmethod
    def parse(cls, url: str) -> EtcdConfig:
        scheme, _, rest = url.partition("://")
        scheme = scheme.lower()
        if scheme not in ("etcd", "etcds"):
            raise InvalidRequest("url", f"{redact_url(url)!r} is not an etcd:// or etcds:// URL")
        # The credentials run to the last '@' (as redact_url reads them), so a password with an unencoded '/', '?' or
        # '#' is still a password: never cut into a host name that an error message would show.
        credentials, at, rest = rest.rpartition("@")
        try:
            parts = urlsplit(f"{scheme}://{rest}")
        except ValueError as exc:  # an unclosed IPv6 bracket: "Invalid IPv6 URL"
            raise InvalidRequest("url", f"{redact_url(url)!r} is not a URL ({exc})") from exc
        if parts.path not in ("", "/") or parts.fragment:
            raise InvalidRequest("url", f"{redact_url(url)!r}: an etcd URL names host:port[,host:port...][?options]")
        netloc = parts.netloc
        user = password = None
        if at:
            user_part, sep, password_part = credentials.partition(":")
            if not user_part or not sep:
                raise InvalidRequest("url", "credentials must be given as user:password@")
            user, password = unquote(user_part), unquote(password_part)
        hosts = [h.strip() for h in netloc.split(",") if h.strip()]
        if not hosts:
            raise InvalidRequest("url", f"{url!r} names no host:port")
        http = "https" if scheme == "etcds" else "http"
        endpoints = []
        for host in hosts:
            name, sep, port = host.rpartition(":")
            if not sep or not name or not port.isdigit() or not 0 < int(port) < 65536:
                raise InvalidRequest("url", f"endpoint {host!r} must be host:port")
            endpoints.append(f"{http}://{host}")
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        unknown = sorted(set(query) - {"cacert", "cert", "key", "timeout"})
        if unknown:
            raise InvalidRequest("url", f"unknown option(s) {', '.join(unknown)} (use cacert, cert, key, timeout)")
        if scheme == "etcd" and any(query.get(k) for k in ("cacert", "cert", "key")):
            raise InvalidRequest("url", "cacert/cert/key need TLS: use etcds://")
        if bool(query.get("cert")) != bool(query.get("key")):
            raise InvalidRequest("url", "a client certificate needs both cert= and key=")
        timeout_s = DEFAULT_TIMEOUT_S
        if "timeout" in query:
            try:
                timeout_s = float(query["timeout"])
            except ValueError:
                timeout_s = -1.0
            if not (math.isfinite(timeout_s) and 0 < timeout_s <= MAX_TIMEOUT_S):
                raise InvalidRequest(
                    "url", f"timeout={query['timeout']!r} must be a positive number of seconds, at most a day"
                )
        return cls(
            endpoints=tuple(endpoints),
            user=user,
            password=password,
            cacert=query.get("cacert") or None,
            cert=query.get("cert") or None,
            key=query.get("key") or None,
            timeout_s=timeout_s,
        )

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.endpoints[0].startswith("https"):
            return True
        try:
            context = ssl.create_default_context(cafile=self.cacert)
            if self.cert and self.key:
                context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidRequest("url", f"cannot load TLS files: {exc}") from exc
        return context


class EtcdStore(Store):
    """A store on an etcd v3 cluster, through its JSON gateway. Thread-safe."""

    # A leader election stalls renewals: followers hold a keepalive until a new leader exists. With etcd's default
    # timings (election timeout 1 s, randomised up to 2 s) a new leader was elected 1.1-2.8 s after kill -9 of the
    # old one here (tests/etcd/test_faults.py; the slow ones with the machine at load 20). The rule: ttl x 0.8 (the
    # belief window) must exceed the renewal interval + an election (<= 2 x election timeout, more under load) + one
    # attempt (ATTEMPT_TIMEOUT_S). At ttl 3 s a worker lost its partitions on a leader kill; at ttl 5 s with a
    # renewal every 1.25 s, 12 of 24 were lost once at load 20; renewing every 0.5 s (cheap for etcd: one small
    # request per member) leaves 4.0 > 0.5 + 2.8 + a fraction of an attempt.
    default_ttl_s = 5.0
    RENEW_EVERY_S = 0.5

    def renew_every_s(self, ttl_s: float) -> float:
        return min(super().renew_every_s(ttl_s), self.RENEW_EVERY_S)

    def __init__(self, url: str, config: EtcdConfig | None = None) -> None:
        self.config = config or EtcdConfig.parse(url)
        self.url = redact_url(url)  # what logs, errors and status may show: never the password
        self._client = httpx.Client(
            verify=self.config.ssl_context(),
            timeout=httpx.Timeout(self.config.timeout_s, connect=min(CONNECT_TIMEOUT_S, self.config.timeout_s)),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=20),
        )
        self._lock = threading.Lock()
        self._current = 0  # index of the endpoint in use
        self._down: dict[str, str] = {}  # endpoint -> why it last failed (cleared when it answers)
        self._token: str | None = None
        self._watches: set[_EtcdWatch] = set()
        self._closed = False
        self._refusing: str | None = None  # the StoreFull message while etcd refuses writes (NOSPACE alarm)
        # With credentials the token is fetched by the first request, under that request's time limit (a worker's
        # --connect-timeout bounds it like any other call; opening the store sends nothing).

    # -- plumbing ------------------------------------------------------------------------------------------

    def _endpoint(self) -> tuple[int, str]:
        with self._lock:
            return self._current, self.config.endpoints[self._current]

    def _failed(self, index: int) -> None:
        """The endpoint at ``index`` failed: move on to the next one (unless someone already did)."""
        with self._lock:
            if self._current == index:
                self._current = (index + 1) % len(self.config.endpoints)

    def _report_failures(self, failures: Mapping[str, str], using: str | None) -> None:
        """The endpoints that failed during one call, logged once per change of state (an endpoint starts failing,
        or fails for a new reason), not on every retry. A warning only when the call got its answer from another
        endpoint (``using``): a call that fails raises StoreUnavailable naming them, and a warning besides would be
        a second line before a one-shot command's one error line (`status` on an unreachable etcd, issue 28)."""
        for endpoint, reason in failures.items():
            if using is None:
                log.debug("etcd endpoint %s unreachable (%s)", _host(endpoint), reason)
                continue
            with self._lock:
                news = endpoint != using and self._down.get(endpoint) != reason
                if news:
                    self._down[endpoint] = reason
            if news:
                log.warning("etcd endpoint %s unreachable (%s), using %s", _host(endpoint), reason, _host(using))

    def _answered(self, endpoint: str) -> None:
        if endpoint in self._down:
            with self._lock:
                was = self._down.pop(endpoint, None)
            if was is not None:
                log.warning("etcd endpoint %s answers again", _host(endpoint))

    def _headers(self) -> dict[str, str]:
        # "hasleader": a member that has lost its leader rejects the request at once (we then try the next one)
        # instead of holding it until etcd's own request timeout; watches on it are cancelled and re-opened.
        headers = {"Grpc-Metadata-hasleader": "true"}
        if self._token:
            headers["Authorization"] = self._token
        return headers

    def _authenticate(self) -> None:
        if self.config.user is None:
            return
        body = {"name": self.config.user, "password": self.config.password or ""}
        reply = self._call("/v3/auth/authenticate", body, idempotent=True, authenticating=True)
        self._token = str(reply.get("token", "")) or None

    def _call(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        idempotent: bool,
        authenticating: bool = False,
        patient: bool = False,
    ) -> dict[str, Any]:
        """POST to the gateway with failover across endpoints; map every failure to the contract's errors.

        The whole call is bounded by the request timeout, or less under a ``time_limit``. An idempotent request
        gives each endpoint at most ``ATTEMPT_TIMEOUT_S`` to answer before it is sent to the next one, so one frozen
        member does not eat a keepalive's whole budget; a write waits the whole budget on one endpoint (re-sending
        it elsewhere could apply it twice). A ``patient`` one (a page of a range: thousands of keys, which a loaded
        etcd may take more than ATTEMPT_TIMEOUT_S to marshal) doubles the attempt after each round of endpoints, so
        a frozen member still costs one ATTEMPT_TIMEOUT_S and a slow one gets the time to answer; on a single
        endpoint it waits the whole budget (an attempt abandoned is marshalled again from the start: at load 13 a
        page of 10,000 keys failed after attempts of 1, 2 and 2 s)."""
        if self._closed:
            raise StoreUnavailable(f"{self._safe_url()} is closed")
        budget = self.remaining_s(self.config.timeout_s)
        if budget <= 0:
            raise StoreUnavailable(f"etcd {path}: the caller's time limit has passed")
        if self.config.user is not None and self._token is None and not authenticating:
            self._authenticate()
        deadline = time.monotonic() + budget
        reauthenticated = False
        pause = 0.02
        tried = 0
        failures: dict[str, str] = {}
        noted: dict[str, str] = {}  # the failures to report (not a slow page's)
        last: BaseException | None = None
        while True:
            index, endpoint = self._endpoint()
            left = max(0.001, deadline - time.monotonic())
            if patient and len(self.config.endpoints) == 1:
                attempt = left  # nowhere else to send it: sending it again would only make etcd start over
            else:
                rounds = tried // len(self.config.endpoints) if patient else 0
                attempt = min(left, ATTEMPT_TIMEOUT_S * 2**rounds) if idempotent else left
            try:
                reply = self._post_once(endpoint, path, body, idempotent=idempotent, timeout_s=attempt)
            except _Unsent as exc:
                last = exc.__cause__
                failures[endpoint] = _reason(last)
                if not patient:  # a slow page: no warning (yet)
                    noted[endpoint] = failures[endpoint]
                self._failed(index)
            except _TokenExpired:
                if authenticating or reauthenticated or self.config.user is None:
                    raise self._auth_error("the server refused the token") from None
                reauthenticated = True
                self._authenticate()
                continue
            else:
                self._answered(endpoint)
                self._report_failures(noted, endpoint)
                return reply
            tried += 1
            if time.monotonic() >= deadline:
                self._report_failures(noted, None)
                raise StoreUnavailable(_unreachable(failures, budget)) from last
            if tried % len(self.config.endpoints) == 0:  # every endpoint failed once: back off a little
                time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                pause = min(pause * 2, 0.5)

    def _post_once(
        self, endpoint: str, path: str, body: Mapping[str, Any], *, idempotent: bool, timeout_s: float
    ) -> dict[str, Any]:
        timeout = httpx.Timeout(timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s))
        try:
            response = self._client.post(endpoint + path, json=body, headers=self._headers(), timeout=timeout)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            if _is_tls_failure(exc):
                raise StoreUnavailable(f"TLS handshake with {endpoint} failed: {exc}") from exc
            raise _Unsent from exc
        except httpx.TransportError as exc:
            if idempotent:
                raise _Unsent from exc
            raise StoreUnavailable(
                f"etcd at {endpoint}: no answer ({type(exc).__name__}: {exc}); the write's outcome is unknown"
            ) from exc
        try:
            reply = response.json()
        except ValueError as exc:
            detail = response.text.strip().splitlines()[0] if response.text.strip() else f"HTTP {response.status_code}"
            if response.status_code >= 500:
                raise _Unsent from StoreUnavailable(f"etcd at {endpoint}: {detail}")
            raise StoreUnavailable(f"etcd at {endpoint} answered {path} with: {detail}") from exc
        if not isinstance(reply, dict):
            raise StoreUnavailable(f"etcd at {endpoint} answered {path} with {reply!r}")
        if "error" in reply or "code" in reply:
            self._raise_error(endpoint, reply, idempotent=idempotent)
        if response.status_code != 200:
            raise StoreUnavailable(f"etcd at {endpoint}: HTTP {response.status_code} for {path}")
        return reply

    def _raise_error(self, endpoint: str, reply: Mapping[str, Any], *, idempotent: bool) -> None:
        code = int(reply.get("code", 2))
        message = str(reply.get("message") or reply.get("error") or "unknown error")
        cause = StoreUnavailable(f"etcd at {endpoint}: {message} (code {code})")
        lowered = message.lower()
        if code == _UNAUTHENTICATED or "invalid auth token" in lowered:
            raise _TokenExpired from cause
        if "authentication failed" in lowered:
            raise self._auth_error("wrong user name or password") from cause
        if "user name is empty" in lowered or "user name not found" in lowered:
            raise self._auth_error("the server requires a user:password@ in the URL") from cause
        if code == _PERMISSION_DENIED:
            raise self._auth_error(f"permission denied ({message})") from cause
        if code == _NOT_FOUND and "lease" in lowered:
            raise LeaseNotFound(message.removeprefix("etcdserver: ")) from cause
        if code == _OUT_OF_RANGE and "compacted" in lowered:
            raise _CompactedRevision from cause
        if _NO_SPACE in lowered:
            self._refusing = (
                f"etcd at {self.url} is out of space (NOSPACE alarm): writes are refused until an operator compacts, "
                'defragments and disarms it (README "Running etcd for apportion")'
            )
            raise StoreFull(self._refusing) from cause
        if "duplicate key" in lowered:
            raise InvalidRequest(
                "op.key", "etcd refuses two writes to one key (or a put inside a deleted range) in one transaction"
            ) from cause
        if code in (_INVALID_ARGUMENT, _OUT_OF_RANGE, _FAILED_PRECONDITION):
            raise InvalidRequest("request", message.removeprefix("etcdserver: ")) from cause
        if idempotent or code == _RESOURCE_EXHAUSTED or any(reason in lowered for reason in _NOT_PROPOSED):
            raise _Unsent from cause
        raise cause

    def _auth_error(self, reason: str) -> InvalidRequest:
        who = f"user {self.config.user!r}" if self.config.user else "no user"
        return InvalidRequest("url", f"etcd authentication failed for {who} at {self._safe_url()}: {reason}")

    def _safe_url(self) -> str:
        return ",".join(self.config.endpoints)

    # -- reads ---------------------------------------------------------------------------------------------

    def revision(self) -> int:
        reply = self._call("/v3/kv/range", {"key": _b64(PROBE_KEY), "count_only": True}, idempotent=True)
        return _revision(reply)

    def _get(self, key: str) -> KeyValue | None:
        reply = self._call("/v3/kv/range", _range_body(key, False), idempotent=True)
        kvs = reply.get("kvs", [])
        return _kv(kvs[0]) if kvs else None

    def _range(self, prefix: str, limit: int | None) -> list[KeyValue]:
        if limit == 0:
            return []
        for _ in range(RANGE_RESTARTS):
            try:
                return self._range_pages(prefix, limit)
            except _CompactedRevision:
                continue  # compacted between two pages: read it all again at the new revision
        raise StoreUnavailable(f"etcd range {prefix!r}: compacted under every attempt to read it")

    def _range_pages(self, prefix: str, limit: int | None) -> list[KeyValue]:
        """``range`` in requests of at most ``RANGE_PAGE`` keys, every page after the first read at the first
        page's revision (one snapshot). _CompactedRevision when that revision is compacted meanwhile."""
        body = _range_body(prefix, True)
        out: list[KeyValue] = []
        while True:
            page = RANGE_PAGE if limit is None else min(RANGE_PAGE, limit - len(out))
            body["limit"] = str(page)
            reply = self._call("/v3/kv/range", body, idempotent=True, patient=True)
            kvs = reply.get("kvs", [])
            out.extend(map(_kv, kvs))
            if not reply.get("more") or not kvs or (limit is not None and len(out) >= limit):
                return out
            body.setdefault("revision", str(_revision(reply)))
            body["key"] = _b64(_unb64(kvs[-1].get("key")) + b"\x00")  # the next key after the last one read

    # -- transactions --------------------------------------------------------------------------------------

    def _txn(self, compares: Sequence[Compare], on_success: Sequence[Op], on_failure: Sequence[Op]) -> TxnResult:
        body: dict[str, Any] = {
            "compare": [_compare(c) for c in compares],
            "success": [_request_op(op) for op in on_success],
            "failure": [_request_op(op) for op in on_failure],
        }
        read_only = all(isinstance(op, Get) for op in (*on_success, *on_failure))
        reply = self._call("/v3/kv/txn", body, idempotent=read_only)
        if self._refusing is not None and any(isinstance(op, Put) for op in (*on_success, *on_failure)):
            self._refusing = None  # a write NOSPACE would refuse was taken (deletes pass under the alarm)
        succeeded = bool(reply.get("succeeded", False))
        ops = on_success if succeeded else on_failure
        replies = reply.get("responses", [])
        responses = tuple(_response(op, r) for op, r in zip(ops, replies, strict=True))
        return TxnResult(succeeded, responses, _revision(reply))

    # -- leases --------------------------------------------------------------------------------------------

    def _grant(self, ttl_s: float) -> Lease:
        reply = self._call("/v3/lease/grant", {"TTL": str(max(1, math.ceil(ttl_s)))}, idempotent=False)
        if reply.get("error"):
            raise StoreUnavailable(f"etcd refused the lease: {reply['error']}")
        self._refusing = None
        return Lease(int(reply["ID"]), float(reply.get("TTL", max(1, math.ceil(ttl_s)))))

    def keepalive(self, lease: Lease | int) -> float:
        lid = lease_id(lease)
        reply = self._call("/v3/lease/keepalive", {"ID": str(lid)}, idempotent=True)
        ttl = int(reply.get("result", {}).get("TTL", 0))
        if ttl <= 0:
            raise LeaseNotFound(f"lease {lid} not found")
        return float(ttl)

    def time_to_live(self, lease: Lease | int) -> float:
        lid = lease_id(lease)
        reply = self._call("/v3/lease/timetolive", {"ID": str(lid)}, idempotent=True)
        ttl = int(reply.get("TTL", 0))  # omitted when 0; -1 when the lease is gone
        if ttl < 0:
            raise LeaseNotFound(f"lease {lid} not found")
        return float(ttl)

    def revoke(self, lease: Lease | int) -> None:
        with contextlib.suppress(LeaseNotFound):  # already gone: not an error
            self._call("/v3/lease/revoke", {"ID": str(lease_id(lease))}, idempotent=True)

    # -- watches and history -------------------------------------------------------------------------------

    def _watch(self, key: str, start_revision: int | None, *, prefix: bool, deletes_only: bool) -> Watch:
        if start_revision is None:
            start = self.revision() + 1
        else:
            start = max(1, start_revision)
            self._check_not_compacted(start)
        watch = _EtcdWatch(self, key, prefix, start, deletes_only)
        with self._lock:
            self._watches.add(watch)
        watch.start()
        return watch

    def _check_not_compacted(self, start: int) -> None:
        """Raise Compacted if ``start <= compact point`` (etcd fails a range read below the compact point)."""
        if start <= 1 or self._range_compacted(start - 1) is None:
            return
        low, high = start, self.revision()  # the smallest readable revision in [start, current] is the compact point
        while low < high:
            middle = (low + high) // 2
            if self._range_compacted(middle):
                low = middle + 1
            else:
                high = middle
        raise Compacted(start, low)

    def _range_compacted(self, revision: int) -> bool | None:
        """True if a read at ``revision`` is compacted away; None when readable (or in the future)."""
        body = {"key": _b64(PROBE_KEY), "count_only": True, "revision": str(revision)}
        try:
            self._call("/v3/kv/range", body, idempotent=True)
        except _CompactedRevision:
            return True
        except InvalidRequest:  # a future revision cannot be compacted
            return None
        return None

    def _compact(self, revision: int) -> None:
        try:
            self._call("/v3/kv/compaction", {"revision": str(revision), "physical": True}, idempotent=True)
        except _CompactedRevision:
            pass  # already compacted there or beyond: nothing to do
        except InvalidRequest as exc:
            raise InvalidRequest("revision", f"{revision}: {exc.reason}") from exc

    def refusing_writes(self) -> str | None:
        return self._refusing

    def close(self) -> None:
        with self._lock:
            watches = sorted(self._watches, key=id)
            self._watches.clear()
            self._closed = True
        for watch in watches:
            watch.close()
        self._client.close()

    def _forget(self, watch: _EtcdWatch) -> None:
        with self._lock:
            self._watches.discard(watch)


def _host(endpoint: str) -> str:
    return endpoint.split("://", 1)[-1]


def _reason(error: BaseException | None) -> str:
    """A short, stable description of why an endpoint did not take a request (for logs and errors)."""
    if error is None:
        return "no answer"
    text = str(error)
    lowered = text.lower()
    if "no leader" in lowered:
        return "no leader"
    if isinstance(error, httpx.TimeoutException):
        return "no answer in time"
    if isinstance(error, httpx.ConnectError):
        return "connection refused" if "refused" in lowered else "cannot connect"
    if isinstance(error, httpx.TransportError):
        return "connection lost"
    return text.removeprefix("etcd at ").split(": ", 1)[-1][:120] or type(error).__name__


def _unreachable(failures: Mapping[str, str], budget_s: float) -> str:
    """The one line a caller sees when no endpoint could serve a request: says "no quorum" when members answer
    but have no leader (a majority is down or partitioned away)."""
    detail = "; ".join(f"{_host(e)}: {why}" for e, why in failures.items()) or "no endpoint answered"
    if "no leader" in failures.values():
        return f"etcd has no quorum (no leader) after {budget_s:.3g}s: {detail}"
    return f"etcd unreachable after {budget_s:.3g}s: {detail}"


class _TokenExpired(Exception):
    """Internal: the auth token was refused (expired): authenticate again."""


class _CompactedRevision(Exception):
    """Internal: etcd said "required revision has been compacted"."""


def _is_tls_failure(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "SSL" in str(exc) or "certificate" in str(exc).lower()


class _EtcdWatch(Watch):
    """A watch fed by a daemon thread that reads etcd's watch stream and re-watches after a break."""

    def __init__(self, store: EtcdStore, key: str, prefix: bool, start: int, deletes_only: bool) -> None:
        self._store = store
        self._body = _range_body(key, prefix)
        if deletes_only:  # filtered by etcd itself: a PUT is never encoded for this stream
            self._body["filters"] = ["NOPUT"]
        self._next = start  # the first revision not yet delivered
        self._pending: deque[Event] = deque()
        self._cond = threading.Condition()
        self._error: ApportionError | None = None
        self._closed = threading.Event()
        self._created = threading.Event()
        self._socket: socket.socket | None = None
        self._thread = threading.Thread(target=self._run, name=f"etcd-watch {key}", daemon=True)

    def start(self) -> None:
        """Start the reader and wait until etcd confirms the watch (so a failure surfaces here)."""
        self._thread.start()
        if not self._created.wait(self._store.config.timeout_s):
            self.close()
            raise StoreUnavailable(f"etcd did not confirm the watch within {self._store.config.timeout_s:g}s")
        with self._cond:
            error = self._error
        if error is not None and not self._pending:
            self.close()
            raise error

    # -- consumer side -------------------------------------------------------------------------------------

    def poll(self) -> list[Event]:
        with self._cond:
            return self._drain()

    def wait(self, timeout_s: float) -> list[Event]:
        with self._cond:
            if not self._pending and self._error is None and not self._closed.is_set():
                self._cond.wait(timeout_s)
            return self._drain()

    def _drain(self) -> list[Event]:
        events = list(self._pending)
        self._pending.clear()
        if not events and self._error is not None and not self._closed.is_set():
            raise self._error
        return events

    def close(self) -> None:
        self._closed.set()
        self._created.set()
        self._interrupt()
        with self._cond:
            self._pending.clear()
            self._cond.notify_all()
        self._store._forget(self)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=1.0)

    def _interrupt(self) -> None:
        sock = self._socket
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the reader blocked in recv()

    # -- reader thread -------------------------------------------------------------------------------------

    def _fail(self, error: ApportionError) -> None:
        with self._cond:
            self._error = error
            self._cond.notify_all()
        self._created.set()

    def _run(self) -> None:
        pause = 0.05
        while not self._closed.is_set():
            index, endpoint = self._store._endpoint()
            try:
                if self._stream(endpoint):
                    pause = 0.05
                    continue
            except Compacted as exc:
                self._fail(exc)
                return
            except _TokenExpired:
                try:
                    self._store._authenticate()
                    continue
                except ApportionError as exc:
                    self._fail(exc)
                    return
            except (InvalidRequest, LeaseNotFound) as exc:
                self._fail(exc)
                return
            except (httpx.HTTPError, StoreUnavailable, _Unsent, ValueError, KeyError, OSError):
                pass  # the stream broke: re-watch from self._next on the next endpoint
            if self._closed.is_set():
                return
            self._store._failed(index)
            self._closed.wait(pause)
            pause = min(pause * 2, 1.0)

    def _stream(self, endpoint: str) -> bool:
        """Read one watch stream until it ends; True if it delivered anything (the endpoint works)."""
        request = {"create_request": {**self._body, "start_revision": str(self._next)}}
        timeout = httpx.Timeout(WATCH_IDLE_S, connect=CONNECT_TIMEOUT_S)
        worked = False
        with self._store._client.stream(
            "POST", endpoint + "/v3/watch", json=request, headers=self._store._headers(), timeout=timeout
        ) as response:
            stream = response.extensions.get("network_stream")
            self._socket = stream.get_extra_info("socket") if stream is not None else None
            if self._closed.is_set():
                return False
            try:
                if response.status_code != 200:
                    response.read()
                    self._store._raise_error(endpoint, response.json(), idempotent=True)
                for line in _lines(response):
                    if self._closed.is_set():
                        return worked
                    worked = True
                    self._handle(json.loads(line), endpoint)
            except httpx.ReadTimeout:
                return True  # idle: re-open from the same revision
            finally:
                self._socket = None
        return worked

    def _handle(self, message: Mapping[str, Any], endpoint: str) -> None:
        if "error" in message:
            error = message["error"]
            if isinstance(error, Mapping):
                code = int(error.get("grpc_code", error.get("code", 14)))
                self._store._raise_error(endpoint, {"code": code, "message": error.get("message", "")}, idempotent=True)
            raise StoreUnavailable(f"watch stream error: {error}")
        result = message.get("result", {})
        if result.get("canceled"):
            compact = int(result.get("compact_revision", 0))
            if compact:
                raise Compacted(self._next, compact)
            reason = str(result.get("cancel_reason", ""))
            if "auth" in reason.lower() or "permission" in reason.lower():
                raise _TokenExpired
            raise StoreUnavailable(f"etcd cancelled the watch: {reason or 'no reason given'}")
        if result.get("created"):
            self._created.set()
        events = [_event(e) for e in result.get("events", [])]
        fresh = [e for e in events if e.revision >= self._next]
        if fresh:
            with self._cond:
                if self._closed.is_set():
                    return
                self._pending.extend(fresh)
                self._next = fresh[-1].revision + 1
                self._cond.notify_all()


def _lines(response: httpx.Response) -> Iterator[str]:
    for line in response.iter_lines():
        if line.strip():
            yield line


def open_etcd(url: str) -> EtcdStore:
    """``etcd://[user:password@]host:port[,host:port...]`` (``etcds://`` for TLS) → an :class:`EtcdStore`."""
    return EtcdStore(url)


__all__ = ["EtcdConfig", "EtcdStore", "open_etcd"]
