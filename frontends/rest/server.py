"""The REST front end's HTTP server (:class:`RestFrontEnd`): one POST route per endpoint under
:data:`API_PREFIX`, the credential check, the body limit, aiohttp's own refusals (404, 405, 413)
as JSON errors (:func:`http_error`), running one request through its endpoint (read, refuse what
was not read, call, render), and the server's start, stop and health."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from pydantic import BaseModel, ValidationError

from agents.proxy.access import CHECK_FAILED
from agents.service import Service
from frontends.inprocess import InProcessClient
from frontends.rest.access import ingest_access, route_access
from frontends.rest.endpoint import Endpoint
from frontends.rest.parse import PartError, database_of, parse_body, refuse_unread
from frontends.rest.render import as_rest_error, failure, success
from frontends.rest.routes import ENDPOINTS, INGEST_ENDPOINTS
from schemas.auth import AUTHORIZATION_HEADER, BEARER_SCHEME, NotAuthenticated, bearer_token
from schemas.codec import decode
from schemas.errors import InvalidParameter, OspreyError, ServiceUnavailable
from schemas.ingest import MAX_CHUNK_BYTES, IngestChunk, IngestOpen
from schemas.rbac import CALLER, ROOT_USER, PermissionDenied
from schemas.status import RestFrontEndHealth

log = logging.getLogger(__name__)

API_PREFIX = "/v2/vectordb"
MAX_BODY_SETTING = "rest_max_body_bytes"  # OspreyConfig field: largest request body, bytes
UNAUTHENTICATED_HTTP_STATUS = 401  # Milvus's REST answer to a request without a valid credential
FORBIDDEN_HTTP_STATUS = 403  # Milvus's REST answer to a request its user may not make
AUTH_CHALLENGE = f'{BEARER_SCHEME} realm="osprey"'  # the WWW-Authenticate header of that answer


def http_error(request: web.Request, exc: web.HTTPException, max_body_bytes: int) -> OspreyError:
    """The error an HTTP-level refusal of aiohttp's (``exc``) answers as JSON. Every client-side
    refusal is code 1100 (Milvus's invalid parameter, what it answers for a bad request): 404 names
    the ``path``, 405 the ``method`` allowed, 413 the ``body`` limit and its setting; any other 4xx
    is an invalid ``request``, a 5xx the service's (code 5)."""
    if isinstance(exc, web.HTTPNotFound):
        return InvalidParameter("path", f"must be an endpoint of the REST API ({API_PREFIX}/...)", request.path)
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = " or ".join(sorted(exc.allowed_methods))
        return InvalidParameter("method", f"must be {allowed} on {request.path}", exc.method)
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return InvalidParameter(
            "body", f"must be at most {max_body_bytes} bytes (setting {MAX_BODY_SETTING})", request.content_length
        )
    if exc.status < 500:
        return InvalidParameter("request", f"refused: HTTP {exc.status} {exc.reason}")
    return OspreyError(f"internal error: HTTP {exc.status} {exc.reason}")


class RestFrontEnd(Service):
    """The REST front end of one proxy. ``start`` binds ``bind`` (default: the client config's
    ``proxy_http``; port 0 picks a free port, see :attr:`url`); ``stop`` closes it, twice is fine.
    Endpoint bodies may be up to ``max_body_bytes`` (default: the client config's
    ``rest_max_body_bytes``); a larger one is refused with a JSON error, HTTP 413. With the client
    config's ``authorization_enabled``, :meth:`authenticate` guards every route."""

    service_name = "REST front end"

    def __init__(self, client: InProcessClient, bind: str | None = None, max_body_bytes: int | None = None) -> None:
        super().__init__()
        self.client = client
        host, _, port = (bind or client.config.proxy_http).rpartition(":")
        self.host, self.port = host, int(port)
        self.max_body_bytes = max_body_bytes if max_body_bytes is not None else client.config.rest_max_body_bytes
        # credentials and privileges checked (authorization_enabled): the proxy's access control
        self.auth = client.config.authorization_enabled
        self.requests = 0
        self.errors = 0
        self.unauthenticated = 0

    def app(self) -> web.Application:
        """The aiohttp application: one POST route per :data:`ENDPOINTS` entry (bodies up to
        :attr:`max_body_bytes`), the stream writers' routes (:data:`INGEST_ENDPOINTS`, bodies up to
        ``MAX_CHUNK_BYTES``, checked by their handler), :meth:`json_errors` around them all and,
        when credentials are required, :meth:`authenticate` inside it (before any route runs)."""
        middlewares = [self.json_errors, self.authenticate] if self.auth else [self.json_errors]
        app = web.Application(client_max_size=self.max_body_bytes, middlewares=middlewares)
        for path, endpoint in ENDPOINTS.items():
            app.router.add_post(f"{API_PREFIX}/{path}", self._handler(endpoint))
        for path, (model, method) in INGEST_ENDPOINTS.items():
            app.router.add_post(f"{API_PREFIX}/{path}", self._ingest_handler(model, method))
        return app

    def _ingest_handler(self, model: Any, method: str) -> Callable[[web.Request], Any]:
        async def handle(request: web.Request) -> web.Response:
            length = request.content_length
            if length is None or length > MAX_CHUNK_BYTES:
                return web.json_response(
                    failure(
                        InvalidParameter(
                            "body", f"must have a Content-Length of at most {MAX_CHUNK_BYTES} bytes", length
                        )
                    ),
                    status=413,
                )
            raw = await request.content.readexactly(length)
            return web.json_response(await self.serve_ingest(model, method, raw))

        return handle

    async def serve_ingest(self, model: Any, method: str, raw: bytes) -> dict[str, Any]:
        """One stream-writer request: the body is the model (codec frame or JSON), the answer
        ``{"code": 0, "data": <reply as JSON>}`` or the error's code and message."""
        self.requests += 1
        try:
            try:
                request = decode(raw, model)
            except ValidationError as err:
                first = err.errors()[0]
                raise InvalidParameter(".".join(str(p) for p in first["loc"]) or "body", first["msg"]) from None
            if isinstance(request, IngestOpen | IngestChunk):  # the stream writers need Insert/Upsert
                await self._authorize_ingest(request)
            argument = request.query_id if method == "ingest_progress" else request
            result = await getattr(self.client, method)(argument)
            return success(result.model_dump(mode="json") if isinstance(result, BaseModel) else result)
        except OspreyError as err:
            self.errors += 1
            return failure(err)
        except Exception as exc:
            self.errors += 1
            log.exception("rest: %s failed", method)
            return failure(OspreyError(f"internal error in {method}: {exc!r}"))

    async def _authorize_ingest(self, request: IngestOpen | IngestChunk) -> None:
        """A stream writer's Insert (or Upsert) on its collection: PermissionDenied (code 65535 in
        the route's JSON answer) unless the caller may."""
        access = self.client.proxy.access
        user = access.caller()
        if user is None:
            return
        collection = None
        if isinstance(request, IngestChunk):
            found = await self.client.proxy.cache.collection(request.collection_id)
            if found is not None:
                view = await self.client.proxy.cache.view()
                collection = (view.databases[found.db_id].db_name, found.collection_name)
        await access.check(user, ingest_access(request, collection))

    @web.middleware
    async def json_errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """aiohttp's HTTP-level refusals (unknown path 404, wrong method 405, body too large 413,
        ...) as the front end's JSON error (:func:`http_error`), with their HTTP status and headers
        (``Allow`` of a 405) kept. Successful answers and redirects pass through."""
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            self.requests += 1
            self.errors += 1
            headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
            error = http_error(request, exc, self.max_body_bytes)
            return web.json_response(failure(error), status=exc.status, headers=headers)

    @web.middleware
    async def authenticate(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Only a request whose ``Authorization`` is ``Bearer <user>:<password>`` of a user of the
        meta reaches ``handler``; any other is answered HTTP 401 with :class:`NotAuthenticated`
        (code 1800, Milvus's text) before its body or path is looked at. Then a JSON route's
        privilege (:mod:`frontends.rest.access`) is checked: a refusal is HTTP 403 with Milvus's
        code and text. The route runs with the user as the caller (``schemas.rbac.CALLER``)."""
        access = self.client.proxy.access
        token = bearer_token(request.headers.get(AUTHORIZATION_HEADER))
        try:
            user = None if token is None else await access.authenticate(token)
        except Exception as exc:  # the meta unreachable (Redis down): the service's error, code 2
            log.warning("rest: authentication failed: %r", exc)
            return web.json_response(failure(ServiceUnavailable(f"{CHECK_FAILED}: {exc!r}")), status=503)
        if user is None:
            self.requests += 1
            self.errors += 1
            self.unauthenticated += 1
            return web.json_response(
                failure(NotAuthenticated()),
                status=UNAUTHENTICATED_HTTP_STATUS,
                headers={"WWW-Authenticate": AUTH_CHALLENGE},
            )
        path = request.path.removeprefix(API_PREFIX + "/")
        if path in ENDPOINTS and user != ROOT_USER:  # root may do anything: its bodies are not read twice
            try:
                body = json.loads(await request.read() or b"{}")
            except ValueError:
                body = None  # the route refuses it (code 1100) before doing anything
            if isinstance(body, dict):
                try:
                    await access.check(user, route_access(path, body))
                except PermissionDenied as denied:
                    self.requests += 1
                    self.errors += 1
                    return web.json_response(failure(denied), status=FORBIDDEN_HTTP_STATUS)
                except Exception as exc:  # the meta unreachable: the route does not run
                    log.warning("rest: privilege check of %s failed: %r", path, exc)
                    return web.json_response(failure(ServiceUnavailable(f"{CHECK_FAILED}: {exc!r}")), status=503)
        caller = CALLER.set(user)
        try:
            return await handler(request)
        finally:
            CALLER.reset(caller)

    def _handler(self, endpoint: Endpoint) -> Callable[[web.Request], Any]:
        async def handle(request: web.Request) -> web.Response:
            # a declared length over the limit is refused before a byte is read; a chunked body
            # is cut by aiohttp's own check in read() (client_max_size): both raise the 413 that
            # json_errors answers
            length = request.content_length
            if length is not None and length > self.max_body_bytes:
                raise web.HTTPRequestEntityTooLarge(max_size=self.max_body_bytes, actual_size=length)
            return web.json_response(await self.serve(endpoint, await request.read()))

        return handle

    async def serve(self, endpoint: Endpoint, raw: bytes) -> dict[str, Any]:
        """Run one request: its response body (``code`` 0 and ``data``, or ``code`` and ``message``).
        The call runs in the body's ``dbName`` (on a view of the client in that database)."""
        self.requests += 1
        try:
            body = parse_body(raw)
            db_name = database_of(body)
            client = self.client.in_database(db_name) if db_name else self.client
            parsed = endpoint.read(body)
            refuse_unread(body)
            try:
                if endpoint.call is not None:
                    result = await endpoint.call(client, **parsed.kwargs)
                else:
                    result = await getattr(client, endpoint.method)(**parsed.kwargs)
            except InvalidParameter as err:
                self.errors += 1
                return failure(as_rest_error(err, parsed.fields), python=err)
            except PartError as part:
                self.errors += 1
                return failure(as_rest_error(part.error, {**parsed.fields, **part.fields}), python=part.error)
            answer = success(endpoint.render(result))
            if endpoint.beside is not None:
                answer.update(endpoint.beside(result))
            return answer
        except OspreyError as err:
            self.errors += 1
            return failure(err)
        except Exception as exc:  # an unexpected failure is the service's: code 5, logged
            self.errors += 1
            log.exception("rest: %s failed", endpoint.method)
            return failure(OspreyError(f"internal error in {endpoint.method}: {exc!r}"))

    async def on_start(self) -> None:
        runner = web.AppRunner(self.app(), access_log=None)
        await runner.setup()
        self.on_close(runner.cleanup, "HTTP server")
        await web.TCPSite(runner, self.host, self.port).start()
        self.port = int(runner.addresses[0][1])

    @property
    def url(self) -> str:
        """``http://host:port`` of the front end (the bound port once started)."""
        return f"http://{self.host}:{self.port}"

    def health(self) -> RestFrontEndHealth:
        return RestFrontEndHealth(
            **dict(super().health()),
            url=self.url,
            auth=self.auth,
            requests=self.requests,
            errors=self.errors,
            unauthenticated=self.unauthenticated,
        )
