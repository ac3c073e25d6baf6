"""Who calls the Milvus gRPC front end, and whether they may: one interceptor for every RPC, with
``authorization_enabled`` (Milvus's authentication and privilege interceptors, in that order).

1. Authentication: the ``authorization`` metadata pymilvus sends (base64 of ``user:password``)
   must name a user of the meta with that password (:meth:`AccessControl.authenticate`); anything
   else is refused with gRPC UNAUTHENTICATED and Milvus's text before anything runs.
2. Authorization: the request's privilege (``schemas.rbac.RPC_PRIVILEGES``, Milvus's
   ``privilege_ext_obj`` options) on the object it names, in its database, is decided by the
   proxy's access control (``state/meta/rbac_access.py``). A refusal is Milvus's: gRPC
   PERMISSION_DENIED with ``Privilege<X>: permission deny to <user> in the `<db>` database``.
3. The RPC then runs with the user as the caller (``schemas.rbac.CALLER``), which the listings and
   the grants it makes read.

The database of the check is Milvus's: the call's ``dbname`` metadata (``default`` when none) for
Global and User requests; for a request on collections, the database they live in (the request's
``db_name`` when it names one, as the RPC itself resolves it).
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc
from google.protobuf.message import Message

from agents.proxy.access import CHECK_FAILED, AccessControl
from frontends.milvus_grpc.service import call_database, request_database
from schemas.database import database_name
from schemas.rbac import CALLER, COLLECTION, RPC_PRIVILEGES, Access, PermissionDenied

AUTH_FAILURE = "auth check failure, please check username and password are correct"  # Milvus's text
AUTHORIZATION_METADATA = "authorization"

log = logging.getLogger(__name__)


def metadata_token(metadata: Mapping[str, str]) -> str | None:
    """The ``user:password`` of the ``authorization`` metadata (base64), or None."""
    raw = metadata.get(AUTHORIZATION_METADATA, "")
    try:
        return base64.b64decode(raw, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


def _field(message: Message, path: str) -> Any:
    value: Any = message
    for part in path.split("."):
        value = getattr(value, part)
    return value


def grpc_access(method: str, request: Message, context: Any) -> Access | None:
    """What ``method``'s ``request`` needs (None: Milvus checks no privilege for it)."""
    needed = RPC_PRIVILEGES.get(method)
    if needed is None:
        return None
    names: tuple[str, ...] = ()
    if needed.name:
        names = (str(_field(request, needed.name)),)
    elif needed.names:
        names = tuple(str(n) for n in _field(request, needed.names))
    if needed.object_type == COLLECTION:
        db_name = request_database(request, context)
    else:
        db_name = database_name(call_database(context))
    role = request.entity.role.name if method == "SelectGrant" else ""
    return Access.of(method, db_name, names, role_name=role)


class AccessInterceptor(grpc.aio.ServerInterceptor):
    """Authenticates every RPC, then checks its privilege and runs it as its user (see the module)."""

    def __init__(self, access: AccessControl) -> None:
        self.access = access

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        metadata = {key: value for key, value in (details.invocation_metadata or ()) if isinstance(value, str)}
        token = metadata_token(metadata)
        try:
            user = None if token is None else await self.access.authenticate(token)
        except Exception as exc:  # the meta unreachable (Redis down): say so, never a bare transport error
            log.warning("authentication failed: %r", exc)
            reason = f"{CHECK_FAILED}: {exc!r}"

            async def unavailable(request: Any, context: grpc.aio.ServicerContext) -> Any:
                await context.abort(grpc.StatusCode.UNAVAILABLE, reason)

            return grpc.unary_unary_rpc_method_handler(unavailable)
        if user is None:

            async def refuse(request: Any, context: grpc.aio.ServicerContext) -> Any:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, AUTH_FAILURE)

            return grpc.unary_unary_rpc_method_handler(refuse)
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        method = details.method.rpartition("/")[2]
        inner = handler.unary_unary
        access = self.access

        async def behavior(request: Message, context: grpc.aio.ServicerContext) -> Any:
            try:
                await access.check(user, grpc_access(method, request, context))
            except PermissionDenied as denied:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, denied.text)
            except Exception as exc:  # the meta unreachable: say so, the RPC does not run
                log.warning("privilege check of %s failed: %r", method, exc)
                await context.abort(grpc.StatusCode.UNAVAILABLE, f"{CHECK_FAILED}: {exc!r}")
            caller = CALLER.set(user)
            try:
                return await inner(request, context)
            finally:
                CALLER.reset(caller)

        return grpc.unary_unary_rpc_method_handler(
            behavior,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


__all__ = ["AUTH_FAILURE", "AccessInterceptor", "grpc_access", "metadata_token"]
