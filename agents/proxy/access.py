"""The proxy's access control: who is calling (authentication against the users in the meta) and
whether they may (the privilege decision of ``state/meta/rbac_access.py`` on the cached meta).

- :meth:`AccessControl.authenticate`: a token ``user:password`` names a user of the meta whose
  salted hash the password matches (``schemas/passwords.py``). A KDF costs tens of milliseconds,
  so a verified token is remembered (by its SHA-256, never in clear) with the hash it was
  verified against: it stays good exactly as long as the user's stored hash is the one it matched
  (a new password, or a deleted user, ends it at once: no timer, no explicit invalidation).
- :meth:`AccessControl.check`: the request's :class:`~schemas.rbac.Access` against the caller's
  roles and grants; :class:`~schemas.rbac.PermissionDenied` when refused.
- The meta is the proxy's :class:`MetaCache` (dropped by every RBAC change's reply on
  ``dd-reply``). A refusal (an unknown user, a wrong password, a denial) is decided on fresh meta:
  the cache is reloaded once first, at most every :data:`REFRESH_MIN_S`, so a user or grant made
  through another proxy a moment ago counts, and a stream of bad requests cannot reload it per
  request.
- The caller of the request being served is :data:`schemas.rbac.CALLER`, set by the front ends;
  :meth:`caller` is None (trusted: no checks, nothing filtered) for a request that did not come
  through a front end, or when ``authorization_enabled`` is off.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

from schemas.auth import TOKEN_SEPARATOR
from schemas.config import OspreyConfig
from schemas.passwords import verify_password
from schemas.rbac import CALLER, Access, PermissionDenied
from state.meta.meta_table import MetaView
from state.meta.rbac_access import allowed, visible_collections, visible_databases

if TYPE_CHECKING:
    from state.meta.meta_cache import MetaCache

CHECK_FAILED = "the proxy could not check the credential or privilege against its meta (is Redis up?)"
REFRESH_MIN_S = 1.0  # a refusal reloads the cached meta at most this often
VERIFIED_TOKENS = 4096  # tokens remembered as verified (least recently used dropped first)


class AccessControl:
    """Authentication and authorization of one proxy's front ends, on its meta cache (given by
    :meth:`attach` when the proxy starts)."""

    def __init__(self, config: OspreyConfig, cache: MetaCache | None = None) -> None:
        self.config = config
        self._cache = cache
        self._verified: OrderedDict[bytes, tuple[str, str]] = OrderedDict()  # sha256(token) -> (user, hash)
        self._last_refresh = 0.0
        self.denied = 0
        self.unauthenticated = 0

    def attach(self, cache: MetaCache) -> None:
        self._cache = cache

    @property
    def enabled(self) -> bool:
        return self.config.authorization_enabled

    def caller(self) -> str | None:
        """The user of the request being served (None: a trusted caller, or auth off)."""
        return CALLER.get() if self.enabled else None

    async def _view(self, fresh: bool = False) -> MetaView:
        assert self._cache is not None, "the proxy is not started"
        if fresh and time.monotonic() - self._last_refresh >= REFRESH_MIN_S:
            self._last_refresh = time.monotonic()
            return await self._cache.refresh()
        return await self._cache.view()

    # -- authentication
    async def authenticate(self, token: str) -> str | None:
        """The user ``token`` (``user:password``) names, if the password is that user's; None for
        anything else (never an exception)."""
        user, sep, password = token.partition(TOKEN_SEPARATOR)
        if not sep or not user:
            self.unauthenticated += 1
            return None
        if await self.verify(user, password, token):
            return user
        self.unauthenticated += 1
        return None

    async def verify(self, user: str, password: str, token: str | None = None) -> bool:
        """Whether ``password`` is ``user``'s (an unknown user: False)."""
        key = hashlib.sha256((token or f"{user}{TOKEN_SEPARATOR}{password}").encode("utf-8", "surrogatepass")).digest()
        for fresh in (False, True):
            credential = (await self._view(fresh)).rbac.credentials.get(user)
            if credential is None:
                continue
            if self._verified.get(key) == (user, credential.password_hash):
                self._verified.move_to_end(key)
                return True
            if await asyncio.to_thread(verify_password, password, credential.password_hash):
                self._verified[key] = (user, credential.password_hash)
                while len(self._verified) > VERIFIED_TOKENS:
                    self._verified.popitem(last=False)
                return True
        return False

    # -- authorization
    async def check(self, user: str | None, access: Access | None) -> None:
        """Raise :class:`PermissionDenied` unless ``user`` may make ``access`` (None: a request
        Milvus checks no privilege for; a None user: trusted)."""
        if user is None or access is None:
            return
        for fresh in (False, True):
            if allowed(await self._view(fresh), user, access):
                return
        self.denied += 1
        raise PermissionDenied(access.privilege, user, access.db_name)

    async def visible_databases(self) -> set[str] | None:
        """The databases the caller sees (None: every one, also for a trusted caller)."""
        user = self.caller()
        return None if user is None else visible_databases(await self._view(), user)

    async def visible_collections(self, db_name: str) -> set[str] | None:
        """The collections of ``db_name`` the caller sees (None: every one)."""
        user = self.caller()
        return None if user is None else visible_collections(await self._view(), user, db_name)


__all__ = ["CHECK_FAILED", "REFRESH_MIN_S", "AccessControl"]
