"""A request's routing decision as data: a refusal, or a plan of attempts (§11).

`Proxy` reads the request (identity, budget, bounded body), asks the router
for its candidates, and hands the pieces to the functions here, which decide
everything else without I/O: whether the model field is usable
(`routable`), whether anything can be sent (`plan_request`), and for each
candidate in selection order the `Attempt` to send: its target, its headers and
the *reference* of its credential (the file and how to inject it, never the
value, which `Proxy` reads when it sends). The `FailoverRule` says which
outcomes move on to the next attempt; it applies only before the first byte
reached the client, after which nothing is retried.

`Routable`, `Plan` and `Attempt` are made per request and never changed once
made; they are plain slotted records (a frozen dataclass's ``__init__`` costs
about a microsecond more per record, on every request).

Headers are multidicts throughout, so a repeated header keeps every value in
order. `end_to_end` drops the hop-by-hop headers: the fixed set below and every
header the message's ``Connection`` names (RFC 9110 §7.6.1), on the way to a
cluster and on the way back to the client.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from multidict import CIMultiDict, CIMultiDictProxy, MultiMapping

from grid.core.metering.bounds import UsageBound, usage_bound
from grid.core.metering.usage import ask_for_usage, stream_refusal
from grid.gateway.config import CredentialFile
from grid.gateway.snapshot import Candidate

CANDIDATE_HEADER = "x-ai-routing-candidate"
REQUEST_ID_HEADER = "x-ai-routing-request-id"
REVISION_HEADER = "x-ai-routing-revision"

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
"""Never relayed either way: RFC 9110's connection-specific fields, and ``Host`` and
``Content-Length``, which the sending side writes itself."""

STRIPPED = HOP_BY_HOP | {
    "authorization",
    "x-api-key",
    "accept-encoding",
    CANDIDATE_HEADER,
    REQUEST_ID_HEADER,
    REVISION_HEADER,
}
"""Client headers never sent to a cluster (the tenant header is added per gateway)."""


def connection_tokens(headers: MultiMapping[str]) -> frozenset[str]:
    """The lower-cased field names every ``Connection`` header of ``headers`` lists."""
    values = headers.getall("Connection", ())
    if not values:
        return frozenset()
    return frozenset(
        token for value in values for t in value.split(",") if (token := t.strip().lower())
    )


def not_relayed(headers: MultiMapping[str], drop: Collection[str] = HOP_BY_HOP) -> Collection[str]:
    """The lower-case names `end_to_end` leaves out of ``headers``: ``drop`` and the
    headers their ``Connection`` lists."""
    listed = connection_tokens(headers)
    return {*drop, *listed} if listed else drop


def end_to_end(headers: MultiMapping[str], drop: Collection[str] = HOP_BY_HOP) -> CIMultiDict[str]:
    """``headers`` in order, repeats kept, without ``drop`` (lower-case names) and
    without the headers their ``Connection`` lists."""
    out = CIMultiDict(headers)
    for name in not_relayed(headers, drop):
        if name in out:
            del out[name]  # every value of that name
    return out


@dataclass(frozen=True, slots=True)
class Refusal:
    """The gateway's own answer ``{error: {code, message}}``; ``outcome`` is the
    request counter it is counted under."""

    status: int
    code: str
    message: str
    outcome: str


NOT_FOUND = Refusal(404, "not_found", "only POST requests under /v1/ are routed", "not_found")
BUDGET_EXHAUSTED = Refusal(
    429, "budget_exhausted", "the tenant's budget is spent", "budget_exhausted"
)
NO_CANDIDATE = Refusal(
    404, "no_candidate", "no candidate admits new requests for this model", "no_candidate"
)
UNREACHABLE = Refusal(
    502, "upstream_unavailable", "no candidate could be reached", "upstream_unavailable"
)
"""Every attempt of the plan failed over."""


def budget_refusal(exhausted: bool) -> Refusal | None:
    """The refusal of a tenant whose budget view is spent (§12), before the body is read."""
    return BUDGET_EXHAUSTED if exhausted else None


@dataclass(frozen=True, slots=True)
class CredentialRef:
    """Where an attempt's credential is read from and how it is sent (no value)."""

    file: str
    header: str
    prefix: str = ""

    @classmethod
    def of(cls, entry: CredentialFile) -> CredentialRef:
        if entry.strategy == "bearer_token":
            return cls(entry.file, "Authorization", "Bearer ")
        return cls(entry.file, "x-api-key")

    def inject(self, value: str) -> tuple[str, str]:
        """The header carrying ``value``."""
        return self.header, f"{self.prefix}{value}"


@dataclass(frozen=True, slots=True)
class FailoverRule:
    """Which outcomes of an attempt move on to the next one. Only before the client
    received any byte: once it did, nothing is retried."""

    statuses: frozenset[int] = frozenset({502, 503})
    """Answers released and failed over, unless the attempt is the last."""
    errors: frozenset[str] = frozenset({"connect_failed", "no_credential"})
    """Attempts that got no answer (always the next one, when there is one)."""

    def on_status(self, status: int, final: bool) -> bool:
        """True when an answer with ``status`` is dropped for the next attempt."""
        return not final and status in self.statuses


@dataclass(slots=True)
class Attempt:
    """One candidate's request: ``target`` under its cluster's base, with `headers`
    and, when it needs one, the credential read at send time. ``blocked`` names
    why it cannot be sent at all (its credential is not configured)."""

    candidate: Candidate
    index: int
    target: str
    shared: MultiMapping[str]
    """The headers every attempt of the request sends (not to be changed)."""
    credential: CredentialRef | None
    blocked: str | None = None

    @property
    def headers(self) -> CIMultiDict[str]:
        """The attempt's headers, a fresh copy each time: the shared ones and the
        candidate's id (the sender adds the credential and the trace context)."""
        headers = CIMultiDict(self.shared)
        headers[CANDIDATE_HEADER] = self.candidate.stable_id
        return headers

    def with_header(self, name: str, value: str) -> Attempt:
        """This attempt with ``name: value`` among its shared headers (a header only
        known when the attempt is sent, such as the MCP session the gateway holds)."""
        shared = CIMultiDict(self.shared)
        shared[name] = value
        return replace(self, shared=CIMultiDictProxy(shared))


@dataclass(slots=True)
class Plan:
    """The attempts in selection order, the body they carry and how they fail over."""

    model: str
    attempts: tuple[Attempt, ...]
    body: bytes
    strip_usage: bool
    """The gateway asked the stream for its usage chunk and removes it again."""
    usage_cap: UsageBound
    session: str | None
    failover: FailoverRule = field(default_factory=FailoverRule)


@dataclass(slots=True)
class Routable:
    """A body that names a usable model, and the session it may be bound to."""

    model: str
    document: dict[str, Any]
    session: str | None


@dataclass(frozen=True)
class PlanRules:
    """What planning reads of the gateway's config and settings (fixed per process)."""

    model_field: str
    model_header: str
    model_max_chars: int
    session_max_chars: int
    credentials: Mapping[tuple[str, str, str], CredentialFile]
    usage_limits: tuple[int, int]
    stripped: frozenset[str] = STRIPPED
    failover: FailoverRule = field(default_factory=FailoverRule)
    refs: Mapping[tuple[str, str, str], CredentialRef] = field(init=False, repr=False)
    """`credentials` as references, made once."""

    def __post_init__(self) -> None:
        refs = {key: CredentialRef.of(entry) for key, entry in self.credentials.items()}
        object.__setattr__(self, "refs", refs)

    def invalid_model(self) -> Refusal:
        return Refusal(
            400,
            "invalid_model",
            f"the body must be a JSON object with a non-blank '{self.model_field}' "
            f"of at most {self.model_max_chars} characters",
            "bad_request",
        )


def routable(document: object, session: str | None, rules: PlanRules) -> Routable | Refusal:
    """The model the decoded body names and the session header's usable value, or
    ``invalid_model`` (not an object, the field missing, blank, not text or too long)."""
    if not isinstance(document, dict):
        return rules.invalid_model()
    model = document.get(rules.model_field)
    if not isinstance(model, str) or not model.strip() or len(model) > rules.model_max_chars:
        return rules.invalid_model()
    if session is not None and (not session or len(session) > rules.session_max_chars):
        session = None
    return Routable(model, document, session)


def outgoing_headers(
    headers: MultiMapping[str],
    name: str,
    request_id: str,
    revision: str | None,
    rules: PlanRules,
) -> CIMultiDict[str]:
    """The headers every attempt of a request for ``name`` shares: the client's end-to-end
    ones without its credentials and routing headers, plus the gateway's own."""
    out = end_to_end(headers, rules.stripped)
    # Always: an encoded answer could not be metered, and aiohttp would otherwise
    # ask for gzip on behalf of a client that never asked for it.
    out["Accept-Encoding"] = "identity"
    out[rules.model_header] = name
    out[REQUEST_ID_HEADER] = request_id
    if revision is not None:
        out[REVISION_HEADER] = revision
    return out


def attempt_of(
    candidate: Candidate, index: int, target: str, base: MultiMapping[str], rules: PlanRules
) -> Attempt:
    """The attempt to ``candidate`` with the ``base`` headers and its credential."""
    if candidate.credential is None:
        return Attempt(candidate, index, target, base, None)
    ref = rules.refs.get(candidate.credential)
    if ref is None:
        return Attempt(candidate, index, target, base, None, "no_credential")
    return Attempt(candidate, index, target, base, ref)


def plan_request(
    headers: MultiMapping[str],
    target: str,
    body: bytes,
    request: Routable,
    tries: Sequence[Candidate],
    rules: PlanRules,
    request_id: str,
    revision: str | None,
) -> Plan | Refusal:
    """The plan of one model request over the selected ``tries``, or its refusal:
    ``no_candidate`` when nothing was selected, ``invalid_stream`` when its streaming
    fields could not be metered. A stream is made to ask for its usage chunk."""
    if not tries:
        return NO_CANDIDATE
    document = request.document
    if (problem := stream_refusal(document)) is not None:
        return Refusal(400, "invalid_stream", problem, "bad_request")
    strip = False
    if document.get("stream") is True:
        document = dict(document)  # `ask_for_usage` changes its argument
        strip = ask_for_usage(document)
    if strip:
        body = json.dumps(document, separators=(",", ":")).encode()
    base = CIMultiDictProxy(outgoing_headers(headers, request.model, request_id, revision, rules))
    attempts = tuple([attempt_of(c, i, target, base, rules) for i, c in enumerate(tries)])
    cap = usage_bound(document, len(body), *rules.usage_limits)
    return Plan(request.model, attempts, body, strip, cap, request.session, rules.failover)


def plan_call(
    headers: MultiMapping[str],
    target: str,
    body: bytes,
    name: str,
    tries: Sequence[Candidate],
    rules: PlanRules,
    request_id: str,
    revision: str | None,
    *,
    unserved: Refusal,
    drop: Collection[str] = (),
    extra: Mapping[str, str] | None = None,
) -> Plan | Refusal:
    """The plan of one tool call or agent request for ``name`` (§16), its body relayed
    as sent and bounded by its size alone (a call carries no tokens), or ``unserved``
    when nothing was selected. The attempts' shared headers are the request's outgoing
    ones without ``drop`` and with ``extra`` set."""
    if not tries:
        return unserved
    out = outgoing_headers(headers, name, request_id, revision, rules)
    for dropped in drop:
        out.popall(dropped, None)
    if extra:
        out.update(extra)
    base = CIMultiDictProxy(out)
    attempts = tuple([attempt_of(c, i, target, base, rules) for i, c in enumerate(tries)])
    return Plan(name, attempts, body, False, usage_bound({}, len(body)), None, rules.failover)
