"""The proxy's Milvus gRPC front end: ``MilvusService`` (grpc.aio) on ``proxy_grpc`` (19530).

``start`` binds and serves; ``stop`` ends the server, letting RPCs in flight finish for at most
``STOP_GRACE_S``. With ``authorization_enabled``, every RPC needs the ``authorization`` metadata
pymilvus sends (base64 of ``user:password``; ``MilvusClient(token="user:password")`` sends the
same) naming a user of the meta with its password; a missing or wrong credential is refused with
gRPC UNAUTHENTICATED and Milvus's text, before anything runs; then the RPC's privilege is checked
(:mod:`frontends.milvus_grpc.access`, docs/rbac.md).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import grpc

from agents.service import Service
from frontends.inprocess import InProcessClient
from frontends.milvus_grpc.access import AUTH_FAILURE, AccessInterceptor, metadata_token
from frontends.milvus_grpc.rbac_service import RbacServicer
from frontends.milvus_grpc.stubs import milvus_pb2_grpc
from schemas.auth import check_token
from schemas.status import GrpcFrontEndHealth

log = logging.getLogger(__name__)

STOP_GRACE_S = 2.0  # RPCs in flight may finish for this long when the front end stops
MAX_MESSAGE_BYTES = 512 * 1024 * 1024  # one request or reply (pymilvus allows 2 GiB; a 64 MiB insert fits)
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
    """The user whose ``authorization`` metadata (base64 ``user:password``) matches the static map
    ``users`` (:func:`schemas.auth.check_token`), or None. The front end itself checks the users of
    the meta (:class:`~frontends.milvus_grpc.access.AccessInterceptor`)."""
    token = metadata_token(metadata)
    return None if token is None else check_token(token, users)


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
        interceptors = [AccessInterceptor(self.client.proxy.access)] if config.authorization_enabled else []
        server = grpc.aio.server(
            interceptors=interceptors,
            options=SERVER_OPTIONS,
        )
        milvus_pb2_grpc.add_MilvusServiceServicer_to_server(RbacServicer(self.client, self.client.proxy), server)
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
