"""A strict Kubernetes API emulator for tests, on aiohttp, served on 127.0.0.1.

No real API server runs on the test machines, so this one behaves as the API
server does where an operator depends on it:

- server-set metadata (``uid``, ``resourceVersion``, ``creationTimestamp``, and
  ``generation`` for custom resources), 201 on create, 409 ``AlreadyExists``;
- one store-wide ``resourceVersion`` counter; 409 ``Conflict`` on a stale
  precondition (PUT body, merge-patch body or apply body);
- status-subresource isolation for custom resources: a write to the main
  resource leaves ``status`` alone and a write to ``/status`` touches nothing else;
  ``generation`` bumps only when the spec changes; a no-op write bumps nothing;
- server-side apply (``application/apply-patch+yaml``) with ``fieldManager``,
  ``force``, per-manager field ownership in ``metadata.managedFields`` and 409 on a
  conflicting field owned by another manager;
- list with ``labelSelector`` and the list's ``resourceVersion``; watch with
  ``watch=true``, ``resourceVersion``, ``allowWatchBookmarks`` (BOOKMARK events),
  ``timeoutSeconds``, and an in-stream 410 ``Expired`` ERROR event for a version the
  trimmed event log no longer reaches;
- Secrets' ``stringData`` folded into base64 ``data``; Leases and Events.

Every operator request is recorded as ``(verb, group, resource, namespace)`` in
`KubeApiEmulator.audit`, which the RBAC test compares with the chart's ClusterRole.
Faults for tests: `drop_watches` ends every open watch mid-stream,
`pause_watches` refuses new ones with 503 until `resume_watches`, `compact`
trims the event log, `fail_next` answers the next requests with an error, and
`fail_writes` makes every write to one resource fail (an HTTP status, a stall
past the client's timeout, or a reset connection) until the rule is cleared.
This module is the ``kmock`` replacement: kmock 0.8's emulator stores merged
dicts with no resourceVersion, preconditions, status subresource, generation,
apply or watch resumption, so each of these would have been an override of its
request handler anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from grid.adapters.store import objects
from grid.testing.kube_state import DEFAULT_RETENTION, ApiError, KubeState, Obj, Resource

Audit = tuple[str, str, str, str]
"""(verb, API group, resource[/subresource], namespace or "")."""

OPERATOR_AGENT = "grid-operator"
"""Requests whose User-Agent starts with this are the operator's and are audited;
a test's own setup writes use another agent and stay out of the RBAC audit."""
DEFAULT_BOOKMARK_INTERVAL_S = 0.5
"""How often an idle watch that asked for bookmarks gets one."""


def _status(code: int, reason: str, message: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


@dataclass
class WriteRule:
    """Every write to ``plural`` fails with ``fault`` while ``active``; ``hits`` counts them.

    ``fault`` is an HTTP status ("403" … "503"; a 429 carries ``Retry-After: 0``),
    "timeout" (the answer stalls until the rule is cleared, past any sane client
    timeout) or "reset" (the connection is dropped without an answer).
    """

    plural: str
    fault: str
    active: bool = True
    hits: int = 0
    cleared: asyncio.Event = field(default_factory=asyncio.Event)

    def clear(self) -> None:
        self.active = False
        self.cleared.set()


@dataclass(eq=False)
class _Watcher:
    resource: Resource
    namespace: str | None
    queue: asyncio.Queue[Obj | None] = field(default_factory=asyncio.Queue)


class KubeApiEmulator(KubeState):
    """The emulator: `start` it, point a kubeconfig at `url` with `token`, `stop` it."""

    def __init__(
        self,
        *,
        token: str = "grid-test-token",
        retention: int = DEFAULT_RETENTION,
        bookmark_interval_s: float = DEFAULT_BOOKMARK_INTERVAL_S,
    ) -> None:
        super().__init__(retention)
        self.token = token
        self.bookmark_interval_s = bookmark_interval_s
        self.audit: Counter[Audit] = Counter()
        self.requests = 0
        self.writes: list[tuple[str, str, str, dict[str, str]]] = []
        """(User-Agent, verb, resource, Lease holders at that moment) per write."""
        self.bookmarked_rv = 0
        """The resourceVersion of the last BOOKMARK sent, for tests to wait on."""
        self._watchers: set[_Watcher] = set()
        self._failures: list[int] = []
        self.write_rules: list[WriteRule] = []
        self._watches_paused = False
        self._runner: web.AppRunner | None = None
        self.url = ""

    def _notify(self, resource: Resource, event: Obj) -> None:
        ns = event["object"]["metadata"].get("namespace")
        for watcher in self._watchers:
            if watcher.resource == resource and watcher.namespace in (None, ns):
                watcher.queue.put_nowait(event)

    # -- lifecycle and faults -------------------------------------------------

    async def start(self, port: int = 0) -> str:
        """Serve on 127.0.0.1 (an ephemeral port by default); returns the base URL."""
        app = web.Application(client_max_size=4 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        server = site._server
        assert server is not None
        sock = server.sockets[0]  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        return self.url

    async def stop(self) -> None:
        """End every watch and stop serving."""
        self.drop_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def drop_watches(self) -> None:
        """End every open watch stream, as an API server restart or a load balancer does."""
        for watcher in list(self._watchers):
            watcher.queue.put_nowait(None)

    def pause_watches(self) -> None:
        """End every watch and answer new ones 503 until `resume_watches`, as a
        restarting API server does; writes still go through meanwhile."""
        self._watches_paused = True
        self.drop_watches()

    def resume_watches(self) -> None:
        """Serve watches again."""
        self._watches_paused = False

    def fail_next(self, *codes: int) -> None:
        """Answer the next requests (one per code) with that HTTP status."""
        self._failures.extend(codes)

    def fail_writes(self, plural: str, fault: str) -> WriteRule:
        """Fail every write to ``plural`` (``leases``, ``events``, …) with ``fault``."""
        rule = WriteRule(plural, fault)
        self.write_rules.append(rule)
        return rule

    async def _injected(self, request: web.Request, plural: str) -> web.StreamResponse | None:
        rule = next((r for r in self.write_rules if r.active and r.plural == plural), None)
        if rule is None:
            return None
        rule.hits += 1
        if rule.fault == "timeout":
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(rule.cleared.wait(), 60)
            raise ApiError(504, "Timeout", "injected stall")
        if rule.fault == "reset":
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=500)
        code = int(rule.fault)
        headers = {"Retry-After": "0"} if code == 429 else None
        body = _status(code, "InjectedFailure", f"injected failure {code}")
        return web.json_response(body, status=code, headers=headers)

    def kubeconfig(self, *, namespace: str = "default") -> Obj:
        """A kubeconfig document that reaches this emulator with its bearer token."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
            "users": [{"name": "grid", "user": {"token": self.token}}],
            "contexts": [
                {
                    "name": "emulator",
                    "context": {"cluster": "emulator", "user": "grid", "namespace": namespace},
                }
            ],
            "current-context": "emulator",
        }

    def _route(self, path: str) -> tuple[Resource, str | None, str | None, str | None]:
        """(resource, namespace, name, subresource) of an API path."""
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, rest = "", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, rest = parts[1], parts[3:]
        else:
            raise ApiError(404, "NotFound", f"the server could not find {path}")
        namespace = None
        if len(rest) >= 2 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise ApiError(404, "NotFound", f"the server could not find {path}")
        resource = self._resources.get((group, rest[0]))
        if resource is None or (namespace is not None and not resource.namespaced):
            raise ApiError(404, "NotFound", f"the server could not find the resource {path}")
        if not resource.namespaced and namespace is not None:
            raise ApiError(404, "NotFound", f"{resource.plural} is cluster-scoped")
        name = rest[1] if len(rest) >= 2 else None
        sub = rest[2] if len(rest) == 3 else None
        if sub is not None and (sub != "status" or not resource.status_subresource):
            raise ApiError(404, "NotFound", f"no subresource {sub} on {resource.plural}")
        return resource, namespace, name, sub

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        try:
            if request.headers.get("Authorization") != f"Bearer {self.token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            if self._failures:
                code = self._failures.pop(0)
                raise ApiError(code, "InjectedFailure", f"injected failure {code}")
            resource, namespace, name, sub = self._route(request.path)
            watch = request.query.get("watch") in ("true", "1")
            verb = self._verb(request.method, name, watch)
            plural = f"{resource.plural}/{sub}" if sub else resource.plural
            agent = request.headers.get("User-Agent", "")
            if agent.startswith(OPERATOR_AGENT):
                self.audit[verb, resource.group, plural, namespace or ""] += 1
            if verb in ("create", "update", "patch", "delete"):
                injected = await self._injected(request, resource.plural)
                if injected is not None:
                    return injected
                self.writes.append((agent, verb, plural, self.lease_holders()))
            if watch:
                if self._watches_paused:
                    raise ApiError(503, "ServiceUnavailable", "watches are paused")
                return await self._watch(request, resource, namespace)
            body = await self._body(request) if request.method in ("POST", "PUT", "PATCH") else {}
            status, answer = self._dispatch(request, verb, resource, namespace, name, sub, body)
            return web.json_response(answer, status=status)
        except ApiError as exc:
            return web.json_response(
                _status(exc.status, exc.reason, exc.message), status=exc.status
            )

    @staticmethod
    def _verb(method: str, name: str | None, watch: bool) -> str:
        if method == "GET":
            return "watch" if watch else ("get" if name else "list")
        verbs = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
        if method not in verbs or (method != "POST" and name is None):
            raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed here")
        return verbs[method]

    @staticmethod
    async def _body(request: web.Request) -> Obj:
        raw = await request.read()
        try:
            if request.content_type == "application/apply-patch+yaml":
                parsed = yaml.safe_load(raw)
            else:
                parsed = json.loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise ApiError(400, "BadRequest", f"cannot decode the body: {exc}") from None
        if not isinstance(parsed, dict):
            raise ApiError(400, "BadRequest", "the body must be an object")
        return parsed

    def _dispatch(
        self,
        request: web.Request,
        verb: str,
        resource: Resource,
        namespace: str | None,
        name: str | None,
        sub: str | None,
        body: Obj,
    ) -> tuple[int, Obj]:
        if resource.namespaced and namespace is None and verb != "list":
            raise ApiError(404, "NotFound", f"{resource.plural} needs a namespace")
        ns = namespace or ""
        manager = request.query.get("fieldManager", "")
        if verb == "list":
            return 200, self._list(resource, namespace, request.query.get("labelSelector"))
        if verb == "create":
            return 201, self._create(resource, ns, body, manager or "unknown")
        assert name is not None
        key = (resource.group, resource.plural, ns, name)
        if verb == "patch" and request.content_type == "application/apply-patch+yaml":
            if not manager:
                raise ApiError(422, "Invalid", "fieldManager is required for apply")
            force = request.query.get("force") == "true"
            return self._apply(resource, ns, name, body, manager, force, sub)
        stored = self._objects.get(key)
        if stored is None:
            raise ApiError(404, "NotFound", f'{resource.plural} "{name}" not found')
        if verb == "get":
            return 200, copy.deepcopy(stored.obj)
        if verb == "delete":
            return 200, self._delete(resource, key)
        if verb == "update":
            return 200, self._update(resource, stored, body, manager or "unknown", sub)
        if request.content_type != "application/merge-patch+json":
            raise ApiError(415, "UnsupportedMediaType", f"{request.content_type} is not served")
        return 200, self._merge_patch(resource, stored, body, manager or "unknown", sub)

    # -- reads ----------------------------------------------------------------

    async def _watch(
        self, request: web.Request, resource: Resource, namespace: str | None
    ) -> web.StreamResponse:
        since = request.query.get("resourceVersion", "")
        bookmarks = request.query.get("allowWatchBookmarks") == "true"
        timeout = float(request.query.get("timeoutSeconds", "0") or 0)
        requirements = objects.parse_selector(request.query.get("labelSelector"))
        watcher = _Watcher(resource, namespace)
        # Snapshot and registration happen with no await between them, so no
        # write can fall between the initial state and the live stream.
        backlog: list[Obj] = []
        expired = False
        if since in ("", "0"):
            current = [
                s.obj
                for (g, p, ns, _n), s in sorted(self._objects.items())
                if (g, p) == (resource.group, resource.plural) and namespace in (None, ns)
            ]
            backlog = [{"type": "ADDED", "object": copy.deepcopy(o)} for o in current]
        elif int(since) < self._compacted_through:
            expired = True
        else:
            backlog = [
                copy.deepcopy(event)
                for rv, res, event in self._log
                if rv > int(since)
                and res == resource
                and namespace in (None, event["object"]["metadata"].get("namespace"))
            ]
        self._watchers.add(watcher)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        try:
            await response.prepare(request)
            if expired:
                gone = _status(410, "Expired", f"too old resource version: {since}")
                await response.write(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
                return response
            for event in backlog:
                await self._send(response, event, requirements)
            await self._stream(response, watcher, requirements, bookmarks, timeout)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._watchers.discard(watcher)
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response

    async def _stream(
        self,
        response: web.StreamResponse,
        watcher: _Watcher,
        requirements: list[tuple[str, str, str | None]],
        bookmarks: bool,
        timeout: float,
    ) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout if timeout else None
        while True:
            wait = self.bookmark_interval_s if bookmarks else None
            if end is not None:
                left = end - loop.time()
                if left <= 0:
                    return
                wait = left if wait is None else min(wait, left)
            try:
                event = await asyncio.wait_for(watcher.queue.get(), wait)
            except TimeoutError:
                if bookmarks:
                    mark = {
                        "apiVersion": watcher.resource.api_version,
                        "kind": watcher.resource.kind,
                        "metadata": {"resourceVersion": str(self._rv)},
                    }
                    await response.write(
                        json.dumps({"type": "BOOKMARK", "object": mark}).encode() + b"\n"
                    )
                    self.bookmarked_rv = self._rv
                continue
            if event is None:
                return
            await self._send(response, event, requirements)

    @staticmethod
    async def _send(
        response: web.StreamResponse, event: Obj, requirements: list[tuple[str, str, str | None]]
    ) -> None:
        if objects.matches(event["object"], requirements):
            await response.write(json.dumps(event).encode() + b"\n")


async def connect_store(
    emulator: KubeApiEmulator,
    directory: Path,
    *,
    agent: str = "",
    request_timeout_s: float = 10.0,
    **options: Any,
) -> Any:
    """A `KubernetesStore` on the emulator through a kubeconfig file, with fast retries.

    ``agent`` replaces the operator's User-Agent (a test harness's setup writes).
    """
    from grid.adapters.kube.client import ClientSettings
    from grid.adapters.store.kubernetes import KubernetesStore

    path = directory / f"kubeconfig-{uuid.uuid4().hex[:8]}.yaml"
    path.write_text(yaml.safe_dump(emulator.kubeconfig()))
    settings = ClientSettings(
        backoff_base_s=0.01, backoff_cap_s=0.1, request_timeout_s=request_timeout_s
    )
    store = await KubernetesStore.connect(path, settings=settings, **options)
    if agent:
        store.client._api.user_agent = agent
    return store
