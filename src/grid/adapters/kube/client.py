"""The Kubernetes API client Grid's adapters share, on ``kubernetes_asyncio``.

`KubeClient` resolves configuration (``--kubeconfig``, then ``KUBECONFIG``, then
the in-cluster service account, then ``~/.kube/config``), sends JSON requests,
retries 429 and 5xx answers and connection failures with jittered exponential
backoff (never sooner than ``Retry-After``), and maps every other failure into
Grid's error tree. Response bodies are read here, never by the library: with
``_preload_content=True`` ``kubernetes_asyncio`` logs each body at debug level,
and a Secret's body must never reach a log. Error messages name the verb, the
resource and the HTTP status, plus the server's message for kinds other than
Secret, so no Secret byte reaches an exception either.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from grid.errors import AlreadyExists, Conflict, GridError, NotFound, ValidationError

log = logging.getLogger("grid.kube")

Obj = dict[str, Any]
FIELD_MANAGER = "grid-operator"
"""The field manager of every write Grid makes, and of its server-side applies."""
KUBECONFIG_ENV = "KUBECONFIG"
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where a pod's service-account token and cluster CA are mounted."""


@dataclass(frozen=True)
class ClientSettings:
    """Limits of the API client."""

    request_timeout_s: float = 30.0
    """Most seconds one non-watch request may take. Longer tolerates a slow API
    server; shorter notices a dead one sooner."""
    retries: int = 5
    """Retries of a 429, a 5xx or a connection failure before the error is raised."""
    backoff_base_s: float = 0.2
    """First retry delay; each retry doubles it, up to `backoff_cap_s`."""
    backoff_cap_s: float = 10.0
    """Longest delay between two retries."""
    watch_timeout_s: int = 300
    """``timeoutSeconds`` asked of each watch; the watch is then re-opened from the
    last version. Shorter re-opens more often; longer leans on bookmarks."""
    max_event_bytes: int = 8 * 1024 * 1024
    """Largest single watch event accepted; a longer line ends the stream."""


class ApiFailure(GridError):
    """An API request failed with an HTTP status that has no narrower Grid error."""

    code = "kubernetes_api"

    def __init__(
        self,
        message: str,
        *,
        status: int,
        retry_after_s: float | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.status = status
        self.retry_after_s = retry_after_s
        """The server's ``Retry-After`` on a 429 or 503, when it sent one."""


class Gone(GridError):
    """The API server answered 410: the requested resourceVersion is too old."""

    code = "expired"


def api_path(
    api_version: str,
    plural: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """The REST path of a collection, an object or an object's subresource."""
    root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    parts = [root]
    if namespace:
        parts.append(f"namespaces/{namespace}")
    parts.append(plural)
    if name:
        parts.append(name)
    if subresource:
        parts.append(subresource)
    return "/".join(parts)


async def load_configuration(kubeconfig: str | Path | None = None) -> k8s_client.Configuration:
    """Configuration from ``kubeconfig``, ``KUBECONFIG``, the service account or ~/.kube/config."""
    cfg = k8s_client.Configuration()
    path = str(kubeconfig) if kubeconfig else os.environ.get(KUBECONFIG_ENV, "")
    try:
        if path:
            await k8s_config.load_kube_config(config_file=path, client_configuration=cfg)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=cfg,
                token_filename=str(SERVICE_ACCOUNT_DIR / "token"),
                cert_filename=str(SERVICE_ACCOUNT_DIR / "ca.crt"),
            )
        else:
            await k8s_config.load_kube_config(client_configuration=cfg)
    except (k8s_config.ConfigException, OSError, ValueError) as exc:
        source = path or ("in-cluster" if os.environ.get("KUBERNETES_SERVICE_HOST") else "")
        raise GridError(
            f"cannot load Kubernetes configuration {source or '~/.kube/config'}: "
            f"{type(exc).__name__}",
            code="store_unavailable",
        ) from None
    return cfg


class KubeClient:
    """JSON requests to one API server, with retries and Grid errors."""

    def __init__(
        self,
        configuration: k8s_client.Configuration,
        settings: ClientSettings | None = None,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings or ClientSettings()
        self._api = k8s_client.ApiClient(configuration)
        self._api.user_agent = "grid-operator"
        self._rng = rng or random.Random()

    @classmethod
    async def connect(
        cls, kubeconfig: str | Path | None = None, settings: ClientSettings | None = None
    ) -> KubeClient:
        """A client for the cluster the configuration names."""
        return cls(await load_configuration(kubeconfig), settings)

    def set_identity(self, identity: str) -> None:
        """Name this replica in the ``User-Agent`` of every request (audit logs show it)."""
        self._api.user_agent = f"grid-operator/{identity}"

    async def close(self) -> None:
        """Close the connection pool."""
        await self._api.close()

    def backoff_s(self, attempt: int, retry_after: float = 0.0) -> float:
        """Delay before retry ``attempt`` (0-based): exponential, jittered, >= Retry-After."""
        s = self.settings
        delay = min(s.backoff_cap_s, s.backoff_base_s * (2**attempt))
        return float(max(retry_after, delay * (0.5 + 0.5 * self._rng.random())))

    async def _send(
        self,
        method: str,
        path: str,
        query: Mapping[str, str],
        body: Obj | None,
        content_type: str,
        timeout: aiohttp.ClientTimeout | float,
    ) -> aiohttp.ClientResponse:
        response: aiohttp.ClientResponse = await self._api.call_api(
            path,
            method,
            query_params=list(query.items()),
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout,
        )
        return response

    async def request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        query: Mapping[str, str] | None = None,
        body: Obj | None = None,
        content_type: str = "application/json",
        secret: bool = False,
        guard: Callable[[], None] | None = None,
    ) -> Obj:
        """Send one request and return the decoded JSON answer, retrying transient failures.

        ``what`` names the target in error messages (``GridSite 'east'``);
        ``secret`` keeps the server's message out of them. ``guard`` runs right
        before every attempt goes out and may raise to stop it (leader election
        fences writes this way: a retry after a pause must not leave a replica
        that no longer leads).
        """
        attempt = 0
        while True:
            retry_after = 0.0
            status = 0
            if guard is not None:
                guard()
            try:
                response = await self._send(
                    method, path, query or {}, body, content_type, self.settings.request_timeout_s
                )
                try:
                    status = response.status
                    raw = await response.read()
                    retry_after = _retry_after(response.headers.get("Retry-After"))
                finally:
                    response.release()
                if 200 <= status < 300:
                    return _decode(raw, what)
                if status != 429 and status < 500:
                    raise _error(method, what, status, raw, secret=secret)
                failure = f"HTTP {status}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                failure = type(exc).__name__
                status = 0
            if attempt >= self.settings.retries and status:
                raise ApiFailure(
                    f"{method} {what}: the API server kept failing ({failure})",
                    status=status,
                    retry_after_s=retry_after or None,
                    code="store_unavailable",
                )
            if attempt >= self.settings.retries:
                raise GridError(
                    f"{method} {what}: the API server kept failing ({failure})",
                    code="store_unavailable",
                )
            delay = self.backoff_s(attempt, retry_after)
            log.warning(
                "kubernetes request retried",
                extra={"verb": method, "target": what, "reason": failure, "delay_s": delay},
            )
            attempt += 1
            await asyncio.sleep(delay)

    async def stream(
        self, path: str, *, what: str, query: Mapping[str, str]
    ) -> AsyncGenerator[Obj, None]:
        """The JSON lines of a watch; ends when the server closes the stream.

        A non-2xx answer raises as `request` does (410 as `Gone`); a dropped
        connection raises ``aiohttp.ClientError`` or ``TimeoutError`` for the caller
        to resume from its last version.
        """
        s = self.settings
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=s.request_timeout_s, sock_read=s.watch_timeout_s + 30
        )
        response = await self._send("GET", path, query, None, "application/json", timeout)
        try:
            if not 200 <= response.status < 300:
                raw = await response.read()
                raise _error("WATCH", what, response.status, raw, secret=False)
            buffer = b""
            async for chunk in response.content.iter_any():
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield _decode(line, what)
                if len(buffer) > s.max_event_bytes:
                    raise GridError(
                        f"WATCH {what}: an event exceeds {s.max_event_bytes} bytes",
                        code="protocol_error",
                    )
        finally:
            response.release()


def _retry_after(value: str | None) -> float:
    try:
        return max(0.0, float(value)) if value else 0.0
    except ValueError:
        return 0.0


def _decode(raw: bytes, what: str) -> Obj:
    try:
        decoded = json.loads(raw) if raw else {}
    except ValueError:
        raise GridError(
            f"{what}: the API server sent invalid JSON", code="protocol_error"
        ) from None
    if not isinstance(decoded, dict):
        raise GridError(f"{what}: the API server sent a non-object", code="protocol_error")
    return decoded


def _error(method: str, what: str, status: int, raw: bytes, *, secret: bool) -> GridError:
    """The Grid error for a failed request; the server's words only for non-Secrets."""
    reason, message = "", ""
    try:
        answer = json.loads(raw)
        if isinstance(answer, dict):
            reason = str(answer.get("reason", ""))
            message = str(answer.get("message", ""))[:300]
    except ValueError:
        pass
    detail = f"{method} {what}: HTTP {status}" + (f" {reason}" if reason else "")
    if message and not secret:
        detail += f": {message}"
    if status == 404:
        return NotFound(f"{what} not found")
    if status == 409:
        return (
            AlreadyExists(f"{what} already exists")
            if reason == "AlreadyExists"
            else (Conflict(detail))
        )
    if status == 410:
        return Gone(detail)
    if status in (400, 422):
        return ValidationError(detail)
    if status in (401, 403):
        return GridError(detail, code="forbidden")
    return ApiFailure(detail, status=status)
