"""Parsing CR YAML text into a typed, cross-checked set of Grid resources.

`grid render`, `grid explain` and `grid validate` read a file or a directory of
``*.yaml`` holding GridNetworks, GridSites, InferenceProviders and core v1 Secrets.
This module is the pure half of that: it takes already-read `Source` texts and returns
`Manifests`, or raises `ManifestError` carrying every `Problem` found. A problem names
the file (and line), the resource (``Kind/name``) and the field path, on one line:

    examples/bad/site.yaml:1: GridSite/east: spec.egress.address: must be host:port

Bad input is collected, never fatal on first sight: malformed YAML, unknown kinds or
apiVersions, invalid fields, duplicate names and references to a GridNetwork that is
not in the set. Secret values never appear in a problem: YAML errors are reported by
position only (PyYAML's own message quotes the offending line) and Secret validation
messages name keys, not values. Reading files is `grid.adapters.manifests`' job.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import yaml

from grid.core.resources import (
    API_VERSION,
    KINDS,
    AgentToAgentProvider,
    AgentToolProvider,
    GridNetwork,
    GridSite,
    InferenceProvider,
    Resource,
    parse_resource,
    resource_label,
)
from grid.core.resources.errors import InvalidResource, join_path, printable
from grid.core.resources.object_meta import SecretRef
from grid.core.resources.secret import Secret, parse_secret
from grid.errors import ValidationError

_R = TypeVar(
    "_R", GridNetwork, GridSite, InferenceProvider, AgentToolProvider, AgentToAgentProvider
)

DOCUMENT_NODES_MAX = 100_000
"""Most YAML nodes one document may expand to once aliases are followed. Real CRs
have a few hundred; the cap stops an alias bomb before validation walks it."""

YAML_DEPTH_MAX = 64
"""Deepest nesting of YAML collections accepted in one document. CRs nest about ten
levels; the bound keeps the composer, the constructor and every later walk of the
value far from the interpreter's recursion limit."""

NO_RESOURCE = "-"
"""`Problem.resource` when the problem concerns no identifiable resource."""
NO_FIELD = "-"
"""`Problem.field` when the problem concerns no particular field."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One bad thing in the input, printable as a single line."""

    file: str
    resource: str
    field: str
    message: str
    line: int | None = None
    """1-based line of the YAML document the problem is in, when known."""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return printable(f"{where}: {self.resource}: {self.field}: {self.message}")


class ManifestError(ValidationError):
    """The input held problems; `problems` lists all of them in input order."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        first = self.problems[0].field if self.problems else ""
        super().__init__("\n".join(str(p) for p in self.problems), path=first)


@dataclass(frozen=True, slots=True)
class Source:
    """The text of one input file, as read by an adapter."""

    file: str
    """How the file is named in problems (the path as the user gave it)."""
    text: str


@dataclass(frozen=True, slots=True)
class Document:
    """One decoded YAML document and where it started."""

    file: str
    line: int
    obj: Any
    node: yaml.Node | None = field(default=None, repr=False, compare=False)

    def line_of(self, path: str) -> int:
        """The 1-based line of the deepest node along a field path (``spec.models[0]``)."""
        node, line = self.node, self.line
        for part in _path_parts(path):
            node = _child(node, part)
            if node is None:
                break
            line = node.start_mark.line + 1
        return line


def _path_parts(path: str) -> list[int | str]:
    parts: list[int | str] = []
    for token in re.findall(r'\["([^"]*)"\]|\[(\d+)\]|([^.\[\]]+)', path):
        key, index, plain = token
        parts.append(int(index) if index else key or plain)
    return parts


def _child(node: yaml.Node | None, part: int | str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode) and isinstance(part, str):
        return next((v for k, v in node.value if getattr(k, "value", None) == part), None)
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int):
        return node.value[part] if 0 <= part < len(node.value) else None
    return None


@dataclass(frozen=True)
class Manifests:
    """A validated, self-consistent set of resources, each kind keyed by name.

    Secrets are keyed by ``namespace/name``; use `find_secret` with a `SecretRef`.
    """

    networks: Mapping[str, GridNetwork] = field(default_factory=dict)
    sites: Mapping[str, GridSite] = field(default_factory=dict)
    providers: Mapping[str, InferenceProvider] = field(default_factory=dict)
    secrets: Mapping[str, Secret] = field(default_factory=dict, repr=False)
    tool_providers: Mapping[str, AgentToolProvider] = field(default_factory=dict)
    agent_providers: Mapping[str, AgentToAgentProvider] = field(default_factory=dict)

    def find_secret(self, ref: SecretRef) -> Secret | None:
        """The Secret `ref` names, if it is in the set."""
        return self.secrets.get(f"{ref.namespace}/{ref.name}")

    def resources(self) -> list[Resource]:
        """Every Grid resource, networks first, then sites, then providers, by name."""
        out: list[Resource] = []
        groups: tuple[Mapping[str, Resource], ...] = (
            self.networks,
            self.sites,
            self.providers,
            self.tool_providers,
            self.agent_providers,
        )
        for group in groups:
            out.extend(group[name] for name in sorted(group))
        return out

    def sites_of(self, network: str) -> dict[str, GridSite]:
        """The GridSites of one network, by name."""
        return {n: s for n, s in self.sites.items() if s.spec.grid_network_ref == network}

    def providers_of(self, network: str) -> dict[str, InferenceProvider]:
        """The InferenceProviders of one network, by name."""
        return {n: p for n, p in self.providers.items() if p.spec.grid_network_ref == network}


def parse_manifests(sources: Iterable[Source]) -> Manifests:
    """Decode, validate and cross-check every document of `sources`.

    Raises `ManifestError` listing every problem when there is at least one.
    """
    collector = _Collector()
    for source in sources:
        for doc in decode_documents(source, collector.problems):
            collector.add(doc)
    collector.check_references()
    if collector.problems:
        raise ManifestError(collector.problems)
    return Manifests(
        networks=collector.of_type("GridNetwork", GridNetwork),
        sites=collector.of_type("GridSite", GridSite),
        providers=collector.of_type("InferenceProvider", InferenceProvider),
        secrets=collector.secrets,
        tool_providers=collector.of_type("AgentToolProvider", AgentToolProvider),
        agent_providers=collector.of_type("AgentToAgentProvider", AgentToAgentProvider),
    )


def _at(doc: Document) -> str:
    return f"{doc.file}:{doc.line}"


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with a nesting bound checked while composing."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > YAML_DEPTH_MAX:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                problem = f"nested deeper than {YAML_DEPTH_MAX} levels"
                raise yaml.composer.ComposerError(None, None, problem, mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def decode_documents(source: Source, problems: list[Problem]) -> Iterator[Document]:
    """Yield each non-empty YAML document of `source`; record a problem on bad YAML.

    A syntax error stops the file (YAML cannot resynchronize), but documents decoded
    before it are still yielded so their own problems are reported too.
    """
    try:
        # The reader checks the whole text for unprintable characters at once.
        loader = _BoundedLoader(source.text)
    except yaml.YAMLError as exc:
        problems.append(_yaml_problem(source.file, exc))
        return
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            obj = loader.construct_document(node)
            if obj is None:
                continue
            doc = Document(source.file, node.start_mark.line + 1, obj, node)
            if _expanded_size(node, {}) > DOCUMENT_NODES_MAX:
                message = f"document expands to more than {DOCUMENT_NODES_MAX} YAML nodes"
                problems.append(Problem(doc.file, _label_of(obj), NO_FIELD, message, doc.line))
                continue
            problems.extend(_duplicate_keys(doc, node, "", set()))
            yield doc
    except yaml.YAMLError as exc:
        problems.append(_yaml_problem(source.file, exc))
    finally:
        loader.dispose()


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    # Aliases share nodes, so a small document can expand exponentially ("billion
    # laughs"); count the expanded size with memoization before validating anything.
    if id(node) in memo:
        return memo[id(node)]
    memo[id(node)] = 1  # a self-referencing alias counts once instead of looping
    size = 1
    if isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(item, memo) for item in node.value)
    memo[id(node)] = min(size, DOCUMENT_NODES_MAX + 1)
    return memo[id(node)]


def _duplicate_keys(doc: Document, node: yaml.Node, path: str, seen: set[int]) -> list[Problem]:
    # PyYAML keeps the last of two equal keys silently; a repeated `spec:` would
    # then drop half a resource without a word, so it is reported.
    if id(node) in seen:
        return []
    seen.add(id(node))
    found: list[Problem] = []
    if isinstance(node, yaml.MappingNode):
        keys: set[str] = set()
        for key, value in node.value:
            name = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
            child = join_path(path, [name])
            if isinstance(key, yaml.ScalarNode) and name in keys:
                label = _label_of(doc.obj)
                line = key.start_mark.line + 1
                found.append(Problem(doc.file, label, child, "duplicate key", line))
            keys.add(name)
            found.extend(_duplicate_keys(doc, value, child, seen))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found.extend(_duplicate_keys(doc, item, join_path(path, [i]), seen))
    return found


def _is_list(kind: object, api_version: object) -> bool:
    if kind == "List" and api_version == "v1":
        return True
    return api_version == API_VERSION and kind in {f"{k}List" for k in KINDS}


def _label_of(obj: Any) -> str:
    return resource_label(obj) if isinstance(obj, Mapping) else NO_RESOURCE


def _yaml_problem(file: str, exc: yaml.YAMLError) -> Problem:
    # Build the message from the parser's description and position only: PyYAML's
    # str(exc) quotes the offending source line, which could be a Secret value.
    mark = getattr(exc, "problem_mark", None)
    what = getattr(exc, "problem", None) or "not valid YAML"
    if isinstance(exc, yaml.reader.ReaderError):
        what = f"character #x{exc.character:04x} is not allowed (offset {exc.position})"
    context = getattr(exc, "context", None)
    message = f"malformed YAML: {what}" + (f" ({context})" if context else "")
    if mark is not None:
        message += f" at column {mark.column + 1}"
    return Problem(file, NO_RESOURCE, NO_FIELD, message, mark.line + 1 if mark else None)


_NETWORKED_KINDS = ("GridSite", "InferenceProvider", "AgentToolProvider", "AgentToAgentProvider")
"""Kinds whose ``spec.gridNetworkRef`` must name a GridNetwork of the input."""


@dataclass
class _Collector:
    problems: list[Problem] = field(default_factory=list)
    by_kind: dict[str, dict[str, Resource]] = field(
        default_factory=lambda: {kind: {} for kind in KINDS}
    )
    secrets: dict[str, Secret] = field(default_factory=dict)
    origin: dict[tuple[str, str], Document] = field(default_factory=dict)
    invalid: set[tuple[str, str]] = field(default_factory=set)
    """(kind, name) of resources that were present but invalid: no cascade problems."""

    def of_type(self, kind: str, model: type[_R]) -> dict[str, _R]:
        return {n: r for n, r in self.by_kind[kind].items() if isinstance(r, model)}

    def add(self, doc: Document) -> None:
        obj = doc.obj
        if not isinstance(obj, Mapping):
            self._problem(doc, NO_RESOURCE, NO_FIELD, "a document must be a YAML mapping")
            return
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if _is_list(kind, api_version):
            self._add_list(doc, obj)
        elif kind == "Secret" and api_version == "v1":
            self._add_secret(doc, obj)
        elif kind in KINDS:
            self._add_resource(doc, obj)
        elif api_version == API_VERSION:
            known = ", ".join(KINDS)
            self._problem(doc, resource_label(obj), "kind", f"unknown kind (expected {known})")
        elif kind == "Secret":
            self._problem(doc, resource_label(obj), "apiVersion", "a Secret must be apiVersion v1")
        else:
            message = f"unknown apiVersion/kind (expected {API_VERSION} or a v1 Secret)"
            self._problem(doc, resource_label(obj), "apiVersion", message)

    def _add_list(self, doc: Document, obj: Mapping[str, Any]) -> None:
        # `kubectl get ... -o yaml` wraps objects in a List; each item counts on its own.
        items = obj.get("items")
        if not isinstance(items, list):
            self._problem(doc, f"{obj.get('kind')}", "items", "must be a list of resources")
            return
        items_node = _child(doc.node, "items")
        for i, item in enumerate(items):
            node = _child(items_node, i)
            line = node.start_mark.line + 1 if node is not None else doc.line
            self.add(Document(doc.file, line, item, node))

    def _add_resource(self, doc: Document, obj: Mapping[str, Any]) -> None:
        label = resource_label(obj)
        try:
            resource = parse_resource(obj)
        except InvalidResource as exc:
            for issue in exc.issues:
                self._problem(doc, label, issue.path or NO_FIELD, issue.message)
            kind, _, name = label.partition("/")
            self.invalid.add((kind, name))
            return
        key = (resource.kind, resource.name)
        if key in self.origin:
            first = self.origin[key]
            message = (
                f"duplicate {resource.kind} {resource.name!r} (first at {first.file}:{first.line})"
            )
            self._problem(doc, label, "metadata.name", message)
            return
        self.origin[key] = doc
        self.by_kind[resource.kind][resource.name] = resource

    def _add_secret(self, doc: Document, obj: Mapping[str, Any]) -> None:
        try:
            secret = parse_secret(obj)
        except InvalidResource as exc:
            for issue in exc.issues:
                self._problem(doc, exc.resource, issue.path or NO_FIELD, issue.message)
            return
        key = f"{secret.metadata.namespace}/{secret.metadata.name}"
        label = f"Secret/{secret.metadata.name}"
        if ("Secret", key) in self.origin:
            first = self.origin[("Secret", key)]
            message = f"duplicate Secret {key!r} (first at {_at(first)})"
            self._problem(doc, label, "metadata.name", message)
            return
        self.origin[("Secret", key)] = doc
        self.secrets[key] = secret

    def check_references(self) -> None:
        networks = self.by_kind["GridNetwork"]
        for kind in _NETWORKED_KINDS:
            for name, resource in self.by_kind[kind].items():
                assert not isinstance(resource, GridNetwork)
                net = resource.spec.grid_network_ref
                if net not in networks and ("GridNetwork", net) not in self.invalid:
                    message = f"GridNetwork {net!r} is not defined in the input"
                    doc = self.origin[(kind, name)]
                    self._problem(doc, f"{kind}/{name}", "spec.gridNetworkRef", message)
        for kind, field_refs in self._secret_refs():
            for (name, path), secret_ref in field_refs.items():
                doc = self.origin[(kind, name)]
                self._check_secret_key(doc, f"{kind}/{name}", path, secret_ref)

    def _secret_refs(self) -> Iterator[tuple[str, dict[tuple[str, str], SecretRef]]]:
        refs: dict[tuple[str, str], SecretRef] = {}
        for name, net in self.of_type("GridNetwork", GridNetwork).items():
            tls = net.spec.tls
            for attr, wire in (
                ("ca_secret_ref", "caSecretRef"),
                ("site_secret_ref", "siteSecretRef"),
                ("swim_key_ref", "swimKeyRef"),
            ):
                ref = getattr(tls, attr, None) if tls else None
                if ref is not None:
                    refs[(name, f"spec.tls.{wire}")] = ref
        yield "GridNetwork", refs
        for kind in _NETWORKED_KINDS[1:]:
            provider_refs: dict[tuple[str, str], SecretRef] = {}
            for name, prov in self.by_kind[kind].items():
                auth = getattr(prov.spec, "auth", None)
                if auth is not None and auth.secret_ref is not None:
                    provider_refs[(name, "spec.auth.secretRef")] = auth.secret_ref
            yield kind, provider_refs

    def _check_secret_key(self, doc: Document, label: str, path: str, ref: SecretRef) -> None:
        # A Secret absent from the input may exist in the cluster; only a Secret that
        # is present and lacks the key is provably wrong.
        secret = self.secrets.get(f"{ref.namespace}/{ref.name}")
        if secret is not None and ref.key and not secret.has_key(ref.key):
            message = f"Secret {ref.namespace}/{ref.name} has no key {ref.key!r}"
            self._problem(doc, label, f"{path}.key", message)

    def _problem(self, doc: Document, resource: str, path: str, message: str) -> None:
        line = doc.line_of(path) if path != NO_FIELD else doc.line
        self.problems.append(Problem(doc.file, resource, path, message, line))
