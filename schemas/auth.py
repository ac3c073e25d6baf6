"""Credentials: Milvus's ``user:password`` token.

One set of rules for every front end and every client of a proxy:

- the front ends: gRPC (``authorization`` metadata, base64 of the token: what pymilvus sends) and
  REST (``Authorization: Bearer <token>``, Milvus RESTful v2) both check the token against the
  users of the meta (``agents/proxy/access.py``; docs/rbac.md); REST answers a refusal with
  :class:`NotAuthenticated` (Milvus's code 1800 and text). :func:`check_token` is the same check
  against a static map (``user -> password``);
- the clients (the thin REST client, the Spark sink, the demo): with ``authorization_enabled``
  they send :func:`client_token` of their config, the first user of ``users``;
- what prints settings shows ``users`` as :func:`masked_users` (every password ``***``).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from schemas.config import OspreyConfig
from schemas.errors import NEED_AUTHENTICATE, NotAuthenticated

TOKEN_SEPARATOR = ":"  # token = user + ":" + password (the first colon splits: a password may hold colons)
AUTHORIZATION_HEADER = "Authorization"
BEARER_SCHEME = "Bearer"  # matched ignoring case, as HTTP auth schemes are (RFC 9110 11.1)
MASKED_PASSWORD = "***"


def _utf8(text: str) -> bytes:
    """``text`` as bytes for :func:`hmac.compare_digest` (which refuses non-ASCII str); never raises."""
    return text.encode("utf-8", "surrogatepass")


def check_token(token: str, users: Mapping[str, str]) -> str | None:
    """The user ``token`` (``user:password``) names, if ``users`` maps it to exactly that
    password (compared in constant time); None for anything else, never an exception."""
    user, sep, password = token.partition(TOKEN_SEPARATOR)
    expected = users.get(user)
    if not sep or not user or expected is None:
        return None
    return user if hmac.compare_digest(_utf8(expected), _utf8(password)) else None


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization`` header value ``Bearer <token>``; None when the header is
    absent, has another scheme or no token."""
    scheme, _, token = (header or "").strip().partition(" ")
    token = token.strip()
    if scheme.casefold() != BEARER_SCHEME.casefold() or not token:
        return None
    return token


def client_token(config: OspreyConfig) -> str | None:
    """The token a client of ``config``'s proxy sends: ``user:password`` of the first entry of
    ``users`` when ``authorization_enabled`` (None if off, or no user is configured)."""
    if not config.authorization_enabled or not config.users:
        return None
    user, password = next(iter(config.users.items()))
    return f"{user}{TOKEN_SEPARATOR}{password}"


def bearer_headers(token: str | None) -> dict[str, str]:
    """The HTTP headers carrying ``token`` (``Authorization: Bearer <token>``); none for None."""
    return {} if token is None else {AUTHORIZATION_HEADER: f"{BEARER_SCHEME} {token}"}


def masked_users(users: Mapping[str, str]) -> dict[str, str]:
    """``users`` with every password shown as ``***`` (what settings and status may print)."""
    return dict.fromkeys(users, MASKED_PASSWORD)


__all__ = [
    "AUTHORIZATION_HEADER",
    "NEED_AUTHENTICATE",
    "NotAuthenticated",
    "bearer_headers",
    "bearer_token",
    "check_token",
    "client_token",
    "masked_users",
]
