"""Choose a backend by URL: ``memory://[name]``, ``sqlite:///path``, ``etcd://host:port[,host:port]``.

Secrets: a URL may carry ``user:password@``. :func:`redact_url` is the one function that makes a URL printable (the
password becomes ``***``, also in malformed URLs such as ``etcd://root:PW@`` or ``etcd:/root:PW@h:p``);
:func:`redact` does the same for every URL inside a text (an error message, a log line). :func:`connect` raises its
errors already redacted, and the CLI passes everything it prints about a store through them.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from apportion.clock import Clock
from apportion.errors import ApportionError, InvalidRequest
from apportion.store._base import Store

MASK = "***"
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:/*")
# In a text, a URL's credentials lie inside one token (a run without white space or quotes): a scheme, any slashes,
# a user (no separator characters) and ':', then the password, which runs to the token's last '@'. The head is
# searched for only in the part of a token before its last '@', and only from the start of a run of scheme
# characters (the lookbehinds: tokens, too, are matched only from their start): every character is then looked at a
# bounded number of times, so a hostile text (100,000 ':' or 'a:') costs linear time. One pattern that also
# matched the password made re try every start position against the rest of the token: quadratic (issue 28).
_TOKEN = re.compile(r"(?<![^\s'\"])[^\s'\"]*@[^\s'\"]*")
_HEAD = re.compile(r"(?<![A-Za-z0-9+.\-])[0-9+.\-]*[A-Za-z][A-Za-z0-9+.\-]*:/*[^\s:/?#@'\"]*:")


def _split_userinfo(url: str) -> tuple[str, str, str, str] | None:
    """``(scheme and slashes, user, password, rest after '@')`` when ``url`` has a ``user:password@``, else None."""
    scheme = _SCHEME.match(url)
    heads = [scheme.group(0)] if scheme else [""]
    if scheme and not scheme.group(0).endswith("/"):
        heads.append("")  # "root:PW@h" has no scheme: "root:" is the user
    for head in heads:
        rest = url[len(head) :]
        at = rest.rfind("@")
        user, sep, password = rest[: max(at, 0)].partition(":")
        if at >= 0 and sep and not any(c in user for c in "/?#"):
            return head, user, password, rest[at + 1 :]
    return None


def redact_url(url: str) -> str:
    """``url`` with the password of its ``user:password@`` replaced by ``***`` (malformed URLs too)."""
    parts = _split_userinfo(url)
    if parts is None:
        return url
    head, user, _, rest = parts
    return f"{head}{user}:{MASK}@{rest}"


def url_secrets(url: str) -> tuple[str, ...]:
    """The password of ``url`` as written and percent-decoded (empty when it has none): what must never be printed."""
    parts = _split_userinfo(url)
    if parts is None or not parts[2]:
        return ()
    return tuple(dict.fromkeys((parts[2], unquote(parts[2]))))


def redact(text: str, secrets: tuple[str, ...] | list[str] = ()) -> str:
    """``text`` with the password of every ``scheme://user:password@`` in it, and every given secret, masked."""
    text = _TOKEN.sub(_mask_token, text) if "@" in text else text
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 3:  # shorter ones would mask ordinary words; the pattern above still catches them in URLs
            text = text.replace(secret, MASK)
    return text


def _mask_token(match: re.Match[str]) -> str:
    """A token holding an '@': the password of its first ``scheme:/*user:`` before its last '@' masked."""
    token = match.group(0)
    at = token.rfind("@")
    head = _HEAD.search(token, 0, at)
    return token if head is None else f"{token[: head.end()]}{MASK}{token[at:]}"


def _redacted(exc: ApportionError, url: str) -> ApportionError:
    """``exc`` with its message redacted (the same type; the original is kept as the cause)."""
    secrets = url_secrets(url)
    text = str(exc)
    if redact(text, secrets) == text:
        return exc
    if isinstance(exc, InvalidRequest):
        return type(exc)(exc.field, redact(exc.reason, secrets))
    try:
        return type(exc)(redact(text, secrets))
    except TypeError:
        return ApportionError(redact(text, secrets))


def connect(url: str, *, clock: Clock | None = None, read_only: bool = False) -> Store:
    """Open the store named by ``url``. ``clock`` is honoured by backends that keep time themselves (memory).

    ``read_only``: never create or write anything (``status``, ``explain``, ``route``, ``report``). An SQLite file
    that does not exist raises :class:`NoSuchStore` instead of being created; etcd reads never write, and a
    ``memory://`` store lives only in this process."""
    if not isinstance(url, str) or "://" not in url:
        shown = redact_url(url) if isinstance(url, str) else url
        raise InvalidRequest("url", f"{shown!r} is not a store URL (memory://, sqlite:///path, etcd://host:port)")
    if "\x00" in url:  # no file name, host or option holds one; sqlite3 and the OS raise ValueError for it
        raise InvalidRequest("url", f"{redact_url(url)!r} holds a NUL character")
    scheme = url.split("://", 1)[0].lower()
    try:
        if scheme == "memory":
            from apportion.store._memory import open_memory

            return open_memory(url, clock)
        if scheme == "sqlite":
            from apportion.store._sqlite import open_sqlite  # type: ignore[import-not-found,unused-ignore]

            return open_sqlite(url, clock, read_only=read_only)  # type: ignore[no-any-return,unused-ignore]
        if scheme in ("etcd", "etcds"):
            from apportion.store._etcd import open_etcd  # type: ignore[import-not-found,unused-ignore]

            return open_etcd(url)  # type: ignore[no-any-return,unused-ignore]
    except ApportionError as exc:
        redacted = _redacted(exc, url)
        if redacted is exc:
            raise
        raise redacted from exc.__cause__  # not from exc: its message holds the password
    raise InvalidRequest("url", f"unknown store scheme {scheme!r} (use memory://, sqlite:///path or etcd://host:port)")


def default_ttl_s(url: str) -> float | None:
    """The member lease TTL the backend named by ``url`` asks for (``Store.default_ttl_s``: 5 s on etcd), without
    opening it; None for a backend that asks for none (the group's default applies)."""
    if isinstance(url, str) and url.split("://", 1)[0].lower() in ("etcd", "etcds"):
        from apportion.store._etcd import EtcdStore  # type: ignore[import-not-found,unused-ignore]

        return EtcdStore.default_ttl_s  # type: ignore[no-any-return,unused-ignore]
    return None


class NoSuchStore(InvalidRequest):
    """A read-only open of a store that does not exist (an SQLite file that is not there): nothing was created."""


__all__ = ["NoSuchStore", "connect", "default_ttl_s", "redact", "redact_url", "url_secrets"]
