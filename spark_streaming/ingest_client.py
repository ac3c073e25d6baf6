"""A small synchronous HTTP client of a proxy's stream-writer routes (``/v2/vectordb/ingest/*``).

Spark tasks run it: standard library only (``http.client``, one kept-alive connection). A request
that fails to connect or loses its connection is sent again until ``retry_s`` has passed: every
request is safe to repeat (a chunk keeps its identity, a commit replaces its record), so a proxy
restart costs time, never rows. An error the proxy answers with is raised as the OspreyError of
its code (InvalidParameter names field and rule; a proxy requiring credentials refuses a request
without a valid ``token`` with NotAuthenticated, code 1800). ``token`` (``user:password``) travels
as ``Authorization: Bearer <token>`` on every request.
"""

from __future__ import annotations

import http.client
import json
import time
from typing import Any
from urllib.parse import urlsplit

from schemas.auth import bearer_headers
from schemas.codec import encode
from schemas.errors import ServiceUnavailable, from_status
from schemas.ingest import IngestChunk, IngestChunkReply, IngestCommit, IngestOpen, IngestProgress, IngestTarget

API_PREFIX = "/v2/vectordb/ingest/"
DEFAULT_TIMEOUT_S = 120.0  # one request: a chunk waits for every broker acknowledgement
DEFAULT_RETRY_S = 120.0  # how long to keep resending while the proxy is unreachable
RETRY_PAUSE_S = 0.5


def proxy_url(address: str) -> str:
    """``host:port`` or ``http://host:port`` -> ``http://host:port``."""
    return address if "://" in address else f"http://{address}"


class IngestClient:
    def __init__(
        self,
        address: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry_s: float = DEFAULT_RETRY_S,
        token: str | None = None,
    ) -> None:
        url = urlsplit(proxy_url(address))
        if url.scheme != "http" or not url.hostname:
            raise ValueError(f"proxy address must be host:port or http://host:port, got {address!r}")
        self.host, self.port = url.hostname, url.port or 80
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self._headers = {"Content-Type": "application/octet-stream", **bearer_headers(token)}
        self._conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> IngestClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self, request: IngestOpen) -> IngestTarget:
        return IngestTarget.model_validate(self._post("open", encode(request)))

    def write(self, chunk: IngestChunk) -> IngestChunkReply:
        return IngestChunkReply.model_validate(self._post("write", encode(chunk)))

    def commit(self, commit: IngestCommit) -> dict[str, Any]:
        return self._post("commit", commit.model_dump_json().encode())

    def progress(self, query_id: str) -> dict[str, Any]:
        return self._post("progress", IngestProgress(query_id=query_id).model_dump_json().encode())

    def _post(self, action: str, body: bytes) -> Any:
        deadline = time.monotonic() + self.retry_s
        while True:
            try:
                if self._conn is None:
                    self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
                self._conn.request("POST", API_PREFIX + action, body=body, headers=self._headers)
                response = self._conn.getresponse()
                payload = response.read()
                break
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                if time.monotonic() >= deadline:
                    raise ServiceUnavailable(
                        f"proxy {self.host}:{self.port} unreachable for {self.retry_s:g} s ({exc!r}); "
                        "is `./osprey proxy` running?"
                    ) from None
                time.sleep(RETRY_PAUSE_S)
        try:
            answer = json.loads(payload)
        except ValueError:
            raise ServiceUnavailable(
                f"proxy {self.host}:{self.port} answered HTTP {response.status} without JSON"
            ) from None
        if answer.get("code", 0) != 0:
            message, field, rule = answer.get("message", ""), answer.get("field", ""), answer.get("rule", "")
            raise from_status(answer["code"], message, field, rule)
        return answer.get("data")
