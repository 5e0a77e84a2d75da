"""Make store URLs printable: one place that knows where a URL keeps its password.

A URL may carry ``user:password@``, and a libpq URL (``postgresql://``) its password as a query parameter too
(``?password=...``, any case, anywhere in the query). :func:`redact_url` is the one function that makes a URL
printable (the password becomes ``***``, also in malformed URLs such as ``etcd://root:PW@`` or ``etcd:/root:PW@h:p``);
:func:`redact` does the same for every URL inside a text (an error message, a log line), and :func:`url_secrets`
names what must never be printed. ``connect`` raises its errors already redacted, backends show only redacted URLs,
and the CLI, the runner and the dashboard pass everything they print about a store through these.

Its own module (not ``_connect``'s): the backends that ``connect`` imports use it too, and a backend importing
``_connect`` was the store package's one import circle.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

MASK = "***"
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:/*")
# In a text, a URL's credentials lie inside one token (a run without white space or quotes): a scheme, any slashes,
# a user (no separator characters) and ':', then the password, which runs to the token's last '@'. The head is
# searched for only in the part of a token before its last '@', and only from the start of a run of scheme
# characters (the lookbehinds: tokens, too, are matched only from their start): every character is then looked at a
# bounded number of times, so a hostile text (100,000 ':' or 'a:') costs linear time. One pattern that also
# matched the password made re try every start position against the rest of the token: quadratic (issue 28).
_TOKEN = re.compile(r"(?<![^\s'\"])[^\s'\"]*@[^\s'\"]*")
# libpq's query-parameter password: linear (no nested repetition), applied to whole texts as well as URLs.
_QUERY_PASSWORD = re.compile(r"([?&]password=)([^&#\s'\"]*)", re.IGNORECASE)
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
    if parts is not None:
        head, user, _, rest = parts
        url = f"{head}{user}:{MASK}@{rest}"
    return _mask_query_passwords(url)


def url_secrets(url: str) -> tuple[str, ...]:
    """The password of ``url`` as written and percent-decoded (empty when it has none): what must never be printed."""
    parts = _split_userinfo(url)
    found = [parts[2], unquote(parts[2])] if parts is not None and parts[2] else []
    for match in _QUERY_PASSWORD.finditer(url):
        if match.group(2):
            found += [match.group(2), unquote(match.group(2).replace("+", " "))]
    return tuple(dict.fromkeys(found))


def redact(text: str, secrets: tuple[str, ...] | list[str] = ()) -> str:
    """``text`` with the password of every ``scheme://user:password@`` in it, and every given secret, masked."""
    text = _TOKEN.sub(_mask_token, text) if "@" in text else text
    text = _mask_query_passwords(text)
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 3:  # shorter ones would mask ordinary words; the pattern above still catches them in URLs
            text = text.replace(secret, MASK)
    return text


def _mask_query_passwords(text: str) -> str:
    """Every ``?password=...`` / ``&password=...`` of ``text`` masked."""
    if "password=" not in text.lower():
        return text
    return _QUERY_PASSWORD.sub(lambda m: f"{m.group(1)}{MASK}", text)


def _mask_token(match: re.Match[str]) -> str:
    """A token holding an '@': the password of its first ``scheme:/*user:`` before its last '@' masked."""
    token = match.group(0)
    at = token.rfind("@")
    head = _HEAD.search(token, 0, at)
    return token if head is None else f"{token[: head.end()]}{MASK}{token[at:]}"


__all__ = ["MASK", "redact", "redact_url", "url_secrets"]
