"""The proxy's Milvus gRPC front end: ``MilvusService`` (grpc.aio) on ``proxy_grpc`` (19530).

``start`` binds and serves; ``stop`` ends the server, letting RPCs in flight finish for at most
``STOP_GRACE_S``. With ``authorization_enabled``, every RPC needs the ``authorization`` metadata
pymilvus sends (base64 of ``user:password``; ``MilvusClient(token="user:password")`` sends the
same) naming a user of ``users``; a missing or wrong credential is refused with gRPC
UNAUTHENTICATED and Milvus's text, before anything runs.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc

from agents.service import Service
from frontends.inprocess import InProcessClient
from frontends.milvus_grpc.service import MilvusServicer
from frontends.milvus_grpc.stubs import milvus_pb2_grpc
from schemas.auth import check_token
from schemas.status import GrpcFrontEndHealth

log = logging.getLogger(__name__)

STOP_GRACE_S = 2.0  # RPCs in flight may finish for this long when the front end stops
MAX_MESSAGE_BYTES = 512 * 1024 * 1024  # one request or reply (pymilvus allows 2 GiB; a 64 MiB insert fits)
AUTH_FAILURE = "auth check failure, please check username and password are correct"  # Milvus's text
# Keepalive pings: pymilvus pings every 10 s, also between calls. gRPC's server default (one ping
# per 5 min without data) answers that with GOAWAY "too_many_pings", which drops an idle client's
# connection. Milvus's server permits pings every 5 s without calls; so does this one.
MIN_PING_INTERVAL_MS = 5_000
SERVER_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", MIN_PING_INTERVAL_MS),
]


def credential_user(metadata: Mapping[str, str], users: Mapping[str, str]) -> str | None:
    """The user whose ``authorization`` metadata (base64 ``user:password``) matches ``users``, or None
    (the token is checked by :func:`schemas.auth.check_token`, as REST's ``Bearer`` token is)."""
    raw = metadata.get("authorization", "")
    try:
        text = base64.b64decode(raw, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return check_token(text, users)


class _Authenticator(grpc.aio.ServerInterceptor):
    """Refuses every RPC without a valid credential (UNAUTHENTICATED, Milvus's text)."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self.users = dict(users)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        metadata = {key: value for key, value in (details.invocation_metadata or ()) if isinstance(value, str)}
        if credential_user(metadata, self.users) is not None:
            return await continuation(details)

        async def refuse(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, AUTH_FAILURE)

        return grpc.unary_unary_rpc_method_handler(refuse)


class GrpcFrontEnd(Service):
    """MilvusService of one proxy on ``bind`` (default: the client config's ``proxy_grpc``; port 0
    picks a free port, see :attr:`address`)."""

    service_name = "Milvus gRPC front end"

    def __init__(self, client: InProcessClient, bind: str | None = None) -> None:
        super().__init__()
        self.client = client
        self.bind = bind or client.config.proxy_grpc
        self.port = 0
        self._server: grpc.aio.Server | None = None

    @property
    def address(self) -> str:
        host = self.bind.rpartition(":")[0]
        return f"{host}:{self.port}"

    async def on_start(self) -> None:
        config = self.client.config
        interceptors = [_Authenticator(config.users)] if config.authorization_enabled else []
        server = grpc.aio.server(
            interceptors=interceptors,
            options=SERVER_OPTIONS,
        )
        milvus_pb2_grpc.add_MilvusServiceServicer_to_server(MilvusServicer(self.client, self.client.proxy), server)
        self.port = server.add_insecure_port(self.bind)
        if not self.port:
            raise OSError(f"the Milvus gRPC front end could not bind {self.bind} (setting proxy_grpc)")
        await server.start()
        self._server = server
        self.on_close(self._close, "gRPC server")

    async def _close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(STOP_GRACE_S)

    def health(self) -> GrpcFrontEndHealth:
        return GrpcFrontEndHealth(
            **dict(super().health()), address=self.address, auth=self.client.config.authorization_enabled
        )


__all__ = ["AUTH_FAILURE", "GrpcFrontEnd", "credential_user"]
